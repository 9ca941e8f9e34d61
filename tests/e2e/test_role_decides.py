"""The role decides, end to end: real roles on exec-mode nodes through the real controller.

- A CR without ``interrupt`` and a role whose handler reboots: every node is cordoned, drained,
  rebooted once (new bootID) and uncordoned.
- One package, two vars changes: a sysctl-only change re-runs the role (no config task file) and
  its check passes with no reboot; a kernel command line change reboots each node once.
- A handler that fails once runs on the retry; the change is then in effect.
- A restart handler becomes a service interrupt on a drained node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from e2e_harness import EXEC_REGISTRY, NAMESPACE, SLOW_TEST_SECONDS, World, wait_for
from kubernetes import client

pytestmark = pytest.mark.e2e


@dataclass
class NodeLog:
    """Per node: every bootID seen, whether it was ever cordoned, and for each of our pods'
    first stage whether the node was cordoned when the pod was first seen."""

    boots: list[str] = field(default_factory=list)
    cordoned: bool = False
    cordoned_at_reboot: list[bool] = field(default_factory=list)
    pods: dict[str, bool] = field(default_factory=dict)


class Watcher:
    def __init__(self, world: World, nodes: list[str]) -> None:
        self.world = world
        self.logs = {n: NodeLog() for n in nodes}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                ours = self.world.core.list_namespaced_pod(NAMESPACE).items
            except Exception:
                ours = []
            for name, log in self.logs.items():
                try:
                    node = self.world.node(name)
                except Exception:
                    continue
                boot = str(node.status.node_info.boot_id)
                cordoned = bool(node.spec.unschedulable)
                log.cordoned = log.cordoned or cordoned
                if not log.boots or log.boots[-1] != boot:
                    if log.boots:
                        log.cordoned_at_reboot.append(cordoned)
                    log.boots.append(boot)
                for pod in ours:
                    if pod.spec.node_name == name:
                        stage = (pod.metadata.labels or {}).get("bridge.nodewright.io/stage", "")
                        log.pods.setdefault(f"{stage}/{pod.metadata.name}", cordoned)

    def stop(self) -> dict[str, NodeLog]:
        self._stop.set()
        self._thread.join(5)
        return self.logs


@pytest.fixture
def web(world: World) -> Iterator[str]:
    """A two-replica Deployment on the test's nodes: a drain has something to evict."""
    ns = world.namespace()
    labels = {"app": "web"}
    world.env.apps.create_namespaced_deployment(
        ns,
        client.V1Deployment(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1DeploymentSpec(
                replicas=2,
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(
                        node_selector=dict(world.labels),
                        containers=[client.V1Container(name="c", image="busybox")],
                    ),
                ),
            ),
        ),
    )
    yield ns


def root_of(world: World, node: str) -> Path:
    kubelet = world.env.box.kubelet
    assert kubelet is not None
    root = kubelet.nodes[node].root_dir
    assert root is not None
    return root


def roll_out(world: World, base: str, package: str, role: str, **fields: object) -> str:
    """A CR rolling one exec-mode package of ``role`` out one node at a time; its name."""
    cr = world.cr_name(base)
    spec = {"version": "1.0.0", "image": f"{EXEC_REGISTRY}/{role}", **fields}
    world.apply_cr(cr, {"interruptionBudget": {"count": 1}, "packages": {package: spec}})
    return cr


def wait_complete(world: World, cr: str, generation: int, timeout: float = 300) -> None:
    def done() -> bool:
        status = world.cr_status(cr)
        return status.get("status") == "complete" and status.get("observedGeneration") == generation

    wait_for(done, what=f"{cr} complete at generation {generation}", timeout=timeout)


def web_pods_on(world: World, ns: str, node: str) -> int:
    pods = world.core.list_namespaced_pod(ns, label_selector="app=web").items
    return sum(
        1 for p in pods if p.spec.node_name == node and p.metadata.deletion_timestamp is None
    )


