"""Aggregate per-node statuses and failures into ``NodeWright.status``.

The one place that decides a CR's status and conditions; the controller only gathers the inputs
(``rollout_input`` maps a rollout plan and one reconcile's findings onto ``AggregationInput``) and
writes the result.

The result is bounded in fleet size: counters, at most ten names per list in a message, the last
``RECENT_FAILURES_MAX`` failures, no per-node maps (per-node truth stays on the Nodes).

CR status, first rule that applies wins (most actionable first; unlike NodeWright a mix is never
degraded to ``unknown``):

1. the spec is invalid, or a package spec failed validation -> ``blocked``
2. ``disable`` annotation -> ``disabled``; 3. ``pause`` annotation -> ``paused``
   (also when every node is complete: the user should see that future changes will not roll)
4. the referenced DeploymentPolicy is missing -> ``blocked``
5. every targeted node complete (also zero nodes) -> ``complete``
6. any node ``erroring`` -> ``erroring`` (a human must look, even while others progress)
7. any node ``in_progress`` -> ``in_progress``
8. an earlier ``sequencing: all`` CR is not done -> ``waiting``
9. any node ``blocked`` -> ``blocked``; 10. any node ``waiting`` -> ``waiting``
11. otherwise ``unknown``

Conditions (docs/architecture.md, "Status and conditions"): ``Ready`` (NodeWright's reasons and
message format), ``Progressing``, ``Degraded`` (naming node, package, stage, task and message of
the newest failure of an erroring node), ``Stalled`` (a compartment stopped on failureThreshold),
``PDBBlocked`` (naming the PodDisruptionBudgets with the pods they keep, or why a drain cannot
evict, while some node still needs its drain: ``drain_pending``), ``WaitingForProtectedPods``
(naming each node we cordoned that waits for podNonInterruptLabels pods, the pods and since
when: ``waiting_for_protected``), ``InvalidSpec`` (the CR's own problems, else the package specs
that failed validation with the reason of the first, e.g. ``ArgumentSpecViolation``, else
``Unknown`` while a validation runs; ``lifecycle.validating``), ``PolicyNotFound``,
``TaintNotTolerable``, ``NodesIgnored`` (every targeted node with the ignore label, whatever its
status), ``NodeStateMalformed`` only while some node's state annotation cannot be parsed, and
``DeletionBlocked`` only while the CR is being deleted with uninstall work pending (True while
paused or disabled, naming the nodes, as NodeWright does) or while some node's state annotation
of the CR does not parse (``MalformedNodeState``, ``deletion_blocked_by_malformed_state``).

Every condition is a function of what this pass saw of the nodes, the PDBs and the CR, never of
the last transition: a node that stops being planned (it went erroring, it is complete and its
plan is kept) still counts. Only ``lastTransitionTime`` of a condition comes from the previous
status: it moves only when the ``status`` flips, so aggregating the same inputs twice gives the
same status (the controller skips writes that change nothing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from lifecycle.nodestate import IGNORE_LABEL, PackageState, StageState, state_annotation
from lifecycle.rollout import RolloutPlan
from lifecycle.spec import NodeWright
from lifecycle.stages import NodeFailure, rfc3339
from lifecycle.status import (
    RECENT_FAILURES_MAX,
    CheckCounts,
    CompartmentStatus,
    Condition,
    NodeWrightStatus,
    PackageValidation,
    RecentFailure,
    Status,
)
from lifecycle.validating import SpecFailure, ValidationPlan

# NodeWright lists at most ten names per bucket in the Ready message, then refers to the logs.
NAMES_MAX = 10
TRUNCATED = "(list truncated; see controller logs)"
# A failure message in status is for orientation; the full text is in the event and the node log.
FAILURE_MESSAGE_MAX = 256
# Why one node's drain cannot evict (its blocking pods), in PDBBlocked.
DRAIN_DETAIL_MAX = 1000
# Pods named per PodDisruptionBudget or per node waiting for protected pods.
PODS_MAX = 5
# InvalidSpec shows this many problems; `nwb plan` prints them all.
PROBLEMS_MAX = 5
# DeletionBlocked/MalformedNodeState names this many nodes, as NodeWright's parse-error message.
MALFORMED_NAMES_MAX = 5

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
    """A PodDisruptionBudget that refused evictions on ``nodes``, of ``pods`` (when known)."""

    namespace: str
    name: str
    nodes: tuple[str, ...]
    pods: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ProtectedWait:
    """A node we cordoned that waits for its podNonInterruptLabels ``pods`` (since ``since``:
    the start of the work that needs the drain, RFC 3339, may be empty)."""

    node: str
    pods: tuple[str, ...]
    since: str = ""


@dataclass(frozen=True, slots=True)
class DrainView:
    """A targeted node's drain as this pass sees the cluster (for ``PDBBlocked``)."""

    name: str
    status: Status  # the node's status for this CR
    held: bool  # this CR holds the node's cordon
    to_evict: int  # pods a drain must still evict, wait for, or cannot evict
    blocking_pdbs: tuple[str, ...] = ()  # "namespace/name" of exhausted budgets covering them
    blockers: tuple[str, ...] = ()  # why some pods cannot be evicted (unmanaged, emptyDir)
    # each exhausted budget ("namespace/name") with the pods ("namespace/name") it keeps here
    pdb_pods: tuple[tuple[str, tuple[str, ...]], ...] = ()
    protected_pods: tuple[str, ...] = ()  # podNonInterruptLabels pods running on the node
    since: str = ""  # when the work now open on the node started (``work_started``)


