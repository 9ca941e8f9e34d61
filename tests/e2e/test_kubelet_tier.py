"""The kubelet tier end to end: package images built by ``nwb package build``, pushed to the
sandbox registry, pulled by containerd and started by the real kubelet on two real nodes
(``nwb sandbox up --mode kubelet``), driven by our controller.

What the real kubelet decides here, and the simulated one only imitates: how privileged,
hostPID and the hostPath ``/`` with HostToContainer propagation behave (the default ``nsenter``
host connection runs), how the termination message is written, how a pull fails, how an evicted
pod terminates with its grace period, and how a reboot looks (a new bootID). The machine's own
sysctls, mounts and network stay as they were.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_harness import CRDS, E2E, EXAMPLE_ROLES, NAMESPACE, SLOW_TEST_SECONDS, World, wait_for
from invariants import Invariants
from kubernetes import client, config, watch

from lifecycle.results import AgentResult
from nodewright_bridge.controller import podspec
from nodewright_bridge.sandbox import Sandbox, rootfs
from nodewright_bridge.sandbox.kubeletnode import tierbins
from nodewright_bridge.sandbox.kubeletnode.realnode import (
    cgroup_hierarchies,
    own_cgroup_path,
    remove_empty_dirs,
)
from playbook_adapter import imaging

pytestmark = [pytest.mark.e2e, pytest.mark.podman, pytest.mark.timeout(SLOW_TEST_SECONDS)]

NODE_PREFIX = "ktier-"
TIER_LABEL = "e2e.nodewright.io/kubelet-tier"
NWB = str(Path(sys.executable).parent / "nwb")
VERSION = "1.0.0"
# Kernel settings the kubelet, the CNI bridge plugin and the sysctl-tuning role write on a node;
# on this machine they must keep their values.
HOST_SYSCTLS = (
    "kernel/panic",
    "kernel/panic_on_oops",
    "vm/overcommit_memory",
    "kernel/keys/root_maxkeys",
    "net/ipv4/ip_forward",
    "vm/swappiness",
    "fs/inotify/max_user_watches",
    "net/core/somaxconn",
)
# What sysctl-tuning sets on the nodes: values this machine does not have.
ROLE_SETTINGS = {"vm.swappiness": 37, "fs.inotify.max_user_watches": 424242}
# Mount points a node's kubelet, containerd or pods could leak onto this machine.
WATCHED_MOUNT_ROOTS = ("/proc", "/sys", "/dev", "/var/lib/kubelet", "/var/lib/containerd", "/etc")
WORKLOAD = ["sh", "-c", "trap 'sleep 4; exit 0' TERM; while :; do sleep 1; done"]
PROBE_ROLE = {
    "defaults/main.yml": "---\nprobe_sleep: 0\nprobe_fail: false\n",
    "tasks/main.yml": """---
- name: Say hello
  ansible.builtin.debug:
    msg: "hello from the kubelet tier"
- name: Wait a while
  ansible.builtin.pause:
    seconds: "{{ probe_sleep | int }}"
  when: probe_sleep | int > 0
- name: Fail on request
  ansible.builtin.fail:
    msg: asked to fail
  when: probe_fail | bool
""",
    "meta/main.yml": "---\ngalaxy_info:\n  author: e2e\n  description: kubelet tier probe\n"
    "  license: MIT\n  min_ansible_version: '2.15'\n  platforms: []\ndependencies: []\n",
}


def host_sysctls() -> dict[str, str]:
    return {key: Path("/proc/sys", key).read_text().strip() for key in HOST_SYSCTLS}


def host_mounts() -> set[tuple[str, str]]:
    """(mount point, fs type) of this machine's mounts where a node's could leak to."""
    found: set[tuple[str, str]] = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        point = left.split()[4]
        if any(point == r or point.startswith(r + "/") for r in WATCHED_MOUNT_ROOTS):
            found.add((point, right.split()[0]))
    return found


def host_network() -> dict[str, Any]:
    """This machine's interfaces (other than container veths) and routes, by ``ip``."""
    links = json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True, check=True).stdout)
    routes = json.loads(
        subprocess.run(["ip", "-j", "route"], capture_output=True, check=True).stdout
    )
    return {
        "links": sorted(
            link["ifname"] for link in links if not link["ifname"].startswith(("veth", "cni-"))
        ),
        "routes": sorted(
            r.get("dst", "") for r in routes if not r.get("dev", "").startswith("cni-")
        ),
    }


