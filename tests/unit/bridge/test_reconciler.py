"""The reconciler's pass (observe -> plan -> apply -> report) on an in-memory API: what it writes,
in which order, and what it leaves alone."""

from __future__ import annotations

import json

from controller_world import ControllerWorld, node, nodewright

from lifecycle.nodestate import CordonRecord, batch_annotation, state_annotation, status_key
from nodewright_bridge.k8s import resources

POOL = {"pool": "gpu"}
SPEC = {
    "nodeSelectors": {"matchLabels": POOL},
    "interruptionBudget": {"count": 1},
    "packages": {"tune": {"version": "1.0.0", "image": "registry.local:5000/tune"}},
}


def world_with(nodes: int = 2, spec: dict[str, object] | None = None) -> ControllerWorld:
    world = ControllerWorld()
    for i in range(nodes):
        world.add(resources.NODES, node(f"n{i}", POOL))
    world.add(resources.NODEWRIGHTS, nodewright("tune", spec or SPEC))
    return world


def annotations(world: ControllerWorld, name: str) -> dict[str, str]:
    return dict(world.obj(resources.NODES, name)["metadata"].get("annotations") or {})


def test_a_pass_starts_one_batch_whose_pods_carry_their_start_instead_of_a_node_write() -> None:
    world = world_with()
    world.validate("tune")
    world.step("tune")
    (pod,) = world.pods("tune")
    started = pod["spec"]["nodeName"]
    # A fresh install: the pod carries the entry it starts and the batch record
    # (lifecycle.pod_records); the Node is not written before it.
    carried = pod["metadata"]["annotations"]
    entry = json.loads(carried["bridge.nodewright.io/entry"])
    assert (entry["stage"], entry["state"], entry["attempts"]) == ("apply", "in_progress", 1)
    assert json.loads(carried["bridge.nodewright.io/batch"])["batch"] == 1
    assert ("PATCH", f"/api/v1/nodes/{started}") not in world.api.requests
    assert state_annotation("tune") not in annotations(world, started)
    status = world.obj(resources.NODEWRIGHTS, "tune")["status"]
    assert status["status"] == "in_progress" and status["completeNodes"] == "0/2"
    assert status["nodesInProgress"] == 1
    other = "n1" if started == "n0" else "n0"
    assert state_annotation("tune") not in annotations(world, other)


def test_the_result_of_a_carried_start_lands_with_its_record_and_the_next_batch_starts() -> None:
    world = world_with()
    world.validate("tune")
    world.step("tune")
    first = world.pods("tune")[0]["spec"]["nodeName"]
    world.finish_pods("tune")
    world.step("tune")
    notes = annotations(world, first)
    assert json.loads(notes[state_annotation("tune")])["tune|1.0.0"]["state"] == "complete"
    assert json.loads(notes[batch_annotation("tune")])["batch"] == 1
    assert notes[status_key("tune")] == "complete"
    world.step("tune")  # the next batch starts on the other node
    running = [p["spec"]["nodeName"] for p in world.pods("tune") if "status" not in p]
    assert running == ["n1" if first == "n0" else "n0"]


def test_a_controller_restarted_after_a_carried_start_finds_the_node_in_progress() -> None:
    world = world_with()
    world.validate("tune")
    world.step("tune")
    (pod,) = world.pods("tune")
    world.restart()  # a new reconciler: nothing remembered but what the API holds
    world.step("tune")
    assert [p["metadata"]["name"] for p in world.pods("tune")] == [pod["metadata"]["name"]]
    status = world.obj(resources.NODEWRIGHTS, "tune")["status"]
    assert status["nodesInProgress"] == 1 and status["completeNodes"] == "0/2"


def test_a_node_whose_cache_lags_our_own_write_is_not_planned_again() -> None:
    world = world_with(nodes=1)
    world.validate("tune")
    world.step("tune")
    creates = len(world.posts("/pods"))
    world.reconciler.reconcile("tune")  # the caches were not refreshed: they lag our writes
    assert len(world.posts("/pods")) == creates
    assert len(world.pods("tune")) == 1


