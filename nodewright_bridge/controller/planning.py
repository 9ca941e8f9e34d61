"""Plan: from one pass's observation to the actions of every node, through ``lifecycle``.

The second of the pass's four steps. All decisions are ``lifecycle``'s; this module only feeds
them and collects their answers:

1. every plannable node is *probed* with the stage planner without permission to start new work,
   which says its status and whether it has work left; with the nodes not planned this pass
   (stale, departed) that gives the ``NodeView`` s of ``lifecycle.rollout.plan_rollout``;
2. the package specs are checked before any node works (``lifecycle.validating``): which need
   a validation pod, what the pods found, and whether new work may start; while it may not,
   the rollout's views show no node ready (no batch is picked, no member allowed);
3. the rollout plan picks the batches (``plan_rollout``), after the batch-reset rule;
4. each node is planned again with the rollout's answer (permission, order, why it cannot be
   picked), the probe reused when the input is identical; its actions, batch record and Events
   become one ``NodeWork``. A node in progress whose plan would start work of a package whose
   spec is not validated yet is planned as paused instead (``validating.holds``). This runs as a
   generator, so the apply step writes the nodes that start pods while the remaining ones are
   still planned;
5. nodes no longer targeted are let go and brand-new nodes tainted (``lifecycle.releasing``).

For the report it also collects, from every targeted node whether planned this pass or not
(stale, malformed, its plan kept), what the conditions are recomputed from: each node's drain
(``drain_views``) and the nodes carrying the ignore label (``ignored_nodes``).

``NodePlanner`` holds what plans depend on across passes: the settled nodes' kept plans, each
package's declared interrupt as any node reported it, the CR's secretVars data, and the
controller's back-off of re-attempts after an outside cause (``lifecycle.recovery``); and the
views made of each node's snapshot (node, drain, validation candidate), kept with the inputs
they read (``settled.KeptValues``), so a node that did not change costs a lookup.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial

from lifecycle import (
    actions,
    aggregation,
    draining,
    pod_records,
    preflight,
    recovery,
    releasing,
    rollout,
    stages,
    validating,
)
from lifecycle.nodestate import PackageState, batch_annotation
from lifecycle.spec import Interrupt, NodeWright
from lifecycle.status import BatchState, Status
from nodewright_bridge.controller import snapshot
from nodewright_bridge.controller.node_writes import EventNote, NodeWork
from nodewright_bridge.controller.observing import Observation
from nodewright_bridge.controller.settled import KeptValues, PlanKey, SettledNodes
from nodewright_bridge.controller.validating import ValidationSettings
from nodewright_bridge.k8s import caches


class NodePlanner:
    """The stage planner with what its answers depend on across passes (see the module doc)."""

    def __init__(
        self,
        stores: snapshot.Stores,
        settled: SettledNodes,
        outside_retry: recovery.OutsideRetry = recovery.DEFAULT_OUTSIDE_RETRY,
        failed_pod_ttl: timedelta = stages.DEFAULT_FAILED_POD_TTL,
    ) -> None:
        self._stores = stores
        self.settled = settled
        self._outside_retry = outside_retry
        self._failed_pod_ttl = failed_pod_ttl
        self._declared: dict[str, dict[str, Interrupt]] = {}
        self._secret_data: dict[str, dict[str, str]] = {}
        # per (CR, node): the views of its snapshot made in earlier passes (``KeptValues``)
        self.node_views: KeptValues[rollout.NodeView] = KeptValues()
        self.drain_views: KeptValues[aggregation.DrainView] = KeptValues()
        self.candidates: KeptValues[validating.CandidateNode] = KeptValues()

    def secret_data(self, cr: str) -> dict[str, str]:
        return self._secret_data.get(cr, {})

    def use_secret_data(self, cr: str, data: dict[str, str]) -> None:
        """The CR's secretVars digests for this pass; a change drops its kept plans."""
        if self._secret_data.get(cr, {}) != data:
            self.settled.forget(cr)
            self._secret_data[cr] = data

    def plan(
        self,
        cr: NodeWright,
        snap: snapshot.NodeSnapshot,
        key: PlanKey,
        now: datetime,
        *,
        paused: bool,
        disabled: bool,
        new_slot: bool = False,
    ) -> stages.NodePlan:
        """The stage planner's answer for ``snap`` and ``key``: kept if the node is settled.

        ``new_slot``: the rollout picked the node into a new batch now (never a kept plan: an
        erroring node re-attempts)."""
        name = cr.metadata.name
        declared = self._declared.get(name, {})
        secret_data = self._secret_data.get(name, {})
        # Everything ``plan_node`` reads but the time and the key (the learned interrupts by
        # their count: they only grow, in place).
        inputs: tuple[object, ...] = (
            cr,
            snap.facts,
            snap.state,
            snap.pods,
            snap.status,
            snap.preflight,
            snap.drift_labelled,
            disabled,
            len(declared),
            secret_data,
            snap.carried,
        )
        kept = None if new_slot else self.settled.plan(cr, snap.name, key, now, inputs)
        if kept is not None:
            self.settled.attach(cr, snap, paused=paused, disabled=disabled)
            return kept
        allowed, paused_key, order, unpickable, may_check = key
        node_plan = stages.plan_node(
            stages.NodeInput(
                cr=cr,
                node=snap.facts,
                state=snap.state,
                now=now,
                allowed_to_start=allowed,
                pods=snap.pods,
                node_order=order,
                previous_status=snap.status,
                paused=paused_key,
                disabled=disabled,
                unpickable=unpickable,
                declared=declared,
                secret_data=secret_data,
                new_slot=new_slot,
                outside_retry=self._outside_retry,
                failed_pod_ttl=self._failed_pod_ttl,
                preflight=snap.preflight,
                may_check=may_check,
                drift_labelled=snap.drift_labelled,
                carried=snap.carried,
            )
        )
        self._learn(name, node_plan.state)
        self.settled.offer(
            cr,
            snap,
            key,
            node_plan,
            self._stores,
            paused=paused,
            disabled=disabled,
            node_index=caches.BY_NODE,
            inputs=inputs,
        )
        return node_plan

    def _learn(self, cr: str, state: Mapping[str, PackageState]) -> None:
        """Remember every package's declared interrupt a node's state shows (first report wins):
        later nodes start knowing it, so they are drained before they apply."""
        for key, entry in state.items():
            if entry.declared is not None:
                self._declared.setdefault(cr, {}).setdefault(key, entry.declared)

    def forget(self, cr: str) -> None:
        self.settled.forget(cr)
        self._declared.pop(cr, None)
        self._secret_data.pop(cr, None)
        for kept in self._kept():
            kept.forget(cr)

    def prune(self, seen: Observation) -> None:
        """Drop the kept views of nodes this pass no longer shows (bounded memory)."""
        count = len(seen.snaps) + len(seen.stale) + len(seen.malformed) + len(seen.departed)

        def alive() -> set[str]:
            return {*seen.snaps, *seen.stale, *seen.malformed, *(s.name for s in seen.departed)}

        for kept in self._kept():
            kept.prune(seen.cr.metadata.name, count, alive)

    def _kept(self) -> tuple[KeptValues[object], ...]:
        return (self.node_views, self.drain_views, self.candidates)  # type: ignore[return-value]


