"""The invariant checker itself: each violation is provoked on purpose, without the controller, on
the sandbox's real API and simulated kubelet, and must be reported (naming the node and what was
seen); the look-alikes that are fine (a released controller hold, a finished pod, a taint the
controller never had a part in, a declared second reboot) must not be.

These tests use a World of their own (``bare``), not the ``world`` fixture, so the autouse check
does not fail them for the violations they make; they call ``collect`` themselves.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from e2e_harness import E2E, NAMESPACE, SIM_REGISTRY, World, wait_for
from invariants import (
    COMPLIANT,
    CORDON,
    HUMAN,
    LEAK,
    PDB,
    REBOOTS,
    TAINT,
    UNDRAINED,
    UNOBSERVED,
)
from kubernetes import client

pytestmark = pytest.mark.e2e

DURATION = "sandbox.nodewright.io/duration"


@pytest.fixture
def bare(e2e: E2E) -> Iterator[World]:
    with World(e2e) as w:
        yield w


def pod(
    world: World,
    namespace: str,
    name: str,
    node: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    restart: str = "Always",
) -> None:
    world.core.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name=name, labels=labels, annotations=annotations),
            spec=client.V1PodSpec(
                node_name=node,
                restart_policy=restart,
                containers=[client.V1Container(name="c", image=f"{SIM_REGISTRY}/{name}")],
            ),
        ),
    )


def phase(world: World, namespace: str, name: str) -> str:
    status = world.core.read_namespaced_pod(name, namespace).status
    return str(status.phase if status is not None else "")


def reboot(world: World, node: str) -> None:
    kubelet = world.env.box.kubelet
    assert kubelet is not None
    before = world.boot_id(node)
    kubelet.reboot(node)
    wait_for(lambda: world.boot_id(node) != before, what=f"{node} rebooted")
    wait_for(lambda: world.node_ready(node), what=f"{node} Ready again")


def db_pods_with_budget(world: World, ns: str, node: str) -> Callable[[], bool]:
    """Pods db-0 and db-1 on ``node`` under PDB db-pdb (minAvailable 2), once the budget counts
    both healthy; returns that check."""
    for name in ("db-0", "db-1"):
        pod(world, ns, name, node, labels={"app": "db"})
    world.pdb(ns, "db-pdb", min_available=2, labels={"app": "db"})

    def budget_counts() -> bool:
        status = world.env.policy.read_namespaced_pod_disruption_budget("db-pdb", ns).status
        return bool(status and status.expected_pods == 2 and status.current_healthy == 2)

    wait_for(budget_counts, what="the budget counts both pods healthy")
    return budget_counts


def patch(world: World, node: str, body: dict[str, Any]) -> None:
    world.core.patch_node(node, body)


def test_an_interrupt_on_a_schedulable_node_with_a_workload_pod_is_reported(bare: World) -> None:
    (node,) = bare.add_nodes(1)
    ns = bare.namespace()
    pod(bare, ns, "web", node)
    pod(bare, ns, "done", node, annotations={DURATION: "0s"}, restart="Never")
    wait_for(lambda: phase(bare, ns, "web") == "Running", what="workload running")
    wait_for(lambda: phase(bare, ns, "done") == "Succeeded", what="finished pod")
    name = f"fake-interrupt-{bare.id}"
    pod(
        bare,
        NAMESPACE,
        name,
        node,
        labels={
            "app.kubernetes.io/managed-by": "nodewright-bridge",
            "bridge.nodewright.io/stage": "interrupt",
            "bridge.nodewright.io/cr": f"fake-{bare.id}",
        },
        annotations={DURATION: "60s"},
        restart="Never",
    )
    wait_for(lambda: phase(bare, NAMESPACE, name) == "Running", what="interrupt pod running")

    report = bare.invariants.collect(end_state=False)
    assert report.kinds() == {UNDRAINED}, report.text()
    (seen,) = report.violations
    assert seen.subject == node, report.text()
    assert f"interrupt pod {NAMESPACE}/{name} Running" in seen.message, report.text()
    assert "the node was schedulable" in seen.message, report.text()
    assert f"{ns}/web (Running)" in seen.message and "done" not in seen.message, report.text()

    reboot(bare, node)  # the same node rebooted as it is: schedulable, the workload on it
    report = bare.invariants.collect(end_state=False)
    rebooted = [v for v in report.violations if "rebooted (bootID" in v.message]
    assert len(rebooted) == 1 and rebooted[0].kind == UNDRAINED, report.text()
    assert f"{ns}/web (Running)" in rebooted[0].message, report.text()
    assert report.kinds() == {UNDRAINED}, report.text()  # one reboot is allowed


def test_a_second_reboot_is_reported_unless_the_test_declares_it(bare: World) -> None:
    (node,) = bare.add_nodes(1)
    patch(bare, node, {"spec": {"unschedulable": True}})  # cordoned and empty: a fine reboot
    reboot(bare, node)
    report = bare.invariants.collect(end_state=False)
    assert report.violations == (), report.text()
    reboot(bare, node)

    report = bare.invariants.collect(end_state=False)
    assert report.kinds() == {REBOOTS}, report.text()
    (seen,) = report.violations
    assert seen.subject == node and "rebooted 2 times (allowed 1)" in seen.message, report.text()
    bare.invariants.allow_reboots(node, 2, "this test reboots it twice")
    report = bare.invariants.collect(end_state=False)
    assert report.violations == (), report.text()


def interrupt_pod(world: World, name: str, node: str, resource_id: str) -> None:
    """A stand-in for one of the controller's interrupt pods (the kubelet reboot kills it)."""
    pod(
        world,
        NAMESPACE,
        name,
        node,
        labels={
            "app.kubernetes.io/managed-by": "nodewright-bridge",
            "bridge.nodewright.io/stage": "interrupt",
            "bridge.nodewright.io/cr": f"fake-{world.id}",
            "bridge.nodewright.io/package": "grub",
        },
        annotations={DURATION: "600s", "bridge.nodewright.io/resource-id": resource_id},
        restart="Never",
    )
    wait_for(lambda: phase(world, NAMESPACE, name) == "Running", what=f"{name} running")