def nwb(*args: str, timeout: float = 600) -> str:
    done = subprocess.run(
        [NWB, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"nwb {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def build_package(role: Path, registry: str, base_image: str) -> str:
    """``nwb package init`` + ``nwb package build --push``; returns the image repository."""
    nwb("package", "init", str(role), "--version", VERSION, "--force")
    repository = f"{registry}/pkgs/{role.name}"
    nwb(
        "package", "build", str(role), "--tag", f"{repository}:{VERSION}",
        "--base-image", base_image, "--push", "--no-tls-verify",
    )  # fmt: skip
    return repository


class Tier:
    """The module's sandbox and what the tests share: images, node names, the host snapshot."""

    def __init__(
        self, e2e: E2E, nodes: list[str], images: dict[str, str], before: tuple[Any, ...]
    ) -> None:
        self.e2e = e2e
        self.nodes = nodes
        self.images = images
        self.before = before  # this machine's sysctls, mounts and network before the sandbox


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tier]:
    if os.geteuid() != 0:
        pytest.fail("the kubelet tier needs root (namespaces, mounts, cgroups)")
    if shutil.which("podman") is None:
        pytest.fail("podman is missing: run `make setup`")
    missing = tierbins.missing_debian_packages()
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: run NWB_KUBELET_TIER=1 make setup")
    state = tmp_path_factory.mktemp("kubelet-tier")
    before = (host_sysctls(), host_mounts(), host_network())
    box = Sandbox(state, nodes=2, mode="kubelet", node_prefix=NODE_PREFIX, labels={TIER_LABEL: "1"})
    box.start()
    api = config.new_client_from_config(config_file=str(box.kubeconfig))
    try:
        ext = client.ApiextensionsV1Api(api)
        for path in sorted(CRDS.glob("*.yaml")):
            ext.create_custom_resource_definition(yaml.safe_load(path.read_text()))
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        assert box.registry is not None
        engine = imaging.detect_engine("podman")
        base = rootfs.ensure_base_rootfs()
        base_image = f"localhost/nwb-base:{base.name}"
        imaging.ensure_rootfs_image(engine, base, base_image)
        work = tmp_path_factory.mktemp("roles")
        shutil.copytree(EXAMPLE_ROLES / "sysctl-tuning", work / "sysctl-tuning")
        for rel, text in PROBE_ROLE.items():
            (work / "kubelet-probe" / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / "kubelet-probe" / rel).write_text(text)
        images = {
            name: build_package(work / name, box.registry.host, base_image)
            for name in ("sysctl-tuning", "kubelet-probe")
        }
        workload = f"{box.registry.host}/e2e/workload:1"
        engine.run(["tag", base_image, workload])
        imaging.push_image(engine, workload, tls_verify=False)
        images["workload"] = workload
        names = box.node_names
        for name in names:
            wait_for(lambda n=name: _ready(core, n), what=f"node {name} Ready")
        yield Tier(E2E(box, api), names, images, before)
    finally:
        api.close()
        box.stop()


def _ready(core: client.CoreV1Api, name: str) -> bool:
    node = core.read_node(name)
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
    return ready and not node.spec.taints


class TierWorld(World):
    """A ``World`` over the tier's two real nodes (shared by the module's tests)."""

    def __init__(self, tier: Tier) -> None:
        super().__init__(tier.e2e)
        self.invariants.stop()
        self.invariants = Invariants(tier.e2e.kubeconfig, node_prefix=NODE_PREFIX)
        self.invariants.track(tier.nodes)
        self.labels = {TIER_LABEL: "1"}
        self.tier = tier

    def cleanup(self) -> None:
        """Also give the shared nodes back as the next test expects them: schedulable, without
        the controller's annotations, labels and taint (a failed test may leave them)."""
        super().cleanup()
        for name in self.tier.nodes:
            node = self.core.read_node(name)
            ours = [
                key
                for key in {**(node.metadata.annotations or {}), **(node.metadata.labels or {})}
                if key.startswith("bridge.nodewright.io/")
            ]
            taints = [
                t for t in node.spec.taints or [] if not t.key.startswith("bridge.nodewright.io/")
            ]
            patch = {
                "metadata": {
                    "annotations": dict.fromkeys(
                        (k for k in ours if k in (node.metadata.annotations or {})), None
                    ),
                    "labels": dict.fromkeys(
                        (k for k in ours if k in (node.metadata.labels or {})), None
                    ),
                },
                "spec": {"unschedulable": False, "taints": taints or None},
            }
            self.core.patch_node(name, patch)

    def on(self, node: str) -> dict[str, Any]:
        """``nodeSelectors`` for one node."""
        return {"matchLabels": {"kubernetes.io/hostname": node}}

    def node_state_file(self, node: str, rel: str) -> str:
        box = self.tier.e2e.box
        assert box.tier is not None
        return (box.tier.nodes[node].isolation_state / rel).read_text()


@pytest.fixture
def world(tier: Tier) -> Iterator[TierWorld]:
    with TierWorld(tier) as w:
        yield w


class PodLog:
    """Every change to every pod, in the API server's order (one watch over all namespaces)."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self.events: list[tuple[str, Any]] = []
        self._stop = threading.Event()
        self._watch = watch.Watch()
        self._core = core
        start = core.list_pod_for_all_namespaces().metadata.resource_version
        self._thread = threading.Thread(target=self._run, args=(start,), daemon=True)
        self._thread.start()

    def _run(self, version: str) -> None:
        while not self._stop.is_set():
            try:
                for event in self._watch.stream(
                    self._core.list_pod_for_all_namespaces,
                    resource_version=version,
                    timeout_seconds=30,
                ):
                    self.events.append((event["type"], event["object"]))
                    version = event["object"].metadata.resource_version
                    if self._stop.is_set():
                        return
            except Exception:  # a cut stream resumes from the last version
                time.sleep(0.2)

    def stop(self) -> list[tuple[str, Any]]:
        self._stop.set()
        self._watch.stop()
        self._thread.join(40)
        return self.events

    def terminated(self, name: str) -> Any:
        """The last terminated container state seen for pod ``name``."""
        for _, pod in reversed(self.events):
            if pod.metadata.name == name:
                for status in pod.status.container_statuses or []:
                    if status.state.terminated is not None:
                        return status.state.terminated
        return None


def test_apply_and_check_run_in_real_pods_that_the_kubelet_accepts_unchanged(
    world: TierWorld,
) -> None:
    """sysctl-tuning on both nodes: validation, apply and check pods pulled by containerd and run
    by the kubelet with the default nsenter connection; the controller reads each result from the
    termination message; the node pod's spec is what podspec built, and the kubelet warned about
    nothing in it; the settings land in each node's own /proc/sys."""
    pods = PodLog(world.core)
    cr = world.cr_name("tuning")
    world.apply_cr(
        cr,
        {
            "hostConnection": "nsenter",
            "interruptionBudget": {"count": 2},
            "packages": {
                "sysctl-tuning": {
                    "version": VERSION,
                    "image": world.tier.images["sysctl-tuning"],
                    "vars": {"sysctl_tuning_settings": ROLE_SETTINGS},
                }
            },
        },
    )
    world.start_controller()
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="complete", timeout=300)
    events = pods.stop()
    ours = [pod for _, pod in events if (pod.metadata.labels or {}).get(podspec.LABEL_CR) == cr]
    node_pods = {
        p.metadata.name: p for p in ours if podspec.LABEL_VALIDATE not in p.metadata.labels
    }
    assert {p.spec.node_name for p in node_pods.values()} == set(world.tier.nodes)
    ran: set[str] = set()
    for name, pod in node_pods.items():
        ended = pods.terminated(name)
        assert ended is not None and ended.exit_code == 0, (name, ended)
        result = AgentResult.model_validate_json(ended.message)
        assert result.succeeded, result
        stage = pod.metadata.labels[podspec.LABEL_STAGE]
        assert result.stages[0].name == stage, result
        ran |= {s.name for s in result.stages}
        spec = pod.spec
        (container,) = spec.containers
        assert spec.host_pid is True
        assert container.security_context.to_dict() == {
            **{k: None for k in client.V1SecurityContext.openapi_types},
            "privileged": True,
        }
        host = next(v for v in spec.volumes if v.name == "host")
        assert (host.host_path.path, host.host_path.type) == ("/", "Directory")
        mount = next(m for m in container.volume_mounts if m.name == "host")
        assert (mount.mount_path, mount.mount_propagation) == ("/host", "HostToContainer")
        tolerations = [(t.key, t.operator, t.effect) for t in spec.tolerations]
        assert tolerations[:3] == [
            ("node.kubernetes.io/unschedulable", "Exists", None),
            ("bridge.nodewright.io/runtime-required", "Exists", None),
            ("node.kubernetes.io/not-ready", "Exists", None),
        ], tolerations
    assert {"apply", "apply-check"} <= ran, ran  # the check ran after the apply, in a real pod
    warnings = [
        (e.involved_object.name, e.reason, e.message)
        for e in world.core.list_namespaced_event(NAMESPACE).items
        if e.type == "Warning" and e.involved_object.name in node_pods
    ]
    assert warnings == []
    for node in world.tier.nodes:
        entry = world.state(cr, node)[f"sysctl-tuning|{VERSION}"]
        assert (entry["stage"], entry["state"]) == ("config", "complete"), entry
        assert world.node_state_file(node, "proc-sys/vm/swappiness").strip() == "37"
        value = world.node_state_file(node, "proc-sys/fs/inotify/max_user_watches")
        assert value.strip() == "424242"
    assert Path("/proc/sys/vm/swappiness").read_text().strip() != "37"