def test_a_node_leaving_the_selector_is_released_and_a_human_cordon_is_kept() -> None:
    world = world_with(nodes=1)
    hold = CordonRecord(holders=["tune"], was_unschedulable=True).model_dump_json(by_alias=True)
    gone = node(
        "n9",
        {},
        annotations={
            state_annotation("tune"): "{}",
            "bridge.nodewright.io/cordon": hold,
        },
    )
    gone["spec"] = {"unschedulable": True}
    world.add(resources.NODES, gone)
    world.step("tune")
    after = world.obj(resources.NODES, "n9")
    assert after["spec"]["unschedulable"] is True, "a human's cordon must stay"
    assert state_annotation("tune") not in (after["metadata"].get("annotations") or {})
    assert "bridge.nodewright.io/cordon" not in (after["metadata"].get("annotations") or {})


def test_deleting_the_cr_lets_go_of_its_nodes_and_drops_the_finalizer() -> None:
    world = world_with(nodes=2)
    world.step("tune")
    cr = world.obj(resources.NODEWRIGHTS, "tune")
    assert cr["metadata"]["finalizers"] == ["bridge.nodewright.io/cleanup"]
    cr["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    world.add(resources.NODEWRIGHTS, cr)
    world.step("tune")
    assert world.obj(resources.NODEWRIGHTS, "tune")["metadata"].get("finalizers") in (None, [])
    for name in ("n0", "n1"):
        meta = world.obj(resources.NODES, name)["metadata"]
        assert not any(k.endswith("-tune") for k in meta.get("annotations") or {})
        assert status_key("tune") not in (meta.get("labels") or {})
    assert world.pods("tune") == [], "the CR's pods are deleted before its finalizer goes"


def test_an_invalid_cr_gets_invalid_spec_and_touches_no_node() -> None:
    bad = {**SPEC, "packages": {"tune": {"version": "one", "image": "registry.local:5000/tune"}}}
    world = world_with(spec=bad)
    world.step("tune")
    status = world.obj(resources.NODEWRIGHTS, "tune")["status"]
    invalid = next(c for c in status["conditions"] if c["type"] == "InvalidSpec")
    assert invalid["status"] == "True" and "packages.tune.version" in invalid["message"]
    assert not [r for r in world.api.requests if r[1].startswith("/api/v1/nodes/")]


RESET = "bridge.nodewright.io/reset-compartment"
STOPPED = {
    "compartments": {
        "__default__": {
            "batchState": {
                "currentBatch": 2,
                "consecutiveFailures": 1,
                "failedNodes": 1,
                "shouldStop": True,
                "lastBatchSize": 1,
                "lastBatchFailed": True,
            }
        }
    }
}


def cr_patches(world: ControllerWorld) -> int:
    """PATCHes of the CR object itself (not of its status)."""
    path = resources.NODEWRIGHTS.path(name="tune")
    return sum(1 for r in world.api.requests if r == ("PATCH", path))


def test_the_reset_annotation_resumes_a_stopped_compartment_once_and_is_removed() -> None:
    world = world_with(nodes=1)
    cr = world.obj(resources.NODEWRIGHTS, "tune")
    cr["metadata"]["annotations"] = {RESET: "*"}
    cr["metadata"]["finalizers"] = ["bridge.nodewright.io/cleanup"]
    cr["status"] = STOPPED
    world.add(resources.NODEWRIGHTS, cr)
    world.validate("tune")
    world.step("tune")
    after = world.obj(resources.NODEWRIGHTS, "tune")
    assert RESET not in (after["metadata"].get("annotations") or {})
    state = after["status"]["compartments"]["__default__"]["batchState"]
    assert not state.get("shouldStop") and state["resetAt"]
    assert world.pods("tune"), "the resumed compartment picks again"
    assert cr_patches(world) == 1  # the removal
    world.step("tune")
    assert cr_patches(world) == 1
