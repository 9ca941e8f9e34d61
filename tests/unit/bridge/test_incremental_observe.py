"""A pass re-observes only the nodes that changed, and still sees what a full observation sees:
a node turns fresh again when our pod on it never showed (no cache event marks that), and a
pass over unchanged nodes re-observes none. (Every test also runs with the full observation
beside the incremental one, ``observing.VERIFY_ENV`` in ``tests/conftest.py``.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from controller_world import ControllerWorld, node, nodewright

from lifecycle.spec import NodeWright
from nodewright_bridge.controller import observing
from nodewright_bridge.controller.pod_starts import UNSEEN_POD_SECONDS
from nodewright_bridge.controller.settled import SettledNodes
from nodewright_bridge.controller.snapshot import NodeSnapshot
from nodewright_bridge.k8s import resources

POOL = {"pool": "gpu"}
SPEC = {
    "nodeSelectors": {"matchLabels": POOL},
    "interruptionBudget": {"count": 1},
    "packages": {"tune": {"version": "1.0.0", "image": "registry.local:5000/tune"}},
}


def world_with(nodes: int) -> ControllerWorld:
    world = ControllerWorld()
    for i in range(nodes):
        world.add(resources.NODES, node(f"n{i}", POOL))
    world.add(resources.NODEWRIGHTS, nodewright("tune", SPEC))
    return world


def quiet(world: ControllerWorld) -> None:
    """Step until a pass writes nothing."""
    for _ in range(20):
        before = len(world.api.requests)
        world.step("tune")
        world.reconciler.executor.wait_for_deletes(10)
        if not any(m != "GET" for m, _ in world.api.requests[before:]):
            return
    raise AssertionError("the passes never stopped writing")


def test_a_node_whose_pod_never_shows_in_the_cache_is_planned_again_after_the_wait() -> None:
    world = world_with(nodes=1)
    world.validate("tune")
    world.step("tune")  # the pod is created: the node awaits it in the cache
    (pod,) = world.pods("tune")
    path = resources.PODS.path(namespace="nodewright-system", name=pod["metadata"]["name"])
    del world.api.objects[path]  # created, but the cache will never show it
    creates = len(world.posts("/pods"))
    quiet(world)  # still awaiting it: not planned again, and at last no write touches the node
    assert len(world.posts("/pods")) == creates
    world.clock.advance(UNSEEN_POD_SECONDS + 1)
    world.step("tune")  # still no cache event, but the wait is over: planned afresh
    assert len(world.posts("/pods")) == creates + 1


def test_a_pass_over_unchanged_nodes_observes_none_of_them_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = world_with(nodes=20)
    world.validate("tune")
    for _ in range(3):
        world.step("tune")
        world.finish_pods("tune")
    quiet(world)  # no node is touched or stale any more
    observed: list[str] = []
    real = SettledNodes.get  # asked once per targeted node observed afresh

    def counting(
        self: SettledNodes, cr: NodeWright, obj: Mapping[str, Any], *args: Any, **kwargs: Any
    ) -> NodeSnapshot | None:
        observed.append(str(obj["metadata"]["name"]))
        return real(self, cr, obj, *args, **kwargs)

    monkeypatch.setattr(SettledNodes, "get", counting)
    monkeypatch.delenv(observing.VERIFY_ENV, raising=False)
    world.step("tune")
    assert observed == []
    world.add(resources.NODES, node("n3", {**POOL, "rack": "b"}))  # one node changed
    world.step("tune")
    assert observed == ["n3"]


def test_the_verify_mode_fails_a_pass_that_reused_a_row_of_a_node_that_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the check is for: a change the dirty set missed. (It compares only reused rows: a
    row made afresh this pass can differ moments later only by what time changed, as a stale
    node whose awaited pod was forgotten.)"""
    world = world_with(nodes=3)
    world.validate("tune")
    world.step("tune")
    world.finish_pods("tune")
    quiet(world)
    cached = world.stores.nodes.get("n1")
    assert cached is not None
    cached["metadata"]["resourceVersion"] = "999"  # edited in place: no journal entry to notice
    monkeypatch.setenv(observing.VERIFY_ENV, "1")
    with pytest.raises(AssertionError, match="incremental observe of n1"):
        world.reconciler.reconcile("tune")


def test_the_verify_mode_leaves_out_rows_made_afresh_that_time_changed_since(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node observed stale (our pod not in the cache yet) whose wait ends before the check
    looks again: a fresh row, not a kept one, so nothing incremental to check (a chaos run's
    reconciles failed on it)."""
    world = world_with(nodes=1)
    world.validate("tune")
    world.step("tune")
    answers = iter([True])  # stale when the pass looks, fresh when the check looks again
    monkeypatch.setattr(world.reconciler, "_stale", lambda node: next(answers, False))
    monkeypatch.setenv(observing.VERIFY_ENV, "1")
    world.step("tune")