def test_a_pull_failure_is_reported_with_the_kubelets_own_reason(world: TierWorld) -> None:
    cr = world.cr_name("ghost")
    ghost = world.tier.images["sysctl-tuning"].rsplit("/", 1)[0] + "/ghost"
    world.apply_cr(
        cr,
        {
            "nodeSelectors": world.on(world.tier.nodes[0]),
            "interruptionBudget": {"count": 1},
            "packages": {"ghost": {"version": VERSION, "image": ghost}},
        },
    )
    # The kubelet reports a missing image as ErrImagePull, then ImagePullBackOff, and retries:
    # the controller's pull deadline (the CLI's option) decides when that is a verdict.
    world.spawn_controller("ctl-pull", ["--image-pull-deadline", "5s"])

    def invalid() -> dict[str, Any] | None:
        cond = world.condition(cr, "InvalidSpec")
        return cond if cond is not None and cond["status"] == "True" else None

    try:
        cond = wait_for(invalid, what="InvalidSpec", timeout=120)
    except AssertionError as exc:
        pods = [(p.metadata.name, p.status.to_dict()) for p in world.validation_pods(cr)]
        raise AssertionError(f"{exc}\nstatus: {world.cr_status(cr)}\npods: {pods}") from None
    assert cond["reason"] == "ImageNotFound", cond
    message = cond["message"]
    assert f"spec.packages.ghost.image: {ghost}:{VERSION}" in message, message
    assert "ErrImagePull" in message or "ImagePullBackOff" in message, message
    assert "code = NotFound" in message, message  # containerd's answer, passed on by the kubelet
    assert not world.node(world.tier.nodes[0]).spec.unschedulable


