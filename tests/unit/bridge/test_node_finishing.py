"""Ended pods recorded in the background while a batch start is still to come
(``node_finishing``): the next batch does not wait for those Node writes, and a write that fails
is planned again, on an in-memory API."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from controller_world import ControllerWorld, node, nodewright

from lifecycle.nodestate import batch_annotation, state_annotation, status_key
from nodewright_bridge.k8s import resources
from nodewright_bridge.testing import InMemoryApi

POOL = {"pool": "gpu"}
SPEC = {
    "nodeSelectors": {"matchLabels": POOL},
    "interruptionBudget": {"count": 1},  # one node per batch: three batches
    "packages": {"tune": {"version": "1.0.0", "image": "registry.local:5000/tune"}},
}


def three_nodes() -> ControllerWorld:
    world = ControllerWorld()
    for i in range(3):
        world.add(resources.NODES, node(f"n{i}", POOL))
    world.add(resources.NODEWRIGHTS, nodewright("tune", SPEC))
    world.validate("tune")
    world.step("tune")
    return world


def on_node_patch(api: InMemoryApi, name: str, before: Callable[[], None]) -> None:
    """Run ``before`` ahead of every merge patch of Node ``name`` the controller sends."""
    sent = api.request
    path = resources.NODES.path(name=name)

    def request(method: str, target: str, **kwargs: Any) -> Any:
        if method == "PATCH" and target == path:
            before()
        return sent(method, target, **kwargs)

    api.request = request  # type: ignore[method-assign]


def live_pod_nodes(world: ControllerWorld) -> list[str]:
    return sorted(p["spec"]["nodeName"] for p in world.pods("tune") if "status" not in p)


def notes_of(world: ControllerWorld, name: str) -> dict[str, str]:
    return dict(world.obj(resources.NODES, name)["metadata"].get("annotations") or {})


def test_the_next_batch_starts_while_the_last_ones_result_is_still_being_written() -> None:
    world = three_nodes()
    (first,) = live_pod_nodes(world)
    world.finish_pods("tune")
    gate = threading.Event()
    on_node_patch(world.api, first, lambda: gate.wait(10))
    try:
        for _ in range(2):  # the pass recording the result, then the one picking batch 2
            world.sync()
            world.reconciler.reconcile("tune")  # returns: the result's write waits on the gate
        assert state_annotation("tune") not in notes_of(world, first)  # not written yet
        (second,) = live_pod_nodes(world)
        assert second != first
    finally:
        gate.set()
    assert world.reconciler.executor.wait_for_finishing(10)
    notes = notes_of(world, first)
    assert json.loads(notes[state_annotation("tune")])["tune|1.0.0"]["state"] == "complete"
    assert json.loads(notes[batch_annotation("tune")])["batch"] == 1  # the record it carried
    assert notes[status_key("tune")] == "complete"


def test_a_background_result_write_that_loses_a_race_is_planned_again() -> None:
    world = three_nodes()
    (first,) = live_pod_nodes(world)
    world.finish_pods("tune")
    raced = []

    def someone_else_writes_first() -> None:
        if not raced:  # a human labels the node just before our write: it answers 409
            raced.append(True)
            current = world.obj(resources.NODES, first)
            current["metadata"]["labels"]["team"] = "ml"
            world.api.put(resources.NODES, current)

    on_node_patch(world.api, first, someone_else_writes_first)
    world.step("tune")
    assert raced and state_annotation("tune") not in notes_of(world, first)
    assert world.reconciler.executor.written_status("tune", first) is None  # taken back
    for _ in range(6):  # the other two batches run and end
        world.step("tune")
        world.finish_pods("tune")
    notes = notes_of(world, first)
    assert json.loads(notes[state_annotation("tune")])["tune|1.0.0"]["state"] == "complete"
    assert json.loads(notes[batch_annotation("tune")])["batch"] == 1
    assert world.obj(resources.NODES, first)["metadata"]["labels"]["team"] == "ml"
    status = world.obj(resources.NODEWRIGHTS, "tune")["status"]
    assert status["status"] == "complete" and status["completeNodes"] == "3/3"
