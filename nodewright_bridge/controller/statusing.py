"""Aggregate per-node outcomes into ``NodeWright.status`` (bounded in fleet size) and conditions.

Conditions (ARCHITECTURE.md §4): ``Ready`` (NodeWright's reasons and message format),
``Progressing``, ``Degraded`` (naming node, package, stage, task and message of the newest final
failure), ``Stalled`` (a compartment stopped on failureThreshold), ``PDBBlocked`` (naming the
PodDisruptionBudgets that refused evictions or protect the pods of a node being drained),
``InvalidSpec``, ``PolicyNotFound``, ``TaintNotTolerable``, ``NodesIgnored`` and
``NodeStateMalformed``.

``lastTransitionTime`` moves only when a condition's status flips, so writing the same status
twice is a no-op the reconciler can skip (it compares before writing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from lifecycle.rollout import RolloutPlan
from lifecycle.spec import NodeWright
from lifecycle.stages import NodeFailure, rfc3339
from lifecycle.status import (
    RECENT_FAILURES_MAX,
    Condition,
    NodeWrightStatus,
    RecentFailure,
    Status,
)

# NodeWright prints at most 10 names per bucket in the Ready message.
NAMES_PER_BUCKET = 10
_READY_REASON = {
    Status.COMPLETE: "NodesConverged",
    Status.IN_PROGRESS: "Progressing",
    Status.BLOCKED: "Blocked",
    Status.ERRORING: "Erroring",
    Status.PAUSED: "Paused",
    Status.WAITING: "Waiting",
    Status.DISABLED: "Disabled",
    Status.UNKNOWN: "Unknown",
}
_BUCKETS = (
    Status.IN_PROGRESS,
    Status.BLOCKED,
    Status.ERRORING,
    Status.WAITING,
    Status.PAUSED,
    Status.DISABLED,
    Status.UNKNOWN,
)


@dataclass(slots=True)
class StatusInputs:
    """What one reconcile learned, for the status writer."""

    node_status: dict[str, Status] = field(default_factory=dict)  # every targeted node
    failures: list[NodeFailure] = field(default_factory=list)
    pdb_blocked: dict[str, list[str]] = field(default_factory=dict)
    drain_blockers: dict[str, list[str]] = field(default_factory=dict)
    malformed: dict[str, str] = field(default_factory=dict)
    waiting_on_all: list[str] = field(default_factory=list)


def _names(nodes: Sequence[str]) -> str:
    shown = ", ".join(nodes[:NAMES_PER_BUCKET])
    if len(nodes) > NAMES_PER_BUCKET:
        return f"{shown}, ... (list truncated; see controller logs)"
    return shown


def ready_message(statuses: Mapping[str, Status]) -> str:
    total = len(statuses)
    complete = sorted(n for n, s in statuses.items() if s is Status.COMPLETE)
    parts = [f"{len(complete)}/{total} nodes complete"]
    for bucket in _BUCKETS:
        nodes = sorted(n for n, s in statuses.items() if s is bucket)
        if nodes:
            parts.append(f"{len(nodes)} {bucket.value.replace('_', ' ')} ({_names(nodes)})")
    return ", ".join(parts)


def aggregate(statuses: Iterable[Status]) -> Status:
    values = list(statuses)
    if all(s is Status.COMPLETE for s in values):
        return Status.COMPLETE
    for wanted in (Status.IN_PROGRESS, Status.ERRORING, Status.BLOCKED, Status.WAITING):
        if wanted in values:
            return wanted
    open_ = {s for s in values if s is not Status.COMPLETE}
    return open_.pop() if len(open_) == 1 else Status.UNKNOWN


def _condition(kind: str, on: bool, reason: str, message: str, generation: int) -> Condition:
    return Condition(
        type=kind,
        status="True" if on else "False",
        reason=reason,
        message=message,
        observed_generation=generation,
    )


def _merge_times(new: list[Condition], old: Sequence[Condition], now: datetime) -> list[Condition]:
    previous = {c.type: c for c in old}
    out: list[Condition] = []
    for cond in new:
        before = previous.get(cond.type)
        if before is not None and before.status == cond.status and before.last_transition_time:
            stamp = before.last_transition_time
        else:
            stamp = rfc3339(now)
        out.append(cond.model_copy(update={"last_transition_time": stamp}))
    return out


def invalid_status(
    old: NodeWrightStatus, generation: int, problems: Sequence[str], now: datetime
) -> NodeWrightStatus:
    """Status of a CR that does not validate: InvalidSpec with every field-path problem."""
    message = "; ".join(problems)[:4000]
    conditions = [
        _condition("InvalidSpec", True, "InvalidSpec", message, generation),
        _condition("Ready", False, "InvalidSpec", "spec is invalid: " + message[:500], generation),
    ]
    kept = [c for c in old.conditions if c.type not in {"InvalidSpec", "Ready"}]
    return old.model_copy(
        update={
            "status": Status.BLOCKED,
            "conditions": _merge_times(conditions, old.conditions, now) + kept,
        }
    )


def build_status(
    cr: NodeWright,
    old: NodeWrightStatus,
    plan: RolloutPlan,
    inputs: StatusInputs,
    now: datetime,
    *,
    policy_name: str,
) -> NodeWrightStatus:
    generation = cr.metadata.generation
    statuses = inputs.node_status
    total = len(statuses)
    complete = sum(1 for s in statuses.values() if s is Status.COMPLETE)
    overall = aggregate(statuses.values()) if statuses else Status.COMPLETE
    if overall is not Status.COMPLETE:
        if plan.disabled:
            overall = Status.DISABLED
        elif plan.paused:
            overall = Status.PAUSED
        elif inputs.waiting_on_all:
            overall = Status.WAITING
    if plan.policy_missing:
        overall = Status.BLOCKED

    failures = list(old.recent_failures)
    for f in inputs.failures:
        failures.append(
            RecentFailure(
                node=f.node,
                package=f.package,
                version=f.version,
                stage=f.stage,
                task=f.task,
                message=f.message,
                time=rfc3339(f.time),
            )
        )
    failures = failures[-RECENT_FAILURES_MAX:]

    conds: list[Condition] = []
    ready = overall is Status.COMPLETE
    conds.append(
        _condition("Ready", ready, _READY_REASON[overall], ready_message(statuses), generation)
    )
    progressing = overall is Status.IN_PROGRESS
    conds.append(
        _condition(
            "Progressing",
            progressing,
            "NodesInProgress" if progressing else _READY_REASON[overall],
            f"{sum(1 for s in statuses.values() if s is Status.IN_PROGRESS)} node(s) in progress",
            generation,
        )
    )
    erroring = sorted(n for n, s in statuses.items() if s is Status.ERRORING)
    if erroring:
        latest = next((f for f in reversed(failures) if f.node in erroring), None)
        if latest is not None:
            detail = (
                f"node {latest.node}, package {latest.package} {latest.version}, "
                f"stage {latest.stage}"
                + (f", task {latest.task!r}" if latest.task else "")
                + f": {latest.message}"
            )
        else:
            detail = "nodes erroring"
        message = f"{len(erroring)} node(s) erroring ({_names(erroring)}); last failure: {detail}"
        conds.append(_condition("Degraded", True, "PackageFailed", message, generation))
    else:
        conds.append(_condition("Degraded", False, "NoFailures", "no node is erroring", generation))
    if plan.stopped:
        message = "; ".join(f"{name}: {why}" for name, why in sorted(plan.stopped.items()))
        conds.append(_condition("Stalled", True, "FailureThresholdReached", message, generation))
    else:
        conds.append(_condition("Stalled", False, "NotStalled", "", generation))
    pdbs = sorted({p for names in inputs.pdb_blocked.values() for p in names})
    if pdbs or inputs.drain_blockers:
        parts = []
        for node, names in sorted(inputs.pdb_blocked.items()):
            parts.append(f"node {node}: PodDisruptionBudget {', '.join(sorted(set(names)))}")
        for node, lines in sorted(inputs.drain_blockers.items()):
            parts.append(f"node {node}: {'; '.join(lines)}")
        reason = "PodDisruptionBudget" if pdbs else "DrainBlocked"
        conds.append(_condition("PDBBlocked", True, reason, "; ".join(parts)[:4000], generation))
    else:
        conds.append(_condition("PDBBlocked", False, "NotBlocked", "", generation))
    if plan.policy_missing:
        conds.append(
            _condition(
                "PolicyNotFound",
                True,
                "PolicyNotFound",
                f"DeploymentPolicy {policy_name!r} not found; nothing is scheduled",
                generation,
            )
        )
    if plan.blocked:
        names = sorted({b.node for b in plan.blocked})
        conds.append(
            _condition(
                "TaintNotTolerable",
                True,
                "TaintNotTolerable",
                f"Node [{_names(names)}] has taints that are not tolerable. Skipping.",
                generation,
            )
        )
    else:
        conds.append(
            _condition(
                "TaintNotTolerable",
                False,
                "AllTolerable",
                "All nodes have tolerable taints.",
                generation,
            )
        )
    conds.append(
        _condition(
            "NodesIgnored",
            bool(plan.ignored),
            "NodesIgnored" if plan.ignored else "NoneIgnored",
            _names(sorted(plan.ignored)) if plan.ignored else "",
            generation,
        )
    )
    if inputs.malformed:
        names = sorted(inputs.malformed)
        first = names[0]
        conds.append(
            _condition(
                "NodeStateMalformed",
                True,
                "ParseError",
                f"state annotation cannot be parsed on {len(names)} node(s): {_names(names)} "
                f"({first}: {inputs.malformed[first]})",
                generation,
            )
        )

    compartments = {name: cp.status for name, cp in plan.compartments.items()}
    packages = ",".join(f"{n}:{p.version}" for n, p in sorted(cr.spec.packages.items()))
    return NodeWrightStatus(
        observed_generation=generation,
        status=overall,
        conditions=_merge_times(conds, old.conditions, now),
        compartments=compartments,
        nodes_in_progress=sum(
            1 for s in statuses.values() if s in (Status.IN_PROGRESS, Status.ERRORING)
        ),
        complete_nodes=f"{complete}/{total}",
        package_list=packages,
        recent_failures=failures,
        node_order_offset=plan.next_node_order,
        policy=policy_name,
    )


def status_wire(status: NodeWrightStatus) -> dict[str, object]:
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)