def web_deployment(world: TierWorld, namespace: str, name: str, node: str) -> None:
    """One real pod of app ``web`` on ``node`` whose SIGTERM handler takes 4 s to exit."""
    world.env.apps.create_namespaced_deployment(
        namespace,
        client.V1Deployment(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1DeploymentSpec(
                replicas=1,
                selector=client.V1LabelSelector(match_labels={"app": "web", "deployment": name}),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels={"app": "web", "deployment": name}),
                    spec=client.V1PodSpec(
                        node_selector={"kubernetes.io/hostname": node},
                        termination_grace_period_seconds=30,
                        automount_service_account_token=False,
                        containers=[
                            client.V1Container(
                                name="c", image=world.tier.images["workload"], command=WORKLOAD
                            )
                        ],
                    ),
                ),
            ),
        ),
    )


def test_a_pdb_respecting_drain_lets_the_workload_end_in_its_grace_then_reboots(
    world: TierWorld,
) -> None:
    """A Deployment of one real pod per node under a PDB (minAvailable 1): the drain waits for
    the budget, evicts with the CR's 10 s grace period, the pod's SIGTERM handler runs, and only
    when the pod is gone does the interrupt pod start; the reboot shows as a new bootID."""
    node = world.tier.nodes[0]
    ns = world.namespace()
    labels = {"app": "web"}
    web_deployment(world, ns, "web", node)
    world.pdb(ns, "web", min_available=1, labels=labels)

    def running() -> list[Any]:
        return [
            p
            for p in world.core.list_namespaced_pod(ns).items
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        ]

    wait_for(lambda: len(running()) == 1, what="the web pod running", timeout=180)
    (web,) = running()
    before = world.boot_id(node)
    pods = PodLog(world.core)
    cr = world.cr_name("reboot")
    world.apply_cr(
        cr,
        {
            "nodeSelectors": world.on(node),
            "interruptionBudget": {"count": 1},
            "drain": {"gracePeriod": 10, "timeout": "5m"},
            "packages": {
                "probe": {
                    "version": VERSION,
                    "image": world.tier.images["kubelet-probe"],
                    "interrupt": {"type": "reboot"},
                }
            },
        },
    )
    world.start_controller()
    wait_for(lambda: world.condition(cr, "PDBBlocked") is not None, what="PDBBlocked", timeout=120)
    assert world.core.read_namespaced_pod(web.metadata.name, ns).metadata.deletion_timestamp is None
    # The budget allows one eviction once a second pod (on the other node) is ready.
    web_deployment(world, ns, "web-b", world.tier.nodes[1])
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="complete", timeout=300)
    events = pods.stop()
    after = world.boot_id(node)
    assert after != before
    deleted = [
        i
        for i, (kind, pod) in enumerate(events)
        if kind == "DELETED" and pod.metadata.uid == web.metadata.uid
    ]
    assert deleted, "the web pod was never deleted"
    graces = [
        pod.metadata.deletion_grace_period_seconds
        for _, pod in events
        if pod.metadata.uid == web.metadata.uid and pod.metadata.deletion_timestamp
    ]
    # The eviction's grace, then the kubelet's own final delete (grace 0) once the pod ended.
    assert graces[0] == 10 and graces[-1] == 0, graces
    gone = deleted[0]
    last_status = [p for _, p in events[:gone] if p.metadata.uid == web.metadata.uid][-1]
    ended = last_status.status.container_statuses[0].state.terminated
    assert ended is not None and ended.exit_code == 0, last_status.status  # its TERM handler ran
    interrupts = [
        i
        for i, (kind, pod) in enumerate(events)
        if kind == "ADDED" and (pod.metadata.labels or {}).get(podspec.LABEL_STAGE) == "interrupt"
    ]
    assert interrupts and min(interrupts) > gone, (interrupts, gone)
    entry = world.state(cr, node)[f"probe|{VERSION}"]
    assert (entry["stage"], entry["state"]) == ("post-interrupt", "complete"), entry


