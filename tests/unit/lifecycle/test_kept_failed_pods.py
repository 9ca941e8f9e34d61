"""A failed package pod is kept for its log (``NodeInput.failed_pod_ttl``) and never taken for an
attempt; ``rerun`` marks run a package again through the rollout (``lifecycle.stages``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from stage_world import T0, World, make_cr

from lifecycle import actions as act
from lifecycle import releasing
from lifecycle.nodestate import StageState
from lifecycle.results import AgentResult, Failure
from lifecycle.stages import PodPhase
from lifecycle.status import Status

KEY = "pkg|1.0.0"
TTL = timedelta(hours=24)


def of(actions: tuple[act.Action, ...], kind: type[Any]) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def world_with(max_attempts: int = 2, **pkg: Any) -> World:
    world = World(make_cr({"pkg": {"version": "1.0.0", "maxAttempts": max_attempts, **pkg}}))
    world.failed_pod_ttl = TTL
    return world


def fail_first_attempt(world: World) -> str:
    world.step()
    world.finish_pods(fail="pkg")
    plan = world.step()
    assert world.state[KEY].retry_at  # a retry after back-off
    (failure,) = plan.failures
    (name,) = world.pods
    assert (failure.attempt, failure.pod) == (1, name)
    return name


def test_a_failed_pod_is_kept_and_deleted_once_its_ttl_passed() -> None:
    world = world_with(max_attempts=1)
    world.step()
    world.finish_pods(fail="pkg")
    plan = world.step()
    assert world.state[KEY].state is StageState.ERRORING
    assert not of(plan.actions, act.DeletePod) and len(world.pods) == 1
    (pod,) = world.pods.values()
    assert pod.finished is not None
    assert plan.requeue_at is not None and plan.requeue_at <= pod.finished + TTL
    world.tick(TTL - timedelta(minutes=1))
    assert not of(world.step().actions, act.DeletePod)
    world.tick(timedelta(minutes=1))
    (delete,) = of(world.step().actions, act.DeletePod)
    assert "kept 24h" in delete.reason and not world.pods


def test_a_kept_failed_pod_is_never_recorded_again_and_goes_when_a_retry_succeeds() -> None:
    world = world_with()
    kept = fail_first_attempt(world)
    world.tick(timedelta(minutes=5))  # past the back-off: attempt 2 starts
    plan = world.step()
    (created,) = of(plan.actions, act.CreatePackagePod)
    assert created.attempt == 2 and kept in world.pods
    assert not plan.failures  # the kept pod's failure is not recorded twice
    world.finish_pods()
    plan = world.step()
    assert world.state[KEY].state is StageState.COMPLETE
    deleted = {a.name: a.reason for a in of(plan.actions, act.DeletePod)}
    assert deleted[kept] == "failed; a newer attempt succeeded"
    assert not world.pods


def test_a_new_attempt_that_reuses_a_kept_pods_name_deletes_it_first() -> None:
    world = world_with(max_attempts=1, vars={"level": 1})
    world.step()
    world.finish_pods(fail="pkg")
    world.step()
    (kept,) = world.pods
    # A spec fix restarts the entry at attempt 1: the same pod name as the kept failed pod.
    world.cr = make_cr(
        {"pkg": {"version": "1.0.0", "maxAttempts": 1, "vars": {"level": 2}}}, generation=2
    )
    world.created.clear()
    plan = world.step()
    (delete,) = of(plan.actions, act.DeletePod)
    assert (delete.name, delete.reason) == (kept, "replaced by a new attempt")
    assert not of(plan.actions, act.CreatePackagePod) and not plan.failures
    assert plan.status is Status.IN_PROGRESS
    plan = world.step()  # the old pod is gone now
    (created,) = of(plan.actions, act.CreatePackagePod)
    assert created.attempt == 1 and world.pods[kept].phase is PodPhase.PENDING
    world.finish_pods()
    world.step()
    assert world.state[KEY].state is StageState.COMPLETE


def test_a_kept_failed_pod_goes_when_its_entry_is_forgotten_or_the_node_released() -> None:
    world = world_with(max_attempts=1)
    world.step()
    world.finish_pods(fail="pkg")
    world.step()
    (kept,) = world.pods
    world.state.clear()  # ``nwb reset``
    world.allowed = False
    deleted = {a.name: a.reason for a in of(world.step().actions, act.DeletePod)}
    assert deleted == {kept: "failed; the node no longer records its package"}
    node = releasing.HeldNode(
        name="n1",
        labels={},
        annotations={"bridge.nodewright.io/status-tune": "erroring"},
        cordon=None,
        pods=(releasing.PodSeen(kept, "pkg", False, live=False, deleting=False, created=T0),),
    )
    plan = releasing.plan_release(world.cr, node, [world.cr], T0)
    assert [a.name for a in of(plan.actions, act.DeletePod)] == [kept]


def test_a_zero_ttl_deletes_a_failed_pod_at_once() -> None:
    world = world_with(max_attempts=1)
    world.failed_pod_ttl = timedelta(0)
    world.step()
    world.finish_pods(fail="pkg")
    (delete,) = of(world.step().actions, act.DeletePod)
    assert delete.reason == "failed" and not world.pods


def test_the_failure_carries_the_agents_output_tail() -> None:
    world = world_with(max_attempts=1)
    world.step()
    (name,) = world.pods
    result = AgentResult(
        failure=Failure(stage="apply", task="Set sysctl", message="boom"),
        output=["ok        apply  Gather", "failed    apply  Set sysctl: boom"],
    )
    world.pods[name] = world.pods[name].__class__(
        **{**_fields(world.pods[name]), "phase": PodPhase.FAILED, "result": result}
    )
    (failure,) = world.step().failures
    assert failure.output == ("ok        apply  Gather", "failed    apply  Set sysctl: boom")


def _fields(pod: Any) -> dict[str, Any]:
    return {f: getattr(pod, f) for f in pod.__slots__}


# ---- rerun -------------------------------------------------------------------------------------


def mark(world: World) -> None:
    world.state[KEY] = world.state[KEY].model_copy(update={"rerun": True})


def test_a_rerun_of_a_complete_package_waits_for_the_rollout_then_runs_the_whole_role() -> None:
    world = world_with()
    world.converge()
    mark(world)
    world.allowed = False
    world.created.clear()
    plan = world.step()
    assert plan.status is Status.WAITING and not world.created  # the rollout must pick it
    world.allowed = True
    plan = world.step()
    (created,) = of(plan.actions, act.CreatePackagePod)
    assert created.stages[0] == "apply" and created.attempt == 1
    assert not world.state[KEY].rerun  # consumed when the cycle started
    world.converge()


def test_a_rerun_of_a_package_with_an_interrupt_cordons_and_drains_first() -> None:
    world = world_with(interrupt={"type": "reboot"})
    world.converge()
    mark(world)
    world.node = world.node.__class__(**{**_fields(world.node), "pods_to_evict": 2})
    world.log.clear()
    world.created.clear()
    for _ in range(3):
        world.step()
    kinds = [type(a).__name__ for a in world.log if isinstance(a, act.Cordon | act.Drain)]
    assert kinds[:2] == ["Cordon", "Drain"]
    first_pod = next(i for i, a in enumerate(world.log) if isinstance(a, act.CreatePackagePod))
    first_drain = next(i for i, a in enumerate(world.log) if isinstance(a, act.Drain))
    assert first_drain < first_pod
    world.converge()
    assert world.boots == 2  # the first cycle's reboot and the rerun's


def test_a_rerun_of_an_erroring_package_is_due_and_restarts_it() -> None:
    world = world_with(max_attempts=1)
    world.failed_pod_ttl = timedelta(0)
    world.step()
    world.finish_pods(fail="pkg")
    world.step()
    world.allowed = False
    assert not world.plan().restart_due
    mark(world)
    probe = world.plan()
    assert probe.restart_due and "rerun asked for" in probe.reason
    world.allowed = True
    plan = world.step()
    assert of(plan.actions, act.CreatePackagePod) and not world.state[KEY].rerun
    assert len(world.events("RerunRequested")) == 2