def drain_pending(view: DrainView) -> bool:
    """The node still needs a drain for this CR: we cordoned it for work that is in progress or
    failed (a drain or podNonInterruptLabels wait that expired leaves the node erroring with the
    cordon held), and pods are still to go. Whatever stops those pods blocks the CR now."""
    return view.held and view.to_evict > 0 and view.status in (Status.IN_PROGRESS, Status.ERRORING)


def waiting_for_protected(view: DrainView) -> bool:
    """We cordoned the node for work in progress (or failed: a wait that expired leaves the node
    erroring with the cordon held) and podNonInterruptLabels pods still run there."""
    return (
        view.held
        and bool(view.protected_pods)
        and view.status in (Status.IN_PROGRESS, Status.ERRORING)
    )


def work_started(state: Mapping[str, PackageState]) -> str:
    """The earliest ``started`` of the entries not complete (RFC 3339), or ""."""
    times = [e.started for e in state.values() if e.state is not StageState.COMPLETE and e.started]
    return min(times, default="")


def carries_ignore_label(labels: Mapping[str, str]) -> bool:
    """``bridge.nodewright.io/ignore=true``: the rollout does not pick the node."""
    return labels.get(IGNORE_LABEL) == "true"


@dataclass(frozen=True, slots=True)
class DriftView:
    """A node a drift check found changed: the first package and the tasks it named."""

    node: str
    package: str
    tasks: tuple[str, ...] = ()


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
    protected_waits: Sequence[ProtectedWait] = ()  # WaitingForProtectedPods
    # node -> why its drain cannot evict (unmanaged or emptyDir pods), for PDBBlocked
    drain_blockers: Mapping[str, Sequence[str]] = field(default_factory=dict)
    untolerable_nodes: Sequence[str] = ()
    ignored_nodes: Sequence[str] = ()
    waiting_for: str | None = None  # an earlier ``sequencing: all`` CR that is not complete
    # compartment -> why it stopped (the rollout planner's words); Stalled also reads batch states
    stop_reasons: Mapping[str, str] = field(default_factory=dict)
    # node -> why its state annotation cannot be parsed (NodeStateMalformed)
    malformed: Mapping[str, str] = field(default_factory=dict)
    # being deleted: the nodes that still record a package to uninstall (DeletionBlocked)
    deletion_pending: Sequence[str] | None = None
    # package specs that failed validation, and what validation still waits for (InvalidSpec)
    spec_failures: Sequence[SpecFailure] = ()
    validating: Sequence[str] = ()
    # the validation records to keep in status; None keeps the previous ones
    validations: Mapping[str, PackageValidation] | None = None
    # check mode (``lifecycle.preflight``): node -> compliant|changing|unknown of its current
    # cycle, and the drifted nodes with the first drifted package and its tasks (``Drifted``)
    checks: Mapping[str, str] = field(default_factory=dict)
    drifted: Sequence[DriftView] = ()