@dataclass(slots=True)
class PassPlan:
    """What the plan step decided before the nodes' own plans (built by :func:`plan_pass`)."""

    rollout: rollout.RolloutPlan
    probes: dict[str, tuple[PlanKey, stages.NodePlan]]
    records: dict[str, dict[str, str | None]]  # node -> batch record change
    unpickable: dict[str, str]
    outside: list[actions.Action]  # releases of nodes no longer targeted
    tainting: dict[str, tuple[actions.Action, ...]]  # brand-new nodes: not planned this pass
    waiting_release: bool  # our pods on a released node must end first
    validation: validating.ValidationPlan  # check before cordon: pods, records, the gate
    checks: frozenset[str] = frozenset()  # nodes granted a check pod (``lifecycle.preflight``)
    checks_in_use: bool = False  # the CR preflights a package or detects drift


@dataclass(frozen=True, slots=True)
class ValidationInputs:
    """What the validation step reads besides the observation (None: the CR is being deleted)."""

    pods: list[validating.ValidationPod]
    missing_secrets: dict[str, list[str]]
    settings: ValidationSettings = field(default_factory=ValidationSettings)


@dataclass(slots=True)
class NodeResults:
    """What the nodes' plans said, collected while :func:`node_works` runs."""

    status: dict[str, Status] = field(default_factory=dict)
    failures: list[stages.NodeFailure] = field(default_factory=list)
    wakeups: list[datetime] = field(default_factory=list)
    works: int = 0
    # check mode, as each planned node stands once its actions are applied: its records, the
    # entries it will record and whether it shows drift (the report reads these, so Drifted and
    # the counts agree with the labels written in the same pass)
    checked: dict[str, stages.NodePlan] = field(default_factory=dict)


