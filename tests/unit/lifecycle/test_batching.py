"""Batch sizing, batch evaluation and reset resolution."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from lifecycle import batching
from lifecycle.batching import Pacing
from lifecycle.spec import DeploymentPolicy, NodeWright, Strategy, StrategyKind
from lifecycle.status import BatchState

FIXED = Pacing(kind=StrategyKind.FIXED, initial_batch=3)
LINEAR = Pacing(kind=StrategyKind.LINEAR, initial_batch=1, delta=2)
EXPO = Pacing(kind=StrategyKind.EXPONENTIAL, initial_batch=1, growth_factor=3)


def after(last: int, *, failed: bool = False, done: int = 0, bad: int = 0) -> BatchState:
    return BatchState(
        current_batch=2,
        last_batch_size=last,
        last_batch_failed=failed,
        completed_nodes=done,
        failed_nodes=bad,
    )


def test_the_first_batch_is_initial_batch_for_every_strategy() -> None:
    for pacing in (FIXED, LINEAR, EXPO):
        size = batching.next_batch_size(pacing, BatchState(), total=100, ceiling=100)
        assert size == pacing.initial_batch


def test_fixed_batches_stay_at_initial_batch() -> None:
    assert batching.next_batch_size(FIXED, after(3, failed=True), total=100, ceiling=100) == 3


def test_linear_grows_by_delta_and_shrinks_by_delta_after_an_early_failure() -> None:
    assert batching.next_batch_size(LINEAR, after(3, done=3), total=100, ceiling=100) == 5
    shrunk = batching.next_batch_size(
        LINEAR, after(3, failed=True, done=2, bad=1), total=100, ceiling=100
    )
    assert shrunk == 1
    assert (
        batching.next_batch_size(LINEAR, after(1, failed=True, bad=1), total=100, ceiling=100) == 1
    )


def test_exponential_multiplies_divides_and_never_exceeds_the_compartment() -> None:
    assert batching.next_batch_size(EXPO, after(4, done=4), total=100, ceiling=100) == 12
    assert (
        batching.next_batch_size(EXPO, after(4, failed=True, done=4), total=100, ceiling=100) == 1
    )
    assert batching.next_batch_size(EXPO, after(9, done=9), total=20, ceiling=100) == 20


def test_failures_after_the_safety_limit_do_not_shrink_the_batch() -> None:
    """Late failure: progress >= safetyLimit, so the strategy grows as if the batch succeeded."""
    state = after(4, failed=True, done=50, bad=1)
    assert batching.next_batch_size(EXPO, state, total=100, ceiling=100) == 12
    assert batching.next_batch_size(LINEAR, state, total=100, ceiling=100) == 6


def test_no_strategy_means_every_batch_is_the_ceiling() -> None:
    assert batching.next_batch_size(batching.NO_STRATEGY, BatchState(), total=9, ceiling=4) == 4


def test_the_ceiling_caps_every_strategy_our_difference_from_nodewright() -> None:
    assert batching.next_batch_size(EXPO, after(4, done=4), total=100, ceiling=5) == 5
    assert batching.next_batch_size(FIXED, BatchState(), total=100, ceiling=2) == 2


def test_batch_threshold_90_passes_one_failure_in_ten_but_not_one_in_three() -> None:
    pacing = Pacing(kind=StrategyKind.FIXED, initial_batch=10, batch_threshold=90)
    ten = batching.evaluate_batch(pacing, BatchState(), succeeded=9, failed=1, total=100)
    assert not ten.batch_failed
    three = batching.evaluate_batch(pacing, BatchState(), succeeded=2, failed=1, total=100)
    assert three.batch_failed
    assert three.state.last_batch_failed


def test_evaluation_moves_the_checkpoint_and_the_batch_number() -> None:
    result = batching.evaluate_batch(EXPO, BatchState(), succeeded=3, failed=1, total=10)
    assert result.state.current_batch == 2
    assert result.state.completed_nodes == 3
    assert result.state.failed_nodes == 1
    assert result.state.last_batch_size == 4
    assert result.state.consecutive_failures == 1


def test_failure_threshold_stops_below_the_safety_limit() -> None:
    pacing = Pacing(kind=StrategyKind.EXPONENTIAL, failure_threshold=2, safety_limit=50)
    first = batching.evaluate_batch(pacing, BatchState(), succeeded=0, failed=1, total=20)
    assert not first.stopped
    second = batching.evaluate_batch(pacing, first.state, succeeded=1, failed=1, total=20)
    assert second.stopped
    assert second.state.should_stop


def test_failures_at_or_past_the_safety_limit_never_stop() -> None:
    pacing = Pacing(kind=StrategyKind.FIXED, failure_threshold=1, safety_limit=50)
    state = BatchState(completed_nodes=9)
    result = batching.evaluate_batch(pacing, state, succeeded=0, failed=1, total=20)
    assert result.batch_failed
    assert not result.stopped


def test_a_successful_batch_clears_consecutive_failures() -> None:
    pacing = Pacing(kind=StrategyKind.LINEAR, failure_threshold=3)
    state = BatchState(consecutive_failures=2)
    assert (
        batching.evaluate_batch(
            pacing, state, succeeded=2, failed=0, total=50
        ).state.consecutive_failures
        == 0
    )


def test_without_failure_threshold_a_compartment_never_stops() -> None:
    state = BatchState()
    for _ in range(10):
        result = batching.evaluate_batch(EXPO, state, succeeded=0, failed=1, total=100)
        assert not result.stopped
        state = result.state
    assert state.consecutive_failures == 10


def test_strategy_less_compartments_only_count_batches() -> None:
    result = batching.evaluate_batch(
        batching.NO_STRATEGY, BatchState(), succeeded=0, failed=2, total=4
    )
    assert result.state.current_batch == 2
    assert result.state.consecutive_failures == 0
    assert not result.batch_failed


def _cr(options: dict[str, Any] | None, policy: str | None = "p") -> NodeWright:
    spec: dict[str, Any] = {}
    if policy:
        spec["deploymentPolicy"] = policy
    if options is not None:
        spec["deploymentPolicyOptions"] = options
    return NodeWright.model_validate({"metadata": {"name": "cr"}, "spec": spec})


def _policy(flag: bool) -> DeploymentPolicy:
    return DeploymentPolicy.model_validate(
        {
            "metadata": {"name": "p"},
            "spec": {
                "default": {"budget": {"count": 1}, "strategy": {"fixed": {}}},
                "resetBatchStateOnCompletion": flag,
            },
        }
    )


def test_reset_flag_prefers_the_cr_option_then_the_policy_then_false() -> None:
    assert (
        batching.resolve_reset_flag(_cr({"resetBatchStateOnCompletion": False}), _policy(True))
        is False
    )
    assert batching.resolve_reset_flag(_cr({}), _policy(True)) is True
    assert batching.resolve_reset_flag(_cr(None), _policy(False)) is False
    assert batching.resolve_reset_flag(_cr(None, policy=None), None) is False


def test_pacing_from_reads_the_one_strategy_that_is_set() -> None:
    strategy = Strategy.model_validate(
        {"linear": {"initialBatch": 2, "delta": 3, "failureThreshold": 4}}
    )
    pacing = batching.pacing_from(strategy)
    assert (pacing.kind, pacing.initial_batch, pacing.delta, pacing.failure_threshold) == (
        StrategyKind.LINEAR,
        2,
        3,
        4,
    )
    assert batching.pacing_from(None) is batching.NO_STRATEGY


pacings = st.builds(
    Pacing,
    kind=st.sampled_from([StrategyKind.FIXED, StrategyKind.LINEAR, StrategyKind.EXPONENTIAL, None]),
    initial_batch=st.integers(1, 20),
    delta=st.integers(1, 5),
    growth_factor=st.integers(2, 4),
    batch_threshold=st.integers(1, 100),
    failure_threshold=st.none() | st.integers(1, 4),
    safety_limit=st.integers(1, 100),
)


@given(
    pacing=pacings,
    last=st.integers(0, 60),
    failed=st.booleans(),
    processed=st.integers(0, 60),
    total=st.integers(1, 60),
    ceiling=st.integers(1, 60),
)
def test_batch_size_is_at_least_one_and_never_above_the_ceiling(  # noqa: PLR0917 (hypothesis)
    pacing: Pacing, last: int, failed: bool, processed: int, total: int, ceiling: int
) -> None:
    state = BatchState(last_batch_size=last, last_batch_failed=failed, completed_nodes=processed)
    size = batching.next_batch_size(pacing, state, total=total, ceiling=ceiling)
    assert 1 <= size <= ceiling


@given(
    pacing=pacings.filter(lambda p: p.kind in (StrategyKind.LINEAR, StrategyKind.EXPONENTIAL)),
    last=st.integers(1, 60),
    total=st.integers(1, 60),
    ceiling=st.integers(1, 60),
    data=st.data(),
)
def test_past_the_safety_limit_batches_never_shrink(
    pacing: Pacing, last: int, total: int, ceiling: int, data: st.DataObject
) -> None:
    least = -(-pacing.safety_limit * total // 100)  # processed nodes that reach safetyLimit
    processed = data.draw(st.integers(least, max(least, total)))
    state = BatchState(last_batch_size=last, last_batch_failed=True, completed_nodes=processed)
    size = batching.next_batch_size(pacing, state, total=total, ceiling=ceiling)
    assert size >= min(last, ceiling, total)


@given(
    pacing=pacings, outcomes=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=12)
)
def test_a_compartment_stops_only_by_failure_threshold_below_the_safety_limit(
    pacing: Pacing, outcomes: list[tuple[int, int]]
) -> None:
    total = 60
    state = BatchState()
    for succeeded, failed in outcomes:
        if succeeded + failed == 0:
            continue
        result = batching.evaluate_batch(
            pacing, state, succeeded=succeeded, failed=failed, total=total
        )
        if result.stopped:
            assert pacing.failure_threshold is not None
            assert result.state.consecutive_failures >= pacing.failure_threshold
            done = result.state.completed_nodes + result.state.failed_nodes
            assert batching.progress_percent(done, total) < pacing.safety_limit
        state = result.state


def test_batch_notes_tell_each_evaluated_batch_with_its_counts_and_nothing_else() -> None:
    before = {
        "a100": BatchState(current_batch=3, completed_nodes=3),
        "h100": BatchState(current_batch=2, completed_nodes=1),
        "idle": BatchState(current_batch=1),
    }
    after = {
        "a100": BatchState(current_batch=4, completed_nodes=6, failed_nodes=1),
        "h100": BatchState(
            current_batch=3, completed_nodes=1, failed_nodes=2, last_batch_failed=True
        ),
        "idle": BatchState(current_batch=1),
        "new": BatchState(current_batch=2, completed_nodes=1),  # no earlier state: not told
    }
    notes = batching.batch_notes(before, after)
    assert [(n.compartment, n.batch, n.succeeded, n.failed) for n in notes] == [
        ("a100", 3, 3, 1),
        ("h100", 2, 0, 2),
    ]
    assert notes[0].reason == "BatchComplete"
    assert notes[0].message == (
        "compartment a100: batch 3 done: 3 succeeded, 1 failed; 7 node(s) processed so far"
    )
    assert (notes[1].reason, "below batchThreshold" in notes[1].message) == ("BatchFailed", True)
    # A reset takes the batch number back: not an evaluation.
    assert batching.batch_notes(after, {"a100": BatchState(current_batch=1)}) == []