def rollout_input(
    cr: NodeWright,
    plan: RolloutPlan,
    node_status: Mapping[str, Status],
    now: datetime,
    *,
    previous: NodeWrightStatus | None = None,
    failures: Sequence[NodeFailure] = (),
    pdb_blocked: Mapping[str, Sequence[str]] | None = None,
    drain_blockers: Mapping[str, Sequence[str]] | None = None,
    drains: Sequence[DrainView] = (),
    ignored: Sequence[str] = (),
    malformed: Mapping[str, str] | None = None,
    waiting_on: Sequence[str] = (),
    deletion_pending: Sequence[str] | None = None,
    validation: ValidationPlan | None = None,
    checks: Mapping[str, str] | None = None,
    drifted: Sequence[DriftView] = (),
) -> AggregationInput:
    """The aggregation input for one reconcile: the rollout plan plus what the reconcile saw.

    ``node_status`` has every targeted node; ``pdb_blocked`` maps a node to the ``namespace/name``
    of each PodDisruptionBudget that refused its evictions this pass and ``drain_blockers`` to
    the pods its drain could not evict (the executor's answers); ``drains`` has every targeted
    node's drain as observed, of which those still pending (``drain_pending``) add their
    exhausted budgets and unevictable pods; ``ignored`` names every targeted node carrying the
    ignore label; ``waiting_on`` lists earlier ``sequencing: all`` CRs that are not complete.
    """
    refused = {node: list(keys) for node, keys in (pdb_blocked or {}).items()}
    blockers = {node: list(lines) for node, lines in (drain_blockers or {}).items()}
    kept: dict[str, set[str]] = {}  # budget -> the pods it keeps on pending nodes
    waits = [
        ProtectedWait(v.name, v.protected_pods, v.since) for v in drains if waiting_for_protected(v)
    ]
    for view in drains:
        if not drain_pending(view):
            continue
        if view.blocking_pdbs:
            refused.setdefault(view.name, []).extend(view.blocking_pdbs)
        for budget, pods in view.pdb_pods:
            kept.setdefault(budget, set()).update(pods)
        if view.blockers and view.name not in blockers:
            blockers[view.name] = list(view.blockers)
    return AggregationInput(
        cr=cr,
        nodes=[NodeStatusView(name, status) for name, status in node_status.items()],
        now=now,
        previous=previous,
        failures=failures,
        compartments={
            name: _with_checks(cp.status, cp.assigned, checks or {})
            for name, cp in plan.compartments.items()
        },
        node_order_offset=plan.next_node_order,
        paused=plan.paused,
        disabled=plan.disabled,
        policy_missing=plan.policy_missing,
        pdb_blocks=pdb_blocks_of(refused, kept),
        protected_waits=sorted(waits, key=lambda w: w.node),
        drain_blockers=blockers,
        untolerable_nodes=sorted({b.node for b in plan.blocked}),
        ignored_nodes=sorted({*plan.ignored, *ignored}),
        waiting_for=waiting_on[0] if waiting_on else None,
        stop_reasons=dict(plan.stopped),
        malformed=dict(malformed or {}),
        deletion_pending=deletion_pending,
        spec_failures=validation.failures if validation is not None else (),
        validating=validation.pending if validation is not None else (),
        validations=validation.records if validation is not None else None,
        checks=dict(checks or {}),
        drifted=sorted(drifted, key=lambda d: d.node),
    )


