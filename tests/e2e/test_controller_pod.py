"""The chart runs the controller image: two controller pods from the image built from this
checkout, under the chart's ServiceAccount, RBAC and security context, lead and roll out.

A second simulated kubelet on the e2e control plane serves this module's nodes in podman mode:
package pods run their real package image on the node's root; workload pods whose image is in
this module's registry (the controller's) run with podman as an unprivileged pod with the
ServiceAccount token, CA and ``KUBERNETES_SERVICE_*`` a kubelet gives
(``nodewright_bridge.sandbox.kubelet.image_pods``). The controller pods are kept on "control"
nodes, the rollouts on "worker" nodes, so a drain never meets a controller pod.

One test walks a release's life: install (2 replicas, one leader), a rollout to complete,
``helm upgrade`` to a new image tag while idle, a second rollout during which the leader's pod
is deleted (the other replica or its replacement finishes it), then the CRs are deleted and
``helm uninstall`` leaves no NodeWright behind a finalizer. The invariant checker watches it all.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from chart_support import CHART, Helm
from controller_image import controller_image, engine, push_as
from e2e_harness import E2E, GROUP, NAMESPACE, SLOW_TEST_SECONDS, VERSION, World, wait_for
from kubernetes.client.exceptions import ApiException

from nodewright_bridge.sandbox import binaries, rootfs
from nodewright_bridge.sandbox.kubelet.api import RawApi
from nodewright_bridge.sandbox.kubelet.image_pods import ImagePodRunner
from nodewright_bridge.sandbox.kubelet.kubelet import Kubelet
from nodewright_bridge.sandbox.kubelet.noderoots import NodeRoots
from nodewright_bridge.sandbox.kubelet.podman_runner import PodmanRunner
from nodewright_bridge.sandbox.kubelet.runners import RunnerMode
from nodewright_bridge.sandbox.registry import Registry
from playbook_adapter import imaging, introspection

pytestmark = [pytest.mark.e2e, pytest.mark.podman]

LEASE = "nodewright-bridge-controller"
ROLE_LABEL = "e2e.nodewright.io/role"
PACKAGE = "sysctl-tuning"
PACKAGE_VERSION = "1.4.0"
EXAMPLE_ROLE = Path(__file__).resolve().parents[2] / "examples" / "roles" / PACKAGE


@dataclass(frozen=True)
class PodmanNodes:
    kubelet: Kubelet
    workloads: ImagePodRunner
    registry: str
    controller_repository: str
    package_image: str


@pytest.fixture(scope="module")
def podman_nodes(e2e: E2E, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodmanNodes]:
    """A registry holding the controller image (two tags) and the package image, and a kubelet
    whose nodes run both for real."""
    tmp = tmp_path_factory.mktemp("controller-pod")
    registry = Registry(tmp / "registry", storage=tmp / "registry-data")
    registry.start()
    api: RawApi | None = None
    kubelet: Kubelet | None = None
    try:
        image = controller_image()
        repository = f"{registry.host}/nodewright-bridge"
        for tag in (image.version, f"{image.version}-next"):
            push_as(image, f"{repository}:{tag}")
        package_image = _push_package(registry.host, tmp)
        workloads = ImagePodRunner(api_server=e2e.box.server, registries=[registry.host])
        api = RawApi(e2e.kubeconfig)
        kubelet = Kubelet(
            api,
            PodmanRunner(roots=NodeRoots(rootfs.ensure_base_rootfs())),
            state_dir=tmp / "kubelet",
            mode=RunnerMode.PODMAN.value,
            workload_runner=workloads,
        )
        kubelet.start()
        assert kubelet.watch_synced.wait(60)
        yield PodmanNodes(kubelet, workloads, registry.host, repository, package_image)
    finally:
        if kubelet is not None:
            kubelet.stop(delete_nodes=True)
        if api is not None:
            api.close()
        registry.stop()
        leftovers = engine().run(["images", "--format", "{{.Repository}}:{{.Tag}}"]).stdout
        for reference in leftovers.split():
            if reference.startswith(f"{registry.host}/"):
                engine().run(["rmi", "--force", reference], check=False)


def _push_package(registry: str, tmp: Path) -> str:
    """The example sysctl-tuning package image, pushed; returns its repository."""
    role = tmp / PACKAGE
    shutil.copytree(EXAMPLE_ROLE, role)
    introspection.write_manifest(role, introspection.introspect_role(role, version=PACKAGE_VERSION))
    tree = rootfs.ensure_base_rootfs()
    base_image = f"localhost/nwb-base:{tree.name}"
    imaging.ensure_rootfs_image(engine(), tree, base_image)
    repository = f"{registry}/pkgs/{PACKAGE}"
    built = imaging.build_package(
        role, engine=engine(), tag=repository, base_image=base_image, now=datetime.now(UTC)
    )
    imaging.push_image(engine(), built.image, tls_verify=False)
    return repository


def _lease_holder(world: World) -> str:
    """The pod name of the Lease's holder (an identity is ``<pod name>_<uuid>``)."""
    try:
        lease = world.env.coordination.read_namespaced_lease(LEASE, NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return ""
        raise
    return str(lease.spec.holder_identity or "").partition("_")[0]


def _controller_pods(world: World, release: str) -> list[Any]:
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=controller"
    return list(world.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items)


def _running(pods: list[Any]) -> list[Any]:
    return [
        p
        for p in pods
        if p.status.phase == "Running"
        and not p.metadata.deletion_timestamp
        and all(c.ready for c in p.status.container_statuses or [])
    ]


def _logs(nodes: PodmanNodes, release: str) -> str:
    out = []
    for (namespace, pod, container), path in sorted(nodes.workloads.outputs.items()):
        if namespace == NAMESPACE and pod.startswith(release) and path.is_file():
            out.append(f"--- {pod}/{container}:\n{path.read_text(errors='replace')[-4000:]}")
    return "\n".join(out)


def _forbidden(nodes: PodmanNodes, release: str) -> list[str]:
    return [
        line
        for line in _logs(nodes, release).splitlines()
        if "forbidden" in line.lower() or '"status": 403' in line or "(403)" in line
    ]


def _container_facts(nodes: PodmanNodes, pod: str) -> dict[str, Any]:
    """How podman runs the controller container of ``pod``: user, root, capabilities, pid."""
    name = nodes.workloads.containers[(NAMESPACE, pod, "controller")]
    shown = engine().run(["inspect", "--format", "{{json .}}", name])
    (facts,) = json.loads(shown.stdout)
    status = Path(f"/proc/{facts['State']['Pid']}/status").read_text()
    uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    return {
        "uids": uids,
        "read_only": facts["HostConfig"]["ReadonlyRootfs"],
        "effective_caps": next(
            line for line in status.splitlines() if line.startswith("CapEff:")
        ).split()[1],
        "no_new_privs": next(
            line for line in status.splitlines() if line.startswith("NoNewPrivs:")
        ).split()[1],
        "network": facts["HostConfig"]["NetworkMode"],
    }


def _kubectl(world: World, *args: str) -> None:
    found = binaries.find("kubectl")
    assert found is not None, "kubectl not found: run `make setup`"
    argv = [str(found.path), "--kubeconfig", str(world.env.kubeconfig), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _allow_uninstall(world: World, account: str) -> None:
    world.invariants.allow_pdb_breach(
        f"{NAMESPACE}/{account}",
        "helm uninstall deletes the controller pods before the chart's own budget for them",
    )


def _rollout(world: World, name: str, image: str, swappiness: int) -> str:
    cr = world.cr_name(name)
    world.apply_cr(
        cr,
        {
            "nodeSelectors": {"matchLabels": {**world.labels, ROLE_LABEL: "worker"}},
            "interruptionBudget": {"count": 1},
            "packages": {
                "tuning": {
                    "version": PACKAGE_VERSION,
                    "image": image,
                    "vars": {"sysctl_tuning_settings": {"vm.swappiness": swappiness}},
                }
            },
        },
    )
    return cr


def _complete(world: World, cr: str) -> bool:
    return world.cr_status(cr).get("status") == "complete"


@pytest.mark.timeout(SLOW_TEST_SECONDS)
def test_the_chart_runs_the_controller_image_through_upgrade_leader_loss_and_uninstall(
    podman_nodes: PodmanNodes, world: World, tmp_path: Path
) -> None:
    nodes = podman_nodes
    control = [f"e{world.id}-ctl{i}" for i in range(3)]
    workers = [f"e{world.id}-wrk{i}" for i in range(2)]
    for names, role in ((control, "control"), (workers, "worker")):
        nodes.kubelet.add_nodes(names, labels={**world.labels, ROLE_LABEL: role})
        world.invariants.track(names)
    for name in control + workers:
        wait_for(lambda n=name: world.node_ready(n), what=f"node {name} Ready")

    helm = Helm(world.env.kubeconfig, tmp_path / "helm-home")
    release = f"nwb-{uuid.uuid4().hex[:6]}"
    image = controller_image()
    values = tmp_path / "values.json"
    # JSON, not YAML: a hex id such as "123e45" is a plain string to PyYAML but a
    # number to Helm's YAML 1.1 reader, which the chart's schema then refuses.
    values.write_text(
        json.dumps(
            {
                "namespace": NAMESPACE,
                "createNamespace": False,
                "image": {"repository": nodes.controller_repository, "tag": image.version},
                "nodeSelector": {**world.labels, ROLE_LABEL: "control"},
                "logFormat": "json",
            }
        )
    )
    account = f"{release}-nodewright-bridge"
    installed = False
    try:
        helm.run("install", release, str(CHART), "-f", str(values), "--wait", "--timeout", "180s")
        installed = True
        # Two controller pods from the image, on control nodes, as the chart's ServiceAccount.
        pods = wait_for(
            lambda: (p := _running(_controller_pods(world, release))) and len(p) == 2 and p,
            timeout=120,
            what="two running controller pods",
        )
        for pod in pods:
            assert pod.spec.service_account_name == account
            assert pod.spec.node_name in control
            (status,) = pod.status.container_statuses
            assert status.image == f"{nodes.controller_repository}:{image.version}"
        leader = wait_for(
            lambda: (h := _lease_holder(world)) in {p.metadata.name for p in pods} and h,
            timeout=90,
            what="one controller pod leads",
        )
        for pod in pods:
            # The chart's security context, as the container really runs.
            facts = _container_facts(nodes, pod.metadata.name)
            assert facts["uids"] == ["65532"] * 4, facts
            assert facts["read_only"] is True and facts["no_new_privs"] == "1", facts
            assert int(facts["effective_caps"], 16) == 0, facts
            assert facts["network"].startswith("slirp4netns"), facts
        standby = next(p.metadata.name for p in pods if p.metadata.name != leader)
        assert (
            '"workers started"'
            not in nodes.workloads.outputs[(NAMESPACE, standby, "controller")].read_text()
        ), "the standby replica must not reconcile"

        # A rollout to complete (the package runs on each worker's root).
        first = _rollout(world, "image-a", nodes.package_image, 21)
        wait_for(lambda: _complete(world, first), timeout=300, what="first rollout complete")
        assert _lease_holder(world) == leader

        # helm upgrade to a new image tag while idle: new pods from the new tag take over.
        helm.run(
            "upgrade", release, str(CHART), "-f", str(values),
            "--set", f"image.tag={image.version}-next", "--wait", "--timeout", "180s",
        )  # fmt: skip
        new_image = f"{nodes.controller_repository}:{image.version}-next"

        def upgraded() -> list[Any]:
            pods = _controller_pods(world, release)
            images = {c.image for p in pods for c in p.status.container_statuses or []}
            running = _running(pods)
            return running if images == {new_image} and len(running) == 2 else []

        pods = wait_for(upgraded, timeout=180, what="two controller pods of the new tag only")
        assert _complete(world, first), "an idle rollout stays complete across the upgrade"
        assert world.cr_status(first).get("observedGeneration") == 1
        names = {p.metadata.name for p in pods}
        leader = wait_for(
            lambda: (h := _lease_holder(world)) in names and h,
            timeout=90,
            what="a pod of the new tag leads",
        )

        # A second rollout; the leader's pod is deleted while it runs.
        second = _rollout(world, "image-b", nodes.package_image, 23)
        wait_for(
            lambda: any(p.status.phase == "Running" for p in world.package_pods(second)),
            timeout=120,
            what="the second rollout's first package pod running",
        )
        assert not _complete(world, second)
        _kubectl(world, "delete", "pod", leader, "--namespace", NAMESPACE, "--wait=false")
        wait_for(
            lambda: (h := _lease_holder(world)) not in ("", leader) and h,
            timeout=120,
            what="another controller pod leads after the leader's pod was deleted",
        )
        wait_for(lambda: _complete(world, second), timeout=300, what="second rollout complete")
        for name in workers:
            root = nodes.kubelet.nodes[name].root_dir
            assert root is not None
            dropin = (root / "etc/sysctl.d/90-node-tuning.conf").read_text()
            assert "vm.swappiness=23" in dropin
        wait_for(
            lambda: len(_running(_controller_pods(world, release))) == 2,
            timeout=120,
            what="the Deployment back at two running pods",
        )
        assert _forbidden(nodes, release) == [], "\n".join(_forbidden(nodes, release)[:20])

        # Delete the CRs while the controller runs, then uninstall: nothing stays behind a
        # finalizer.
        for cr in (first, second):
            world.custom.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", cr)
        wait_for(
            lambda: world.cr_gone(first) and world.cr_gone(second),
            timeout=120,
            what="both CRs deleted (their finalizer removed by the controller pod)",
        )
        _allow_uninstall(world, account)
        helm.run("uninstall", release, "--wait", "--timeout", "120s")
        installed = False
        wait_for(
            lambda: not _controller_pods(world, release), timeout=60, what="controller pods gone"
        )
        stuck = [
            o["metadata"]["name"]
            for o in world.custom.list_cluster_custom_object(GROUP, VERSION, "nodewrights")["items"]
            if o["metadata"].get("deletionTimestamp")
        ]
        assert stuck == []
    except BaseException:
        print(_logs(nodes, release))
        raise
    finally:
        if installed:
            _allow_uninstall(world, account)
            helm.run("uninstall", release, "--wait", "--timeout", "120s", check=False)
        with contextlib.suppress(Exception):
            nodes.kubelet.remove_nodes(control + workers)