def test_a_reboot_handler_drains_and_reboots_every_node_once_without_a_cr_interrupt(
    world: World, web: str
) -> None:
    nodes = world.add_nodes(2)
    wait_for(lambda: sum(web_pods_on(world, web, n) for n in nodes) == 2, what="web running")
    watch = Watcher(world, nodes)
    cr = roll_out(world, "grub", "grub", "grub-params", vars={"grub_params_cmdline": ["iommu=pt"]})
    world.start_controller()
    wait_complete(world, cr, 1)
    logs = watch.stop()
    for node in nodes:
        log = logs[node]
        assert len(log.boots) == 2, f"{node} rebooted {len(log.boots) - 1} times"
        assert log.cordoned and log.cordoned_at_reboot == [True]
        assert not world.node(node).spec.unschedulable
        entry = world.state(cr, node)["grub|1.0.0"]
        assert (entry["stage"], entry["state"]) == ("post-interrupt", "complete")
        assert entry["requested"] == {"type": "reboot"}
        assert entry["declared"]["type"] == "reboot"
        grub = (root_of(world, node) / "etc/default/grub").read_text()
        assert 'GRUB_CMDLINE_LINUX="iommu=pt"' in grub
    # The first node learned the package's declared reboot after applying undrained; the node
    # of the next batch started knowing it: cordoned (and drained) before its apply pod.
    applies = {n: [c for p, c in logs[n].pods.items() if p.startswith("apply/")] for n in nodes}
    assert sorted(applies.values()) == [[False], [True]], applies
    reasons = {
        e.reason
        for e in world.core.list_namespaced_event("default").items
        if e.involved_object.name in nodes
    }
    assert "InterruptRequested" in reasons


@pytest.mark.timeout(SLOW_TEST_SECONDS)
def test_the_vars_change_decides_whether_a_node_reboots(world: World, web: str) -> None:
    nodes = world.add_nodes(2)
    for node in nodes:
        world.invariants.allow_reboots(node, 2, "the install and the command line change")
    cr = world.cr_name("tune")
    package = {"version": "1.0.0", "image": f"{EXEC_REGISTRY}/host-tuning"}
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 1},
            "packages": {"tune": {**package, "vars": {"host_tuning_cmdline": "quiet"}}},
        },
    )
    world.start_controller()
    wait_complete(world, cr, 1)

    # sysctl only: the role (no config task file) runs again, its check passes, no reboot.
    watch = Watcher(world, nodes)
    sysctl_only = {"host_tuning_cmdline": "quiet", "host_tuning_sysctls": {"vm.swappiness": 33}}
    world.patch_cr(cr, {"spec": {"packages": {"tune": {"vars": sysctl_only}}}})
    wait_complete(world, cr, 2)
    logs = watch.stop()
    for node in nodes:
        assert len(logs[node].boots) == 1, f"{node} rebooted for a sysctl change"
        assert not logs[node].cordoned, f"{node} was cordoned for a sysctl change"
        dropin = (root_of(world, node) / "etc/sysctl.d/60-host-tuning.conf").read_text()
        assert "vm.swappiness=33" in dropin
        entry = world.state(cr, node)["tune|1.0.0"]
        assert (entry["stage"], entry["state"]) == ("config", "complete")
        assert "requested" not in entry

    # the kernel command line: the same role's reboot handler fires, one reboot per node.
    watch = Watcher(world, nodes)
    cmdline = {
        "host_tuning_cmdline": "quiet iommu=pt",
        "host_tuning_sysctls": {"vm.swappiness": 33},
    }
    world.patch_cr(cr, {"spec": {"packages": {"tune": {"vars": cmdline}}}})
    wait_complete(world, cr, 3)
    logs = watch.stop()
    for node in nodes:
        assert len(logs[node].boots) == 2, f"{node}: {len(logs[node].boots) - 1} reboots"
        assert logs[node].cordoned_at_reboot == [True]
        grub = (root_of(world, node) / "etc/default/grub").read_text()
        assert 'GRUB_CMDLINE_LINUX="quiet iommu=pt"' in grub
        assert not world.node(node).spec.unschedulable