def test_a_second_reboot_for_the_same_interrupt_is_reported_whatever_is_allowed(
    bare: World,
) -> None:
    (node,) = bare.add_nodes(1)
    bare.invariants.allow_reboots(node, 3, "two changes may reboot it, one each")
    patch(bare, node, {"spec": {"unschedulable": True}})
    interrupt_pod(bare, f"first-{bare.id}", node, "change-1")
    reboot(bare, node)
    interrupt_pod(bare, f"other-{bare.id}", node, "change-2")  # a new change: a fine reboot
    reboot(bare, node)
    report = bare.invariants.collect(end_state=False)
    assert report.violations == (), report.text()
    interrupt_pod(bare, f"rerun-{bare.id}", node, "change-2")  # its re-run must not act again
    reboot(bare, node)

    report = bare.invariants.collect(end_state=False)
    assert report.kinds() == {REBOOTS}, report.text()
    (seen,) = report.violations
    assert seen.subject == node and "rebooted again" in seen.message, report.text()
    assert f"fake-{bare.id}/grub@change-2" in seen.message, report.text()


def test_a_node_deleted_and_registered_again_is_a_new_machine(bare: World) -> None:
    (node,) = bare.add_nodes(1)
    kubelet = bare.env.box.kubelet
    assert kubelet is not None
    ns = bare.namespace()
    patch(bare, node, {"spec": {"unschedulable": True}})  # a human's cordon on the old machine
    reboot(bare, node)
    db_pods_with_budget(bare, ns, node)
    kubelet.remove_nodes([node])
    # Its pods go with it (as pod garbage collection would delete them): no drain's doing.
    for name in ("db-0", "db-1"):
        bare.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    wait_for(lambda: not bare.core.list_namespaced_pod(ns).items, what="db pods gone")
    kubelet.add_nodes([node], labels=bare.labels)
    wait_for(lambda: bare.node_ready(node), what="the node registered anew")
    patch(bare, node, {"spec": {"unschedulable": True}})
    reboot(bare, node)  # once on the new machine: fine
    report = bare.invariants.collect(end_state=False)
    assert report.violations == (), report.text()
    reboot(bare, node)

    report = bare.invariants.collect(end_state=False)
    assert report.kinds() == {REBOOTS}, report.text()
    (seen,) = report.violations
    assert "rebooted 2 times (allowed 1) after it was registered anew" in seen.message, (
        report.text()
    )


