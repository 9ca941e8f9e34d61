"""Dry-run a whole rollout by calling the real planner until nothing moves.

Why: "which nodes go in which batch, and where does it stop?" must be answerable before anything
is applied (docs/architecture.md, "Rollout: compartments and batches"). The simulation uses
``plan_rollout`` itself, not a second model of it, so what ``nwb plan --offline`` prints is what
the controller will do given the same node outcomes: every allowed node finishes its work in the
step it is allowed, as a success, or as a failure for the nodes named in ``fail``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from lifecycle.rollout import NodeView, RolloutPlan, plan_rollout
from lifecycle.spec import DeploymentPolicy, NodeWright
from lifecycle.status import BatchState, CompartmentStatus, Status

STEP = timedelta(minutes=1)  # simulated time per step; only shows up in BatchRecord.picked


@dataclass(frozen=True, slots=True)
class SimBatch:
    """One batch as it started: its compartment, number, nodes (by node order) and step."""

    compartment: str
    batch: int
    nodes: tuple[str, ...]
    step: int


@dataclass(frozen=True, slots=True)
class Simulation:
    """The outcome of a simulated rollout.

    Attributes:
        compartments: compartment -> status at the start (matched, ceiling, strategy).
        batches: batches in the order they started.
        stopped: compartment -> reason, for compartments stopped by failureThreshold.
        failed: nodes that failed (ERRORING at the end).
        blocked: node -> reason, candidates never picked because of untolerated taints.
        ignored: candidates carrying the ignore label.
        waiting: nodes kept waiting by sequencing.
        unfinished: targeted nodes that still have pending work at the end.
        max_in_progress: compartment -> most nodes allowed to work at once in one step.
        steps: planner calls made.
        final: the last plan.
    """

    compartments: Mapping[str, CompartmentStatus]
    batches: tuple[SimBatch, ...]
    stopped: Mapping[str, str]
    failed: tuple[str, ...]
    blocked: Mapping[str, str]
    ignored: tuple[str, ...]
    waiting: tuple[str, ...]
    unfinished: tuple[str, ...]
    max_in_progress: Mapping[str, int]
    steps: int
    final: RolloutPlan | None

    def to_json(self) -> dict[str, object]:
        """The stable JSON shape of ``nwb plan -o json``."""
        return {
            "compartments": {
                name: {"matched": status.matched, "ceiling": status.ceiling}
                for name, status in self.compartments.items()
            },
            "batches": [
                {"compartment": b.compartment, "nodes": list(b.nodes)} for b in self.batches
            ],
            "stopped": dict(self.stopped),
        }


def simulate(
    cr: NodeWright,
    policy: DeploymentPolicy | None,
    nodes: Sequence[NodeView],
    *,
    start: datetime,
    fail: Collection[str] = (),
    batch_states: Mapping[str, BatchState] | None = None,
    max_steps: int | None = None,
) -> Simulation:
    """Run ``plan_rollout`` step by step; allowed nodes succeed, except those in ``fail``.

    Args:
        cr: the NodeWright CR.
        policy: its DeploymentPolicy (None for legacy CRs).
        nodes: the starting snapshot (statuses, pending work, records as they are now).
        start: time of the first step.
        fail: nodes whose work fails (they end ERRORING, attempts exhausted).
        batch_states: persisted batch states to start from (fresh when None).
        max_steps: safety stop; defaults to enough steps for one node per batch, twice.

    Returns:
        The Simulation; ``batches`` lists every batch in the order it started.
    """
    fleet = {n.name: n for n in nodes}
    states: dict[str, BatchState] = dict(batch_states or {})
    next_order = 0
    limit = max_steps if max_steps is not None else 2 * len(fleet) + 10
    batches: list[SimBatch] = []
    max_in_progress: dict[str, int] = {}
    initial: Mapping[str, CompartmentStatus] | None = None
    plan: RolloutPlan | None = None
    steps = 0
    while steps < limit:
        now = start + steps * STEP
        plan = plan_rollout(
            cr, policy, list(fleet.values()), states, now, next_node_order=next_order
        )
        steps += 1
        if initial is None:
            initial = {name: p.status for name, p in plan.compartments.items()}
        for name, cplan in plan.compartments.items():
            max_in_progress[name] = max(max_in_progress.get(name, 0), len(cplan.allowed))
            if cplan.started:
                batches.append(SimBatch(name, cplan.batch, cplan.members, steps))
        moved = _apply(plan, fleet, fail)
        changed = plan.batch_states != states
        states = plan.batch_states
        next_order = plan.next_node_order
        if not moved and not changed:
            break
    return _result(
        plan, fleet, initial=initial or {}, batches=batches, peak=max_in_progress, steps=steps
    )


def _apply(plan: RolloutPlan, fleet: dict[str, NodeView], fail: Collection[str]) -> bool:
    """Write records, release records and run every allowed node once. True if anything moved."""
    moved = bool(plan.records or plan.released or plan.allowed)
    for name in plan.released:
        fleet[name] = replace(fleet[name], record=None)
    for name, record in plan.records.items():
        fleet[name] = replace(fleet[name], record=record)
    for name in plan.allowed:
        if name in fail:
            fleet[name] = replace(fleet[name], status=Status.ERRORING)
        else:
            fleet[name] = replace(fleet[name], status=Status.COMPLETE, has_pending_work=False)
    blocked = {b.node for b in plan.blocked}
    for name in blocked:
        fleet[name] = replace(fleet[name], status=Status.BLOCKED)
    return moved


def _result(
    plan: RolloutPlan | None,
    fleet: Mapping[str, NodeView],
    *,
    initial: Mapping[str, CompartmentStatus],
    batches: list[SimBatch],
    peak: Mapping[str, int],
    steps: int,
) -> Simulation:
    targeted = set(plan.assignment) if plan is not None else set()
    return Simulation(
        compartments=initial,
        batches=tuple(batches),
        stopped=dict(plan.stopped) if plan is not None else {},
        failed=tuple(sorted(n for n in targeted if fleet[n].failed)),
        blocked={b.node: b.reason for b in plan.blocked} if plan is not None else {},
        ignored=tuple(sorted(plan.ignored)) if plan is not None else (),
        waiting=tuple(sorted(plan.waiting)) if plan is not None else (),
        unfinished=tuple(sorted(n for n in targeted if not fleet[n].done)),
        max_in_progress=dict(peak),
        steps=steps,
        final=plan,
    )