def test_nwb_logs_reads_a_kept_failed_pods_log_and_follows_a_running_one(
    world: TierWorld,
) -> None:
    """The real kubelet serves pod logs (through the API server's egress into the node): ``nwb
    logs -f`` follows a running package pod to its end, ``nwb logs`` reads a kept failed one."""
    failing, slow = world.tier.nodes
    image = world.tier.images["kubelet-probe"]
    crs = {}
    for node, variables in ((failing, {"probe_fail": True}), (slow, {"probe_sleep": 8})):
        crs[node] = world.cr_name(f"logs-{node}")
        world.apply_cr(
            crs[node],
            {
                "nodeSelectors": world.on(node),
                "interruptionBudget": {"count": 1},
                "packages": {
                    "probe": {
                        "version": VERSION,
                        "image": image,
                        "maxAttempts": 1,
                        "vars": variables,
                    }
                },
            },
        )
    world.start_controller()
    kubeconfig = str(world.env.kubeconfig)

    def running(cr: str) -> bool:
        return any(
            p.status.phase == "Running" and p.metadata.labels[podspec.LABEL_STAGE] == "apply"
            for p in world.package_pods(cr)
        )

    wait_for(lambda: running(crs[slow]), what="a running package pod", timeout=180)
    followed = nwb("logs", crs[slow], "--node", slow, "-f", "--kubeconfig", kubeconfig, timeout=120)
    assert "following pod" in followed and "Wait a while" in followed, followed
    cr = crs[failing]
    wait_for(lambda: world.node_status(cr, failing) == "erroring", what="erroring", timeout=180)
    kept = nwb("logs", cr, "--node", failing, "--kubeconfig", kubeconfig, timeout=60)
    assert "Failed)" in kept and "Fail on request" in kept, kept
    world.invariants.expect_held(failing, "an erroring node stays held")