def test_a_cordon_the_test_lifts_itself_and_declares_is_not_reported(bare: World) -> None:
    (node,) = bare.add_nodes(1)
    patch(bare, node, {"spec": {"unschedulable": True}})
    lifted = bare.core.patch_node(node, {"spec": {"unschedulable": False}})
    bare.invariants.allow_uncordon(node, int(lifted.metadata.resource_version))
    report = bare.invariants.collect()
    assert report.violations == (), report.text()


def test_lifting_a_humans_cordon_is_reported_and_releasing_a_controller_hold_is_not(
    bare: World,
) -> None:
    human, held = bare.add_nodes(2)
    patch(bare, human, {"spec": {"unschedulable": True}})
    record = json.dumps({"holders": ["fake"], "wasUnschedulable": False})
    patch(
        bare, held, {"metadata": {"annotations": {CORDON: record}}, "spec": {"unschedulable": True}}
    )
    patch(
        bare, held, {"metadata": {"annotations": {CORDON: None}}, "spec": {"unschedulable": False}}
    )
    patch(bare, human, {"spec": {"unschedulable": False}})

    report = bare.invariants.collect()
    assert report.kinds() == {HUMAN}, report.text()
    (seen,) = report.violations
    assert seen.subject == human and "a human's cordon" in seen.message, report.text()
    assert "became schedulable" in seen.message, report.text()


def test_a_node_recorded_compliant_after_a_cordon_for_its_cycle_is_reported(bare: World) -> None:
    spared, disrupted = bare.add_nodes(2)
    status = "bridge.nodewright.io/status-fake"
    for node in (spared, disrupted):
        patch(bare, node, {"metadata": {"labels": {status: "complete"}}})
        patch(bare, node, {"metadata": {"labels": {status: "waiting"}}})  # a new version
    held = json.dumps({"holders": ["fake"], "wasUnschedulable": False})
    patch(
        bare,
        disrupted,
        {"metadata": {"annotations": {CORDON: held}}, "spec": {"unschedulable": True}},
    )
    entry = json.dumps(
        {"tune|2.0.0": {"stage": "config", "state": "complete", "preflight": "compliant"}}
    )
    for node in (spared, disrupted):
        patch(
            bare,
            node,
            {
                "metadata": {
                    "annotations": {"bridge.nodewright.io/state-fake": entry, CORDON: None},
                    "labels": {status: "complete"},
                },
                "spec": {"unschedulable": False},
            },
        )

    report = bare.invariants.collect(end_state=False)
    assert report.kinds() == {COMPLIANT}, report.text()
    (seen,) = report.violations
    assert seen.subject == disrupted and "cordoned by fake" in seen.message, report.text()


def test_a_hold_left_at_the_end_is_reported_unless_the_test_expects_it(bare: World) -> None:
    cordoned, tainted, bystander = bare.add_nodes(3)
    record = json.dumps({"holders": ["fake"], "wasUnschedulable": False})
    patch(
        bare,
        cordoned,
        {"metadata": {"annotations": {CORDON: record}}, "spec": {"unschedulable": True}},
    )
    taint = {"key": TAINT, "value": "true", "effect": "NoSchedule"}
    trace = {"bridge.nodewright.io/state-fake": "{}"}
    patch(bare, tainted, {"metadata": {"annotations": trace}, "spec": {"taints": [taint]}})
    patch(bare, bystander, {"spec": {"taints": [taint]}})  # never ours: not our leak

    report = bare.invariants.collect(settle_seconds=1)
    assert report.kinds() == {LEAK}, report.text()
    leaks = {v.subject: v.message for v in report.violations}
    assert set(leaks) == {cordoned, tainted}, report.text()
    assert "holders ['fake']" in leaks[cordoned], report.text()
    assert "still unschedulable" in leaks[cordoned], report.text()
    assert f"still carries the {TAINT} taint" in leaks[tainted], report.text()
    bare.invariants.expect_held(cordoned, "a fake controller holds it")
    bare.invariants.expect_held(tainted, "a fake controller keeps its taint")
    report = bare.invariants.collect(settle_seconds=0)
    assert report.violations == (), report.text()


