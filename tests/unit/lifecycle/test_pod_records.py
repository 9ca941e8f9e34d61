"""A fresh install's start rides on its pod (``lifecycle.pod_records``): when the Node is not
written at start, and why an entry the pod carries never outlives what the Node records."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from stage_world import T0, World, make_cr

from lifecycle import actions as act
from lifecycle import pod_records, releasing
from lifecycle.nodestate import BatchRecord, PackageState, Stage, StageState
from lifecycle.stages import PodObservation, PodPhase
from lifecycle.status import Status

KEY = "tune|1.0.0"
STARTED = PackageState(stage=Stage.APPLY, state=StageState.IN_PROGRESS, attempts=1)


def of(plan_actions: tuple[act.Action, ...], kind: type[Any]) -> list[Any]:
    return [a for a in plan_actions if isinstance(a, kind)]


def pod(phase: PodPhase = PodPhase.RUNNING, picked: str = "2026-01-01T12:00:00") -> PodObservation:
    record = BatchRecord(compartment="default", batch=1, order=0, picked=picked)
    return PodObservation(
        "p", "tune", "1.0.0", ("apply",), 1, phase, carried=STARTED, carried_record=record
    )


def test_a_carried_entry_counts_only_where_the_node_records_nothing_and_waits() -> None:
    seen = pod_records.overlay({}, None, [pod()], Status.WAITING)
    assert seen.state == {KEY: STARTED} and seen.keys == {KEY} and seen.record_from_pod
    assert pod_records.overlay({}, None, [pod()], None).keys == {KEY}  # never labelled
    # The node's own entry wins: a result, a retry, a later cycle.
    done = PackageState(stage=Stage.CONFIG, state=StageState.COMPLETE)
    assert pod_records.overlay({KEY: done}, None, [pod()], Status.WAITING).state == {KEY: done}
    # A label that moved on means the Node has written what it knows: an entry removed since
    # (an uninstall, an upgrade's old version) does not come back from a pod kept for its log.
    kept = pod(PodPhase.FAILED)
    for label in (Status.COMPLETE, Status.ERRORING, Status.IN_PROGRESS):
        assert pod_records.overlay({}, None, [kept], label).keys == frozenset()


def test_the_newest_batch_record_wins() -> None:
    older = BatchRecord(compartment="default", batch=1, order=3, picked="2026-01-01T11:00:00")
    seen = pod_records.overlay({}, older, [pod()], Status.WAITING)
    assert seen.record is not None and seen.record.order == 0 and seen.record_from_pod
    newer = older.model_copy(update={"picked": "2026-01-01T13:00:00"})
    seen = pod_records.overlay({}, newer, [pod()], Status.WAITING)
    assert seen.record == newer and not seen.record_from_pod


def test_a_fresh_install_writes_no_node_at_start_and_its_result_lands_with_the_label() -> None:
    world = World(make_cr({"tune": {"version": "1.0.0"}}))
    start = world.step()
    (create,) = start.actions
    assert isinstance(create, act.CreatePackagePod) and create.carries is not None
    assert (create.carries.stage, create.carries.attempts) == (Stage.APPLY, 1)
    assert world.state == {} and world.status is None
    running = world.step()
    assert running.status is Status.IN_PROGRESS and running.actions == ()  # label kept
    world.finish_pods()
    done = world.step()
    assert of(done.actions, act.PatchNodeState)[0].set[KEY].state is StageState.COMPLETE
    assert of(done.actions, act.SetNodeStatus)[0].status is Status.COMPLETE
    assert world.state[KEY].state is StageState.COMPLETE


def test_a_failed_carried_attempt_is_recorded_and_retried_with_the_node_written_first() -> None:
    world = World(make_cr({"tune": {"version": "1.0.0", "maxAttempts": 2}}))
    world.step()
    world.finish_pods(fail="tune")
    failed = world.step()
    assert len(failed.failures) == 1 and not failed.failures[0].final
    assert world.state[KEY].attempts == 1 and world.state[KEY].retry_at
    world.tick()
    world.tick()
    retry = world.step()
    (create,) = of(retry.actions, act.CreatePackagePod)
    assert create.attempt == 2 and create.carries is None  # a retry writes the Node first
    assert world.state[KEY].attempts == 2


def test_only_a_lone_fresh_install_rides() -> None:
    # An installed package's config change records the cycle on the Node first.
    world = World(make_cr({"tune": {"version": "1.0.0", "vars": {"a": 1}}}))
    world.converge()
    world.cr = make_cr({"tune": {"version": "1.0.0", "vars": {"a": 2}}}, generation=2)
    change = world.step()
    assert of(change.actions, act.PatchNodeState)
    assert all(c.carries is None for c in of(change.actions, act.CreatePackagePod))
    # A package with an interrupt is cordoned first: the Node is written anyway.
    world = World(make_cr({"tune": {"version": "1.0.0", "interrupt": {"type": "reboot"}}}))
    assert of(world.step().actions, act.PatchNodeState)
    # Two packages starting together: one write for both.
    world = World(make_cr({"tune": {"version": "1.0.0"}, "other": {"version": "2.0.0"}}))
    both = world.step()
    assert len(of(both.actions, act.CreatePackagePod)) == 2
    assert set(of(both.actions, act.PatchNodeState)[0].set) == {KEY, "other|2.0.0"}


def test_a_carried_entry_goes_with_the_next_node_write() -> None:
    """While a carried start runs, nothing is written; once the label must move (here: the CR is
    paused) the entry the pod carries is written with it, so it never lives only on a pod
    behind a label that moved on."""
    world = World(make_cr({"tune": {"version": "1.0.0"}}))
    world.step()
    world.status = Status.WAITING
    assert world.plan().actions == ()
    world.paused = True
    paused = world.step()
    assert of(paused.actions, act.SetNodeStatus)[0].status is Status.PAUSED
    assert of(paused.actions, act.PatchNodeState)[0].set[KEY] == world.state[KEY]
    assert world.state[KEY].attempts == 1


def test_a_node_whose_only_trace_is_a_pod_carrying_its_start_is_released_like_any_other() -> None:
    """The node left the selector while its first pod ran: the Node records nothing of the CR,
    but the pod does, so the node is let go (its runtime-required taint included) once the pod
    ended, and the ended pod goes with it."""
    cr = make_cr({"tune": {"version": "1.0.0"}}, runtimeRequired=True)
    running = releasing.PodSeen("p", "tune", False, live=True, deleting=False, created=None)
    node = releasing.HeldNode(name="n1", labels={}, annotations={}, cordon=None, pods=(running,))
    assert not releasing.tracked("tune", node)  # a pod that carries nothing: not ours
    carrying = replace(running, carries=True)
    node = replace(node, pods=(carrying,))
    assert releasing.tracked("tune", node)
    assert releasing.plan_release(cr, node, [cr], T0).waiting  # its pod must end first
    node = replace(node, pods=(replace(carrying, live=False),))
    done = releasing.plan_release(cr, node, [cr], T0)
    assert [a.name for a in of(done.actions, act.DeletePod)] == ["p"]
    (release,) = of(done.actions, act.ReleaseNode)
    assert release.remove_taint
