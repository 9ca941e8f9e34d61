"""The rollout planner: which nodes of one CR may do work now.

Why one pure entry point: the controller (every reconcile), ``nwb plan`` (offline simulation) and
the collection's check mode must take the same decisions. ``plan_rollout`` is a function of the
CR, its policy, a snapshot of the nodes and the persisted batch states; it returns a
``RolloutPlan`` and touches nothing.

How a rollout moves (per compartment, see ``lifecycle.compartments`` and ``lifecycle.batching``):

1. The *current batch* of a compartment is the set of nodes whose BatchRecord (annotation
   ``bridge.nodewright.io/batch-<cr>``) names that compartment, its ``currentBatch`` number and
   the moment the batch was picked (``batchState.picked``). Records stay on the Nodes afterwards
   as history (the batch that last picked the node): releasing them would cost one Node write per
   node, and a reset batch state (numbers start over) cannot mistake an old record for a member.
   Only nodes the CR no longer targets lose their record.
2. While a member still has work and has not failed, the batch runs: its unfinished members are
   ``allowed`` to work, nobody else in the compartment is.
3. When every member is done (no pending work) or failed (ERRORING and not retrying), the batch
   is evaluated against batchThreshold / failureThreshold / safetyLimit and the batch number moves
   on. A failed node ends its slot there (not sticky, unlike NodeWright); it keeps its record and
   is not picked again while nothing changed, so it cannot eat a slot of every later batch.
   It becomes a candidate again (recovery, ``lifecycle.recovery``) when its stage planner says a
   re-attempt is due (``NodeView.restart``: the failed spec changed, an outside cause cleared or
   its back-off passed), or when its compartment was reset after the node's last pick. Picked
   again, it takes a slot in the new batch like any member and is counted there as succeeded or
   failed; the earlier batch's evaluation stands, so ``failedNodes`` counts failed slots.
4. With no current batch, a new one is picked from the candidates (nodes with pending work of
   *any* kind: first install, upgrade, config change, uninstall, a due re-attempt), at most
   ``min(strategy size, ceiling)`` of them, in this order:
   - nodes behind an exhausted PodDisruptionBudget go last (picked only when nothing else fits);
   - then by node status: in_progress (stray work), waiting, unknown, blocked, erroring
     (a re-attempt, or a node with no record of this rollout);
   - then creationTimestamp, then name.
   Nodes with label ``bridge.nodewright.io/ignore=true`` are reported ``ignored`` and nodes with
   a taint the CR does not tolerate are reported ``blocked``; neither takes a slot.
5. A compartment stopped by failureThreshold picks nothing until its batch state is reset, and
   ``stopped`` says why (for the ``Stalled`` condition). The annotation
   ``bridge.nodewright.io/reset-compartment`` on the CR (a name, a comma list, or ``*``) resets the
   named compartments that are stopped to a fresh batch state stamped with ``resetAt``: they pick
   again, starting at the initial batch, and their failed nodes are candidates once more. A
   compartment that is not stopped is left as it is, so handling the annotation twice (a
   controller restarted before it removed it) changes nothing. The plan reports what it saw
   (``reset_request``) for the controller to remove and what it reset (``compartment_resets``).

Restart safety: apply a plan in this order: (1) write the batch states (status.compartments),
(2) write ``records`` and delete ``released`` records on the Nodes, (3) start work on
``allowed`` nodes only. Planning again from any partial write gives the same or an equivalent
plan: batch membership lives on the Nodes and evaluations are replayed from it.

Guarantees: the nodes allowed to work in a compartment never exceed its ceiling (a concurrency
cap, unlike NodeWright's) unless a policy edit shrank the ceiling under a running batch, which then
finishes; a node's ``order`` (``NW_NODE_ORDER``) is fixed at its first pick and kept while it holds
a record.
Caveats: taints and the ignore label are checked when picking only; a running member finishes
its work even if a taint appears (nodes get not-ready taints while they reboot).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from lifecycle import batching, compartments, selectors, sequencing
from lifecycle.nodestate import (
    IGNORE_LABEL,
    RESET_COMPARTMENT_ANNOTATION,
    RUNTIME_REQUIRED_TAINT_KEY,
    BatchRecord,
)
from lifecycle.spec import DeploymentPolicy, NodeWright, Toleration
from lifecycle.status import BatchState, CompartmentStatus, Status

UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"

# Candidate order by node status (NodeWright's: waiting, unknown, blocked, erroring; with stray
# in_progress work first so a node already cordoned or mid-change is finished before another one
# is disturbed).
_STATUS_RANK: Mapping[Status, int] = {
    Status.IN_PROGRESS: 0,
    Status.WAITING: 1,
    Status.PAUSED: 1,
    Status.DISABLED: 1,
    Status.UNKNOWN: 2,
    Status.COMPLETE: 2,  # complete but with new pending work: the status is simply stale
    Status.BLOCKED: 3,
    Status.ERRORING: 4,
}
_NO_TIME = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class NodeView:
    """What the planner needs to know about one node, for one CR.

    Attributes:
        name: Node name.
        labels: Node labels (targeting, compartments, the ignore label).
        taints: Node taints (the toleration check when picking).
        created: metadata.creationTimestamp; older nodes are picked first. None sorts first.
        status: the node's status for this CR (``bridge.nodewright.io/status-<cr>``).
        has_pending_work: the node still has something to do for this CR (install, upgrade,
            config change, interrupt, uninstall, ...). False means done.
        record: the node's BatchRecord for this CR, if any.
        pdb_exhausted: pods on the node are protected by a PodDisruptionBudget that allows no
            disruption right now; such a node is picked only when nothing else fits.
        ready: sequencing allows this CR to work on the node (``lifecycle.sequencing``).
        retrying: ERRORING but attempts remain; the node keeps its batch slot. Set it whenever a
            retry is still due, otherwise the failure ends the node's slot.
        restart: ERRORING (failed) but a re-attempt is due (``stages.NodePlan.restart_due``):
            once its batch is evaluated the node may be picked into a new one.
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[selectors.Taint, ...] = ()
    created: datetime | None = None
    status: Status = Status.UNKNOWN
    has_pending_work: bool = True
    record: BatchRecord | None = None
    pdb_exhausted: bool = False
    ready: bool = True
    retrying: bool = False
    restart: bool = False

    @property
    def done(self) -> bool:
        return not self.has_pending_work

    @property
    def failed(self) -> bool:
        """Gave up: ERRORING with no retry due. Ends its batch slot and counts as failed."""
        return self.has_pending_work and self.status is Status.ERRORING and not self.retrying


