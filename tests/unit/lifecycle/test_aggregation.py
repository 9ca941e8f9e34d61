"""CR status, conditions and bounded status fields from per-node statuses."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from stage_world import T0, make_cr

from lifecycle.aggregation import (
    AggregationInput,
    NodeStatusView,
    PdbBlock,
    aggregate,
    cr_status,
    invalid_status,
    pdb_blocks_of,
    ready_message,
    rollout_input,
)
from lifecycle.rollout import BlockedNode, CompartmentPlan, RolloutPlan
from lifecycle.stages import NodeFailure
from lifecycle.status import (
    RECENT_FAILURES_MAX,
    BatchState,
    CompartmentStatus,
    NodeWrightStatus,
    PackageValidation,
    Status,
    ValidationState,
)
from lifecycle.validating import SpecFailure

S = Status


def nodes(*statuses: Status) -> list[NodeStatusView]:
    return [NodeStatusView(f"n{i:02d}", s) for i, s in enumerate(statuses)]


def inp(*statuses: Status, **kw: object) -> AggregationInput:
    cr = make_cr({"dexter": {"version": "1.2.3"}, "baxter": {"version": "2.0.0"}})
    return AggregationInput(cr=cr, nodes=nodes(*statuses), now=T0, **kw)  # type: ignore[arg-type]


def cond(status: object, type_: str) -> object:
    return next(c for c in status.conditions if c.type == type_)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("statuses", "flags", "expected"),
    [
        ((S.COMPLETE, S.COMPLETE), {}, S.COMPLETE),
        ((), {}, S.COMPLETE),
        ((S.COMPLETE, S.IN_PROGRESS, S.WAITING), {}, S.IN_PROGRESS),
        ((S.ERRORING, S.WAITING, S.WAITING), {}, S.ERRORING),
        ((S.ERRORING, S.IN_PROGRESS), {}, S.ERRORING),
        ((S.BLOCKED, S.WAITING), {}, S.BLOCKED),
        ((S.WAITING, S.COMPLETE), {}, S.WAITING),
        ((S.COMPLETE, S.IN_PROGRESS), {"paused": True}, S.PAUSED),
        ((S.COMPLETE,), {"disabled": True, "paused": True}, S.DISABLED),
        ((S.COMPLETE,), {"policy_missing": True}, S.BLOCKED),
        ((S.COMPLETE,), {"invalid_spec": ["spec.x: bad"]}, S.BLOCKED),
        ((S.WAITING, S.BLOCKED), {"waiting_for": "earlier"}, S.WAITING),
        ((S.UNKNOWN,), {}, S.UNKNOWN),
    ],
)
def test_cr_status_picks_the_most_actionable_status(
    statuses: tuple[Status, ...], flags: dict[str, object], expected: Status
) -> None:
    assert cr_status(inp(*statuses, **flags)) is expected


def test_a_mix_of_erroring_and_waiting_is_erroring_not_unknown() -> None:
    assert cr_status(inp(S.ERRORING, *[S.WAITING] * 9)) is S.ERRORING


def test_ready_message_follows_nodewright_format_and_bucket_order() -> None:
    msg = ready_message(nodes(S.COMPLETE, S.ERRORING, S.IN_PROGRESS, S.WAITING))
    assert msg == "1/4 nodes complete (n00), 1 in progress (n02), 1 erroring (n01), 1 waiting (n03)"


def test_ready_message_truncates_a_bucket_of_more_than_ten_nodes() -> None:
    msg = ready_message(nodes(*[S.IN_PROGRESS] * 11, S.COMPLETE))
    assert msg == "1/12 nodes complete (n11), 11 in progress (list truncated; see controller logs)"


def test_ready_is_true_only_when_every_node_is_complete_with_the_status_reason() -> None:
    done = aggregate(inp(S.COMPLETE, S.COMPLETE))
    moving = aggregate(inp(S.COMPLETE, S.IN_PROGRESS))
    assert (cond(done, "Ready").status, cond(done, "Ready").reason) == ("True", "NodesConverged")
    assert (cond(moving, "Ready").status, cond(moving, "Ready").reason) == ("False", "Progressing")


def test_last_transition_time_moves_only_when_the_condition_status_flips() -> None:
    first = aggregate(inp(S.IN_PROGRESS))
    later = aggregate(
        replace(inp(S.IN_PROGRESS, S.WAITING), now=T0 + timedelta(minutes=5), previous=first)
    )
    flipped = aggregate(replace(inp(S.COMPLETE), now=T0 + timedelta(minutes=9), previous=later))
    assert cond(later, "Ready").last_transition_time == "2026-01-01T12:00:00Z"
    assert cond(later, "Ready").message != cond(first, "Ready").message
    assert cond(flipped, "Ready").last_transition_time == "2026-01-01T12:09:00Z"


def test_degraded_names_node_package_stage_task_and_message_of_the_latest_failure() -> None:
    failure = NodeFailure(
        "n00", "dexter", "1.2.3", "config-check", "Verify sysctl", "vm.swappiness is 60", T0, True
    )
    status = aggregate(inp(S.ERRORING, S.COMPLETE, failures=[failure]))
    degraded = cond(status, "Degraded")
    assert (degraded.status, degraded.reason) == ("True", "ValidationFailed")
    for part in ("n00", "dexter", "1.2.3", "config-check", "Verify sysctl", "vm.swappiness is 60"):
        assert part in degraded.message


def test_recent_failures_keep_the_newest_twenty_newest_last_with_truncated_messages() -> None:
    fails = [
        NodeFailure(
            f"n{i}", "dexter", "1.2.3", "apply", "", "x" * 1000, T0 + timedelta(seconds=i), False
        )
        for i in range(25)
    ]
    status = aggregate(inp(S.ERRORING, failures=fails))
    assert len(status.recent_failures) == RECENT_FAILURES_MAX
    assert status.recent_failures[-1].node == "n24" and status.recent_failures[0].node == "n5"
    assert all(len(f.message) <= 256 for f in status.recent_failures)
    again = aggregate(inp(S.ERRORING, failures=fails[:1], previous=status))
    assert (
        len(again.recent_failures) == RECENT_FAILURES_MAX and again.recent_failures[-1].node == "n0"
    )


def test_counters_package_list_and_policy_are_filled() -> None:
    status = aggregate(inp(S.COMPLETE, S.IN_PROGRESS, S.ERRORING, S.WAITING))
    assert status.complete_nodes == "1/4"
    assert status.nodes_in_progress == 2
    assert status.package_list == "baxter:2.0.0,dexter:1.2.3"
    assert status.observed_generation == 1


def test_stalled_names_the_compartment_stopped_by_failure_threshold() -> None:
    comps = {
        "gpu": CompartmentStatus(batch_state=BatchState(should_stop=True)),
        "cpu": CompartmentStatus(),
    }
    stalled = cond(aggregate(inp(S.ERRORING, compartments=comps)), "Stalled")
    assert (stalled.status, stalled.reason) == ("True", "FailureThresholdReached")
    assert "gpu" in stalled.message and "cpu" not in stalled.message


def test_pdb_blocked_names_the_pod_disruption_budget() -> None:
    block = PdbBlock("training", "trainer-pdb", ("n00",))
    c = cond(aggregate(inp(S.IN_PROGRESS, pdb_blocks=[block])), "PDBBlocked")
    assert c.status == "True" and "training/trainer-pdb" in c.message and "n00" in c.message


def test_taint_and_ignore_conditions_use_names_then_counts() -> None:
    few = aggregate(inp(S.BLOCKED, untolerable_nodes=["b", "a"], ignored_nodes=["c"]))
    assert (
        cond(few, "TaintNotTolerable").message
        == "Node [a, b] has taints that are not tolerable. Skipping."
    )
    assert cond(few, "NodesIgnored").status == "True"
    many = aggregate(inp(S.BLOCKED, untolerable_nodes=[f"x{i}" for i in range(11)]))
    assert cond(many, "TaintNotTolerable").message.startswith("11 nodes")
    none = aggregate(inp(S.COMPLETE))
    assert cond(none, "TaintNotTolerable").message == "All nodes have tolerable taints."


def test_invalid_spec_and_policy_not_found_conditions() -> None:
    status = aggregate(
        inp(S.WAITING, invalid_spec=[f"p{i}: bad" for i in range(7)], policy_missing=True)
    )
    assert cond(status, "InvalidSpec").message.endswith("and 2 more")
    assert cond(status, "PolicyNotFound").status == "True"


def test_status_size_does_not_grow_with_the_fleet() -> None:
    small = aggregate(inp(*[S.IN_PROGRESS] * 20, *[S.COMPLETE] * 20))
    large = aggregate(inp(*[S.IN_PROGRESS] * 5000, *[S.COMPLETE] * 5000))
    assert abs(len(large.model_dump_json()) - len(small.model_dump_json())) < 50


def test_invalid_spec_status_keeps_the_transition_time_while_unchanged() -> None:
    first = invalid_status(NodeWrightStatus(), 1, ["spec.x: bad"], T0)
    later = invalid_status(first, 1, ["spec.x: bad"], T0.replace(hour=5))
    assert first.conditions == later.conditions
    invalid = next(c for c in later.conditions if c.type == "InvalidSpec")
    assert invalid.status == "True" and "spec.x: bad" in invalid.message


def test_an_invalid_spec_blocks_the_cr_and_keeps_its_counters_and_other_conditions() -> None:
    before = aggregate(inp(S.COMPLETE, S.IN_PROGRESS))
    status = invalid_status(before, 2, ["spec.packages.a.version: bad"], T0)
    assert status.status is S.BLOCKED and status.observed_generation == 2
    assert status.complete_nodes == "1/2"
    assert cond(status, "Ready").status == "False"
    assert cond(status, "Progressing") == cond(before, "Progressing")


def test_node_state_malformed_names_the_node_and_is_absent_once_fixed() -> None:
    broken = aggregate(inp(S.COMPLETE, S.UNKNOWN, malformed={"n01": "Expecting value"}))
    c = cond(broken, "NodeStateMalformed")
    assert (c.status, c.reason) == ("True", "ParseError")  # type: ignore[attr-defined]
    assert "n01" in c.message and "Expecting value" in c.message  # type: ignore[attr-defined]
    fixed = aggregate(inp(S.COMPLETE, S.COMPLETE, previous=broken))
    assert all(c.type != "NodeStateMalformed" for c in fixed.conditions)


def test_degraded_lists_the_erroring_nodes_and_says_stage_failed_for_an_apply() -> None:
    failure = NodeFailure("n01", "dexter", "1.2.3", "apply", "", "exit 2", T0, True)
    degraded = cond(aggregate(inp(S.COMPLETE, S.ERRORING, failures=[failure])), "Degraded")
    assert degraded.reason == "StageFailed"  # type: ignore[attr-defined]
    assert degraded.message == (  # type: ignore[attr-defined]
        "1 node(s) erroring (n01); latest: node n01, package dexter 1.2.3, stage apply: exit 2"
    )


def test_stalled_uses_the_planners_reason_when_it_has_one() -> None:
    reasons = {"gpu": "compartment gpu stopped after 2 consecutive failed batch(es)"}
    stalled = cond(aggregate(inp(S.ERRORING, stop_reasons=reasons)), "Stalled")
    assert stalled.message == reasons["gpu"]  # type: ignore[attr-defined]


def test_pdb_blocked_groups_budgets_by_name_and_reports_drains_blocked_by_pods() -> None:
    blocks = pdb_blocks_of({"n01": ["ml/train", "ml/train"], "n00": ["ml/train", "db/pg"]})
    assert blocks == (PdbBlock("db", "pg", ("n00",)), PdbBlock("ml", "train", ("n00", "n01")))
    pods = {"n02": ["pod ns/p has no controller and would be lost by eviction"]}
    c = cond(aggregate(inp(S.IN_PROGRESS, drain_blockers=pods)), "PDBBlocked")
    assert (c.status, c.reason) == ("True", "DrainBlocked")  # type: ignore[attr-defined]
    assert "node n02: pod ns/p has no controller" in c.message  # type: ignore[attr-defined]


def test_rollout_input_carries_the_plan_into_status_fields_and_conditions() -> None:
    comp = CompartmentStatus(matched=3, ceiling=1, completed=1)
    plan = RolloutPlan(
        compartments={
            "__default__": CompartmentPlan("__default__", comp, 1, (), (), False, (), None)
        },
        assignment={},
        allowed=(),
        records={},
        released=(),
        orders={},
        blocked=(BlockedNode("n02", "__default__", ()),),
        ignored=("n03",),
        waiting=(),
        stopped={},
        next_node_order=7,
    )
    statuses = {"n00": S.COMPLETE, "n01": S.IN_PROGRESS, "n02": S.BLOCKED, "n03": S.WAITING}
    got = rollout_input(
        make_cr({"dexter": {"version": "1.2.3"}}),
        plan,
        statuses,
        T0,
        pdb_blocked={"n01": ["ml/train"]},
        waiting_on=["earlier"],
    )
    status = aggregate(got)
    assert status.compartments == {"__default__": comp}
    assert status.node_order_offset == 7 and status.complete_nodes == "1/4"
    assert cond(status, "TaintNotTolerable").status == "True"
    assert "n03" in cond(status, "NodesIgnored").message  # type: ignore[attr-defined]
    assert "ml/train" in cond(status, "PDBBlocked").message  # type: ignore[attr-defined]
    assert got.waiting_for == "earlier"


# ---- check before cordon: validation failures and validation in progress ---------------------

ARGSPEC = SpecFailure(
    "dexter", "ArgumentSpecViolation", "spec.packages.dexter.vars.swappiness: must be integer"
)


def test_a_failed_validation_sets_invalid_spec_with_its_reason_and_blocks_the_cr() -> None:
    status = aggregate(inp(S.WAITING, S.WAITING, spec_failures=[ARGSPEC]))
    invalid = cond(status, "InvalidSpec")
    assert (invalid.status, invalid.reason) == ("True", "ArgumentSpecViolation")
    assert invalid.message.startswith("spec.packages.dexter.vars.swappiness: must be integer")
    assert status.status is S.BLOCKED
    ready = cond(status, "Ready")
    assert ready.status == "False" and ready.reason == "Blocked"


def test_a_retried_failure_says_when_it_is_validated_again() -> None:
    pull = SpecFailure(
        "dexter", "ImageNotFound", "image x cannot be pulled", "2026-01-01T12:01:30Z"
    )
    invalid = cond(aggregate(inp(S.WAITING, spec_failures=[pull])), "InvalidSpec")
    assert invalid.reason == "ImageNotFound"
    assert "(validated again at 2026-01-01T12:01:30Z)" in invalid.message


def test_the_crs_own_problems_come_before_validation_failures() -> None:
    status = aggregate(inp(S.WAITING, invalid_spec=["spec.x: bad"], spec_failures=[ARGSPEC]))
    invalid = cond(status, "InvalidSpec")
    assert (invalid.reason, invalid.message) == ("ValidationFailed", "spec.x: bad")


def test_while_validation_runs_invalid_spec_is_unknown_and_says_what_runs() -> None:
    status = aggregate(inp(S.WAITING, validating=["dexter 1.2.3: validating on node n1"]))
    invalid = cond(status, "InvalidSpec")
    assert (invalid.status, invalid.reason) == ("Unknown", "Validating")
    assert "dexter 1.2.3: validating on node n1" in invalid.message
    assert status.status is S.WAITING


def test_validation_records_are_written_and_kept_when_a_pass_has_none() -> None:
    record = PackageValidation(key="k", state=ValidationState.PASSED)
    first = aggregate(inp(S.COMPLETE, validations={"dexter": record}))
    assert first.validations == {"dexter": record}
    assert aggregate(inp(S.COMPLETE, previous=first)).validations == {"dexter": record}
    assert aggregate(inp(S.COMPLETE, previous=first, validations={})).validations == {}