def plan_key(
    snap: snapshot.NodeSnapshot,
    *,
    allowed: bool,
    paused: bool,
    order: int | None = None,
    unpickable: str = "",
    may_check: bool = False,
) -> PlanKey:
    if order is None:
        order = snap.record.order if snap.record is not None else 0
    return (allowed, paused, order, unpickable, may_check)


def node_view(
    snap: snapshot.NodeSnapshot,
    probe: stages.NodePlan | None,
    *,
    ready: bool,
    status: Status | None = None,
) -> rollout.NodeView:
    status = status or (probe.status if probe is not None else (snap.status or Status.UNKNOWN))
    view = rollout.NodeView(
        name=snap.name,
        labels=snap.labels,
        taints=snap.taints,
        created=snap.created,
        status=status,
        has_pending_work=status is not Status.COMPLETE,
        record=snap.record,
        pdb_exhausted=bool(snap.blocking_pdbs),
        ready=ready,
        restart=probe is not None and probe.restart_due,
    )
    if probe is not None and probe.check_pending:
        # waiting for check mode's outcome: the rollout must not give it a slot it may not need
        view = replace(view, ready=False)
    return view


def probe_views(
    seen: Observation,
    planner: NodePlanner,
    written: Mapping[str, Status | None],
    *,
    skip: frozenset[str] = frozenset(),
) -> tuple[dict[str, tuple[PlanKey, stages.NodePlan]], list[rollout.NodeView]]:
    """Step 1: probe every plannable node (not in ``skip``) and build the rollout's views."""
    cr, now = seen.cr, seen.now
    kept = planner.node_views
    cr_name = cr.metadata.name
    probes: dict[str, tuple[PlanKey, stages.NodePlan]] = {}
    views = [_kept_view(kept, cr_name, s, None, ready=False) for s in seen.departed]
    ready = seen.ready
    for name, snap in seen.snaps.items():
        if name in skip:
            views.append(_kept_view(kept, cr_name, snap, None, ready=name in ready))
            continue
        key = plan_key(snap, allowed=False, paused=seen.paused)
        probe = planner.plan(cr, snap, key, now, paused=seen.paused, disabled=seen.disabled)
        probes[name] = (key, probe)
        views.append(_kept_view(kept, cr_name, snap, probe, ready=name in ready))
    for name, snap in seen.stale.items():
        status = written.get(name)
        views.append(_kept_view(kept, cr_name, snap, None, ready=name in ready, status=status))
    return probes, views


