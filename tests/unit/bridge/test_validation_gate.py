"""Check before cordon in the reconciler's pass (in-memory API): a package spec is validated by
one pod before any node works, a failure touches no node, a fix rolls out, the outcome survives a
restart, and a node mid-cycle waits instead of running an unvalidated spec."""

from __future__ import annotations

import copy
import json
from typing import Any

from controller_world import ControllerWorld, node, nodewright
from prometheus_client import CollectorRegistry

from lifecycle.nodestate import batch_annotation, state_annotation
from lifecycle.validating import ValidationResult
from nodewright_bridge.controller.productmetrics import ProductMetrics
from nodewright_bridge.controller.reconciler import NodeWrightReconciler
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.events import EventRecorder
from nodewright_bridge.k8s.patching import Writer

POOL = {"pool": "gpu"}
SPEC: dict[str, Any] = {
    "nodeSelectors": {"matchLabels": POOL},
    "interruptionBudget": {"count": 1},
    "packages": {
        "tune": {
            "version": "1.0.0",
            "image": "registry.local:5000/tune",
            "interrupt": {"type": "reboot"},
            "vars": {"swappiness": "high"},
        }
    },
}
BAD = ValidationResult(
    reason="ArgumentSpecViolation",
    problems=["vars.swappiness: must be of type integer (rule: type)"],
)


def world_with(nodes: int = 2) -> ControllerWorld:
    world = ControllerWorld()
    for i in range(nodes):
        world.add(resources.NODES, node(f"n{i}", POOL))
    world.add(resources.NODEWRIGHTS, nodewright("tune", copy.deepcopy(SPEC)))
    return world


def condition(world: ControllerWorld, kind: str) -> dict[str, Any]:
    status = world.obj(resources.NODEWRIGHTS, "tune").get("status") or {}
    return next(c for c in status.get("conditions") or [] if c["type"] == kind)


def untouched(world: ControllerWorld, name: str) -> bool:
    obj = world.obj(resources.NODES, name)
    notes = obj["metadata"].get("annotations") or {}
    ours = {state_annotation("tune"), batch_annotation("tune"), "bridge.nodewright.io/cordon"}
    return not (ours & set(notes)) and not (obj.get("spec") or {}).get("unschedulable")


def change_vars(world: ControllerWorld, value: object) -> None:
    cr = world.obj(resources.NODEWRIGHTS, "tune")
    cr["spec"]["packages"]["tune"]["vars"] = {"swappiness": value}
    cr["metadata"]["generation"] += 1
    world.add(resources.NODEWRIGHTS, cr)


def test_the_first_pass_only_validates_and_touches_no_node() -> None:
    world = world_with()
    world.step("tune")
    (pod,) = world.pods("tune", validation=True)
    assert pod["spec"]["containers"][0]["args"] == ["validate"]
    assert world.pods("tune") == []
    assert untouched(world, "n0") and untouched(world, "n1")
    invalid = condition(world, "InvalidSpec")
    assert (invalid["status"], invalid["reason"]) == ("Unknown", "Validating")
    world.step("tune")
    assert len(world.posts("/pods")) == 1, "one validation pod per spec, however often planned"


def test_a_failed_validation_touches_no_node_and_the_fixed_spec_rolls_out() -> None:
    world = world_with()
    world.step("tune")
    (pod,) = world.pods("tune", validation=True)
    world.end_pod(pod, BAD.to_termination_message(), exit_code=2)
    for _ in range(3):
        world.step("tune")
    invalid = condition(world, "InvalidSpec")
    assert (invalid["status"], invalid["reason"]) == ("True", "ArgumentSpecViolation")
    assert "spec.packages.tune.vars.swappiness: must be of type integer" in invalid["message"]
    assert condition(world, "Ready")["status"] == "False"
    assert world.pods("tune") == []
    assert all(p.get("status") for p in world.pods("tune", validation=True)), "none running"
    assert untouched(world, "n0") and untouched(world, "n1")
    assert len(world.posts("/pods")) == 1, "a failed spec is not validated again"

    change_vars(world, 10)
    world.validate("tune")
    world.step("tune")
    assert condition(world, "InvalidSpec")["reason"] == "Valid"
    assert not untouched(world, "n0"), "the rollout goes on once the fix validated"


def test_a_restarted_controller_keeps_the_outcome_and_does_not_validate_again() -> None:
    world = world_with(nodes=1)
    world.validate("tune")
    world.step("tune")
    posts = len(world.posts("/pods"))
    world.reconciler = NodeWrightReconciler(
        rest=world.api,
        writer=Writer(world.api),
        events=EventRecorder(world.api, clock=world.clock, instance="test"),
        stores=world.stores,
        namespace="nodewright-system",
        metrics=ProductMetrics(CollectorRegistry()),
        clock=world.clock,
    )
    world.step("tune")
    assert len(world.posts("/pods")) == posts + len(world.pods("tune")), "no validation pod"
    assert all(p.get("status") for p in world.pods("tune", validation=True))


def test_a_node_mid_cycle_waits_for_the_new_spec_to_validate_before_its_next_pod() -> None:
    world = world_with(nodes=1)
    change_vars(world, 5)
    world.validate("tune")
    world.step("tune")  # cordon
    world.step("tune")  # the apply pod
    (apply_pod,) = world.pods("tune")
    change_vars(world, 6)  # while the apply runs
    world.finish_pods("tune")
    world.step("tune")
    state = json.loads(
        world.obj(resources.NODES, "n0")["metadata"]["annotations"][state_annotation("tune")]
    )
    assert state["tune|1.0.0"]["state"] == "complete", "the pod in flight is recorded"
    seen = {p["metadata"]["name"] for p in world.pods("tune")}
    assert seen <= {apply_pod["metadata"]["name"]}, "no pod of the unvalidated spec"
    assert world.obj(resources.NODES, "n0")["spec"]["unschedulable"], "it keeps its cordon"
    # the old spec's validation pod goes in the background, after the pass's Node writes
    assert world.reconciler.executor.wait_for_deletes(10)
    assert len(world.pods("tune", validation=True)) == 1
    world.finish_pods("tune", validation=True)
    world.step("tune")
    names = {p["metadata"]["name"] for p in world.pods("tune")}
    assert names - {apply_pod["metadata"]["name"]}, "validated: the node goes on"
