"""The rollout planner: batches, membership, picking order, failures, restarts.

NodeWright's worked batching examples are here (legacy budgets, linear, exponential, failures,
batchThreshold, late failures), driven through ``lifecycle.simulation`` (which calls
``plan_rollout`` step by step), plus hypothesis properties over random policies and fleets.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle.compartments import DEFAULT_COMPARTMENT
from lifecycle.nodestate import (
    DISABLE_ANNOTATION,
    IGNORE_LABEL,
    PAUSE_ANNOTATION,
    RUNTIME_REQUIRED_TAINT_KEY,
    BatchRecord,
)
from lifecycle.rollout import NodeView, RolloutPlan, plan_rollout
from lifecycle.selectors import Taint, TaintEffect
from lifecycle.simulation import Simulation, simulate
from lifecycle.spec import DeploymentPolicy, NodeWright
from lifecycle.status import BatchState, Status

T0 = datetime(2025, 1, 1, tzinfo=UTC)
PKG = {"tuning": {"version": "1.0.0", "image": "registry.example.com/tuning"}}


def make_cr(annotations: dict[str, str] | None = None, **spec: Any) -> NodeWright:
    return NodeWright.model_validate(
        {
            "metadata": {"name": "cr", "annotations": annotations or {}},
            "spec": {"packages": PKG, **spec},
        }
    )


def make_policy(
    default: dict[str, Any],
    comps: list[dict[str, Any]] | None = None,
    *,
    reset: bool = True,
) -> DeploymentPolicy:
    return DeploymentPolicy.model_validate(
        {
            "metadata": {"name": "p"},
            "spec": {
                "default": default,
                "compartments": comps or [],
                "resetBatchStateOnCompletion": reset,
            },
        }
    )


def strategy(kind: str, **params: Any) -> dict[str, Any]:
    return {kind: params}


def fleet(count: int, prefix: str = "n", **labels: str) -> list[NodeView]:
    return [NodeView(name=f"{prefix}{i:02d}", labels=dict(labels)) for i in range(count)]


def sizes(sim: Simulation, compartment: str | None = None) -> list[int]:
    return [len(b.nodes) for b in sim.batches if compartment in (None, b.compartment)]


def with_policy(default: dict[str, Any], **kw: Any) -> tuple[NodeWright, DeploymentPolicy]:
    return make_cr(deploymentPolicy="p"), make_policy(default, **kw)


# ------------------------------------------------------------------------------------------------
# Worked examples (NodeWright's, with our differences)
# ------------------------------------------------------------------------------------------------


def test_legacy_count_3_on_10_nodes_runs_3_3_3_1() -> None:
    sim = simulate(make_cr(interruptionBudget={"count": 3}), None, fleet(10), start=T0)
    assert sizes(sim) == [3, 3, 3, 1]
    assert not sim.unfinished


def test_legacy_percent_25_on_10_nodes_runs_five_batches_of_2() -> None:
    sim = simulate(make_cr(interruptionBudget={"percent": 25}), None, fleet(10), start=T0)
    assert sizes(sim) == [2, 2, 2, 2, 2]


def test_no_budget_and_no_policy_runs_all_nodes_in_one_batch() -> None:
    assert sizes(simulate(make_cr(), None, fleet(10), start=T0)) == [10]


def test_legacy_zero_budgets_run_batches_of_one() -> None:
    for budget in ({"count": 0}, {"percent": 0}):
        sim = simulate(make_cr(interruptionBudget=budget), None, fleet(4), start=T0)
        assert sizes(sim) == [1, 1, 1, 1]


def test_linear_on_8_nodes_runs_1_2_3_then_the_2_left() -> None:
    cr, policy = with_policy(
        {"budget": {"count": 4}, "strategy": strategy("linear", initialBatch=1, delta=1)}
    )
    assert sizes(simulate(cr, policy, fleet(8), start=T0)) == [1, 2, 3, 2]


def test_exponential_on_15_nodes_runs_1_2_4_8() -> None:
    cr, policy = with_policy(
        {"budget": {"percent": 100}, "strategy": strategy("exponential", growthFactor=2)}
    )
    assert sizes(simulate(cr, policy, fleet(15), start=T0)) == [1, 2, 4, 8]


def test_multi_compartment_test_runs_2_2_and_the_33_percent_standard_one_at_a_time() -> None:
    """e2e ``multi-compartment``: ``standard`` has ceiling 1 (6 x 33%); our ceiling caps its
    exponential strategy to batches of 1 (NodeWright would grow 1, 2, 3)."""
    cr = make_cr(deploymentPolicy="p")
    policy = make_policy(
        {"budget": {"percent": 100}, "strategy": strategy("fixed")},
        [
            {
                "name": "test",
                "selector": {"matchLabels": {"env": "test"}},
                "budget": {"count": 2},
                "strategy": strategy("fixed", initialBatch=2),
            },
            {
                "name": "standard",
                "selector": {"matchLabels": {"env": "standard"}},
                "budget": {"percent": 33},
                "strategy": strategy("exponential", initialBatch=1),
            },
        ],
    )
    nodes = fleet(4, "t", env="test") + fleet(6, "s", env="standard")
    sim = simulate(cr, policy, nodes, start=T0)
    assert sim.compartments["standard"].ceiling == 1
    assert sizes(sim, "test") == [2, 2]
    assert sizes(sim, "standard") == [1] * 6
    assert sim.max_in_progress["standard"] == 1


FAILURE_STRATEGY = {"growthFactor": 2, "batchThreshold": 100, "safetyLimit": 50}


def test_failure_example_moves_on_with_a_halved_batch_instead_of_waiting() -> None:
    """NodeWright's failure example, adapted to our non-sticky rule.

    Exponential on 20 nodes, failureThreshold 2: batches 1 and 2 succeed, batch 3 (4 nodes) has
    one failure -> 75% < 100 -> failed; progress 7/20 = 35% < 50 -> consecutiveFailures 1, no
    stop. NodeWright keeps the failed node sticky and starts nothing until it recovers. Here the
    failure ends the node's slot, so the next batch starts at once with max(1, 4/2) = 2 nodes,
    then grows again (4, then the 7 left). The failed node is not picked again.
    """
    cr, policy = with_policy(
        {
            "budget": {"count": 20},
            "strategy": strategy("exponential", failureThreshold=2, **FAILURE_STRATEGY),
        }
    )
    sim = simulate(cr, policy, fleet(20), start=T0, fail={"n05"})
    assert sizes(sim) == [1, 2, 4, 2, 4, 7]
    assert "n05" in sim.batches[2].nodes
    assert sim.failed == ("n05",)
    assert sim.unfinished == ("n05",)
    assert not sim.stopped
    assert sum(b.nodes.count("n05") for b in sim.batches) == 1


def test_failure_example_with_failure_threshold_1_stops_the_compartment() -> None:
    cr, policy = with_policy(
        {
            "budget": {"count": 20},
            "strategy": strategy("exponential", failureThreshold=1, **FAILURE_STRATEGY),
        }
    )
    sim = simulate(cr, policy, fleet(20), start=T0, fail={"n05"})
    assert sizes(sim) == [1, 2, 4]
    reason = sim.stopped[DEFAULT_COMPARTMENT]
    assert "6 succeeded, 1 failed of 20" in reason
    assert "failureThreshold 1" in reason
    assert sim.final is not None
    assert sim.final.batch_states[DEFAULT_COMPARTMENT].should_stop


def test_batch_threshold_90_lets_one_failure_in_ten_pass() -> None:
    cr, policy = with_policy(
        {
            "budget": {"count": 10},
            "strategy": strategy("fixed", initialBatch=10, batchThreshold=90, failureThreshold=1),
        }
    )
    sim = simulate(cr, policy, fleet(20), start=T0, fail={"n03"})
    assert sizes(sim) == [10, 10]
    assert not sim.stopped


def test_batch_threshold_90_fails_two_of_three_and_stops_at_threshold_1() -> None:
    cr, policy = with_policy(
        {
            "budget": {"count": 3},
            "strategy": strategy("fixed", initialBatch=3, batchThreshold=90, failureThreshold=1),
        }
    )
    sim = simulate(cr, policy, fleet(20), start=T0, fail={"n01"})
    assert sizes(sim) == [3]
    assert DEFAULT_COMPARTMENT in sim.stopped


def test_a_late_failure_past_the_safety_limit_neither_stops_nor_shrinks() -> None:
    cr, policy = with_policy(
        {
            "budget": {"count": 100},
            "strategy": strategy(
                "linear", initialBatch=2, delta=2, failureThreshold=1, safetyLimit=50
            ),
        }
    )
    sim = simulate(cr, policy, fleet(30), start=T0, fail={"n13"})  # batch 4, 12 of 30 done
    assert sizes(sim) == [2, 4, 6, 8, 10]
    assert not sim.stopped


# ------------------------------------------------------------------------------------------------
# One planning call at a time
# ------------------------------------------------------------------------------------------------


def plan(
    cr: NodeWright,
    policy: DeploymentPolicy | None,
    nodes: list[NodeView],
    states: dict[str, BatchState] | None = None,
    **kw: Any,
) -> RolloutPlan:
    return plan_rollout(cr, policy, nodes, states or {}, T0, **kw)


def apply(nodes: list[NodeView], result: RolloutPlan) -> list[NodeView]:
    out = []
    for node in nodes:
        updated = node
        if node.name in result.released:
            updated = replace(updated, record=None)
        if node.name in result.records:
            updated = replace(updated, record=result.records[node.name])
        out.append(updated)
    return out


def finish(nodes: list[NodeView], names: set[str], *, fail: bool = False) -> list[NodeView]:
    return [
        (
            replace(n, status=Status.ERRORING)
            if fail
            else replace(n, status=Status.COMPLETE, has_pending_work=False)
        )
        if n.name in names
        else n
        for n in nodes
    ]


LEGACY_2 = make_cr(interruptionBudget={"count": 2})


def test_batch_membership_is_stable_across_calls_and_restarts() -> None:
    nodes = fleet(6)
    first = plan(LEGACY_2, None, nodes)
    assert first.allowed == ("n00", "n01")
    nodes = apply(nodes, first)
    states = first.batch_states
    again = plan(LEGACY_2, None, nodes, states)
    assert again.allowed == ("n00", "n01")
    assert again.records == {}


def test_picks_ahead_until_the_last_batch_has_taken_every_node() -> None:
    """What paces bookkeeping writes: only while some node still waits for a batch."""
    nodes = fleet(3)
    first = plan(LEGACY_2, None, nodes)
    assert first.allowed == ("n00", "n01") and first.picks_ahead  # n02 waits for batch 2
    nodes = finish(apply(nodes, first), {"n00", "n01"})
    last = plan(LEGACY_2, None, nodes, first.batch_states)
    assert last.allowed == ("n02",) and not last.picks_ahead  # the last batch runs
    done = plan(LEGACY_2, None, finish(apply(nodes, last), {"n02"}), last.batch_states)
    assert done.complete and not done.picks_ahead


def test_a_lost_batch_state_restarts_pacing_with_the_nodes_in_flight_first() -> None:
    """Records only count with the batch state that picked them; with the state gone (a wiped
    status) the next batch is picked afresh and nodes with work in flight go first."""
    nodes = fleet(6)
    first = plan(LEGACY_2, None, nodes)
    nodes = [
        replace(n, status=Status.IN_PROGRESS) if n.name in first.allowed else n
        for n in apply(nodes, first)
    ]
    again = plan(LEGACY_2, None, nodes, {})
    assert again.allowed == ("n00", "n01")
    assert set(again.records) == {"n00", "n01"}
    assert again.orders == first.orders  # NW_NODE_ORDER survives


def test_records_of_an_earlier_rollout_are_history_not_members() -> None:
    """After resetBatchStateOnCompletion numbers start over; old batch-1 records must not pass
    for the new batch 1 (its size comes from the strategy, not from the old membership)."""
    cr = make_cr(interruptionBudget={"count": 1})
    nodes = fleet(3)
    states: dict[str, BatchState] = {}
    for _ in range(3):
        result = plan(cr, None, nodes, states)
        nodes = finish(apply(nodes, result), set(result.allowed))
        states = result.batch_states
    assert all(n.record is not None for n in nodes)  # kept as history, no release write
    reopened = [replace(n, status=Status.WAITING, has_pending_work=True) for n in nodes]
    fresh = plan(cr, None, reopened, {})
    assert len(fresh.allowed) == 1
    assert fresh.compartments[DEFAULT_COMPARTMENT].started


def started(count: int, cr: NodeWright = LEGACY_2) -> tuple[list[NodeView], dict[str, BatchState]]:
    """A fleet whose first batch was just picked, with the batch state that picked it."""
    first = plan(cr, None, fleet(count))
    return apply(fleet(count), first), first.batch_states


def test_nobody_else_starts_while_a_member_still_works() -> None:
    nodes, states = started(6)
    nodes = finish(nodes, {"n00"})
    result = plan(LEGACY_2, None, nodes, states)
    assert result.allowed == ("n01",)
    assert result.records == {}


def test_a_finished_batch_is_evaluated_and_the_next_one_starts_in_the_same_call() -> None:
    nodes, states = started(6)
    nodes = finish(nodes, {"n00", "n01"})
    result = plan(LEGACY_2, None, nodes, states)
    assert result.allowed == ("n02", "n03")
    cplan = result.compartments[DEFAULT_COMPARTMENT]
    assert cplan.started
    assert [o.batch for o in cplan.evaluated] == [1]
    assert result.batch_states[DEFAULT_COMPARTMENT].current_batch == 2
    assert result.released == ()  # finished members keep their records: no extra Node write


def test_a_failed_node_ends_its_slot_and_is_not_picked_again() -> None:
    nodes, states = started(4)
    nodes = finish(finish(nodes, {"n00"}), {"n01"}, fail=True)
    result = plan(LEGACY_2, None, nodes, states)
    assert result.allowed == ("n02", "n03")
    outcome = result.compartments[DEFAULT_COMPARTMENT].evaluated[0]
    assert (outcome.succeeded, outcome.failed) == (("n00",), ("n01",))
    assert "n01" not in result.released  # keeps its record: failed in this rollout
    nodes = finish(apply(nodes, result), {"n02", "n03"})
    final = plan(LEGACY_2, None, nodes, result.batch_states)
    assert final.allowed == ()
    assert final.compartments[DEFAULT_COMPARTMENT].status.failed == 1


def test_a_retrying_node_keeps_its_slot() -> None:
    nodes, states = started(4)
    nodes = finish(nodes, {"n00"})
    nodes = [
        replace(n, status=Status.ERRORING, retrying=True) if n.name == "n01" else n for n in nodes
    ]
    assert plan(LEGACY_2, None, nodes, states).allowed == ("n01",)


def test_candidates_are_picked_by_status_then_age_then_name() -> None:
    old, new = T0 - timedelta(days=2), T0 - timedelta(days=1)
    nodes = [
        NodeView(name="err", status=Status.ERRORING, created=old),
        NodeView(name="blk", status=Status.BLOCKED, created=old),
        NodeView(name="unk", status=Status.UNKNOWN, created=old),
        NodeView(name="w-new", status=Status.WAITING, created=new),
        NodeView(name="w-b-old", status=Status.WAITING, created=old),
        NodeView(name="w-a-old", status=Status.WAITING, created=old),
    ]
    order = []
    cr = make_cr(interruptionBudget={"count": 1})
    states: dict[str, BatchState] = {}
    for _ in range(6):
        result = plan(cr, None, nodes, states)
        order.extend(result.allowed)
        nodes = finish(apply(nodes, result), set(result.allowed))
        states = result.batch_states
    assert order == ["w-a-old", "w-b-old", "w-new", "unk", "blk", "err"]


def test_pdb_protected_nodes_are_picked_only_when_nothing_else_fits() -> None:
    nodes = [NodeView(name="a", pdb_exhausted=True), NodeView(name="b"), NodeView(name="c")]
    cr = make_cr(interruptionBudget={"count": 2})
    assert plan(cr, None, nodes).allowed == ("b", "c")
    only = [NodeView(name="a", pdb_exhausted=True)]
    assert plan(cr, None, only).allowed == ("a",)


def test_ignored_and_untolerated_nodes_are_reported_and_take_no_slot() -> None:
    nodes = [
        NodeView(name="a", labels={IGNORE_LABEL: "true"}),
        NodeView(name="b", taints=(Taint("gpu", TaintEffect.NO_SCHEDULE, "broken"),)),
        NodeView(
            name="c", taints=(Taint("node.kubernetes.io/unschedulable", TaintEffect.NO_SCHEDULE),)
        ),
        NodeView(name="d", taints=(Taint("dedicated", TaintEffect.NO_EXECUTE, "ml"),)),
    ]
    cr = make_cr(
        interruptionBudget={"count": 2},
        additionalTolerations=[{"key": "dedicated", "operator": "Equal", "value": "ml"}],
    )
    result = plan(cr, None, nodes)
    assert result.allowed == ("c", "d")
    assert result.ignored == ("a",)
    assert [(b.node, b.reason) for b in result.blocked] == [
        ("b", "taints not tolerated: gpu=broken:NoSchedule")
    ]


def test_the_runtime_required_taint_is_tolerated_only_by_runtime_required_crs() -> None:
    taint = Taint(RUNTIME_REQUIRED_TAINT_KEY, TaintEffect.NO_SCHEDULE, "true")
    nodes = [NodeView(name="a", taints=(taint,))]
    assert plan(make_cr(), None, nodes).allowed == ()
    assert plan(make_cr(runtimeRequired=True), None, nodes).allowed == ("a",)


def test_node_order_is_assigned_at_first_pick_and_never_reused() -> None:
    nodes = fleet(4)
    first = plan(LEGACY_2, None, nodes, next_node_order=7)
    assert first.orders == {"n00": 7, "n01": 8}
    assert first.next_node_order == 9
    nodes = finish(apply(nodes, first), {"n00", "n01"})
    second = plan(LEGACY_2, None, nodes, first.batch_states, next_node_order=first.next_node_order)
    assert second.orders == {"n00": 7, "n01": 8, "n02": 9, "n03": 10}
    assert {n.record.order for n in apply(nodes, second) if n.record} == {7, 8, 9, 10}


def test_a_repicked_node_keeps_its_order() -> None:
    """A failed node whose work is re-opened (spec change) keeps NW_NODE_ORDER for the rollout."""
    nodes, states = started(3)
    nodes = finish(finish(nodes, {"n00"}), {"n01"}, fail=True)
    result = plan(LEGACY_2, None, nodes, states)
    nodes = finish(apply(nodes, result), {"n02"})
    nodes = [replace(n, status=Status.UNKNOWN) if n.name == "n01" else n for n in nodes]
    again = plan(LEGACY_2, None, nodes, result.batch_states)
    assert again.allowed == ("n01",)
    assert again.records["n01"].order == 1


def test_paused_and_disabled_crs_allow_no_work_and_start_no_batch() -> None:
    for key in (PAUSE_ANNOTATION, DISABLE_ANNOTATION):
        cr = make_cr({key: "true"}, interruptionBudget={"count": 2})
        nodes = apply(fleet(4), plan(LEGACY_2, None, fleet(4)))
        result = plan(cr, None, nodes)
        assert result.allowed == ()
        assert result.records == {}
        fresh = plan(cr, None, fleet(4))
        assert fresh.allowed == ()
        assert fresh.records == {}


def test_a_missing_policy_schedules_nothing() -> None:
    result = plan(make_cr(deploymentPolicy="p"), None, fleet(3))
    assert result.policy_missing
    assert result.allowed == ()
    assert result.compartments == {}


def test_nodes_outside_the_selector_are_ignored_and_lose_their_records() -> None:
    cr = make_cr(nodeSelectors={"matchLabels": {"pool": "gpu"}})
    record = BatchRecord(compartment=DEFAULT_COMPARTMENT, batch=1, order=0)
    nodes = [NodeView(name="gpu", labels={"pool": "gpu"}), NodeView(name="cpu", record=record)]
    result = plan(cr, None, nodes)
    assert result.assignment == {"gpu": DEFAULT_COMPARTMENT}
    assert result.allowed == ("gpu",)
    assert result.released == ("cpu",)


def test_nodes_waiting_for_earlier_crs_are_not_picked() -> None:
    nodes = [NodeView(name="a", ready=False), NodeView(name="b")]
    result = plan(make_cr(interruptionBudget={"count": 2}), None, nodes)
    assert result.allowed == ("b",)
    assert result.waiting == ("a",)


def test_completion_releases_every_record_and_resets_only_when_asked() -> None:
    default = {"budget": {"count": 2}, "strategy": strategy("linear", initialBatch=1)}
    for reset, expected_batch in ((True, 1), (False, 4)):
        cr, policy = with_policy(default, reset=reset)
        sim = simulate(cr, policy, fleet(5), start=T0)
        assert sim.final is not None
        assert sim.final.complete
        assert sim.final.reset is reset
        assert sim.final.batch_states[DEFAULT_COMPARTMENT].current_batch == expected_batch


def test_a_new_change_after_completion_is_paced_again_from_the_initial_batch() -> None:
    """Beyond 1: upgrades and config changes are batched like first installs."""
    cr, policy = with_policy(
        {"budget": {"count": 4}, "strategy": strategy("exponential", initialBatch=1)}
    )
    first = simulate(cr, policy, fleet(7), start=T0)
    assert first.final is not None
    reopened = fleet(7)  # every node has pending work again (say, a version bump)
    second = simulate(cr, policy, reopened, start=T0, batch_states=first.final.batch_states)
    assert sizes(second) == [1, 2, 4]


def test_stray_in_progress_nodes_are_absorbed_first_within_the_ceiling() -> None:
    nodes = [
        NodeView(name="a"),
        NodeView(name="b", status=Status.IN_PROGRESS),
        NodeView(name="c", status=Status.IN_PROGRESS),
    ]
    result = plan(make_cr(interruptionBudget={"count": 1}), None, nodes)
    assert result.allowed == ("b",)


def test_a_stopped_compartment_picks_nothing_and_says_why() -> None:
    cr, policy = with_policy(
        {"budget": {"count": 3}, "strategy": strategy("fixed", failureThreshold=1)}
    )
    state = BatchState(current_batch=2, should_stop=True, consecutive_failures=1, failed_nodes=1)
    result = plan(cr, policy, fleet(3), {DEFAULT_COMPARTMENT: state})
    assert result.allowed == ()
    assert "compartment __default__ stopped" in result.stopped[DEFAULT_COMPARTMENT]


def test_planning_is_deterministic_for_the_same_input() -> None:
    nodes = apply(fleet(6), plan(LEGACY_2, None, fleet(6)))
    assert plan(LEGACY_2, None, nodes) == plan(LEGACY_2, None, nodes)


# ------------------------------------------------------------------------------------------------
# Properties over random policies, fleets and failures
# ------------------------------------------------------------------------------------------------

GROUPS = ("a", "b", "c")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[NodeWright, DeploymentPolicy, list[NodeView], set[str]]:
    def strategy_dict() -> dict[str, Any]:
        kind = draw(st.sampled_from(["fixed", "linear", "exponential"]))
        params: dict[str, Any] = {
            "initialBatch": draw(st.integers(1, 6)),
            "batchThreshold": draw(st.integers(1, 100)),
            "safetyLimit": draw(st.integers(1, 100)),
        }
        if draw(st.booleans()):
            params["failureThreshold"] = draw(st.integers(1, 3))
        if kind == "linear":
            params["delta"] = draw(st.integers(1, 3))
        if kind == "exponential":
            params["growthFactor"] = draw(st.integers(2, 3))
        return {kind: params}

    def budget() -> dict[str, int]:
        if draw(st.booleans()):
            return {"count": draw(st.integers(1, 8))}
        return {"percent": draw(st.integers(1, 100))}

    comps = []
    for group in draw(st.lists(st.sampled_from(GROUPS), unique=True, max_size=3)):
        comp: dict[str, Any] = {
            "name": f"g-{group}",
            "selector": {"matchLabels": {"group": group}},
            "budget": budget(),
        }
        if draw(st.booleans()):
            comp["strategy"] = strategy_dict()
        comps.append(comp)
    policy = make_policy({"budget": budget(), "strategy": strategy_dict()}, comps)
    count = draw(st.integers(0, 25))
    nodes = [
        NodeView(name=f"n{i:02d}", labels={"group": draw(st.sampled_from((*GROUPS, "none")))})
        for i in range(count)
    ]
    fail = (
        set(draw(st.lists(st.sampled_from([n.name for n in nodes]), max_size=4)))
        if nodes
        else set()
    )
    return make_cr(deploymentPolicy="p"), policy, nodes, fail


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_batches_and_work_in_progress_never_exceed_the_ceiling(
    scenario: tuple[NodeWright, DeploymentPolicy, list[NodeView], set[str]],
) -> None:
    cr, policy, nodes, fail = scenario
    sim = simulate(cr, policy, nodes, start=T0, fail=fail)
    for batch in sim.batches:
        assert len(batch.nodes) <= max(1, sim.compartments[batch.compartment].ceiling)
    for name, peak in sim.max_in_progress.items():
        assert peak <= max(1, sim.compartments[name].ceiling)


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_every_node_completes_when_nothing_fails(
    scenario: tuple[NodeWright, DeploymentPolicy, list[NodeView], set[str]],
) -> None:
    cr, policy, nodes, _ = scenario
    sim = simulate(cr, policy, nodes, start=T0)
    assert sim.unfinished == ()
    assert not sim.stopped
    picked = [n for b in sim.batches for n in b.nodes]
    assert sorted(picked) == sorted(n.name for n in nodes)


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_compartments_stop_only_by_failure_threshold_below_the_safety_limit(
    scenario: tuple[NodeWright, DeploymentPolicy, list[NodeView], set[str]],
) -> None:
    cr, policy, nodes, fail = scenario
    sim = simulate(cr, policy, nodes, start=T0, fail=fail)
    assert sim.final is not None
    for name in sim.stopped:
        state = sim.final.batch_states[name]
        rules = {c.name: c for c in policy.spec.compartments}
        strat = rules[name].strategy if name in rules else policy.spec.default.strategy
        assert strat is not None
        params = strat.fixed or strat.linear or strat.exponential
        assert params is not None
        assert params.failure_threshold is not None
        assert state.consecutive_failures >= params.failure_threshold
        matched = sim.compartments[name].matched
        assert (state.completed_nodes + state.failed_nodes) * 100 // matched < params.safety_limit
    # Nodes that never ran are only ever in stopped compartments.
    never = set(sim.unfinished) - set(sim.failed)
    assert all(sim.final.assignment[n] in sim.stopped for n in never)


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_simulation_and_planning_are_deterministic(
    scenario: tuple[NodeWright, DeploymentPolicy, list[NodeView], set[str]],
) -> None:
    cr, policy, nodes, fail = scenario
    assert simulate(cr, policy, nodes, start=T0, fail=fail) == simulate(
        cr, policy, nodes, start=T0, fail=fail
    )
    assert plan_rollout(cr, policy, nodes, {}, T0) == plan_rollout(cr, policy, nodes, {}, T0)