def _kept_view(
    kept: KeptValues[rollout.NodeView],
    cr: str,
    snap: snapshot.NodeSnapshot,
    probe: stages.NodePlan | None,
    *,
    ready: bool,
    status: Status | None = None,
) -> rollout.NodeView:
    """``node_view``, made again only when something it reads changed."""
    if probe is not None:
        inputs: tuple[object, ...] = (
            snap,
            ready,
            status or probe.status,
            probe.restart_due,
            probe.check_pending,
        )
    else:
        inputs = (snap, ready, status, False, False)
    return kept.made(
        cr, snap.name, inputs, lambda: node_view(snap, probe, ready=ready, status=status)
    )


def plan_validation(
    seen: Observation,
    planner: NodePlanner,
    views: list[rollout.NodeView],
    inputs: ValidationInputs | None,
) -> validating.ValidationPlan:
    """Step 2: the validation plan of this pass (the gate is open while the CR is deleted)."""
    if inputs is None:
        return validating.open_plan(seen.old.validations)
    targeted = set(seen.snaps) | set(seen.stale)
    return validating.plan_validation(
        validating.ValidationInput(
            cr=seen.cr,
            now=seen.now,
            records=seen.old.validations,
            pods=inputs.pods,
            nodes=validation_candidates(
                [*seen.snaps.values(), *seen.stale.values()],
                planner.candidates,
                seen.cr.metadata.name,
            ),
            secret_data=planner.secret_data(seen.cr.metadata.name),
            missing_secrets=inputs.missing_secrets,
            pull_deadline=inputs.settings.pull_deadline,
            work_pending=any(v.has_pending_work for v in views if v.name in targeted),
            may_start=not seen.disabled,
        )
    )


def validation_candidates(
    snaps: list[snapshot.NodeSnapshot],
    kept: KeptValues[validating.CandidateNode],
    cr: str,
) -> list[validating.CandidateNode]:
    """The nodes a validation pod could run on (``kept``: made again only for changed nodes)."""

    def candidate(snap: snapshot.NodeSnapshot) -> validating.CandidateNode:
        return validating.CandidateNode(
            name=snap.name, ready=snap.facts.ready, labels=snap.labels, taints=snap.taints
        )

    return [kept.made(cr, s.name, (s,), partial(candidate, s)) for s in snaps]


def plan_pass(
    seen: Observation,
    planner: NodePlanner,
    written: Mapping[str, Status | None],
    validation: ValidationInputs | None = None,
    check_limit: int = preflight.DEFAULT_CONCURRENCY,
) -> PassPlan:
    """Steps 1, 2, 3 and 5 of the module docstring (``written``: our last status of stale
    nodes; ``validation``: None while the CR is being deleted, which validates nothing)."""
    cr, now = seen.cr, seen.now
    tainting = {
        node.name: planned
        for node in seen.new_nodes
        if (planned := releasing.plan_auto_taint(cr, node))
    }
    probes, views = probe_views(seen, planner, written, skip=frozenset(tainting))
    planner.prune(seen)
    checked = plan_validation(seen, planner, views, validation)
    if not checked.open:
        views = validating.hold_views(views)
    states: dict[str, BatchState] = {}
    if not releasing.reset_batches(seen.old, cr, seen.policy):
        states = {
            c: s.batch_state for c, s in seen.old.compartments.items() if s.batch_state is not None
        }
    plan = rollout.plan_rollout(
        cr, seen.policy, views, states, now, next_node_order=seen.old.node_order_offset
    )
    record_key = batch_annotation(cr.metadata.name)
    records: dict[str, dict[str, str | None]] = {
        node: {record_key: record.model_dump_json(by_alias=True)}
        for node, record in plan.records.items()
    }
    for node in plan.released:
        if node not in seen.malformed:
            records[node] = {record_key: None}
    unpickable = {n: "node has the ignore label" for n in plan.ignored}
    unpickable.update({b.node: b.reason for b in plan.blocked})
    outside: list[actions.Action] = []
    waiting = False
    for held in seen.held:
        release = releasing.plan_release(cr, held, seen.crs, now)
        outside.extend(release.actions)
        waiting = waiting or release.waiting
    checks = frozenset[str]()
    if checked.open and not seen.paused and not seen.disabled:
        checks = preflight.grant(
            (n for n, (_, p) in probes.items() if p.check_wanted),
            running=sum(p.checks_running for _, p in probes.values()),
            limit=check_limit,
        )
    return PassPlan(
        plan,
        probes,
        records,
        unpickable,
        outside,
        tainting,
        waiting,
        checked,
        checks,
        checks_in_use(cr),
    )


