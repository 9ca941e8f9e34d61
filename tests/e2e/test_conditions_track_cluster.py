"""Conditions follow the cluster, pass after pass: ``PDBBlocked`` stays True while an exhausted
PodDisruptionBudget still blocks a node whose drain expired (the node erroring, its cordon held)
and turns False once the budget is deleted; ``WaitingForProtectedPods`` names the node, the
podNonInterruptLabels pod and since when while the cordoned node waits, and turns False once the
pod is gone; ``NodesIgnored`` names a targeted node with the ignore label also when that node is
already complete."""

from __future__ import annotations

from typing import Any

import pytest
from e2e_harness import SIM_REGISTRY, InProcessController, World, wait_for
from kubernetes import client

pytestmark = pytest.mark.e2e

IGNORE = "bridge.nodewright.io/ignore"
RESULTS = ("success", "requeue", "error")


def passes(ctl: InProcessController) -> float:
    """Reconciles the controller has run (the test's world has one CR)."""
    registry = ctl.metrics.registry
    return sum(
        registry.get_sample_value("nwb_reconciles_total", {"result": r}) or 0.0 for r in RESULTS
    )


def one_replica(world: World, namespace: str, app: str) -> None:
    labels = {"app": app}
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=labels),
        spec=client.V1PodSpec(
            node_selector=dict(world.labels),
            containers=[client.V1Container(name="c", image="busybox")],
        ),
    )
    world.env.apps.create_namespaced_deployment(
        namespace,
        client.V1Deployment(
            metadata=client.V1ObjectMeta(name=app),
            spec=client.V1DeploymentSpec(
                replicas=1, selector=client.V1LabelSelector(match_labels=labels), template=template
            ),
        ),
    )


def true_condition(world: World, cr: str, kind: str) -> dict[str, Any] | None:
    cond = world.condition(cr, kind)
    return cond if cond is not None and cond["status"] == "True" else None


def test_pdb_blocked_holds_while_the_budget_blocks_an_erroring_node_and_clears_without_it(
    world: World,
) -> None:
    (node,) = world.add_nodes(1)
    ns = world.namespace()
    one_replica(world, ns, "db")
    world.pdb(ns, "db-pdb", min_available=1, labels={"app": "db"})

    def exhausted() -> bool:
        pdb = world.env.policy.read_namespaced_pod_disruption_budget("db-pdb", ns)
        status = pdb.status
        return bool(status and status.current_healthy == 1 and status.disruptions_allowed == 0)

    wait_for(exhausted, what="db-pdb exhausted by its one healthy pod")
    cr = world.cr_name("blocked")
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 1},
            "packages": {
                "tune": {
                    "version": "1.0.0",
                    "image": f"{SIM_REGISTRY}/tune",
                    "interrupt": {"type": "noop"},
                    "timeouts": {"drain": "5s"},
                }
            },
        },
    )
    world.invariants.expect_held(node, "its drain expired behind the PDB: it stays erroring")
    ctl = world.start_controller()
    wait_for(lambda: world.node_status(cr, node) == "erroring", what="drain expired", timeout=90)
    # A few passes after the node went erroring (each PDB event is one for every CR).
    seen = passes(ctl)
    for nudge in range(3):
        world.env.policy.patch_namespaced_pod_disruption_budget(
            "db-pdb", ns, {"metadata": {"labels": {"nudge": str(nudge)}}}
        )
        wait_for(lambda n=nudge: passes(ctl) > seen + n, what=f"pass {nudge + 1} after erroring")
    blocked = true_condition(world, cr, "PDBBlocked")
    assert blocked is not None, world.condition(cr, "PDBBlocked")
    (db,) = [p.metadata.name for p in world.core.list_namespaced_pod(ns).items]
    assert blocked["message"] == (
        f"PodDisruptionBudget {ns}/db-pdb blocks eviction of pod(s) {ns}/{db} on node(s) {node}"
    )
    assert world.cr_status(cr)["status"] == "erroring"
    assert world.node(node).spec.unschedulable

    world.env.policy.delete_namespaced_pod_disruption_budget("db-pdb", ns)
    cleared = wait_for(
        lambda: (c := world.condition(cr, "PDBBlocked")) and c["status"] == "False" and c,
        what="PDBBlocked False once the PDB is gone",
        timeout=60,
    )
    assert cleared["reason"] == "NoBlockingPDB"


def test_nodes_ignored_names_a_labelled_node_while_the_rest_completes(world: World) -> None:
    first, second = world.add_nodes(2)
    cr = world.cr_name("ignored")
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 1},
            "packages": {"tune": {"version": "1.0.0", "image": f"{SIM_REGISTRY}/tune"}},
        },
    )
    world.start_controller()
    wait_for(lambda: world.node_status(cr, first) == "complete", what="first node complete")
    # Labelled once complete: the rollout never skips it, so only the labels can tell.
    world.core.patch_node(first, {"metadata": {"labels": {IGNORE: "true"}}})
    ignored = wait_for(
        lambda: true_condition(world, cr, "NodesIgnored"), what="NodesIgnored", timeout=60
    )
    assert ignored["message"] == f"Node [{first}] ignored by label."
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="rollout complete")
    assert world.node_status(cr, second) == "complete"
    assert true_condition(world, cr, "NodesIgnored") is not None


def test_waiting_for_protected_pods_names_node_pod_and_since_until_the_pod_is_gone(
    world: World,
) -> None:
    (node,) = world.add_nodes(1)
    ns = world.namespace()
    one_replica(world, ns, "training")
    wait_for(
        lambda: [
            p for p in world.core.list_namespaced_pod(ns).items if p.status.phase == "Running"
        ],
        what="training pod running",
    )
    (pod,) = [p.metadata.name for p in world.core.list_namespaced_pod(ns).items]
    cr = world.cr_name("protected")
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 1},
            "podNonInterruptLabels": {"matchLabels": {"app": "training"}},
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
    waiting = wait_for(
        lambda: true_condition(world, cr, "WaitingForProtectedPods"), what="waiting", timeout=90
    )
    assert waiting["reason"] == "ProtectedPodsRunning"
    assert waiting["message"].startswith(f"node {node} waits since 20"), waiting
    assert f"for 1 podNonInterruptLabels pod(s) {ns}/{pod}" in waiting["message"], waiting
    assert world.node(node).spec.unschedulable  # cordoned, so nothing new lands meanwhile
    world.env.apps.delete_namespaced_deployment("training", ns)
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="complete")
    cond = world.condition(cr, "WaitingForProtectedPods")
    assert cond is not None and cond["status"] == "False", cond
