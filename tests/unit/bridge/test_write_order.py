"""When a pass's node work goes out: a pass that picks a batch holds everything but its pod
starts until it has planned every node; any other pass writes each node's work as it is handed
over (the results there are what the next batch waits for), bookkeeping up to its cap."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import Future

from cache_world import empty_stores

from lifecycle import actions
from lifecycle.spec import NodeWright
from lifecycle.status import Status
from nodewright_bridge.controller import snapshot
from nodewright_bridge.controller.node_writes import (
    BOOKKEEPING_PER_PASS,
    DEFERRED_RETRY_SECONDS,
    NodeWork,
    NodeWrites,
    Outcome,
)
from nodewright_bridge.k8s.foreground import Foreground

CR = NodeWright.model_validate(
    {
        "metadata": {"name": "t"},
        "spec": {"packages": {"sysctl": {"version": "1.0.0", "image": "r/p"}}},
    }
)


class Applier:
    """The executor's side of :class:`NodeWrites`: records the nodes whose work was applied."""

    def __init__(self) -> None:
        self.foreground = Foreground()
        self.applied: list[str] = []
        self.deleted: list[str] = []  # pod deletes queued (on the caller's thread)
        self.first = threading.Event()
        self._lock = threading.Lock()

    def ensure_config_map_soon(self, cr: NodeWright, package: str) -> Future[None]:
        done: Future[None] = Future()
        done.set_result(None)
        return done

    def apply_work(
        self,
        cr: NodeWright,
        work: NodeWork,
        outcome: Outcome,
        config_maps: Mapping[str, Future[None]],
    ) -> None:
        with self._lock:
            self.applied.append(work.node.name)
        self.first.set()

    def write_annotations(self, node: str, annotations: Mapping[str, str | None]) -> None:
        raise AssertionError("no record of a node without work in these tests")

    def delete_pod_soon(self, name: str) -> None:
        self.deleted.append(name)


def work(name: str, *acts: actions.Action) -> NodeWork:
    raw = {"metadata": {"name": name, "resourceVersion": "1"}}
    snap = snapshot.snapshot_node(CR, raw, empty_stores(), snapshot.PdbIndex())
    return NodeWork(node=snap, actions=acts)


def result(name: str) -> NodeWork:
    """A node's bookkeeping: a Node write that starts no pod and takes no batch record."""
    return work(name, actions.SetNodeStatus(node=name, cr="t", status=Status.COMPLETE))


def test_a_pass_that_picks_no_batch_writes_each_nodes_work_as_it_is_handed_over() -> None:
    applier = Applier()
    with NodeWrites(applier, CR, Outcome(), defer=True, hold=False) as writes:
        writes.add(result("n1"))
        assert applier.first.wait(10), "the result waited for the pass to end"
        assert applier.applied == ["n1"]
    assert writes.counts.written == 1


def test_a_pass_that_picks_a_batch_holds_other_work_until_it_has_planned_every_node() -> None:
    applier = Applier()
    with NodeWrites(applier, CR, Outcome(), defer=True, hold=True) as writes:
        writes.add(result("n1"))
        assert applier.applied == [], "bookkeeping went ahead of the batch's pod starts"
    assert applier.applied == ["n1"]
    assert writes.counts.written == 1


def test_bookkeeping_over_the_cap_waits_for_the_next_pass_and_other_work_does_not() -> None:
    applier, outcome = Applier(), Outcome()
    over = 5
    names = [f"n{i}" for i in range(BOOKKEEPING_PER_PASS + over)]
    delete_only = work("gone", actions.DeletePod(name="p", node="gone", reason="succeeded"))
    with NodeWrites(applier, CR, outcome, defer=True, hold=False) as writes:
        for name in names:
            writes.add(result(name))
        writes.add(delete_only)
    assert sorted(applier.applied) == sorted(names[:BOOKKEEPING_PER_PASS])
    assert applier.deleted == ["p"]
    assert writes.counts.deferred == over
    assert writes.counts.written == BOOKKEEPING_PER_PASS + 1
    assert outcome.requeue_after == DEFERRED_RETRY_SECONDS


def test_background_senders_wait_while_a_pass_writes_results_not_while_it_only_deletes() -> None:
    applier = Applier()
    with NodeWrites(applier, CR, Outcome(), defer=True, hold=False) as writes:
        writes.add(work("n1", actions.DeletePod(name="p1", node="n1", reason="finished")))
        assert not applier.foreground.busy(), "queueing a delete is no reason to hold deletes"
        writes.add(result("n2"))
        assert applier.foreground.busy(), "a result the next batch waits for goes first"
    assert not applier.foreground.busy(), "released once the pass's writes are done"


def test_work_that_only_deletes_pods_is_queued_at_once_not_held_nor_handed_to_a_thread() -> None:
    applier = Applier()
    deletes = work(
        "n1",
        actions.DeletePod(name="p1", node="n1", reason="succeeded"),
        actions.DeletePod(name="p2", node="n1", reason="succeeded"),
    )
    with NodeWrites(applier, CR, Outcome(), defer=True, hold=True) as writes:
        writes.add(deletes)
        assert applier.deleted == ["p1", "p2"], "a queued delete waited for the pass to end"
        writes.add(result("n2"))
    assert applier.applied == ["n2"], "the delete-only work was applied on a node thread too"
    assert writes.counts.written == 2