def _hold_if_gated(
    seen: Observation,
    planner: NodePlanner,
    snap: snapshot.NodeSnapshot,
    key: PlanKey,
    node_plan: stages.NodePlan,
    *,
    gated: frozenset[str],
) -> stages.NodePlan:
    """A node in progress waits, as if paused, instead of starting work of a gated package."""
    allowed, _, order, unpickable, may_check = key
    paused_key: PlanKey = (allowed, True, order, unpickable, may_check)
    paused = planner.plan(
        seen.cr, snap, paused_key, seen.now, paused=seen.paused, disabled=seen.disabled
    )
    if not validating.holds(seen.cr, gated, node_plan, paused):
        return node_plan
    return validating.held_plan(node_plan, paused, gated)


def node_works(
    seen: Observation, passed: PassPlan, planner: NodePlanner, results: NodeResults
) -> Iterator[NodeWork]:
    """Step 3: each planned node's work, in node order; ``results`` collects their answers."""
    cr, plan = seen.cr, passed.rollout
    name = cr.metadata.name
    allowed = set(plan.allowed)
    gated = passed.validation.gated
    for node, snap in seen.snaps.items():
        if node in passed.tainting:  # planned once the cache shows the taint
            results.status[node] = snap.status or Status.UNKNOWN
            continue
        key = plan_key(
            snap,
            allowed=node in allowed,
            paused=seen.paused or plan.paused,
            order=plan.orders.get(node),
            unpickable=passed.unpickable.get(node, ""),
            may_check=node in passed.checks,
        )
        probe_key, probe = passed.probes[node]
        new_slot = node in plan.records  # picked into a new batch by this plan
        # The planner is pure: the probe already answered an identical input.
        node_plan = (
            probe
            if key == probe_key and not new_slot
            else planner.plan(
                cr,
                snap,
                key,
                seen.now,
                paused=seen.paused,
                disabled=seen.disabled,
                new_slot=new_slot,
            )
        )
        if gated and validating.may_hold(node_plan):
            node_plan = _hold_if_gated(seen, planner, snap, key, node_plan, gated=gated)
        extra = releasing.plan_runtime_taint(
            cr, node, taints=snap.taints, labels=snap.labels, status=node_plan.status, crs=seen.crs
        )
        node_actions = (*node_plan.actions, *extra)
        results.status[node] = node_plan.status
        if passed.checks_in_use:
            results.checked[node] = node_plan
        results.failures.extend(node_plan.failures)
        if node_plan.requeue_at is not None:
            results.wakeups.append(node_plan.requeue_at)
        notes: list[EventNote] = []
        for failure in node_plan.failures:
            if failure.final:
                why = aggregation.describe_failure(failure)
                notes.append(EventNote("NodeWright", name, "PackageFailed", why, warning=True))
        if node_actions or notes or node in passed.records:
            results.works += 1
            record, carried = _record_writes(cr, snap, node_actions, passed.records.get(node, {}))
            yield NodeWork(
                node=snap,
                actions=node_actions,
                annotations=record,
                events=notes,
                pod_annotations=carried,
            )


