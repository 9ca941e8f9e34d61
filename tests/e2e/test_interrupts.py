"""Interrupt packages: cordon, wait for podNonInterruptLabels pods, drain through the Eviction API
(PodDisruptionBudgets respected and named), reboot verified by a new bootID, uncordon."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from e2e_harness import EXEC_REGISTRY, SIM_REGISTRY, World, wait_for
from kubernetes import client

pytestmark = pytest.mark.e2e


class BootWatcher:
    """Remembers every bootID a node reports and when it first appeared."""

    def __init__(self, world: World, node: str) -> None:
        self.world = world
        self.node = node
        self.seen: dict[str, datetime] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                boot = self.world.boot_id(self.node)
            except Exception:
                continue
            self.seen.setdefault(boot, datetime.now(UTC))

    def stop(self) -> dict[str, datetime]:
        self._stop.set()
        self._thread.join(5)
        return self.seen


def deployment(world: World, namespace: str, name: str, replicas: int) -> None:
    labels = {"app": name}
    world.env.apps.create_namespaced_deployment(
        namespace,
        client.V1Deployment(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1DeploymentSpec(
                replicas=replicas,
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


def ready_pods(world: World, namespace: str, app: str) -> list[client.V1Pod]:
    pods = world.core.list_namespaced_pod(namespace, label_selector=f"app={app}").items
    return [
        p
        for p in pods
        if p.metadata.deletion_timestamp is None
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]


def test_a_reboot_package_waits_for_protected_pods_drains_reboots_once_and_uncordons(
    world: World,
) -> None:
    (node,) = world.add_nodes(1)
    ns = world.namespace()
    deployment(world, ns, "web", 1)
    wait_for(lambda: len(ready_pods(world, ns, "web")) == 1, what="web pod ready")
    (web_before,) = [p.metadata.name for p in ready_pods(world, ns, "web")]
    training = world.core.create_namespaced_pod(
        ns,
        client.V1Pod(
            metadata=client.V1ObjectMeta(
                name="training",
                labels={"job": "training"},
                annotations={"sandbox.nodewright.io/duration": "8s"},
            ),
            spec=client.V1PodSpec(
                node_name=node,
                restart_policy="Never",
                containers=[client.V1Container(name="c", image="busybox")],
            ),
        ),
    )
    assert training.metadata.name == "training"
    cr = world.cr_name("grub")
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 1},
            "podNonInterruptLabels": {"matchLabels": {"job": "training"}},
            "drain": {"force": True},
            "packages": {
                "grub": {
                    "version": "2.0.1",
                    "image": f"{EXEC_REGISTRY}/grub-params",
                    "interrupt": {"type": "reboot"},
                }
            },
        },
    )
    boots = BootWatcher(world, node)
    world.start_controller()
    wait_for(lambda: world.node(node).spec.unschedulable, what="node cordoned")
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="complete", timeout=300)
    seen = boots.stop()
    assert len(seen) == 2, seen  # the original boot and exactly one reboot
    reboot_at = max(seen.values())
    job = world.core.read_namespaced_pod("training", ns)
    assert job.status.phase == "Succeeded"
    finished = job.status.container_statuses[0].state.terminated.finished_at
    assert finished <= reboot_at  # the reboot waited for the podNonInterruptLabels pod
    assert web_before not in {p.metadata.name for p in world.core.list_namespaced_pod(ns).items}
    entry = world.state(cr, node)["grub|2.0.1"]
    assert (entry["stage"], entry["state"]) == ("post-interrupt", "complete")
    after = world.node(node)
    assert not after.spec.unschedulable
    assert "bridge.nodewright.io/cordon" not in (after.metadata.annotations or {})
    kubelet = world.env.box.kubelet
    assert kubelet is not None and kubelet.nodes[node].root_dir is not None
    grub = (kubelet.nodes[node].root_dir / "etc/default/grub").read_text()
    assert "intel_iommu=on" in grub


def test_a_drain_never_violates_a_pdb_and_names_it_until_the_budget_allows(world: World) -> None:
    nodes = world.add_nodes(2)
    ns = world.namespace()
    deployment(world, ns, "db", 2)
    wait_for(lambda: len(ready_pods(world, ns, "db")) == 2, what="db pods ready")
    world.pdb(ns, "db-pdb", min_available=2, labels={"app": "db"})
    cr = world.cr_name("noop")
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 1},
            "packages": {
                "tune": {
                    "version": "1.0.0",
                    "image": f"{SIM_REGISTRY}/tune",
                    "interrupt": {"type": "noop"},
                }
            },
        },
    )
    world.start_controller()
    blocked = wait_for(
        lambda: (c := world.condition(cr, "PDBBlocked")) and c["status"] == "True" and c,
        what="PDBBlocked",
        timeout=90,
    )
    assert f"{ns}/db-pdb" in blocked["message"]
    assert len(ready_pods(world, ns, "db")) == 2
    # Room for one disruption: the drain goes on, one pod at a time, never below the budget.
    world.env.policy.patch_namespaced_pod_disruption_budget(
        "db-pdb", ns, {"spec": {"minAvailable": 1}}
    )
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="complete", timeout=240)
    for n in nodes:
        assert not world.node(n).spec.unschedulable
    cond = world.condition(cr, "PDBBlocked")
    assert cond is not None and cond["status"] == "False"
