"""Check-mode preflight and drift in the stage planner: the role decides whether a node is
disrupted at all (``lifecycle.preflight``, ``lifecycle.stages``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from stage_world import World, check_result, make_cr

from lifecycle import actions as act
from lifecycle.preflight import Outcome
from lifecycle.spec import Interrupt, InterruptType
from lifecycle.stages import NodeFacts, PodPhase
from lifecycle.status import Status

REBOOT = Interrupt(type=InterruptType.REBOOT)


def tuned(**extra: object) -> dict[str, dict[str, object]]:
    return {"tuning": {"version": "1.0.0", "preflight": True, "vars": {"x": 1}, **extra}}


def package_pods(world: World) -> list[tuple[str, ...]]:
    return [s for _, s in world.created_stages() if s[0] not in ("preflight", "drift")]


def test_a_compliant_node_is_recorded_complete_without_a_pod_cordon_or_batch_slot() -> None:
    world = World(cr=make_cr(tuned()), allowed=False)  # the rollout never picks it
    world.converge()
    entry = world.state["tuning|1.0.0"]
    assert entry.preflight == Outcome.COMPLIANT.value
    assert world.status is Status.COMPLETE
    assert [s for _, s in world.created_stages()] == [("preflight", "apply", "config")]
    assert world.cordons() == 0
    assert len(world.events("PreflightCompliant")) == 1
    assert world.preflight == {}  # the record was consumed by the entry


def test_a_node_not_granted_a_check_slot_asks_for_one_and_is_not_pickable() -> None:
    world = World(cr=make_cr(tuned()), allowed=False, may_check=False)
    plan = world.step()
    assert plan.check_wanted and plan.check_pending
    assert not world.created
    assert plan.status is Status.WAITING


def test_changes_without_a_reboot_handler_apply_without_cordon_even_if_declared() -> None:
    world = World(cr=make_cr(tuned()), declared={"tuning|1.0.0": REBOOT})
    world.checks["tuning"] = check_result(1, tasks=("Write sysctl file",), declared=REBOOT)
    world.converge()
    assert world.cordons() == 0 and world.boots == 0
    assert package_pods(world) == [("apply", "apply-check", "config", "config-check")]
    entry = world.state["tuning|1.0.0"]
    assert entry.preflight == "changes" and entry.preflight_tasks == ["Write sysctl file"]


def test_changes_that_notify_the_reboot_handler_drain_before_the_apply() -> None:
    world = World(cr=make_cr(tuned()), node=NodeFacts(name="n1", boot_id="boot-0"))
    world.checks["tuning"] = check_result(1, tasks=("Set kernel args",), reboot=True)
    world.converge()
    first_apply = next(
        i
        for i, a in enumerate(world.log)
        if isinstance(a, act.CreatePackagePod) and a.stages[0] == "apply"
    )
    cordon = next(i for i, a in enumerate(world.log) if isinstance(a, act.Cordon))
    assert cordon < first_apply
    assert world.boots == 1


def test_unknown_takes_the_declared_path_and_records_why() -> None:
    world = World(cr=make_cr(tuned()))
    world.checks["tuning"] = check_result(
        0, unsupported=("Rebuild initramfs: shell without check mode",), declared=REBOOT
    )
    world.converge()
    entry = world.state["tuning|1.0.0"]
    assert entry.preflight == "unknown"
    assert "Rebuild initramfs" in entry.preflight_tasks[0]
    assert world.cordons() == 1 and world.boots == 1  # the declared reboot, drained first


def test_a_vars_change_is_checked_again_and_a_compliant_one_runs_nothing() -> None:
    world = World(cr=make_cr(tuned()))
    world.checks["tuning"] = check_result(1, tasks=("Write sysctl file",))
    world.converge()
    before = len(world.created)
    world.cr = make_cr(tuned(vars={"x": 2}), generation=2)
    world.checks["tuning"] = check_result(0)
    world.converge()
    assert [s for _, s in world.created_stages()][before:] == [("preflight", "config")]
    assert world.state["tuning|1.0.0"].preflight == "compliant"


def test_a_failed_check_pod_without_result_is_unknown_and_takes_the_declared_path() -> None:
    world = World(cr=make_cr(tuned()), allowed=False)
    world.step()
    name = next(iter(world.pods))
    world.pods[name] = replace(world.pods[name], phase=PodPhase.FAILED, result=None)
    plan = world.step()
    assert world.preflight["tuning"].outcome is Outcome.UNKNOWN
    assert not plan.check_pending  # now a candidate for the rollout
    world.allowed = True
    world.step()
    assert world.state["tuning|1.0.0"].preflight == "unknown"
    assert package_pods(world) == [("apply", "apply-check", "config", "config-check")]


def drifting(remediate: bool) -> dict[str, object]:
    return {"driftDetection": {"interval": "1h", "remediate": remediate}}


def test_drift_is_checked_every_interval_labelled_and_cleared() -> None:
    world = World(cr=make_cr({"tuning": {"version": "1.0.0"}}, **drifting(False)))
    world.converge()
    applied = len(world.created)
    world.tick(timedelta(minutes=30))
    world.step()
    assert len(world.created) == applied, "no check before the interval"
    world.tick(timedelta(minutes=40))  # past 1h + at most 6 min of jitter
    world.checks["tuning"] = check_result(1, tasks=("Write sysctl file",))
    world.step()
    assert world.created[-1].stages[0] == "drift"
    world.finish_pods()
    world.step()
    assert world.drift_labelled
    assert world.status is Status.COMPLETE  # remediate off: reported, nothing runs
    world.checks["tuning"] = check_result(0)  # someone put the file back
    world.tick(timedelta(minutes=70))
    world.step()
    world.finish_pods()
    world.step()
    assert not world.drift_labelled


def test_drift_with_remediate_runs_the_role_again_through_the_batches() -> None:
    world = World(cr=make_cr({"tuning": {"version": "1.0.0"}}, **drifting(True)))
    world.converge()
    world.tick(timedelta(minutes=70))
    world.checks["tuning"] = check_result(1, tasks=("Write sysctl file",))
    world.allowed = False
    world.step()
    world.finish_pods()
    plan = world.step()
    assert world.drift_labelled
    assert plan.status is Status.WAITING  # a candidate for the rollout again
    world.allowed = True
    world.checks["tuning"] = check_result(0)
    world.converge()
    assert package_pods(world)[-1] == ("apply", "apply-check", "config", "config-check")
    assert world.state["tuning|1.0.0"].preflight == "drifted"
    assert not world.drift_labelled