@dataclass(frozen=True, slots=True)
class BlockedNode:
    """A candidate that cannot be picked because of taints the CR does not tolerate."""

    node: str
    compartment: str
    taints: tuple[selectors.Taint, ...]

    @property
    def reason(self) -> str:
        return "taints not tolerated: " + ", ".join(str(t) for t in self.taints)


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """One batch evaluated during this planning call."""

    batch: int
    succeeded: tuple[str, ...]
    failed: tuple[str, ...]
    batch_failed: bool
    stopped: bool


@dataclass(frozen=True, slots=True)
class CompartmentPlan:
    """The plan for one compartment.

    Attributes:
        name: compartment name (``__default__`` for the default/legacy one).
        status: the CompartmentStatus to write, including the new batch state.
        batch: number of the current batch (running, or just started by this call).
        members: nodes of the current batch (those already finished included).
        allowed: members that may do work now.
        started: the current batch was picked by this call (its records are in ``records``).
        evaluated: batches evaluated by this call, oldest first.
        stop_reason: set when the compartment is stopped by failureThreshold.
    """

    name: str
    status: CompartmentStatus
    batch: int
    members: tuple[str, ...]
    allowed: tuple[str, ...]
    started: bool
    evaluated: tuple[BatchOutcome, ...]
    stop_reason: str | None
    assigned: tuple[str, ...] = ()  # every node of the compartment


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    """What ``plan_rollout`` decided for one CR.

    Attributes:
        compartments: per compartment plan, policy order, ``__default__`` last.
        assignment: node -> compartment, for every targeted node.
        allowed: nodes that may do work now, all compartments, by node order.
        records: BatchRecords to write (new picks; unchanged records are not repeated).
        released: nodes no longer targeted whose BatchRecord must be removed.
        orders: node -> NW_NODE_ORDER for every node holding a record after this plan.
        blocked: candidates with untolerated taints (``TaintNotTolerable``).
        ignored: candidates with ``bridge.nodewright.io/ignore=true`` (``NodesIgnored``).
        waiting: nodes with pending work that sequencing keeps waiting for earlier CRs.
        stopped: compartment -> reason, for compartments stopped by failureThreshold.
        next_node_order: the next NW_NODE_ORDER to hand out; persist it (status.nodeOrderOffset).
        policy_missing: the CR names a policy that was not supplied: nothing is scheduled.
        paused: the CR is paused: evaluations happen, no node is allowed, no batch starts.
        disabled: the CR is disabled: as paused.
        complete: every targeted node is done.
        reset: batch states were reset because the rollout completed (resetBatchStateOnCompletion).
        reset_request: the CR's ``bridge.nodewright.io/reset-compartment`` value, handled by this
            plan (None: absent, or not handled because the policy is missing); the controller
            removes it once the batch states are written.
        compartment_resets: compartments that request resumed (fresh batch state, ``resetAt``).
        reset_ignored: names in the request that reset nothing -> why.
    """

    compartments: Mapping[str, CompartmentPlan]
    assignment: Mapping[str, str]
    allowed: tuple[str, ...]
    records: Mapping[str, BatchRecord]
    released: tuple[str, ...]
    orders: Mapping[str, int]
    blocked: tuple[BlockedNode, ...]
    ignored: tuple[str, ...]
    waiting: tuple[str, ...]
    stopped: Mapping[str, str]
    next_node_order: int
    policy_missing: bool = False
    paused: bool = False
    disabled: bool = False
    complete: bool = False
    reset: bool = False
    reset_request: str | None = None
    compartment_resets: tuple[str, ...] = ()
    reset_ignored: Mapping[str, str] = field(default_factory=dict)

    @property
    def picks_ahead(self) -> bool:
        """Some compartment has nodes no batch has taken yet: a batch start is still to come.

        While one is, bookkeeping writes are paced so the pass that starts it is not held up;
        once the last batch runs there is nothing to protect, and its results are written as
        they arrive (the rollout's Ready waits for every one of them)."""
        return any(
            c.status.matched > c.status.completed + c.status.failed + c.status.in_progress
            for c in self.compartments.values()
        )

    @property
    def batch_states(self) -> dict[str, BatchState]:
        """Compartment -> batch state to persist in ``status.compartments[*].batchState``."""
        return {
            name: plan.status.batch_state
            for name, plan in self.compartments.items()
            if plan.status.batch_state is not None
        }