@pytest.mark.timeout(SLOW_TEST_SECONDS)
def test_a_handler_that_fails_once_runs_on_the_retry(world: World) -> None:
    (node,) = world.add_nodes(1)
    cr = roll_out(
        world,
        "app",
        "app",
        "app-config",
        vars={"app_config_level": "debug", "app_config_handler_fails_once": True},
    )
    world.start_controller()

    def owed() -> list[str]:
        entry = world.state(cr, node).get("app|1.0.0") or {}
        return list(entry.get("pendingHandlers") or [])

    assert wait_for(owed, what="the failed attempt's owed handlers on the node", timeout=120) == [
        "Apply the app configuration",
        "Restart the app service",
    ]
    started = time.monotonic()
    wait_complete(world, cr, 1, timeout=240)
    assert time.monotonic() - started > 5, "the retry waits for its back-off"
    root = root_of(world, node)
    assert (root / "etc/app-config/applied.conf").read_text() == "level=debug\n"
    assert not (root / "var/lib/nodewright/handlers" / cr / "app.json").exists()
    entry = world.state(cr, node)["app|1.0.0"]
    assert (entry["stage"], entry["state"]) == ("config", "complete")
    assert "pendingHandlers" not in entry or entry["pendingHandlers"] == []


def test_a_restart_handler_becomes_a_service_interrupt_on_a_drained_node(
    world: World, web: str
) -> None:
    nodes = world.add_nodes(2)
    wait_for(lambda: sum(web_pods_on(world, web, n) for n in nodes) == 2, what="web running")
    watch = Watcher(world, nodes)
    cr = roll_out(
        world,
        "svc",
        "app",
        "app-config",
        vars={"app_config_restart_service": True, "app_config_service": "fabric"},
    )
    world.start_controller()
    wait_complete(world, cr, 1)
    logs = watch.stop()
    for node in nodes:
        assert logs[node].cordoned and len(logs[node].boots) == 1
        systemctl = root_of(world, node) / "run/nodewright-sim/systemctl.log"
        assert "restart fabric" in systemctl.read_text()
        entry = world.state(cr, node)["app|1.0.0"]
        assert entry["requested"] == {"type": "service", "services": ["fabric"]}
        assert (entry["stage"], entry["state"]) == ("post-interrupt", "complete")
        assert not world.node(node).spec.unschedulable


def test_new_content_in_a_secret_vars_secret_reruns_the_role_with_it(world: World) -> None:
    (node,) = world.add_nodes(1)
    secret = f"app-level-{world.id}"
    world.core.create_namespaced_secret(
        NAMESPACE,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name=secret), string_data={"app_config_level": "alpha"}
        ),
    )
    try:
        cr = roll_out(world, "secret", "app", "app-config", secretVars=[{"secretName": secret}])
        world.start_controller()
        wait_complete(world, cr, 1)
        applied = root_of(world, node) / "etc/app-config/applied.conf"
        assert applied.read_text() == "level=alpha\n"
        watch = Watcher(world, [node])
        world.core.patch_namespaced_secret(
            secret, NAMESPACE, {"stringData": {"app_config_level": "beta"}}
        )
        wait_for(lambda: applied.read_text() == "level=beta\n", what="the new secret applied")
        wait_complete(world, cr, 1)
        logs = watch.stop()
        assert not logs[node].cordoned
        entry = world.state(cr, node)["app|1.0.0"]
        assert (entry["stage"], entry["state"], entry["changedKeys"]) == (
            "config",
            "complete",
            ["secretVars"],
        )
    finally:
        world.core.delete_namespaced_secret(secret, NAMESPACE)