def _with_checks(
    status: CompartmentStatus, nodes: Sequence[str], checks: Mapping[str, str]
) -> CompartmentStatus:
    """The compartment's status with the check-mode counts of its nodes (unset: none checked)."""
    outcomes = [checks[n] for n in nodes if checks.get(n)]
    if not outcomes:
        return status
    counts = CheckCounts(
        compliant=outcomes.count("compliant"),
        changing=outcomes.count("changing"),
        unknown=outcomes.count("unknown"),
    )
    return status.model_copy(update={"checks": counts})


def checks_summary(checks: Mapping[str, str]) -> str:
    """``"3 compliant, 2 changing"`` over every node (zeros left out), or empty."""
    outcomes = list(checks.values())
    parts = [
        f"{outcomes.count(kind)} {kind}"
        for kind in ("compliant", "changing", "unknown")
        if outcomes.count(kind)
    ]
    return ", ".join(parts)


def pdb_blocks_of(
    by_node: Mapping[str, Sequence[str]], pods: Mapping[str, Iterable[str]] | None = None
) -> tuple[PdbBlock, ...]:
    """Group ``node -> ["namespace/name", ...]`` by PodDisruptionBudget; ``pods``: budget key ->
    the pods it keeps (named in the message)."""
    nodes: dict[tuple[str, str], set[str]] = {}
    for node, keys in by_node.items():
        for key in keys:
            namespace, _, name = key.partition("/")
            nodes.setdefault((namespace, name), set()).add(node)
    kept = pods or {}
    return tuple(
        PdbBlock(ns, name, tuple(sorted(n)), tuple(sorted(kept.get(f"{ns}/{name}", ()))))
        for (ns, name), n in sorted(nodes.items())
    )


def cr_status(inp: AggregationInput) -> Status:
    """The aggregate status (rules in the module docstring)."""
    counts = _counts(inp.nodes)
    total = len(inp.nodes)
    if inp.invalid_spec or inp.spec_failures:
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
    failures = failures[-RECENT_FAILURES_MAX:]
    compartments = (
        dict(inp.compartments) if inp.compartments is not None else dict(previous.compartments)
    )
    generation = cr.metadata.generation
    conditions = [
        _ready(inp, status, complete),
        _progressing(counts, status),
        _degraded(inp, counts, failures),
        _stalled(compartments, inp.stop_reasons),
        _pdb_blocked(inp.pdb_blocks, inp.drain_blockers),
        _waiting_for_protected_pods(inp.protected_waits),
        _invalid_spec(inp.invalid_spec, inp.spec_failures, inp.validating),
        _policy_not_found(inp),
        _taint_not_tolerable(inp.untolerable_nodes),
        _nodes_ignored(inp.ignored_nodes),
    ]
    if cr.spec.drift_detection is not None or inp.drifted:
        conditions.append(_drifted(inp.drifted))
    if inp.malformed:
        conditions.append(_node_state_malformed(inp.malformed))
    if inp.deletion_pending:
        conditions.append(_deletion_blocked(inp, inp.deletion_pending))
    spec = cr.spec
    policy = spec.deployment_policy or ("legacy" if spec.interruption_budget else "")
    return NodeWrightStatus(
        observed_generation=generation,
        status=status,
        conditions=_settle_all(conditions, previous, inp.now, generation),
        compartments=compartments,
        nodes_in_progress=counts.get(Status.IN_PROGRESS, 0) + counts.get(Status.ERRORING, 0),
        complete_nodes=f"{complete}/{len(inp.nodes)}",
        package_list=",".join(f"{n}:{p.version}" for n, p in sorted(spec.packages.items())),
        recent_failures=failures,
        node_order_offset=inp.node_order_offset,
        policy=policy,
        validations=dict(inp.validations if inp.validations is not None else previous.validations),
        checks=checks_summary(inp.checks),
    )


