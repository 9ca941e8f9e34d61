"""Aggregate per-node statuses and failures into ``NodeWright.status``.

The result is bounded in fleet size: counters, at most ten names per list in a message, the last
``RECENT_FAILURES_MAX`` failures, no per-node maps (per-node truth stays on the Nodes).

CR status, first rule that applies wins (most actionable first; unlike NodeWright a mix is never
degraded to ``unknown``):

1. the spec is invalid -> ``blocked``
2. ``disable`` annotation -> ``disabled``; 3. ``pause`` annotation -> ``paused``
   (also when every node is complete: the user should see that future changes will not roll)
4. the referenced DeploymentPolicy is missing -> ``blocked``
5. every targeted node complete (also zero nodes) -> ``complete``
6. any node ``erroring`` -> ``erroring`` (a human must look, even while others progress)
7. any node ``in_progress`` -> ``in_progress``
8. an earlier ``sequencing: all`` CR is not done -> ``waiting``
9. any node ``blocked`` -> ``blocked``; 10. any node ``waiting`` -> ``waiting``
11. otherwise ``unknown``

``lastTransitionTime`` of a condition moves only when its ``status`` flips.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from lifecycle.spec import NodeWright
from lifecycle.stages import NodeFailure, rfc3339
from lifecycle.status import (
    RECENT_FAILURES_MAX,
    CompartmentStatus,
    Condition,
    NodeWrightStatus,
    RecentFailure,
    Status,
)

# NodeWright lists at most ten names per bucket in the Ready message, then refers to the logs.
NAMES_MAX = 10
TRUNCATED = "(list truncated; see controller logs)"
# A failure message in status is for orientation; the full text is in the event and the node log.
FAILURE_MESSAGE_MAX = 256
# InvalidSpec shows this many problems; `nwb plan` prints them all.
PROBLEMS_MAX = 5

READY_REASONS: Mapping[Status, str] = {
    Status.COMPLETE: "NodesConverged",
    Status.IN_PROGRESS: "Progressing",
    Status.BLOCKED: "Blocked",
    Status.ERRORING: "Erroring",
    Status.PAUSED: "Paused",
    Status.WAITING: "Waiting",
    Status.DISABLED: "Disabled",
    Status.UNKNOWN: "Unknown",
}
_BUCKETS: tuple[tuple[Status, str], ...] = (
    (Status.IN_PROGRESS, "in progress"),
    (Status.BLOCKED, "blocked"),
    (Status.ERRORING, "erroring"),
    (Status.WAITING, "waiting"),
    (Status.PAUSED, "paused"),
    (Status.DISABLED, "disabled"),
    (Status.UNKNOWN, "unknown"),
)


@dataclass(frozen=True, slots=True)
class NodeStatusView:
    name: str
    status: Status


@dataclass(frozen=True, slots=True)
class PdbBlock:
    """A PodDisruptionBudget that refused evictions on ``nodes``."""

    namespace: str
    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AggregationInput:
    cr: NodeWright
    nodes: Sequence[NodeStatusView]  # every targeted node, with its status for this CR
    now: datetime
    previous: NodeWrightStatus | None = None
    failures: Sequence[NodeFailure] = ()  # new in this reconcile, oldest first
    compartments: Mapping[str, CompartmentStatus] | None = None
    node_order_offset: int = 0
    paused: bool = False
    disabled: bool = False
    policy_missing: bool = False
    invalid_spec: Sequence[str] = ()
    pdb_blocks: Sequence[PdbBlock] = ()
    untolerable_nodes: Sequence[str] = ()
    ignored_nodes: Sequence[str] = ()
    waiting_for: str | None = None  # an earlier ``sequencing: all`` CR that is not complete


def cr_status(inp: AggregationInput) -> Status:
    """The aggregate status (rules in the module docstring)."""
    counts = _counts(inp.nodes)
    total = len(inp.nodes)
    if inp.invalid_spec:
        return Status.BLOCKED
    if inp.disabled:
        return Status.DISABLED
    if inp.paused:
        return Status.PAUSED
    if inp.policy_missing:
        return Status.BLOCKED
    if counts.get(Status.COMPLETE, 0) == total:
        return Status.COMPLETE
    for status in (Status.ERRORING, Status.IN_PROGRESS):
        if counts.get(status):
            return status
    if inp.waiting_for:
        return Status.WAITING
    for status in (Status.BLOCKED, Status.WAITING):
        if counts.get(status):
            return status
    return Status.UNKNOWN


def aggregate(inp: AggregationInput) -> NodeWrightStatus:
    """Build ``NodeWright.status`` from the nodes, the new failures and the previous status."""
    cr = inp.cr
    counts = _counts(inp.nodes)
    status = cr_status(inp)
    complete = counts.get(Status.COMPLETE, 0)
    previous = inp.previous or NodeWrightStatus()
    failures = [*previous.recent_failures, *(_failure(f) for f in inp.failures)]
    compartments = (
        dict(inp.compartments) if inp.compartments is not None else dict(previous.compartments)
    )
    generation = cr.metadata.generation
    conditions = [
        _ready(inp, status, complete),
        _progressing(counts, status),
        _degraded(inp, counts, failures[-RECENT_FAILURES_MAX:]),
        _stalled(compartments),
        _pdb_blocked(inp.pdb_blocks),
        _invalid_spec(inp.invalid_spec),
        _policy_not_found(inp),
        _taint_not_tolerable(inp.untolerable_nodes),
        _nodes_ignored(inp.ignored_nodes),
    ]
    before = {c.type: c for c in previous.conditions}
    now_text = rfc3339(inp.now)
    conditions = [_settle(c, before.get(c.type), now_text, generation) for c in conditions]
    spec = cr.spec
    policy = spec.deployment_policy or ("legacy" if spec.interruption_budget else "")
    return NodeWrightStatus(
        observed_generation=generation,
        status=status,
        conditions=conditions,
        compartments=compartments,
        nodes_in_progress=counts.get(Status.IN_PROGRESS, 0) + counts.get(Status.ERRORING, 0),
        complete_nodes=f"{complete}/{len(inp.nodes)}",
        package_list=",".join(f"{n}:{p.version}" for n, p in sorted(spec.packages.items())),
        recent_failures=failures[-RECENT_FAILURES_MAX:],
        node_order_offset=inp.node_order_offset,
        policy=policy,
    )


def ready_message(nodes: Sequence[NodeStatusView]) -> str:
    """``"<c>/<n> nodes complete (names), <k> in progress (names), ..."`` (NodeWright's format)."""
    by_status: dict[Status, list[str]] = {}
    for node in nodes:
        by_status.setdefault(node.status, []).append(node.name)
    done = by_status.get(Status.COMPLETE, [])
    parts = [f"{len(done)}/{len(nodes)} nodes complete{_names(done)}"]
    for status, label in _BUCKETS:
        names = by_status.get(status, [])
        if names:
            parts.append(f"{len(names)} {label}{_names(names)}")
    return ", ".join(parts)


def _names(names: Sequence[str]) -> str:
    if not names:
        return ""
    if len(names) > NAMES_MAX:
        return f" {TRUNCATED}"
    return f" ({', '.join(sorted(names))})"


def _counts(nodes: Sequence[NodeStatusView]) -> dict[Status, int]:
    counts: dict[Status, int] = {}
    for node in nodes:
        counts[node.status] = counts.get(node.status, 0) + 1
    return counts


def _failure(f: NodeFailure) -> RecentFailure:
    message = f.message
    if len(message) > FAILURE_MESSAGE_MAX:
        message = message[: FAILURE_MESSAGE_MAX - 1] + "…"
    return RecentFailure(
        node=f.node,
        package=f.package,
        version=f.version,
        stage=f.stage,
        task=f.task,
        message=message,
        time=rfc3339(f.time),
    )


def _cond(type_: str, true: bool, reason: str, message: str) -> Condition:
    return Condition(type=type_, status="True" if true else "False", reason=reason, message=message)


def _settle(
    condition: Condition, before: Condition | None, now_text: str, generation: int
) -> Condition:
    moved = before is None or before.status != condition.status
    when = now_text if moved or before is None else before.last_transition_time
    return condition.model_copy(
        update={"last_transition_time": when or now_text, "observed_generation": generation}
    )


def _ready(inp: AggregationInput, status: Status, complete: int) -> Condition:
    all_done = complete == len(inp.nodes) and not inp.invalid_spec and not inp.policy_missing
    return _cond("Ready", all_done, READY_REASONS[status], ready_message(inp.nodes))


def _progressing(counts: Mapping[Status, int], status: Status) -> Condition:
    moving = counts.get(Status.IN_PROGRESS, 0)
    if moving:
        return _cond("Progressing", True, "NodesInProgress", f"{moving} node(s) in progress")
    return _cond("Progressing", False, READY_REASONS[status], "no node in progress")


def _degraded(
    inp: AggregationInput, counts: Mapping[Status, int], failures: Sequence[RecentFailure]
) -> Condition:
    erroring = counts.get(Status.ERRORING, 0)
    if not erroring:
        return _cond("Degraded", False, "NoFailures", "no node is erroring")
    names = {n.name for n in inp.nodes if n.status is Status.ERRORING}
    latest = next((f for f in reversed(failures) if f.node in names), None)
    if latest is None:
        return _cond("Degraded", True, "StageFailed", f"{erroring} node(s) erroring")
    if latest.stage.endswith("-check"):
        reason = "ValidationFailed"
    elif latest.stage in ("drain", "wait"):
        reason = "DrainFailed"
    else:
        reason = "StageFailed"
    task = f" task {latest.task!r}" if latest.task else ""
    message = (
        f"{erroring} node(s) erroring; latest: node {latest.node}, package {latest.package} "
        f"{latest.version}, stage {latest.stage}{task}: {latest.message}"
    )
    return _cond("Degraded", True, reason, message)


def _stalled(compartments: Mapping[str, CompartmentStatus]) -> Condition:
    stopped = sorted(
        name for name, c in compartments.items() if c.batch_state and c.batch_state.should_stop
    )
    if not stopped:
        return _cond("Stalled", False, "NotStalled", "no compartment stopped")
    return _cond(
        "Stalled",
        True,
        "FailureThresholdReached",
        f"compartment(s) {_list(stopped)} stopped: failureThreshold consecutive batches failed",
    )


def _pdb_blocked(blocks: Sequence[PdbBlock]) -> Condition:
    if not blocks:
        return _cond("PDBBlocked", False, "NoBlockingPDB", "no PodDisruptionBudget blocks a drain")
    parts = [
        f"PodDisruptionBudget {b.namespace}/{b.name} blocks eviction on node(s) {_list(b.nodes)}"
        for b in sorted(blocks, key=lambda b: (b.namespace, b.name))[:NAMES_MAX]
    ]
    return _cond("PDBBlocked", True, "EvictionBlocked", "; ".join(parts))


def _invalid_spec(problems: Sequence[str]) -> Condition:
    if not problems:
        return _cond("InvalidSpec", False, "Valid", "spec is valid")
    shown = "; ".join(problems[:PROBLEMS_MAX])
    more = len(problems) - PROBLEMS_MAX
    return _cond(
        "InvalidSpec", True, "ValidationFailed", shown + (f" and {more} more" if more > 0 else "")
    )


def _policy_not_found(inp: AggregationInput) -> Condition:
    name = inp.cr.spec.deployment_policy
    if inp.policy_missing:
        return _cond(
            "PolicyNotFound", True, "DeploymentPolicyNotFound", f"DeploymentPolicy {name} not found"
        )
    return _cond("PolicyNotFound", False, "PolicyFound", "")


def _taint_not_tolerable(nodes: Sequence[str]) -> Condition:
    if not nodes:
        return _cond(
            "TaintNotTolerable", False, "TaintsTolerable", "All nodes have tolerable taints."
        )
    if len(nodes) > NAMES_MAX:
        message = f"{len(nodes)} nodes have taints that are not tolerable. Skipping."
    else:
        message = f"Node [{', '.join(sorted(nodes))}] has taints that are not tolerable. Skipping."
    return _cond("TaintNotTolerable", True, "TaintNotTolerable", message)


def _nodes_ignored(nodes: Sequence[str]) -> Condition:
    if not nodes:
        return _cond("NodesIgnored", False, "NoNodesIgnored", "No nodes are ignored.")
    if len(nodes) > NAMES_MAX:
        message = f"{len(nodes)} nodes are ignored by label."
    else:
        message = f"Node [{', '.join(sorted(nodes))}] ignored by label."
    return _cond("NodesIgnored", True, "NodesIgnored", message)


def _list(names: Sequence[str]) -> str:
    shown = sorted(names)[:NAMES_MAX]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")
