"""Recovery rules (``lifecycle.recovery``): a failed node comes back once its cause is fixed.

The stage planner says when a re-attempt of an erroring entry is due (a spec change, an outside
cause cleared, its back-off passed) and restarts it when the rollout gives the node a slot again;
the rollout planner picks such nodes into a new batch and resumes a Stalled compartment once for
the reset annotation.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from stage_world import T0, World, failed_result, make_cr

from lifecycle import actions as act
from lifecycle import batching, recovery
from lifecycle.compartments import DEFAULT_COMPARTMENT
from lifecycle.nodestate import RESET_COMPARTMENT_ANNOTATION, Stage, StageState
from lifecycle.recovery import Cause, OutsideRetry
from lifecycle.rollout import NodeView, RolloutPlan, plan_rollout
from lifecycle.spec import DeploymentPolicy, NodeWright, Package
from lifecycle.stages import NodePlan, PodPhase, plan_node, rfc3339
from lifecycle.status import BatchState, Status

KEY = "pkg|1.0.0"
BASE: dict[str, Any] = {"version": "1.0.0", "maxAttempts": 1, "vars": {"level": 1}}
APPLY_CHAIN = ("apply", "apply-check", "config", "config-check")
CONFIG_CHAIN = ("config", "config-check")
REBOOT = {"type": "reboot"}
DIGEST = "sha256:" + "c" * 64


def of(actions: tuple[act.Action, ...], kind: type[Any]) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def respec(world: World, pkg: dict[str, Any], generation: int = 2, **spec: Any) -> None:
    world.cr = make_cr({"pkg": pkg}, generation=generation, **spec)


def failed(pkg: dict[str, Any] = BASE, **spec: Any) -> World:
    """A node whose package failed its only attempt (the role failed) and is now erroring."""
    world = World(make_cr({"pkg": pkg}, **spec))
    world.step()
    world.finish_pods(fail="pkg")
    world.step()
    assert world.state[KEY].state is StageState.ERRORING
    world.created.clear()
    world.log.clear()
    return world


def probe(world: World) -> NodePlan:
    """The plan without permission to start (as the controller probes a node for the rollout)."""
    return plan_node(replace(world.input(), allowed_to_start=False))


def step_undrained(world: World) -> act.Action | None:
    """Plan and apply, except that a drain does not get anywhere (a PDB refuses it)."""
    plan = world.plan()
    world.apply(
        replace(plan, actions=tuple(a for a in plan.actions if not isinstance(a, act.Drain)))
    )
    return next((a for a in plan.actions if isinstance(a, act.Drain)), None)


# ---- any change to a failed package's spec restarts it -----------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"image": "registry.local:5000/fixed/pkg"},
        {"digest": DIGEST},
        {"timeouts": {"stage": "45m"}},
        {"maxAttempts": 2},
        {"vars": {"level": 2}},
        {"configMap": {"a.conf": "x"}},
        {"tags": ["sysctl"]},
        {"env": [{"name": "X", "value": "1"}]},
        {
            "version": "1.0.0",
            "resources": {
                "cpuRequest": "1",
                "cpuLimit": "2",
                "memoryRequest": "1Gi",
                "memoryLimit": "2Gi",
            },
        },
    ],
    ids=["image", "digest", "timeouts", "maxAttempts", "vars", "configMap", "tags", "env", "res"],
)
def test_a_change_to_the_failed_package_spec_restarts_it_from_the_failed_stage(
    change: dict[str, Any],
) -> None:
    world = failed()
    world.allowed = False
    respec(world, {**BASE, **change})
    probe = world.plan()
    assert probe.restart_due and probe.status is Status.ERRORING
    assert not of(probe.actions, act.CreatePackagePod)  # only through the batches
    assert "re-attempt due (spec changed)" in probe.reason
    world.allowed = True
    plan = world.step()
    (pod,) = of(plan.actions, act.CreatePackagePod)
    assert (pod.stages, pod.attempt) == (APPLY_CHAIN, 1)
    assert plan.status is Status.IN_PROGRESS
    assert len(world.events("RetryingAfterSpecChange")) == 2  # on the Node and on the CR
    world.converge()


def test_an_image_fixed_while_the_failing_attempt_still_waits_restarts_it() -> None:
    """The fix lands before the unpullable attempt reaches its deadline: it failed with the old
    image, so the fixed one is still worth an attempt."""
    pkg = {"version": "1.0.0", "maxAttempts": 1, "timeouts": {"stage": "1m"}}
    world = World(make_cr({"pkg": {**pkg, "image": "registry.local:5000/typo/pkg"}}))
    world.step()
    (name,) = world.pods
    world.pods[name] = replace(world.pods[name], waiting_reason="ErrImagePull")
    respec(world, {**pkg, "image": "registry.local:5000/pkg"})
    world.tick(timedelta(minutes=1))
    world.allowed = False
    assert world.step().status is Status.ERRORING
    assert probe(world).restart_due


def test_new_data_in_a_secret_vars_secret_restarts_a_failed_package() -> None:
    pkg = {**BASE, "secretVars": [{"secretName": "token"}]}
    world = World(make_cr({"pkg": pkg}), secret_data={"pkg": "d1"})
    world.step()
    world.finish_pods(fail="pkg")
    world.step()
    assert not probe(world).restart_due
    world.secret_data = {"pkg": "d2"}
    assert probe(world).restart_due


def test_an_unchanged_spec_does_not_restart_a_failed_package() -> None:
    world = failed()
    respec(world, dict(BASE), generation=5)  # a new generation, the same package spec
    world.tick(timedelta(hours=3))
    plan = world.step()
    assert not plan.restart_due
    assert not of(plan.actions, act.CreatePackagePod)
    assert plan.status is Status.ERRORING
    assert plan.requeue_at is None  # no back-off: the package itself failed
    assert "a change to the package's spec retries it" in plan.reason


def test_a_record_written_before_spec_existed_restarts_only_for_a_config_change() -> None:
    """An upgraded controller must not restart a fleet of old erroring entries."""
    world = failed()
    world.state[KEY] = world.state[KEY].model_copy(update={"spec": ""})
    respec(world, {**BASE, "image": "registry.local:5000/other/pkg", "maxAttempts": 2})
    assert not probe(world).restart_due
    respec(world, {**BASE, "vars": {"level": 2}}, generation=3)
    assert probe(world).restart_due


def test_the_record_is_compact_and_names_what_the_entry_failed_with() -> None:
    world = failed()
    entry = world.state[KEY]
    pkg = world.cr.spec.packages["pkg"]
    assert entry.spec == recovery.fingerprint(pkg)
    assert len(entry.spec) == recovery.FINGERPRINT_CHARS
    assert (entry.cause, entry.reattempt_at) == ("", "")  # the role failed: no outside cause


def test_the_fingerprint_ignores_fields_left_at_their_defaults() -> None:
    plain = Package(version="1.0.0", image="registry.local:5000/pkg")
    explicit = Package.model_validate(
        {"version": "1.0.0", "image": "registry.local:5000/pkg", "maxAttempts": 3}
    )
    assert recovery.fingerprint(plain) == recovery.fingerprint(explicit)
    assert recovery.fingerprint(plain) != recovery.fingerprint(plain, "secret-digest")


def test_a_restart_keeps_owed_handlers_and_resumes_at_the_stage_that_failed() -> None:
    world = World(make_cr({"pkg": BASE}))
    world.step()
    (name,) = world.pods
    result = failed_result("config-check").model_copy(update={"pending_handlers": ["Restart app"]})
    world.pods[name] = replace(world.pods[name], phase=PodPhase.FAILED, result=result)
    world.step()
    assert world.state[KEY].state is StageState.ERRORING
    respec(world, {**BASE, "vars": {"level": 2}})
    (pod,) = of(world.step().actions, act.CreatePackagePod)
    assert pod.stages == CONFIG_CHAIN
    assert world.state[KEY].pending_handlers == ["Restart app"]


def test_a_node_picked_again_by_the_rollout_re_attempts_even_an_unchanged_spec() -> None:
    """The rollout picks a failed node again only for a reason (a compartment reset here)."""
    world = failed()
    assert not of(world.step().actions, act.CreatePackagePod)
    world.new_slot = True
    (pod,) = of(world.step().actions, act.CreatePackagePod)
    assert pod.attempt == 1
    assert world.events("RetryingFailedNode")


# ---- outside causes ----------------------------------------------------------------------------


def test_a_drain_blocked_by_a_pdb_is_re_attempted_when_the_pdb_allows_and_keeps_the_cordon() -> (
    None
):
    world = World(
        make_cr({"pkg": {"version": "1.0.0", "interrupt": REBOOT}}, drain={"timeout": "5m"})
    )
    world.node = replace(world.node, pods_to_evict=1, blocking_pdbs=("web/web-pdb",))
    step_undrained(world)  # cordon
    assert step_undrained(world) is not None  # draining, refused
    world.tick(timedelta(minutes=5))
    world.allowed = False
    plan = world.plan()
    world.apply(plan)
    entry = world.state[KEY]
    assert (entry.state, entry.cause) == (StageState.ERRORING, Cause.DRAIN.value)
    again = rfc3339(T0 + timedelta(minutes=10))
    assert entry.reattempt_at == again
    assert "blocked by PodDisruptionBudget web/web-pdb" in entry.message
    assert (
        f"re-attempt when no PodDisruptionBudget or unevictable pod blocks the drain or at {again}"
        in entry.message
    )
    assert entry.message in plan.reason and plan.failures[0].final
    assert plan.requeue_at == T0 + timedelta(minutes=10)
    assert not plan.restart_due
    assert world.node.unschedulable and not of(tuple(world.log), act.Uncordon)  # cordon held
    world.node = replace(world.node, blocking_pdbs=())  # the PDB is deleted
    world.tick(timedelta(seconds=10))
    probe = world.plan()
    assert probe.restart_due and "re-attempt due (cause cleared)" in probe.reason
    world.allowed = True
    plan = world.step()
    assert of(plan.actions, act.Drain)  # goes on from the cordon we hold: no gap
    assert not of(plan.actions, act.Uncordon) and not of(plan.actions, act.Cordon)
    assert len(world.events("RetryingAfterOutsideCause")) == 2
    assert world.state[KEY].reattempts == 1 and world.state[KEY].cause == ""
    world.converge()
    assert not world.node.unschedulable


def test_protected_pods_that_outlast_the_wait_are_re_attempted_once_they_are_gone() -> None:
    world = World(
        make_cr(
            {"pkg": {"version": "1.0.0", "interrupt": REBOOT, "timeouts": {"drain": "2m"}}},
            podNonInterruptLabels={"matchLabels": {"job": "training"}},
        )
    )
    world.node = replace(world.node, non_interrupt_pods=1, pods_to_evict=1)
    world.step()
    world.tick(timedelta(minutes=2))
    world.step()
    assert world.state[KEY].cause == Cause.PROTECTED_PODS.value
    assert not probe(world).restart_due
    world.node = replace(world.node, non_interrupt_pods=0)
    assert probe(world).restart_due


def test_an_image_pull_failure_is_re_attempted_on_a_doubling_bounded_back_off() -> None:
    pkg = {"version": "1.0.0", "maxAttempts": 1, "timeouts": {"stage": "1m"}}
    world = World(make_cr({"pkg": pkg}))
    world.outside_retry = OutsideRetry(base=timedelta(minutes=5), cap=timedelta(minutes=15))
    delays = []
    for _ in range(4):
        world.step()
        (name,) = [n for n, p in world.pods.items() if p.live]
        world.pods[name] = replace(world.pods[name], waiting_reason="ImagePullBackOff")
        world.tick(timedelta(minutes=1))
        plan = world.step()
        entry = world.state[KEY]
        assert (entry.state, entry.cause) == (StageState.ERRORING, "image-pull")
        assert "ImagePullBackOff" in entry.message and "re-attempt at" in entry.message
        delay = plan.requeue_at - world.now if plan.requeue_at else None
        delays.append(delay)
        assert delay is not None
        world.tick(delay - timedelta(seconds=1))
        assert not probe(world).restart_due
        world.tick(timedelta(seconds=1))
        assert probe(world).restart_due
    assert delays == [timedelta(minutes=m) for m in (5, 10, 15, 15)]


def test_a_node_that_rebooted_but_was_not_ready_in_time_completes_without_a_second_reboot() -> None:
    pkg = {
        "version": "1.0.0",
        "interrupt": REBOOT,
        "maxAttempts": 1,
        "timeouts": {"interrupt": "15m"},
    }
    world = World(make_cr({"pkg": pkg}))
    for _ in range(10):
        world.step()
        irq = [n for n, p in world.pods.items() if p.interrupt and p.live]
        if irq:
            break
        world.finish_pods()
    del world.pods[irq[0]]  # killed by the reboot, which happened ...
    world.node = replace(world.node, boot_id="boot-9", ready=False)  # ... but no Ready
    world.tick(timedelta(minutes=15))
    plan = world.step()
    entry = world.state[KEY]
    assert (entry.stage, entry.state, entry.cause) == (
        Stage.INTERRUPT,
        StageState.ERRORING,
        "not-ready",
    )
    assert world.node.unschedulable  # an erroring node keeps our cordon
    assert plan.status is Status.ERRORING and not plan.restart_due
    world.node = replace(world.node, ready=True)
    world.created.clear()
    world.converge()
    assert not any(isinstance(c, act.CreateInterruptPod) for c in world.created)
    assert world.state[KEY].stage is Stage.POST_INTERRUPT and not world.node.unschedulable


def test_the_outside_retry_back_off_doubles_up_to_its_cap() -> None:
    retry = OutsideRetry()
    assert [retry.delay(n) for n in range(6)] == [
        timedelta(minutes=m) for m in (5, 10, 20, 40, 60, 60)
    ]


# ---- the rollout gives a failed node a slot again ----------------------------------------------

T = datetime(2025, 1, 1, tzinfo=UTC)


def nodes(count: int) -> list[NodeView]:
    return [NodeView(name=f"n{i:02d}") for i in range(count)]


def legacy(count: int, annotations: dict[str, str] | None = None) -> NodeWright:
    return NodeWright.model_validate(
        {
            "metadata": {"name": "cr", "annotations": annotations or {}},
            "spec": {
                "packages": {"pkg": {"version": "1.0.0", "image": "registry.local:5000/pkg"}},
                "interruptionBudget": {"count": count},
            },
        }
    )


def applied(views: list[NodeView], plan: RolloutPlan) -> list[NodeView]:
    return [replace(v, record=plan.records.get(v.name, v.record)) for v in views]


def mark(views: list[NodeView], names: set[str], **changes: Any) -> list[NodeView]:
    return [replace(v, **changes) if v.name in names else v for v in views]


DONE: dict[str, Any] = {"status": Status.COMPLETE, "has_pending_work": False}
FAILED: dict[str, Any] = {"status": Status.ERRORING}


def test_a_due_re_attempt_waits_for_its_batch_then_takes_a_slot_in_a_new_one() -> None:
    cr = legacy(3)
    first = plan_rollout(cr, None, nodes(4), {}, T)
    views = applied(nodes(4), first)
    assert first.allowed == ("n00", "n01", "n02")
    views = mark(views, {"n00"}, restart=True, **FAILED)  # failed, its spec fixed since
    running = plan_rollout(cr, None, views, first.batch_states, T + timedelta(minutes=1))
    assert running.allowed == ("n01", "n02") and running.records == {}
    views = mark(views, {"n01", "n02"}, **DONE)
    nxt = plan_rollout(cr, None, views, running.batch_states, T + timedelta(minutes=2))
    (outcome,) = nxt.compartments[DEFAULT_COMPARTMENT].evaluated
    assert outcome.failed == ("n00",)  # counted as failed for the batch it failed in
    assert set(nxt.allowed) == {"n00", "n03"}
    assert nxt.records["n00"].batch == 2
    assert nxt.records["n00"].order == first.records["n00"].order
    # It fails again with the new spec: counted in the new batch too, and not picked again.
    views = mark(applied(views, nxt), {"n00"}, restart=False, **FAILED)
    views = mark(views, {"n03"}, **DONE)
    last = plan_rollout(cr, None, views, nxt.batch_states, T + timedelta(minutes=3))
    assert last.allowed == ()
    assert last.batch_states[DEFAULT_COMPARTMENT].failed_nodes == 2  # failed slots


def stalled() -> tuple[NodeWright, DeploymentPolicy, list[NodeView], dict[str, BatchState]]:
    """3 nodes, batches of 1, failureThreshold 1: the first node failed and stopped it."""
    policy = DeploymentPolicy.model_validate(
        {
            "metadata": {"name": "p"},
            "spec": {
                "default": {
                    "budget": {"count": 1},
                    "strategy": {
                        "fixed": {"initialBatch": 1, "failureThreshold": 1, "safetyLimit": 100}
                    },
                }
            },
        }
    )
    cr = legacy(1).model_copy(
        update={"spec": legacy(1).spec.model_copy(update={"deployment_policy": "p"})}
    )
    first = plan_rollout(cr, policy, nodes(3), {}, T)
    views = mark(applied(nodes(3), first), set(first.allowed), **FAILED)
    stopped = plan_rollout(cr, policy, views, first.batch_states, T + timedelta(minutes=1))
    assert stopped.stopped and stopped.allowed == ()
    return cr, policy, views, dict(stopped.batch_states)


def annotated(cr: NodeWright, value: str) -> NodeWright:
    meta = cr.metadata.model_copy(update={"annotations": {RESET_COMPARTMENT_ANNOTATION: value}})
    return cr.model_copy(update={"metadata": meta})


def test_the_reset_annotation_resumes_a_stalled_compartment_once() -> None:
    cr, policy, views, states = stalled()
    reset = plan_rollout(annotated(cr, "*"), policy, views, states, T + timedelta(minutes=2))
    assert reset.reset_request == "*"
    assert reset.compartment_resets == (DEFAULT_COMPARTMENT,)
    assert reset.stopped == {}
    state = reset.batch_states[DEFAULT_COMPARTMENT]
    assert not state.should_stop and state.consecutive_failures == 0
    assert state.reset_at == (T + timedelta(minutes=2)).isoformat()
    assert reset.allowed == ("n01",)  # waiting nodes before the failed one
    views = mark(applied(views, reset), {"n01"}, **DONE)
    # The controller died before it removed the annotation: handled again, nothing is reset.
    again = plan_rollout(
        annotated(cr, "*"), policy, views, reset.batch_states, T + timedelta(minutes=3)
    )
    assert again.compartment_resets == ()
    assert again.reset_ignored == {"*": "no compartment is stopped"}
    assert again.batch_states[DEFAULT_COMPARTMENT].reset_at == state.reset_at
    assert again.batch_states[DEFAULT_COMPARTMENT].current_batch == 2
    assert again.allowed == ("n02",)
    views = mark(applied(views, again), {"n02"}, **DONE)
    # The node that failed before the reset is picked again, once.
    back = plan_rollout(cr, policy, views, again.batch_states, T + timedelta(minutes=4))
    assert back.allowed == ("n00",)
    views = mark(applied(views, back), {"n00"}, **FAILED)
    final = plan_rollout(cr, policy, views, back.batch_states, T + timedelta(minutes=5))
    assert final.allowed == () and "n00" not in final.records


def test_a_reset_of_a_compartment_that_is_not_stopped_changes_nothing() -> None:
    cr = legacy(2, {RESET_COMPARTMENT_ANNOTATION: f"{DEFAULT_COMPARTMENT},nope"})
    first = plan_rollout(cr, None, nodes(4), {}, T)
    assert first.compartment_resets == ()
    assert first.reset_ignored == {
        DEFAULT_COMPARTMENT: "not stopped",
        "nope": "no such compartment",
    }
    assert first.allowed == ("n00", "n01")


def test_reset_targets_reads_a_name_a_list_or_a_star() -> None:
    stopped = {"gpu": True, "cpu": False, "edge": True}
    assert batching.reset_targets("*", stopped).reset == ("gpu", "edge")
    targets = batching.reset_targets(" gpu , cpu,x ", stopped)
    assert targets.reset == ("gpu",)
    assert targets.ignored == {"cpu": "not stopped", "x": "no such compartment"}
    assert batching.reset_targets("", stopped).ignored == {'""': "names no compartment"}


def test_asking_to_uninstall_a_failed_package_is_a_change_that_lets_the_uninstall_run() -> None:
    pkg = {**BASE, "uninstall": {"enabled": True}}
    world = failed(pkg)
    world.allowed = False
    respec(world, {**pkg, "uninstall": {"enabled": True, "apply": True}})
    assert probe(world).restart_due
    world.allowed = True
    (pod,) = of(world.step().actions, act.CreatePackagePod)
    assert pod.stages == ("uninstall", "uninstall-check")