def _record_writes(
    cr: NodeWright,
    snap: snapshot.NodeSnapshot,
    node_actions: tuple[actions.Action, ...],
    record: Mapping[str, str | None],
) -> tuple[Mapping[str, str | None], dict[str, str]]:
    """Where the node's batch record goes (``lifecycle.pod_records``): with a pod that carries
    its start, on that pod; a record a pod carried, with the node's next state write."""
    if any(isinstance(a, actions.CreatePackagePod) and a.carries for a in node_actions):
        value = record.get(batch_annotation(cr.metadata.name))
        return {}, ({pod_records.BATCH_ANNOTATION: value} if value else {})
    writes_state = any(isinstance(a, actions.PatchNodeState) for a in node_actions)
    if snap.record_from_pod and snap.record is not None and not record and writes_state:
        return {batch_annotation(cr.metadata.name): snap.record.model_dump_json(by_alias=True)}, {}
    return record, {}


def _targeted(seen: Observation) -> Iterator[snapshot.NodeSnapshot]:
    """Every targeted node's snapshot: planned, stale or malformed."""
    yield from seen.snaps.values()
    yield from seen.stale.values()
    yield from seen.malformed.values()


def drain_views(
    seen: Observation,
    status: Mapping[str, Status],
    kept: KeptValues[aggregation.DrainView],
) -> list[aggregation.DrainView]:
    """Every targeted node's drain as observed, with its status this pass (``status``): what
    ``PDBBlocked`` is recomputed from, so a node that went erroring behind a PDB still counts.
    ``kept``: a node's view is made again only when its snapshot or status changed."""
    name = seen.cr.metadata.name

    def view(snap: snapshot.NodeSnapshot, now_status: Status) -> aggregation.DrainView:
        cordon = snap.facts.cordon
        return aggregation.DrainView(
            name=snap.name,
            status=now_status,
            held=cordon is not None and name in cordon.holders,
            to_evict=snap.facts.pods_to_evict,
            blocking_pdbs=snap.blocking_pdbs,
            blockers=tuple(draining.describe_blocker(p, d) for p, d in snap.drain.blockers),
            pdb_pods=snap.pdb_pods,
            protected_pods=snap.protected_pods,
            since=aggregation.work_started(snap.state),
        )

    views = []
    for snap in _targeted(seen):
        now = status.get(snap.name) or snap.status or Status.UNKNOWN
        views.append(kept.made(name, snap.name, (snap, now), partial(view, snap, now)))
    return views


def checks_in_use(cr: NodeWright) -> bool:
    """The CR preflights a package or detects drift: check mode is reported for it."""
    spec = cr.spec
    return spec.drift_detection is not None or any(p.preflight for p in spec.packages.values())


def check_views(
    seen: Observation, results: NodeResults | None = None
) -> tuple[dict[str, str], list[aggregation.DriftView]]:
    """Every targeted node's check-mode outcome for its current cycle and the drifted nodes
    (``lifecycle.preflight``): the per-compartment counts and ``Drifted``. A node planned this
    pass counts as its plan leaves it (``results.checked``), the others as last observed.
    Nothing to read for a CR that neither preflights a package nor detects drift."""
    if not checks_in_use(seen.cr):
        return {}, []
    versions = {name: pkg.version for name, pkg in seen.cr.spec.packages.items()}
    planned = results.checked if results is not None else {}
    checks: dict[str, str] = {}
    drifted: list[aggregation.DriftView] = []
    for snap in _targeted(seen):
        plan = planned.get(snap.name)
        state = plan.state if plan is not None else snap.state
        records = plan.preflight if plan is not None else snap.preflight
        shows_drift = plan.drifted if plan is not None else snap.drift_labelled
        outcome = preflight.node_check(versions, state, records)
        if outcome:
            checks[snap.name] = outcome
        found = preflight.drift_found(records) if shows_drift else None
        if found is not None:
            drifted.append(aggregation.DriftView(snap.name, found[0], found[1]))
    return checks, drifted


def ignored_nodes(seen: Observation) -> list[str]:
    """Targeted nodes carrying the ignore label, whatever their status (``NodesIgnored``)."""
    return sorted(s.name for s in _targeted(seen) if aggregation.carries_ignore_label(s.labels))