def tolerations_for(cr: NodeWright) -> list[Toleration]:
    """Taints the CR's work tolerates when picking nodes (as NodeWright checks them).

    The cordon taint, the CR's additionalTolerations and, for runtimeRequired CRs, the
    runtime-required taint. Anything else (of any effect) makes the node ``blocked``.
    """
    tolerations = [
        Toleration(key=UNSCHEDULABLE_TAINT_KEY, operator="Exists", effect="NoSchedule"),
        *cr.spec.additional_tolerations,
    ]
    if cr.spec.runtime_required:
        tolerations.append(
            Toleration(key=RUNTIME_REQUIRED_TAINT_KEY, operator="Exists", effect="NoSchedule")
        )
    return tolerations


def _created_key(node: NodeView) -> datetime:
    if node.created is None:
        return _NO_TIME
    if node.created.tzinfo is None:
        return node.created.replace(tzinfo=UTC)
    return node.created


def _candidate_key(node: NodeView) -> tuple[bool, int, datetime, str]:
    return (node.pdb_exhausted, _STATUS_RANK[node.status], _created_key(node), node.name)


def is_member(record: BatchRecord, state: BatchState) -> bool:
    """The record belongs to the compartment's running batch (not to an earlier one, nor to an
    earlier rollout whose batch numbers started over)."""
    return bool(state.picked) and (record.batch, record.picked) == (
        state.current_batch,
        state.picked,
    )


def _moment(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text) if text else None
    except ValueError:
        return None
    if moment is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


def picked_before_reset(record: BatchRecord, state: BatchState) -> bool:
    """The node's last pick predates the compartment's reset: a failure of it may be re-tried."""
    reset = _moment(state.reset_at)
    if reset is None:
        return False
    picked = _moment(record.picked)
    return picked is None or picked < reset