def test_a_pod_disruption_budget_broken_is_reported(bare: World) -> None:
    (node,) = bare.add_nodes(1)
    ns = bare.namespace()
    db_pods_with_budget(bare, ns, node)
    report = bare.invariants.collect(end_state=False)
    assert report.violations == (), report.text()
    bare.core.delete_namespaced_pod("db-0", ns, grace_period_seconds=0)

    report = bare.invariants.collect(end_state=False)
    assert report.kinds() == {PDB}, report.text()
    (seen,) = report.violations
    assert seen.subject == f"{ns}/db-pdb", report.text()
    assert f"{ns}/db-0 on {node} " in seen.message, report.text()
    assert "1 healthy < minAvailable 2" in seen.message, report.text()


def test_a_reboot_under_budgeted_pods_breaks_the_budget_and_a_pod_failing_alone_does_not(
    bare: World,
) -> None:
    """Pods turned unready by a reboot of their node count against their budget (an interrupt
    did that); a pod whose readiness fails by itself is no disruption of ours, only a note."""
    (node,) = bare.add_nodes(1)
    ns = bare.namespace()
    budget_counts = db_pods_with_budget(bare, ns, node)
    failing = {"conditions": [{"type": "Ready", "status": "False", "reason": "ProbeFailed"}]}
    bare.core.patch_namespaced_pod_status("db-0", ns, {"status": failing})
    report = bare.invariants.collect(end_state=False)
    assert report.violations == (), report.text()
    assert any(f"{ns}/db-0 on {node} turned unhealthy by itself" in n for n in report.notes), (
        report.text()
    )
    bare.core.patch_namespaced_pod_status(
        "db-0", ns, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    wait_for(budget_counts, what="db-0 ready again")
    reboot(bare, node)

    report = bare.invariants.collect(end_state=False)
    assert PDB in report.kinds(), report.text()
    assert any(f"{ns}/db-" in v.message for v in report.violations if v.kind == PDB)


def test_pods_a_deleted_node_left_behind_restarting_is_no_drains_doing(bare: World) -> None:
    """A Node deleted under its pods (no pod garbage collection here) and registered again: its
    kubelet starts the pods anew, which a budget sees as unhealthy for a moment. The machine went
    away, no drain did it; once they are healthy again, taking one down counts as before."""
    (node,) = bare.add_nodes(1)
    kubelet = bare.env.box.kubelet
    assert kubelet is not None
    ns = bare.namespace()
    budget_counts = db_pods_with_budget(bare, ns, node)
    kubelet.remove_nodes([node])
    kubelet.add_nodes([node], labels=bare.labels)
    wait_for(lambda: bare.node_ready(node), what="the node registered anew")

    def restarted() -> bool:
        pods = bare.core.list_namespaced_pod(ns).items
        return len(pods) == 2 and all(
            any(c.restart_count for c in p.status.container_statuses or ()) for p in pods
        )

    wait_for(restarted, what="both pods' containers started again on the new machine")
    wait_for(budget_counts, what="both pods healthy again on the new machine")
    report = bare.invariants.collect(end_state=False)
    assert report.violations == (), report.text()
    bare.core.delete_namespaced_pod("db-0", ns, grace_period_seconds=0)

    report = bare.invariants.collect(end_state=False)
    assert report.kinds() == {PDB}, report.text()
    assert f"{ns}/db-0 on {node} " in report.violations[0].message, report.text()


def test_the_checker_cannot_pass_without_having_seen_the_nodes(bare: World) -> None:
    (node,) = bare.add_nodes(1)
    report = bare.invariants.collect()
    assert report.violations == () and report.observed[node] >= 1, report.text()
    ghost = f"e{bare.id}-ghost"
    bare.invariants.track([ghost])
    report = bare.invariants.collect(settle_seconds=0)
    assert report.kinds() == {UNOBSERVED}, report.text()
    assert [v.subject for v in report.violations] == [ghost], report.text()
