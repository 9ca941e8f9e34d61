"""Package pods created through the API server run for real on simulated nodes.

A sandbox whose kubelet runs package pods in ``exec`` mode (the image map points the
sysctl-tuning example's repository at its assembled package directory) gets node pods built by
``nodewright_bridge.podspec`` exactly as the controller builds them: the real ``nwb-agent``
applies and checks the role on the pod's node root only, its AgentResult comes back as the
container's termination message, a failing check names its task, the reboot interrupt reboots the
node once per resource id, and a service interrupt reaches the node's recorded systemctl. The
``podman`` tests add a second kubelet on the same control plane that runs the real package
image, pulled from the sandbox's local registry (the role, and the reboot hook from inside it).
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from waiting import wait_for

from lifecycle.results import AgentResult, StageStatus, parse_termination_message
from lifecycle.spec import NodeWright
from nodewright_bridge.controller import podspec
from nodewright_bridge.sandbox import Sandbox, binaries, isolation, rootfs
from nodewright_bridge.sandbox.kubelet.api import RawApi
from nodewright_bridge.sandbox.kubelet.kubelet import Kubelet
from nodewright_bridge.sandbox.kubelet.noderoots import SYSTEMCTL_LOG_PATH, NodeRoots
from nodewright_bridge.sandbox.kubelet.nodes import SimNode
from nodewright_bridge.sandbox.kubelet.runners import RunnerMode
from playbook_adapter import imaging, introspection

pytestmark = [
    pytest.mark.integration,
    pytest.mark.rootfs,
    pytest.mark.skipif(os.geteuid() != 0, reason="namespaces, chroot and mounts need root"),
]

EXAMPLE_ROLE = Path(__file__).resolve().parents[2] / "examples" / "roles" / "sysctl-tuning"
PACKAGE = "sysctl-tuning"
VERSION = "1.4.0"
EXEC_IMAGE = "registry.kubelet-modes.test/pkgs/sysctl-tuning"
DROPIN = "etc/sysctl.d/90-node-tuning.conf"
SWAPPINESS = Path("/proc/sys/vm/swappiness")
# The agent, Ansible and a role on a busy 2-core box: generous, but a hang still fails.
POD_SECONDS = 180.0


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def package_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `nwb package init` + the image build lay out, as a directory (exec mode's image)."""
    work = tmp_path_factory.mktemp("package")
    role = work / PACKAGE
    shutil.copytree(EXAMPLE_ROLE, role)
    manifest = introspection.introspect_role(role, version=VERSION)
    introspection.write_manifest(role, manifest)
    imaging.assemble_package(role, imaging.load_role_manifest(role), work / "package")
    return work / "package"


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory, package_dir: Path) -> Iterator[Sandbox]:
    missing = [name for name, found in binaries.find_all(binaries.REQUIRED).items() if not found]
    if missing:
        pytest.skip(f"control-plane binaries missing ({', '.join(missing)}); run `make setup`")
    sandbox = Sandbox(
        tmp_path_factory.mktemp("modes"),
        nodes=2,
        mode=RunnerMode.EXEC,
        image_map={EXEC_IMAGE: package_dir},
        registry=True,
        node_prefix="exec-",
    )
    sandbox.start()
    try:
        yield sandbox
    finally:
        sandbox.stop()