def invalid_status(
    previous: NodeWrightStatus, generation: int, problems: Sequence[str], now: datetime
) -> NodeWrightStatus:
    """Status of a CR that does not validate (there is no spec to aggregate over).

    ``blocked`` with ``InvalidSpec`` naming the field-path problems and ``Ready=False``; counters,
    compartments, failures and the other conditions stay as they were.
    """
    conditions = [
        _cond("Ready", False, READY_REASONS[Status.BLOCKED], "spec is invalid (see InvalidSpec)"),
        _invalid_spec(problems),
    ]
    settled = _settle_all(conditions, previous, now, generation)
    kept = [c for c in previous.conditions if c.type not in {"Ready", "InvalidSpec"}]
    return previous.model_copy(
        update={
            "observed_generation": generation,
            "status": Status.BLOCKED,
            "conditions": settled + kept,
        }
    )


def deletion_blocked_by_malformed_state(
    previous: NodeWrightStatus,
    *,
    cr: str,
    generation: int,
    malformed: Mapping[str, str],
    now: datetime,
) -> NodeWrightStatus:
    """Status of a CR whose deletion waits because state annotations do not parse.

    Cleaning up now would drop the finalizer without knowing what those nodes still run, so
    deletion stops until the annotation is fixed or removed; the message says where. The other
    conditions stay as they were.
    """
    names = sorted(malformed)
    first = names[0]
    key = state_annotation(cr)
    message = (
        f"deletion waits: annotation {key} does not parse on {len(names)} node(s) "
        f"({first}: {_clip(malformed[first])}); fix or remove annotation {key} on node "
        f"{_list(names, MALFORMED_NAMES_MAX)} and deletion continues"
    )
    blocked = _cond("DeletionBlocked", True, "MalformedNodeState", message)
    settled = _settle_all([blocked], previous, now, generation)
    kept = [c for c in previous.conditions if c.type != "DeletionBlocked"]
    return previous.model_copy(
        update={"observed_generation": generation, "conditions": [*kept, *settled]}
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


def describe_failure(f: NodeFailure | RecentFailure) -> str:
    """``node n, package p 1.0.0, stage apply, task 'T': message`` (conditions and events)."""
    task = f", task {f.task!r}" if f.task else ""
    return f"node {f.node}, package {f.package} {f.version}, stage {f.stage}{task}: {f.message}"


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


def _clip(text: str, limit: int = FAILURE_MESSAGE_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _failure(f: NodeFailure) -> RecentFailure:
    return RecentFailure(
        node=f.node,
        package=f.package,
        version=f.version,
        stage=f.stage,
        task=f.task,
        message=_clip(f.message),
        time=rfc3339(f.time),
    )


def _cond(type_: str, true: bool, reason: str, message: str) -> Condition:
    return Condition(type=type_, status="True" if true else "False", reason=reason, message=message)


def _settle_all(
    conditions: Sequence[Condition], previous: NodeWrightStatus, now: datetime, generation: int
) -> list[Condition]:
    """Stamp generation and lastTransitionTime (kept from ``previous`` unless the status flips)."""
    before = {c.type: c for c in previous.conditions}
    now_text = rfc3339(now)
    out = []
    for condition in conditions:
        old = before.get(condition.type)
        moved = old is None or old.status != condition.status
        when = now_text if moved or old is None else old.last_transition_time
        update = {"last_transition_time": when or now_text, "observed_generation": generation}
        out.append(condition.model_copy(update=update))
    return out


def _ready(inp: AggregationInput, status: Status, complete: int) -> Condition:
    all_done = (
        complete == len(inp.nodes)
        and not inp.invalid_spec
        and not inp.spec_failures
        and not inp.policy_missing
    )
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
    head = f"{erroring} node(s) erroring ({_list(sorted(names))})"
    latest = next((f for f in reversed(failures) if f.node in names), None)
    if latest is None:
        return _cond("Degraded", True, "StageFailed", head)
    if latest.stage.endswith("-check"):
        reason = "ValidationFailed"
    elif latest.stage in ("drain", "wait"):
        reason = "DrainFailed"
    else:
        reason = "StageFailed"
    return _cond("Degraded", True, reason, f"{head}; latest: {describe_failure(latest)}")


def _stalled(
    compartments: Mapping[str, CompartmentStatus], reasons: Mapping[str, str]
) -> Condition:
    stopped = sorted(
        {name for name, c in compartments.items() if c.batch_state and c.batch_state.should_stop}
        | set(reasons)
    )
    if not stopped:
        return _cond("Stalled", False, "NotStalled", "no compartment stopped")
    default = "compartment {} stopped: failureThreshold consecutive batches failed"
    lines = [reasons.get(name) or default.format(name) for name in stopped[:NAMES_MAX]]
    more = len(stopped) - NAMES_MAX
    message = "; ".join(lines) + (f"; and {more} more compartment(s)" if more > 0 else "")
    return _cond("Stalled", True, "FailureThresholdReached", message)


def _pdb_blocked(
    blocks: Sequence[PdbBlock], drain_blockers: Mapping[str, Sequence[str]]
) -> Condition:
    if not blocks and not drain_blockers:
        return _cond("PDBBlocked", False, "NoBlockingPDB", "no PodDisruptionBudget blocks a drain")
    parts = [
        f"PodDisruptionBudget {b.namespace}/{b.name} blocks eviction"
        + (f" of pod(s) {_list(b.pods, PODS_MAX)}" if b.pods else "")
        + f" on node(s) {_list(b.nodes)}"
        for b in sorted(blocks, key=lambda b: (b.namespace, b.name))[:NAMES_MAX]
    ]
    nodes = sorted(drain_blockers)
    parts.extend(
        f"node {n}: {_clip('; '.join(drain_blockers[n]), DRAIN_DETAIL_MAX)}"
        for n in nodes[:NAMES_MAX]
    )
    if len(nodes) > NAMES_MAX:
        parts.append(f"and {len(nodes) - NAMES_MAX} more node(s) whose drain is blocked")
    reason = "EvictionBlocked" if blocks else "DrainBlocked"
    return _cond("PDBBlocked", True, reason, "; ".join(parts))


def _waiting_for_protected_pods(waits: Sequence[ProtectedWait]) -> Condition:
    """True while a node we cordoned waits for its podNonInterruptLabels pods: which node, which
    pods, since when (recomputed from the cluster each pass, like ``PDBBlocked``)."""
    if not waits:
        return _cond(
            "WaitingForProtectedPods",
            False,
            "NoProtectedPods",
            "no node waits for podNonInterruptLabels pods",
        )
    parts = []
    for wait in waits[:NAMES_MAX]:
        since = f" since {wait.since}" if wait.since else ""
        parts.append(
            f"node {wait.node} waits{since} for {len(wait.pods)} podNonInterruptLabels pod(s) "
            f"{_list(wait.pods, PODS_MAX)}"
        )
    if len(waits) > NAMES_MAX:
        parts.append(f"and {len(waits) - NAMES_MAX} more node(s)")
    return _cond("WaitingForProtectedPods", True, "ProtectedPodsRunning", "; ".join(parts))


def _invalid_spec(
    problems: Sequence[str],
    failures: Sequence[SpecFailure] = (),
    validating: Sequence[str] = (),
) -> Condition:
    """The CR's own problems first; else the package specs that failed validation (the first
    one's reason, e.g. ``ArgumentSpecViolation``); ``Unknown`` while a validation still runs."""
    if problems:
        shown = "; ".join(problems[:PROBLEMS_MAX])
        more = len(problems) - PROBLEMS_MAX
        tail = f" and {more} more" if more > 0 else ""
        return _cond("InvalidSpec", True, "ValidationFailed", shown + tail)
    if failures:
        parts = [
            f.message + (f" (validated again at {f.retry_at})" if f.retry_at else "")
            for f in failures[:PROBLEMS_MAX]
        ]
        more = len(failures) - PROBLEMS_MAX
        message = "; ".join(parts) + (f" and {more} more package(s)" if more > 0 else "")
        message += "; no node is touched until the spec is fixed"
        return _cond("InvalidSpec", True, failures[0].reason, message)
    if validating:
        message = "validating before any node is touched: " + "; ".join(validating[:NAMES_MAX])
        condition = _cond("InvalidSpec", False, "Validating", message)
        return condition.model_copy(update={"status": "Unknown"})
    return _cond("InvalidSpec", False, "Valid", "spec is valid")


def _policy_not_found(inp: AggregationInput) -> Condition:
    name = inp.cr.spec.deployment_policy
    if inp.policy_missing:
        return _cond(
            "PolicyNotFound",
            True,
            "DeploymentPolicyNotFound",
            f"DeploymentPolicy {name} not found; nothing is scheduled",
        )
    return _cond("PolicyNotFound", False, "PolicyFound", "")


def _taint_not_tolerable(nodes: Sequence[str]) -> Condition:
    if not nodes:
        return _cond(
            "TaintNotTolerable", False, "TaintsTolerable", "All nodes have tolerable taints."
        )
    message = _named_or_counted(
        nodes,
        few="has taints that are not tolerable. Skipping.",
        many="have taints that are not tolerable. Skipping.",
    )
    return _cond("TaintNotTolerable", True, "TaintNotTolerable", message)


def _drifted(drifted: Sequence[DriftView]) -> Condition:
    if not drifted:
        return _cond("Drifted", False, "NoDrift", "no node drifted from the applied packages")
    first = drifted[0]
    tasks = f" (tasks: {', '.join(first.tasks)})" if first.tasks else ""
    message = f"{len(drifted)} node(s) drifted; first: {first.node}, package {first.package}{tasks}"
    return _cond("Drifted", True, "NodesDrifted", _clip(message))


def _nodes_ignored(nodes: Sequence[str]) -> Condition:
    if not nodes:
        return _cond("NodesIgnored", False, "NoNodesIgnored", "No nodes are ignored.")
    message = _named_or_counted(nodes, few="ignored by label.", many="are ignored by label.")
    return _cond("NodesIgnored", True, "NodesIgnored", message)


def _named_or_counted(nodes: Sequence[str], *, few: str, many: str) -> str:
    """NodeWright's ``Node [a, b] <few>``, or ``<n> nodes <many>`` beyond ten names."""
    if len(nodes) > NAMES_MAX:
        return f"{len(nodes)} nodes {many}"
    return f"Node [{', '.join(sorted(nodes))}] {few}"


def _deletion_blocked(inp: AggregationInput, pending: Sequence[str]) -> Condition:
    """Paused or disabled while deletion waits for uninstalls: say so, or it looks hung."""
    where = f"{len(pending)} node(s): {_list(sorted(pending))}"
    if not (inp.paused or inp.disabled):
        return _cond("DeletionBlocked", False, "Uninstalling", f"uninstalling on {where}")
    # Disabled first, as in the CR status; the message names every annotation to remove.
    what = "disabled" if inp.disabled else "paused"
    reason = "DisabledWithPendingUninstall" if inp.disabled else "PausedWithPendingUninstall"
    keys = [k for k, on in (("disable", inp.disabled), ("pause", inp.paused)) if on]
    message = (
        f"deletion waits: the CR is {what} and uninstall is pending on {where}; remove "
        + " and ".join(f"bridge.nodewright.io/{k}" for k in keys)
        + " to continue"
    )
    return _cond("DeletionBlocked", True, reason, message)


def _node_state_malformed(malformed: Mapping[str, str]) -> Condition:
    names = sorted(malformed)
    first = names[0]
    message = (
        f"state annotation cannot be parsed on {len(names)} node(s): {_list(names)} "
        f"({first}: {_clip(malformed[first])})"
    )
    return _cond("NodeStateMalformed", True, "ParseError", message)


def _list(names: Sequence[str], limit: int = NAMES_MAX) -> str:
    shown = sorted(names)[:limit]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")
