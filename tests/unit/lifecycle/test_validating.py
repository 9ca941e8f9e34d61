"""Check before cordon, the pure decisions: which package specs need a validation pod, what a
pod's outcome means, and whether new work may start."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from stage_world import T0, World, make_cr

from lifecycle import validating as v
from lifecycle.actions import CreateInterruptPod, CreatePackagePod, SetNodeStatus
from lifecycle.rollout import NodeView
from lifecycle.selectors import Taint, TaintEffect
from lifecycle.spec import NodeWright
from lifecycle.stages import PodPhase
from lifecycle.status import PackageValidation, Status, ValidationState

NODES = (v.CandidateNode("n1", ready=True), v.CandidateNode("n2", ready=True))


def cr_with(**pkg: Any) -> NodeWright:
    return make_cr({"tuning": {"version": "1.0.0", **pkg}})


def plan(cr: NodeWright, **kw: Any) -> v.ValidationPlan:
    kw.setdefault("nodes", NODES)
    kw.setdefault("records", {})
    kw.setdefault("now", T0)
    return v.plan_validation(v.ValidationInput(cr=cr, **kw))


def key_of(cr: NodeWright, secret: str = "") -> str:
    return v.validation_key(cr.spec.packages["tuning"], secret)


def pod(cr: NodeWright, **kw: Any) -> v.ValidationPod:
    base: dict[str, Any] = {
        "name": "nwv-tuning-a1",
        "package": "tuning",
        "key": key_of(cr),
        "attempt": 1,
        "node": "n1",
        "phase": PodPhase.PENDING,
        "started": T0,
    }
    base.update(kw)
    return v.ValidationPod(**base)


def ended(cr: NodeWright, result: v.ValidationResult, **kw: Any) -> v.ValidationPod:
    kw.setdefault("phase", PodPhase.SUCCEEDED)
    return pod(cr, result=v.parse_result(result.to_termination_message()), **kw)


def passed_record(cr: NodeWright) -> PackageValidation:
    return PackageValidation(key=key_of(cr), state=ValidationState.PASSED)


# ---- the key ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"version": "1.0.1"},
        {"image": "registry.local:5000/other"},
        {"digest": "sha256:" + "a" * 64},
        {"vars": {"swappiness": 10}},
        {"configMap": {"a.conf": "x"}},
        {"secretVars": [{"secretName": "s"}]},
        {"tags": ["fast"]},
    ],
)
def test_any_change_of_what_validation_checks_is_a_new_spec(change: dict[str, Any]) -> None:
    assert key_of(cr_with(**change)) != key_of(cr_with())


def test_new_secret_data_is_a_new_spec_and_pacing_settings_are_not() -> None:
    cr = cr_with(secretVars=[{"secretName": "s"}])
    assert key_of(cr, "digest-1") != key_of(cr, "digest-2")
    same = cr_with(interrupt={"type": "reboot"}, timeouts={"stage": "5m"}, maxAttempts=5)
    assert key_of(same) == key_of(cr_with())


# ---- which specs need a pod ------------------------------------------------------------------


def test_an_unvalidated_spec_gets_one_pod_on_the_first_ready_node_and_closes_the_gate() -> None:
    cr = cr_with(timeouts={"stage": "10m"})
    nodes = (
        v.CandidateNode("a-not-ready", ready=False),
        v.CandidateNode("b-ignored", ready=True, labels={"bridge.nodewright.io/ignore": "true"}),
        v.CandidateNode("c-tainted", ready=True, taints=(Taint("gpu", TaintEffect.NO_SCHEDULE),)),
        v.CandidateNode("d-cordoned", ready=True, taints=(_cordon_taint(),)),
        v.CandidateNode("e", ready=True),
    )
    out = plan(cr, nodes=nodes)
    (start,) = out.start
    assert (start.package, start.node, start.attempt) == ("tuning", "d-cordoned", 1)
    assert start.key == key_of(cr)
    assert start.deadline == T0 + timedelta(minutes=10)
    assert out.gated == {"tuning"} and not out.open
    assert out.pending == ("tuning 1.0.0: validating on node d-cordoned",)
    assert out.requeue_at == T0 + v.DEFAULT_PULL_DEADLINE  # the pull deadline comes first
    assert not out.failures


def test_a_taint_the_cr_tolerates_does_not_keep_the_pod_off_a_node() -> None:
    cr = make_cr(
        {"tuning": {"version": "1.0.0"}},
        additionalTolerations=[{"key": "gpu", "operator": "Exists"}],
    )
    tainted = v.CandidateNode("n1", ready=True, taints=(Taint("gpu", TaintEffect.NO_SCHEDULE),))
    assert v.pick_node(cr, [tainted]) == "n1"


def test_without_a_ready_node_validation_waits_and_says_so() -> None:
    out = plan(cr_with(), nodes=(v.CandidateNode("n1", ready=False),))
    assert out.start == () and out.gated == {"tuning"}
    assert out.pending == ("tuning 1.0.0: waits for a Ready node to validate on",)


def test_nothing_to_roll_out_means_nothing_to_validate() -> None:
    out = plan(cr_with(), work_pending=False)
    assert out.start == () and out.pending == () and out.failures == ()


def test_a_disabled_cr_starts_no_validation_pod() -> None:
    out = plan(cr_with(), may_start=False)
    assert out.start == () and out.gated == {"tuning"}


def test_a_passed_spec_opens_the_gate_and_needs_no_pod_again() -> None:
    cr = cr_with()
    out = plan(cr, records={"tuning": passed_record(cr)})
    assert out.open and out.start == () and out.records["tuning"] == passed_record(cr)


def test_a_changed_spec_is_validated_again_and_the_old_specs_pod_goes() -> None:
    old, new = cr_with(), cr_with(vars={"swappiness": 10})
    running = pod(old, name="old", phase=PodPhase.RUNNING)
    out = plan(new, records={"tuning": passed_record(old)}, pods=[running])
    assert out.delete == ("old",)
    assert [s.key for s in out.start] == [key_of(new)]
    assert not out.open


def test_the_pod_of_a_package_no_longer_in_the_spec_is_deleted() -> None:
    cr = cr_with()
    out = plan(cr, records={"tuning": passed_record(cr)}, pods=[pod(cr, package="gone")])
    assert out.delete == ("nwv-tuning-a1",)


def test_a_missing_secret_fails_at_once_without_a_pod() -> None:
    cr = cr_with(secretVars=[{"secretName": "creds", "key": "token"}])
    missing = {"tuning": ["[0] Secret nodewright-system/creds: key token"]}
    out = plan(cr, missing_secrets=missing)
    assert out.start == ()
    (failure,) = out.failures
    assert failure.reason == "SecretNotFound"
    assert "spec.packages.tuning.secretVars: [0] Secret nodewright-system/creds" in failure.message
    assert out.records["tuning"].retry_at == ""  # a new Secret is new data: a new spec


# ---- what a pod's outcome means ---------------------------------------------------------------


def test_a_passed_pod_records_the_pass_opens_the_gate_and_is_deleted() -> None:
    cr = cr_with()
    out = plan(cr, pods=[ended(cr, v.ValidationResult(passed=True))])
    record = out.records["tuning"]
    assert record.state is ValidationState.PASSED and record.key == key_of(cr)
    assert record.image == "registry.local:5000/tuning:1.0.0"
    assert out.open and out.delete == ("nwv-tuning-a1",)
    assert [e.reason for e in out.events] == ["SpecValidated"]


def test_an_argument_spec_violation_names_the_var_by_its_cr_path_and_is_final() -> None:
    cr = cr_with(vars={"swappiness": "high"})
    result = v.ValidationResult(
        reason="ArgumentSpecViolation",
        problems=["vars.swappiness: must be of type integer (rule: type)"],
    )
    out = plan(cr, pods=[ended(cr, result, phase=PodPhase.FAILED)])
    (failure,) = out.failures
    assert failure.reason == "ArgumentSpecViolation"
    assert failure.message == (
        "spec.packages.tuning.vars.swappiness: must be of type integer (rule: type)"
    )
    assert failure.retry_at == ""
    assert out.gated == {"tuning"} and out.delete == ("nwv-tuning-a1",)
    assert [(e.reason, e.type.value) for e in out.events] == [("ArgumentSpecViolation", "Warning")]
    # Recorded: later passes (and a restarted controller) start no pod for this spec again.
    again = plan(cr, records=out.records, now=T0 + timedelta(hours=5))
    assert again.start == () and again.failures == out.failures and again.events == ()


def test_a_broken_package_names_the_image_and_what_it_lacks() -> None:
    cr = cr_with()
    result = v.ValidationResult(
        reason="BrokenPackage", problems=["stages.apply: tasks/main.yml not found in /p"]
    )
    (failure,) = plan(cr, pods=[ended(cr, result)]).failures
    assert failure.reason == "BrokenPackage"
    assert failure.message == (
        "spec.packages.tuning.image: registry.local:5000/tuning:1.0.0: "
        "stages.apply: tasks/main.yml not found in /p"
    )


def test_an_image_still_not_pulled_at_the_pull_deadline_is_image_not_found_and_retried() -> None:
    cr = cr_with()
    pulling = pod(cr, waiting_reason="ImagePullBackOff", waiting_message="manifest unknown")
    early = plan(
        cr, pods=[pulling], now=T0 + timedelta(seconds=30), pull_deadline=timedelta(minutes=1)
    )
    assert early.failures == () and early.requeue_at == T0 + timedelta(minutes=1)
    late = plan(
        cr, pods=[pulling], now=T0 + timedelta(minutes=1), pull_deadline=timedelta(minutes=1)
    )
    (failure,) = late.failures
    assert failure.reason == "ImageNotFound"
    assert failure.message == (
        "spec.packages.tuning.image: registry.local:5000/tuning:1.0.0 cannot be pulled on node "
        "n1 (ImagePullBackOff: manifest unknown)"
    )
    retry_at = T0 + timedelta(minutes=1, seconds=30)
    assert failure.retry_at == "2026-01-01T12:01:30Z" and late.requeue_at == retry_at
    assert late.delete == (pulling.name,)
    # Before the retry: still failed, no pod. At the retry: attempt 2 on a new pod.
    waiting = plan(cr, records=late.records, now=retry_at - timedelta(seconds=1))
    assert waiting.start == () and waiting.failures == late.failures
    retry = plan(cr, records=late.records, now=retry_at)
    assert [s.attempt for s in retry.start] == [2] and retry.failures == late.failures


def test_the_pull_deadline_is_at_most_the_stage_timeout() -> None:
    cr = cr_with(timeouts={"stage": "6s"})
    pulling = pod(cr, waiting_reason="ErrImagePull")
    (failure,) = plan(cr, pods=[pulling], now=T0 + timedelta(seconds=6)).failures
    assert failure.reason == "ImageNotFound"


def test_an_invalid_image_name_fails_at_once_and_is_not_retried() -> None:
    cr = cr_with()
    (failure,) = plan(cr, pods=[pod(cr, waiting_reason="InvalidImageName")]).failures
    assert failure.reason == "ImageNotFound" and failure.retry_at == ""


def test_a_pod_that_outlives_the_stage_timeout_is_incomplete_and_retried() -> None:
    cr = cr_with(timeouts={"stage": "5m"})
    stuck = pod(cr, waiting_reason="ContainerCreating")
    assert plan(cr, pods=[stuck], now=T0 + timedelta(minutes=4)).failures == ()
    (failure,) = plan(cr, pods=[stuck], now=T0 + timedelta(minutes=5)).failures
    assert failure.reason == "ValidationIncomplete"
    assert "did not finish within 5m (ContainerCreating)" in failure.message
    assert failure.retry_at


def test_a_pod_that_ends_without_a_result_is_incomplete() -> None:
    cr = cr_with()
    gone = pod(cr, phase=PodPhase.FAILED, result=v.parse_result("Traceback ..."), ended="exit 1")
    (failure,) = plan(cr, pods=[gone]).failures
    assert failure.reason == "ValidationIncomplete"
    assert "ended without a result (exit 1: Traceback ...)" in failure.message


# ---- the result ------------------------------------------------------------------------------


def test_a_result_fits_the_termination_message_and_reads_back() -> None:
    many = [f"vars.v{i}: must be of type integer (rule: type) " + "x" * 400 for i in range(100)]
    result = v.ValidationResult(package="p", reason="ArgumentSpecViolation", problems=many)
    text = result.to_termination_message()
    assert len(text.encode()) <= v.MAX_TERMINATION_BYTES
    back = v.parse_result(text)
    assert back.problems and back.problems_omitted == 100 - len(back.problems)
    assert back.problems[0].startswith("vars.v0: must be of type integer")


@pytest.mark.parametrize("text", ["", "garbage", '{"v": 1}', json.dumps({"kind": "validation"})])
def test_anything_else_in_the_termination_message_is_unparseable(text: str) -> None:
    assert v.parse_result(text).unparseable


# ---- the gate --------------------------------------------------------------------------------


def test_a_closed_gate_shows_the_rollout_no_node_ready() -> None:
    views = [NodeView("n1"), NodeView("n2", ready=False)]
    assert [x.ready for x in v.hold_views(views)] == [False, False]


def mid_cycle() -> World:
    """A node of a reboot package, cordoned and drained, its apply pod just succeeded: the
    reboot is next."""
    cr = make_cr({"tuning": {"version": "1.0.0", "interrupt": {"type": "reboot"}}})
    world = World(cr)
    world.step()  # cordon
    world.step()  # the apply pod
    world.finish_pods()
    assert world.node.unschedulable and [p.phase for p in world.pods.values()] == [
        PodPhase.SUCCEEDED
    ]
    world.status = Status.IN_PROGRESS
    return world


def test_a_node_mid_cycle_waits_for_validation_before_its_next_pod() -> None:
    world = mid_cycle()
    world.cr = make_cr(
        {"tuning": {"version": "1.0.0", "interrupt": {"type": "reboot"}, "vars": {"x": 1}}}
    )
    world.allowed = False
    planned = world.plan()
    # The vars changed before the interrupt: config runs again first (then one interrupt).
    assert any(isinstance(a, CreatePackagePod) and "config" in a.stages for a in planned.actions)
    world.paused = True
    paused = world.plan()
    gated = frozenset({"tuning"})
    assert v.may_hold(planned) and v.holds(world.cr, gated, planned, paused)
    held = v.held_plan(planned, paused, gated)
    assert not any(isinstance(a, (CreateInterruptPod, CreatePackagePod)) for a in held.actions)
    assert held.status is Status.IN_PROGRESS == planned.status
    assert "validation of tuning" in held.reason
    assert not any(isinstance(a, SetNodeStatus) and a.status is Status.PAUSED for a in held.actions)
    assert not v.holds(world.cr, frozenset(), planned, paused)


def test_a_node_whose_plan_only_records_is_not_held() -> None:
    world = mid_cycle()
    world.allowed = False
    world.paused = True
    paused = world.plan()
    assert not v.holds(world.cr, frozenset({"other"}), paused, paused)


def _cordon_taint() -> Taint:
    return Taint("node.kubernetes.io/unschedulable", TaintEffect.NO_SCHEDULE)


def test_a_result_record_keeps_the_problems_short() -> None:
    cr = cr_with()
    result = v.ValidationResult(reason="ArgumentSpecViolation", problems=["vars.a: " + "y" * 5000])
    record = plan(cr, pods=[ended(cr, result)]).records["tuning"]
    assert len(record.message) <= v.MESSAGE_MAX
