"""Batch sizing and batch evaluation for one compartment (NodeWright's formulas, except below).

Why a module of its own: these are the numbers an operator argues about ("why was batch 4 only two
nodes?"), so they live in small pure functions with the formulas spelled out, apart from the
bookkeeping that decides *which* nodes go into a batch (``lifecycle.rollout``).

Where we deliberately differ from NodeWright (the full list is in docs/architecture.md,
"Where we differ from NodeWright"):

- The budget ceiling caps every batch, whatever the strategy (NodeWright only documents it).
- A failed node ends its batch slot; the batch is evaluated as soon as every member is done or
  failed, so the next batch is not held hostage by one broken node (``lifecycle.rollout``).
- "remaining" is the number of nodes still eligible, not ``total - processed``; after a rollout
  without reset the next change therefore starts from the grown batch size instead of collapsing
  to batches of one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lifecycle.spec import (
    DeploymentPolicy,
    NodeWright,
    Strategy,
    StrategyKind,
    StrategyParams,
)
from lifecycle.status import BatchState

# Strategy defaults (NodeWright's): used when a strategy object leaves a parameter out.
DEFAULT_INITIAL_BATCH = 1
DEFAULT_BATCH_THRESHOLD = 100
DEFAULT_SAFETY_LIMIT = 50
DEFAULT_DELTA = 1
DEFAULT_GROWTH_FACTOR = 2


@dataclass(frozen=True, slots=True)
class Pacing:
    """A resolved strategy. ``kind`` None means "no strategy": every batch is the ceiling."""

    kind: StrategyKind | None
    initial_batch: int = DEFAULT_INITIAL_BATCH
    delta: int = DEFAULT_DELTA
    growth_factor: int = DEFAULT_GROWTH_FACTOR
    batch_threshold: int = DEFAULT_BATCH_THRESHOLD
    failure_threshold: int | None = None
    safety_limit: int = DEFAULT_SAFETY_LIMIT

    @property
    def label(self) -> str:
        """``fixed``, ``linear``, ``exponential`` or ``""`` (CompartmentStatus.strategy)."""
        return "" if self.kind is None else self.kind.value


NO_STRATEGY = Pacing(kind=None)


def pacing_from(strategy: Strategy | None) -> Pacing:
    """Resolve a DeploymentPolicy strategy object (exactly one kind set) to a Pacing."""
    if strategy is None:
        return NO_STRATEGY
    params: StrategyParams
    if strategy.fixed is not None:
        params, kind = strategy.fixed, StrategyKind.FIXED
    elif strategy.linear is not None:
        params, kind = strategy.linear, StrategyKind.LINEAR
    elif strategy.exponential is not None:
        params, kind = strategy.exponential, StrategyKind.EXPONENTIAL
    else:
        return NO_STRATEGY
    delta = strategy.linear.delta if strategy.linear is not None else DEFAULT_DELTA
    growth = (
        strategy.exponential.growth_factor
        if strategy.exponential is not None
        else DEFAULT_GROWTH_FACTOR
    )
    return Pacing(
        kind=kind,
        initial_batch=params.initial_batch,
        delta=delta,
        growth_factor=growth,
        batch_threshold=params.batch_threshold,
        failure_threshold=params.failure_threshold,
        safety_limit=params.safety_limit,
    )


def progress_percent(processed: int, total: int) -> int:
    """``floor(processed * 100 / total)``, 0 for an empty compartment, never above 100."""
    if total <= 0:
        return 0
    return min(100, processed * 100 // total)


def processed(state: BatchState) -> int:
    """Nodes already evaluated in some batch (the checkpoint)."""
    return state.completed_nodes + state.failed_nodes


def next_batch_size(pacing: Pacing, state: BatchState, *, total: int, ceiling: int) -> int:
    """Size of the next batch of a compartment (NodeWright's rule plus our ceiling cap).

    Args:
        pacing: the compartment's resolved strategy.
        state: the compartment's batch state after the last evaluation.
        total: nodes assigned to the compartment (exponential growth never exceeds it).
        ceiling: the budget ceiling; caps every batch, whatever the strategy.

    Returns:
        A size >= 1. Callers pick at most that many of the eligible nodes, so the NodeWright clamp
        "at most the remaining nodes" happens there.
    """
    first = state.last_batch_size <= 0
    last = state.last_batch_size
    shrink = state.last_batch_failed and (
        progress_percent(processed(state), total) < pacing.safety_limit
    )
    if pacing.kind is None:
        size = ceiling
    elif first or pacing.kind is StrategyKind.FIXED:
        size = pacing.initial_batch
    elif pacing.kind is StrategyKind.LINEAR:
        size = max(1, last - pacing.delta) if shrink else last + pacing.delta
    else:  # exponential
        size = max(1, last // pacing.growth_factor) if shrink else last * pacing.growth_factor
        size = min(size, max(1, total))
    size = max(1, size)
    return min(size, max(1, ceiling))


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The outcome of evaluating one finished batch."""

    state: BatchState
    batch_failed: bool
    stopped: bool  # this evaluation set shouldStop


def evaluate_batch(
    pacing: Pacing, state: BatchState, *, succeeded: int, failed: int, total: int
) -> Evaluation:
    """Evaluate a finished batch: every member is done or failed (NodeWright's evaluation).

    ``success% = floor(succeeded*100/size)``; the batch failed when that is below batchThreshold.
    A failed batch increments consecutiveFailures and, while progress (after counting this batch)
    is below safetyLimit, stops the compartment once consecutiveFailures reaches failureThreshold.
    A successful batch resets consecutiveFailures. Strategy-less compartments only count batches.
    """
    size = succeeded + failed
    checkpoint = state.model_copy(
        update={
            "completed_nodes": state.completed_nodes + succeeded,
            "failed_nodes": state.failed_nodes + failed,
            "current_batch": state.current_batch + 1,
            "picked": "",
            "last_batch_size": size,
        }
    )
    if pacing.kind is None or size == 0:
        return Evaluation(state=checkpoint, batch_failed=False, stopped=False)
    batch_failed = succeeded * 100 // size < pacing.batch_threshold
    consecutive = state.consecutive_failures + 1 if batch_failed else 0
    progress = progress_percent(processed(checkpoint), total)
    stop = (
        batch_failed
        and pacing.failure_threshold is not None
        and progress < pacing.safety_limit
        and consecutive >= pacing.failure_threshold
    )
    new_state = checkpoint.model_copy(
        update={
            "consecutive_failures": consecutive,
            "last_batch_failed": batch_failed,
            "should_stop": state.should_stop or stop,
        }
    )
    return Evaluation(state=new_state, batch_failed=batch_failed, stopped=stop)


def stop_reason(name: str, pacing: Pacing, state: BatchState, *, total: int) -> str:
    """One line for the ``Stalled`` condition: names the compartment and the counts."""
    return (
        f"compartment {name} stopped after {state.consecutive_failures} consecutive failed "
        f"batch(es) (failureThreshold {pacing.failure_threshold}, batchThreshold "
        f"{pacing.batch_threshold}%): {state.completed_nodes} succeeded, {state.failed_nodes} "
        f"failed of {total} nodes, progress {progress_percent(processed(state), total)}% < "
        f"safetyLimit {pacing.safety_limit}%"
    )


def resolve_reset_flag(cr: NodeWright, policy: DeploymentPolicy | None) -> bool:
    """resetBatchStateOnCompletion: the CR's option, else the policy's, else False."""
    options = cr.spec.deployment_policy_options
    if options is not None and options.reset_batch_state_on_completion is not None:
        return options.reset_batch_state_on_completion
    if policy is not None and cr.spec.deployment_policy:
        return policy.spec.reset_batch_state_on_completion
    return False


def fresh_state() -> BatchState:
    """The state of a compartment that has not run a batch yet (also the reset target)."""
    return BatchState()


RESET_ALL = "*"


@dataclass(frozen=True, slots=True)
class ResetTargets:
    """What a ``bridge.nodewright.io/reset-compartment`` value asks for, against the compartments.

    ``reset``: the stopped compartments it names (``*``: every stopped one); ``ignored``: name ->
    why nothing happens for it (no such compartment, not stopped).
    """

    reset: tuple[str, ...]
    ignored: Mapping[str, str]


def reset_targets(request: str, stopped: Mapping[str, bool]) -> ResetTargets:
    """Which of the compartments (name -> stopped by failureThreshold) ``request`` resets.

    Only stopped compartments are reset, so a request handled twice (the controller restarted
    before it removed the annotation) resets nothing the second time.
    """
    names = [part.strip() for part in request.split(",") if part.strip()]
    if RESET_ALL in names:
        reset = tuple(name for name, stop in stopped.items() if stop)
        ignored = {} if reset else {RESET_ALL: "no compartment is stopped"}
        return ResetTargets(reset=reset, ignored=ignored)
    out: list[str] = []
    why: dict[str, str] = {}
    for name in dict.fromkeys(names):
        if name not in stopped:
            why[name] = "no such compartment"
        elif not stopped[name]:
            why[name] = "not stopped"
        else:
            out.append(name)
    if not names:
        why[request or '""'] = "names no compartment"
    return ResetTargets(reset=tuple(out), ignored=why)


def reset_state(at: str) -> BatchState:
    """A compartment resumed by the reset annotation at ``at``: fresh, stamped ``resetAt``."""
    return fresh_state().model_copy(update={"reset_at": at})


@dataclass(frozen=True, slots=True)
class BatchNote:
    """One evaluated batch, told as an Event on the CR (``BatchComplete`` or ``BatchFailed``)."""

    compartment: str
    batch: int
    succeeded: int
    failed: int
    processed: int
    batch_failed: bool

    @property
    def reason(self) -> str:
        return "BatchFailed" if self.batch_failed else "BatchComplete"

    @property
    def message(self) -> str:
        outcome = "below batchThreshold" if self.batch_failed else "done"
        return (
            f"compartment {self.compartment}: batch {self.batch} {outcome}: {self.succeeded} "
            f"succeeded, {self.failed} failed; {self.processed} node(s) processed so far"
        )


def batch_notes(old: Mapping[str, BatchState], new: Mapping[str, BatchState]) -> list[BatchNote]:
    """The batches evaluated between two batch states of a CR, one note per compartment.

    Why per batch and not per node: at thousands of nodes an Event per node completion is a write
    per node that says what the Node's status label already says; a batch is what an operator
    watches a canary rollout by. A reset (the batch number going back) is not an evaluation.
    """
    notes = []
    for name in sorted(new):
        after, before = new[name], old.get(name)
        if before is None or after.current_batch <= before.current_batch:
            continue
        succeeded = after.completed_nodes - before.completed_nodes
        failed = after.failed_nodes - before.failed_nodes
        notes.append(
            BatchNote(
                compartment=name,
                batch=after.current_batch - 1,
                succeeded=succeeded,
                failed=failed,
                processed=processed(after),
                batch_failed=after.last_batch_failed,
            )
        )
    return notes