def test_a_node_reboot_restarts_kubelet_and_containerd_in_a_new_boot(tier: Tier) -> None:
    box = tier.e2e.box
    assert box.tier is not None
    node = box.tier.nodes[tier.nodes[1]]
    before = node.boot_id
    log_text = (node.log_dir / "node-init.log").read_text()
    assert node.running()
    # A reboot without a controller (no drain): the invariants of a World do not apply here.
    core = client.CoreV1Api(tier.e2e.api)
    new = box.tier.reboot(node.name)
    assert new != before
    wait_for(lambda: core.read_node(node.name).status.node_info.boot_id == new, what="new bootID")
    wait_for(lambda: _ready(core, node.name), what="Ready again")
    boots = (node.log_dir / "node-init.log").read_text()[len(log_text) :]
    assert f"boot {new}" in boots
    seen = (node.isolation_state / "proc-sys/kernel/random/boot_id").read_text().strip()
    assert seen == new  # the node's own boot_id file, where the kubelet read it


def test_nwb_sandbox_up_mode_kubelet_starts_real_nodes_and_down_stops_them(
    tier: Tier, tmp_path: Path
) -> None:
    """The CLI entry point: one real node (besides the module's sandbox), reported Ready by
    ``status``, running the pinned kubelet and containerd; more than three are refused."""
    state = tmp_path / "cli"
    refused = subprocess.run(
        [NWB, "sandbox", "up", "--mode", "kubelet", "--nodes", "4", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode == 2 and "1 to 3 nodes" in refused.stderr, refused
    up = nwb("sandbox", "up", "--mode", "kubelet", "--nodes", "1", "--node-prefix", "kcli-",
             "--state-dir", str(state))  # fmt: skip
    try:
        assert f"export KUBECONFIG={state}/controlplane/admin.kubeconfig" in up
        status = nwb("sandbox", "status", "--state-dir", str(state))
        assert "nodes: 1/1 Ready, mode kubelet" in status, status
        api = config.new_client_from_config(
            config_file=str(state / "controlplane/admin.kubeconfig")
        )
        try:
            info = client.CoreV1Api(api).read_node("kcli-000").status.node_info
        finally:
            api.close()
        assert (info.kubelet_version, info.container_runtime_version) == (
            "v1.36.3",
            f"containerd://{tierbins.CONTAINERD_VERSION.removeprefix('v')}",
        )
    finally:
        assert "sandbox stopped" in nwb("sandbox", "down", "--state-dir", str(state))
    leftover = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
                if str(state) in line]  # fmt: skip
    assert leftover == []
    cgroups = [h / own_cgroup_path().lstrip("/") / "nwb-kubelet" for h in cgroup_hierarchies()]
    assert not [c for c in cgroups if (c / "kcli-000").exists()]  # the node's cgroups removed


def test_a_killed_sandbox_leaves_no_node_process_and_no_node_mount(
    tier: Tier, tmp_path: Path
) -> None:
    """SIGKILL to ``nwb sandbox up``'s supervisor: the node's kubelet, containerd and init die
    with it, and its root and per-boot file systems are unmounted."""
    state = tmp_path / "killed"
    nwb("sandbox", "up", "--mode", "kubelet", "--nodes", "1", "--node-prefix", "kkill-",
        "--state-dir", str(state))  # fmt: skip
    pid = int(json.loads((state / "state.json").read_text())["pid"])

    def ours() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    text = (entry / "cmdline").read_bytes().decode(errors="replace")
                except OSError:
                    continue
                if str(state) in text or "kkill-000" in text:
                    found.append(int(entry.name))
        return found

    def mounted() -> list[str]:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
        return [line for line in lines if str(state) in line]

    assert ours() and mounted()
    os.kill(pid, 9)
    wait_for(lambda: not ours(), what="node processes gone", timeout=60)
    wait_for(lambda: not mounted(), what="node mounts gone", timeout=60)
    # What a crash does leave: the node's empty cgroups (nothing runs in them any more).
    for hierarchy in cgroup_hierarchies():
        top = hierarchy / own_cgroup_path().lstrip("/") / "nwb-kubelet" / "kkill-000"
        trees = sorted(os.walk(top), key=lambda w: -w[0].count("/"))
        assert remove_empty_dirs([Path(path) for path, _, _ in trees]) == []


def test_the_machine_kept_its_sysctls_mounts_and_network(tier: Tier) -> None:
    """Last in the module, after every node pod, drain, reboot and the role's sysctls: the
    kubelet, containerd, CNI and the roles changed only the nodes' own namespaces and files."""
    sysctls, mounts, network = tier.before
    assert host_sysctls() == sysctls
    assert host_mounts() == mounts
    assert host_network() == network