@pytest.fixture(scope="module")
def core(box: Sandbox) -> Iterator[client.CoreV1Api]:
    api = config.new_client_from_config(config_file=str(box.kubeconfig))
    try:
        yield client.CoreV1Api(api)
    finally:
        api.close()


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = f"modes-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})

    def has_default_account() -> bool:
        try:
            core.read_namespaced_service_account("default", name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    wait_for(has_default_account, what=f"ServiceAccount {name}/default")
    yield name
    core.delete_namespace(name)


@pytest.fixture
def fresh_nodes(box: Sandbox) -> Iterator[list[SimNode]]:
    """Two nodes of the exec kubelet for this test only (own roots, removed afterwards)."""
    assert box.kubelet is not None
    prefix = f"exec-{uuid.uuid4().hex[:6]}-"
    made = box.kubelet.add_nodes([f"{prefix}{i}" for i in range(2)])
    yield made
    box.kubelet.remove_nodes([node.name for node in made])


# --- helpers ----------------------------------------------------------------------------------


def nodewright(image: str, variables: dict[str, Any]) -> NodeWright:
    return NodeWright.model_validate(
        {
            "metadata": {"name": f"modes-{uuid.uuid4().hex[:6]}", "uid": str(uuid.uuid4())},
            "spec": {
                "packages": {PACKAGE: {"version": VERSION, "image": image, "vars": variables}},
                "hostConnection": "chroot",
            },
        }
    )


def create_node_pod(
    core: client.CoreV1Api,
    namespace: str,
    cr: NodeWright,
    node: str,
    *,
    stages: tuple[str, ...] = (),
    interrupt: str | None = None,
    services: tuple[str, ...] = (),
    resource_id: str = "rid-1",
    attempt: int = 1,
) -> str:
    """The vars ConfigMap and the node pod, as the controller's executor creates them.

    The owner references point at a NodeWright that does not exist in this cluster; they are
    dropped so the garbage collector leaves the objects alone.
    """
    configmap = podspec.build_vars_configmap(cr, cr.spec.packages[PACKAGE])
    configmap["metadata"]["namespace"] = namespace
    del configmap["metadata"]["ownerReferences"]
    try:
        core.create_namespaced_config_map(namespace, configmap)
    except ApiException as exc:
        if exc.status != 409:
            raise
    request = podspec.PodRequest(
        cr=cr,
        package_name=PACKAGE,
        node=node,
        stages=stages,
        resource_id=resource_id,
        node_order=0,
        interrupt_type=interrupt,
        interrupt_services=services,
        attempt=attempt,
    )
    pod = podspec.build_pod(request)
    pod["metadata"]["namespace"] = namespace
    del pod["metadata"]["ownerReferences"]
    core.create_namespaced_pod(namespace, pod)
    return str(pod["metadata"]["name"])


def finished(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod:
    def done() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, namespace)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    return wait_for(done, timeout=POD_SECONDS, what=f"pod {name} finished")


def agent_result(pod: client.V1Pod) -> AgentResult:
    (status,) = pod.status.container_statuses
    assert status.state.terminated is not None, status
    return parse_termination_message(status.state.terminated.message or "")


def pod_output(node: SimNode, pod: client.V1Pod) -> str:
    """The agent's stdout/stderr as the exec runner kept it (for assertion messages)."""
    logs = node.state_dir.glob(f"pods/{pod.metadata.uid}/containers/*/output.log")
    return "\n".join(path.read_text(errors="replace")[-3000:] for path in logs)


def node_swappiness(node: SimNode) -> str:
    """vm.swappiness in the node's /proc/sys stand-in ("" before the node ran anything)."""
    stand_in = node.state_dir / "isolation" / isolation.PROC_SYS_DIR / "vm" / "swappiness"
    return stand_in.read_text().strip() if stand_in.exists() else ""


def other_swappiness() -> int:
    """A value the machine does not have, so a leak to the real kernel would show."""
    return 7 if SWAPPINESS.read_text().strip() != "7" else 8


def assert_dropin_on_node_only(node: SimNode, other: SimNode, expected: str) -> None:
    assert node.root_dir is not None and other.root_dir is not None
    assert (node.root_dir / DROPIN).read_text().strip() == expected
    assert not (other.root_dir / DROPIN).exists()
    assert not (rootfs.ensure_base_rootfs() / DROPIN).exists()
    assert not (Path("/") / DROPIN).exists()


@pytest.fixture(autouse=True)
def machine_untouched() -> Iterator[None]:
    """Nothing a pod does may reach this machine's kernel settings or /etc/sysctl.d."""
    before = SWAPPINESS.read_text()
    assert not (Path("/") / DROPIN).exists(), "the machine already has the role's drop-in"
    yield
    assert SWAPPINESS.read_text() == before
    assert not (Path("/") / DROPIN).exists()


# --- exec mode --------------------------------------------------------------------------------


def test_an_exec_mode_node_pod_applies_and_checks_the_role_on_its_node_only(
    box: Sandbox, core: client.CoreV1Api, namespace: str, fresh_nodes: list[SimNode]
) -> None:
    node, other = fresh_nodes
    wanted = other_swappiness()
    cr = nodewright(EXEC_IMAGE, {"sysctl_tuning_settings": {"vm.swappiness": wanted}})
    name = create_node_pod(core, namespace, cr, node.name, stages=("apply", "apply-check"))
    pod = finished(core, namespace, name)

    assert pod.status.phase == "Succeeded", pod_output(node, pod)
    result = agent_result(pod)
    assert (result.package, result.version) == (PACKAGE, VERSION)
    assert [(s.name, s.status) for s in result.stages] == [
        ("apply", StageStatus.OK),
        ("apply-check", StageStatus.OK),
    ]
    assert result.stages[0].changed >= 1 and result.failure is None
    assert_dropin_on_node_only(node, other, f"vm.swappiness={wanted}")
    assert node_swappiness(node) == str(wanted)  # sysctl -p reached the node's stand-in only
    assert node_swappiness(other) != str(wanted)


def test_an_exec_mode_node_pod_whose_check_fails_ends_failed_naming_the_task(
    core: client.CoreV1Api, namespace: str, fresh_nodes: list[SimNode]
) -> None:
    node = fresh_nodes[0]
    # The sysctl module writes a boolean as 1, so the check's "vm.swappiness=True" is not there.
    cr = nodewright(EXEC_IMAGE, {"sysctl_tuning_settings": {"vm.swappiness": True}})
    name = create_node_pod(core, namespace, cr, node.name, stages=("apply", "apply-check"))
    pod = finished(core, namespace, name)

    assert pod.status.phase == "Failed", pod_output(node, pod)
    (status,) = pod.status.container_statuses
    assert status.state.terminated.exit_code != 0
    result = agent_result(pod)
    assert not result.unparseable and result.failure is not None
    assert result.failure.stage == "apply-check"
    assert result.failure.task == "Every parameter is persisted in the drop-in file"
    assert result.failure.message == f"vm.swappiness is not set to True in /{DROPIN}"
    assert [s.status for s in result.stages] == [StageStatus.OK, StageStatus.FAILED]


# --- interrupts (exec mode) -------------------------------------------------------------------


class NodeWatcher:
    """Records every (bootID, Ready) a Node reports, polling in the background."""

    def __init__(self, core: client.CoreV1Api, node: str) -> None:
        self.core, self.node = core, node
        self.seen: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                got = self.core.read_node(self.node).status
            except Exception:  # a transient read error just skips a sample
                continue
            ready = next((c.status for c in got.conditions or [] if c.type == "Ready"), "")
            sample = (got.node_info.boot_id, ready)
            if not self.seen or self.seen[-1] != sample:
                self.seen.append(sample)

    def rebooted(self, before: str) -> bool:
        """Seen: a new bootID reported NotReady, later the same bootID Ready."""
        samples = list(self.seen)
        down = [i for i, (boot, ready) in enumerate(samples) if boot != before and ready == "False"]
        return bool(down) and samples[-1] == (samples[down[0]][0], "True")

    def stop(self) -> list[tuple[str, str]]:
        self._stop.set()
        self._thread.join(5)
        return self.seen


def boot_id(core: client.CoreV1Api, node: str) -> str:
    return str(core.read_node(node).status.node_info.boot_id)


def node_ready(core: client.CoreV1Api, node: str) -> bool:
    conditions = core.read_node(node).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def test_a_reboot_interrupt_pod_reboots_its_node_once_per_resource_id(
    core: client.CoreV1Api, namespace: str, fresh_nodes: list[SimNode]
) -> None:
    node = fresh_nodes[0]
    workload = {
        "metadata": {"name": "web"},
        "spec": {"nodeName": node.name, "containers": [{"name": "c", "image": "example/web:1"}]},
    }
    core.create_namespaced_pod(namespace, workload)
    wait_for(
        lambda: core.read_namespaced_pod("web", namespace).status.phase == "Running",
        what="workload pod Running",
    )
    before = boot_id(core, node.name)
    watcher = NodeWatcher(core, node.name)
    cr = nodewright(EXEC_IMAGE, {})
    resource_id = f"reboot-{uuid.uuid4().hex[:8]}"
    first = create_node_pod(
        core, namespace, cr, node.name, interrupt="reboot", resource_id=resource_id
    )
    try:
        killed = finished(core, namespace, first)
        wait_for(lambda: watcher.rebooted(before), what="new bootID NotReady, then Ready")
    finally:
        seen = watcher.stop()

    after = boot_id(core, node.name)
    assert after != before and seen[-1] == (after, "True"), seen
    assert (killed.status.phase, killed.status.reason) == ("Failed", "NodeRebooted")
    web = core.read_namespaced_pod("web", namespace)
    assert (web.status.phase, web.status.reason) == ("Failed", "NodeRebooted")
    assert web.status.container_statuses[0].state.terminated is not None

    # The controller's retry: same resource id, next attempt. The host flag the agent wrote
    # before asking for the reboot makes it complete without rebooting again.
    again = create_node_pod(
        core, namespace, cr, node.name, interrupt="reboot", resource_id=resource_id, attempt=2
    )
    rerun = finished(core, namespace, again)
    assert rerun.status.phase == "Succeeded", pod_output(node, rerun)
    result = agent_result(rerun)
    assert result.succeeded and [s.name for s in result.stages] == ["interrupt"]
    assert "already done" in pod_output(node, rerun)
    assert node.reboot_request_file is not None and not node.reboot_request_file.exists()
    assert boot_id(core, node.name) == after and node_ready(core, node.name)


def test_a_service_interrupt_pod_reloads_and_restarts_the_units_on_its_node(
    core: client.CoreV1Api, namespace: str, fresh_nodes: list[SimNode]
) -> None:
    node, other = fresh_nodes
    before = boot_id(core, node.name)
    cr = nodewright(EXEC_IMAGE, {})
    name = create_node_pod(core, namespace, cr, node.name, interrupt="service", services=("a", "b"))
    pod = finished(core, namespace, name)

    assert pod.status.phase == "Succeeded", pod_output(node, pod)
    result = agent_result(pod)
    assert result.succeeded and [s.name for s in result.stages] == ["interrupt"]
    assert node.root_dir is not None and other.root_dir is not None
    log = (node.root_dir / SYSTEMCTL_LOG_PATH).read_text().splitlines()
    assert log == ["daemon-reload", "restart a", "restart b"]
    assert not (other.root_dir / SYSTEMCTL_LOG_PATH).exists()
    assert boot_id(core, node.name) == before


# --- podman mode ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pushed_image(box: Sandbox, package_dir: Path) -> str:
    """The sysctl-tuning package image built on the cached rootfs base, pushed to the sandbox's
    registry; returns its repository (``127.0.0.1:<port>/pkgs/sysctl-tuning``)."""
    if shutil.which("podman") is None:
        pytest.fail("podman is missing: run `make setup`")
    assert box.registry is not None
    engine = imaging.detect_engine("podman")
    base = rootfs.ensure_base_rootfs()
    base_image = f"localhost/nwb-base:{base.name}"
    imaging.ensure_rootfs_image(engine, base, base_image)
    role = package_dir.parent / PACKAGE  # holds the manifest written by the package fixture
    repository = f"{box.registry.host}/pkgs/{PACKAGE}"
    built = imaging.build_package(
        role, engine=engine, tag=repository, base_image=base_image, now=datetime.now(UTC)
    )
    assert built.image == f"{repository}:{VERSION}"
    imaging.push_image(engine, built.image, tls_verify=False)
    engine.run(["rmi", "--force", built.image])  # the node must pull it from the registry
    return repository


@pytest.fixture(scope="module")
def podman_nodes(box: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SimNode]]:
    """A second kubelet on the same control plane whose package pods run with podman."""
    from nodewright_bridge.sandbox.kubelet.podman_runner import PodmanRunner  # noqa: PLC0415

    api = RawApi(box.kubeconfig)
    kubelet = Kubelet(
        api,
        PodmanRunner(roots=NodeRoots(rootfs.ensure_base_rootfs())),
        state_dir=tmp_path_factory.mktemp("podman-kubelet"),
        mode=RunnerMode.PODMAN.value,
    )
    try:
        nodes = kubelet.add_nodes([f"podman-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)])
        kubelet.start()
        assert kubelet.watch_synced.wait(60)
        yield nodes
    finally:
        kubelet.stop(delete_nodes=True)
        api.close()


@pytest.mark.podman
def test_a_podman_mode_node_pod_runs_the_pushed_package_image_on_its_node_only(
    core: client.CoreV1Api, namespace: str, pushed_image: str, podman_nodes: list[SimNode]
) -> None:
    node, other = podman_nodes
    wanted = other_swappiness()
    cr = nodewright(pushed_image, {"sysctl_tuning_settings": {"vm.swappiness": wanted}})
    name = create_node_pod(core, namespace, cr, node.name, stages=("apply", "apply-check"))
    pod = finished(core, namespace, name)

    assert pod.status.phase == "Succeeded", pod_output(node, pod)
    (status,) = pod.status.container_statuses
    assert status.image == f"{pushed_image}:{VERSION}"
    result = agent_result(pod)
    assert (result.package, result.version) == (PACKAGE, VERSION)
    assert [(s.name, s.status) for s in result.stages] == [
        ("apply", StageStatus.OK),
        ("apply-check", StageStatus.OK),
    ]
    assert_dropin_on_node_only(node, other, f"vm.swappiness={wanted}")
    assert node_swappiness(node) == str(wanted)


@pytest.mark.podman
def test_a_podman_mode_reboot_interrupt_reboots_its_node_and_the_rerun_does_not(
    core: client.CoreV1Api, namespace: str, pushed_image: str, podman_nodes: list[SimNode]
) -> None:
    node = podman_nodes[1]
    before = boot_id(core, node.name)
    watcher = NodeWatcher(core, node.name)
    cr = nodewright(pushed_image, {})
    resource_id = f"reboot-{uuid.uuid4().hex[:8]}"
    first = create_node_pod(
        core, namespace, cr, node.name, interrupt="reboot", resource_id=resource_id
    )
    try:
        killed = finished(core, namespace, first)
        wait_for(lambda: watcher.rebooted(before), what="new bootID NotReady, then Ready")
    finally:
        watcher.stop()
    assert (killed.status.phase, killed.status.reason) == ("Failed", "NodeRebooted")
    after = boot_id(core, node.name)
    again = create_node_pod(
        core, namespace, cr, node.name, interrupt="reboot", resource_id=resource_id, attempt=2
    )
    rerun = finished(core, namespace, again)
    assert rerun.status.phase == "Succeeded", pod_output(node, rerun)
    assert agent_result(rerun).succeeded
    assert boot_id(core, node.name) == after