def _evaluate(
    pacing: batching.Pacing,
    state: BatchState,
    recorded: Sequence[NodeView],
    total: int,
) -> tuple[BatchState, list[BatchOutcome]]:
    """Evaluate finished batches, oldest first, until the current one is running or empty."""
    outcomes: list[BatchOutcome] = []
    while not state.should_stop:
        current = [n for n in recorded if n.record is not None and is_member(n.record, state)]
        if not current or not all(n.done or n.failed for n in current):
            break
        succeeded = tuple(n.name for n in current if n.done)
        failed = tuple(n.name for n in current if n.failed)
        evaluation = batching.evaluate_batch(
            pacing, state, succeeded=len(succeeded), failed=len(failed), total=total
        )
        outcomes.append(
            BatchOutcome(
                batch=state.current_batch,
                succeeded=succeeded,
                failed=failed,
                batch_failed=evaluation.batch_failed,
                stopped=evaluation.stopped,
            )
        )
        state = evaluation.state
    return state, outcomes


def plan_rollout(
    cr: NodeWright,
    policy: DeploymentPolicy | None,
    nodes: Sequence[NodeView],
    batch_states: Mapping[str, BatchState],
    now: datetime,
    *,
    next_node_order: int = 0,
) -> RolloutPlan:
    """Decide which nodes of ``cr`` may do work now.

    Args:
        cr: the NodeWright CR (its annotations carry pause/disable).
        policy: the DeploymentPolicy the CR names, or None (legacy CRs, or not found).
        nodes: node snapshot; nodes the CR's nodeSelectors do not match are ignored (their
            records are released).
        batch_states: persisted ``status.compartments[name].batchState``; missing = fresh.
        now: the time recorded in new BatchRecords.
        next_node_order: persisted ``status.nodeOrderOffset`` (the next NW_NODE_ORDER).

    Returns:
        The plan; see ``RolloutPlan`` and the module docstring for how to apply it.
    """
    annotations = cr.metadata.annotations
    paused = sequencing.is_paused(annotations)
    disabled = sequencing.is_disabled(annotations)
    hold = paused or disabled
    targeted = [n for n in nodes if selectors.matches(cr.spec.node_selectors, n.labels)]
    targeted_names = {n.name for n in targeted}
    taken = [n.record.order for n in nodes if n.record is not None]
    order_counter = max(next_node_order, max(taken) + 1) if taken else next_node_order
    rules = compartments.build(cr, policy)
    if rules is None:
        return RolloutPlan(
            compartments={},
            assignment={},
            allowed=(),
            records={},
            released=(),
            orders={n.name: n.record.order for n in nodes if n.record is not None},
            blocked=(),
            ignored=(),
            waiting=(),
            stopped={},
            next_node_order=order_counter,
            policy_missing=True,
            paused=paused,
            disabled=disabled,
        )
    assignment = compartments.assign(rules, ((n.name, n.labels) for n in targeted))
    by_name = {n.name: n for n in targeted}
    complete = bool(targeted) and all(n.done for n in targeted)
    reset = complete and batching.resolve_reset_flag(cr, policy)

    picked_at = now.isoformat()
    # Pass 0: the reset annotation resumes stopped compartments.
    request = annotations.get(RESET_COMPARTMENT_ANNOTATION)
    loaded = {r.name: batch_states.get(r.name) or batching.fresh_state() for r in rules}
    targets = batching.reset_targets(
        request or "", {name: state.should_stop for name, state in loaded.items()}
    )
    if request is not None:
        for name in targets.reset:
            loaded[name] = batching.reset_state(picked_at)

    # Pass 1: evaluate finished batches in every compartment.
    states: dict[str, BatchState] = {}
    pacings: dict[str, batching.Pacing] = {}
    outcomes: dict[str, list[BatchOutcome]] = {}
    for rule in rules:
        ceiling = assignment.ceilings[rule.name]
        pacing = rule.pacing_for(ceiling)
        pacings[rule.name] = pacing
        recorded = [
            n for n in targeted if n.record is not None and n.record.compartment == rule.name
        ]
        state = loaded[rule.name]
        state, evaluated = _evaluate(pacing, state, recorded, len(assignment.members[rule.name]))
        states[rule.name] = state
        outcomes[rule.name] = evaluated

    def is_current(record: BatchRecord) -> bool:
        state = states.get(record.compartment)
        return state is not None and is_member(record, state)

    tolerations = tolerations_for(cr)
    records: dict[str, BatchRecord] = {}
    blocked: list[BlockedNode] = []
    ignored: list[str] = []
    waiting: list[str] = []
    stopped: dict[str, str] = {}
    plans: dict[str, CompartmentPlan] = {}

    # Pass 2: run or start batches.
    for rule in rules:
        name = rule.name
        state = states[name]
        pacing = pacings[name]
        ceiling = assignment.ceilings[name]
        assigned = [by_name[x] for x in assignment.members[name]]
        members = [
            n
            for n in targeted
            if n.record is not None and n.record.compartment == name and is_current(n.record)
        ]
        candidates: list[NodeView] = []
        for node in assigned:
            if node.done or (node.record is not None and is_current(node.record)):
                continue
            if (
                node.failed
                and node.record is not None
                and not node.restart
                and not picked_before_reset(node.record, state)
            ):
                continue  # failed, and nothing changed since: counted once, not picked again
            if not node.ready:
                waiting.append(node.name)
                continue
            if node.labels.get(IGNORE_LABEL) == "true":
                ignored.append(node.name)
                continue
            bad = selectors.untolerated_taints(node.taints, tolerations)
            if bad:
                blocked.append(BlockedNode(node=node.name, compartment=name, taints=tuple(bad)))
                continue
            candidates.append(node)

        stop_reason: str | None = None
        started = False
        allowed: list[NodeView] = []
        if state.should_stop:
            stop_reason = batching.stop_reason(name, pacing, state, total=len(assigned))
            stopped[name] = stop_reason
        elif members:
            unfinished = [n for n in members if not n.done and not n.failed]
            waiting.extend(n.name for n in unfinished if not n.ready)
            if not hold:
                allowed = [n for n in unfinished if n.ready]
        elif candidates and not hold:
            size = batching.next_batch_size(pacing, state, total=len(assigned), ceiling=ceiling)
            state = state.model_copy(update={"picked": picked_at})
            for node in sorted(candidates, key=_candidate_key)[:size]:
                order = node.record.order if node.record is not None else order_counter
                if node.record is None:
                    order_counter += 1
                record = BatchRecord(
                    compartment=name, batch=state.current_batch, order=order, picked=picked_at
                )
                records[node.name] = record
                members.append(node)
                allowed.append(node)
            started = True

        def order_of(node: NodeView) -> tuple[int, str]:
            record = records.get(node.name) or node.record
            return (record.order if record is not None else -1, node.name)

        members.sort(key=order_of)
        allowed.sort(key=order_of)
        done = sum(1 for n in assigned if n.done)
        failed = sum(1 for n in assigned if n.failed)
        state_out = batching.fresh_state() if reset else state
        plans[name] = CompartmentPlan(
            name=name,
            status=CompartmentStatus(
                matched=len(assigned),
                ceiling=ceiling,
                in_progress=len(allowed),
                completed=done,
                failed=failed,
                progress_percent=batching.progress_percent(done, len(assigned)),
                strategy=pacing.label,
                batch_state=state_out,
            ),
            batch=state.current_batch,
            members=tuple(n.name for n in members),
            allowed=tuple(n.name for n in allowed),
            started=started,
            evaluated=tuple(outcomes[name]),
            stop_reason=stop_reason,
            assigned=tuple(n.name for n in assigned),
        )

    released: list[str] = []
    for node in nodes:
        if node.record is None or node.name in records:
            continue
        if node.name not in targeted_names:
            released.append(node.name)

    orders = {n.name: n.record.order for n in nodes if n.record is not None}
    for gone in released:
        orders.pop(gone, None)
    orders.update({node: record.order for node, record in records.items()})
    allowed_all = sorted(
        (node for plan in plans.values() for node in plan.allowed), key=lambda n: (orders[n], n)
    )
    return RolloutPlan(
        compartments=plans,
        assignment=dict(assignment.of_node),
        allowed=tuple(allowed_all),
        records=records,
        released=tuple(sorted(released)),
        orders=orders,
        blocked=tuple(blocked),
        ignored=tuple(ignored),
        waiting=tuple(waiting),
        stopped=stopped,
        next_node_order=order_counter,
        paused=paused,
        disabled=disabled,
        complete=complete,
        reset=reset,
        reset_request=request,
        compartment_resets=targets.reset if request is not None else (),
        reset_ignored=dict(targets.ignored) if request is not None else {},
    )
