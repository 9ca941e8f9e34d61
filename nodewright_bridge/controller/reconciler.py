"""The NodeWright reconciler: one key per CR, level-triggered, restart-safe.

One reconcile of CR ``name`` (it never learns which event caused it):

1. Read the CR from the cache. Invalid -> ``InvalidSpec`` (the first five field-path problems), no
   requeue (the next edit triggers a new reconcile). Being deleted -> uninstall where enabled
   (``DeletionBlocked`` while paused or disabled stops that, and so does any node whose state
   annotation of the CR does not parse), then remove everything we own from the Nodes and drop
   the finalizer. Else ensure the finalizer.
2. Snapshot the targeted nodes (``snapshot``), probe each with the stage planner *without*
   permission to start new work to learn its status and whether it has work left, and hand the
   resulting ``NodeView``s to ``lifecycle.rollout.plan_rollout``. A node no longer targeted that
   still carries our keys or cordon hold is released once our pods there have ended. A settled
   node (its plan does nothing: waiting, complete, or a pod still running) keeps its snapshot and
   plans until its Node, its pods or the CR change or a deadline passes
   (``snapshot.SettledNodes``), so a reconcile of thousands of nodes costs what changed.
3. Apply the rollout plan in the restart-safe order its docstring gives: (a) batch states and the
   node-order counter into ``status``, (b) batch records on the Nodes, (c) node plans: allowed
   nodes are planned again with ``allowed_to_start=True`` (the probe is reused when the input
   is the same); every node's actions go to the executor (work in flight always finishes,
   results are always recorded). A node's record rides on its first write of (c) - one atomic
   patch, so work never starts without it - and the executor writes nodes in parallel.
4. Aggregate the status (``lifecycle.aggregation``) and write it when it changed; requeue at the
   earliest deadline the planners reported (bounded by ``POLL_SECONDS`` while work is open).

Restart safety comes from the planners' ordering (the node state is written before any pod acts
on it) plus the executor's conditional Node writes, plus one guard here: a node whose cached
resourceVersion is older than one this process wrote (or with a pod this process created that the
pod cache does not show yet) is skipped until the cache catches up, so a decision is never re-made
from state we already changed.

Event mapping (``keys_for``) stays cheap at thousands of nodes: a Node or workload Pod maps to the
CRs that target the node (label match against a parsed-CR cache); our pods carry their CR as a
label; PDB changes map to every CR (there are few CRs); policies to the CRs that name them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from lifecycle import (
    actions,
    aggregation,
    batching,
    durations,
    rollout,
    selectors,
    sequencing,
    stages,
)
from lifecycle.nodestate import (
    CORDON_ANNOTATION,
    RUNTIME_REQUIRED_TAINT_KEY,
    CordonRecord,
    PackageState,
    batch_annotation,
    state_annotation,
    status_key,
)
from lifecycle.spec import PREFIX, DeploymentPolicy, Interrupt, NodeWright
from lifecycle.status import NodeWrightStatus, Status
from nodewright_bridge.controller import snapshot
from nodewright_bridge.controller.executor import EventNote, Executor, NodeWork, Outcome
from nodewright_bridge.controller.productmetrics import ProductMetrics
from nodewright_bridge.errors import NotFoundError
from nodewright_bridge.k8s import caches, resources
from nodewright_bridge.k8s.events import EventRecorder
from nodewright_bridge.k8s.foreground import Foreground
from nodewright_bridge.k8s.patching import Writer, has_finalizer
from nodewright_bridge.k8s.rest import Rest
from nodewright_bridge.runtime.clock import Clock
from nodewright_bridge.runtime.reconciling import Result

logger = logging.getLogger(__name__)

FINALIZER = "bridge.nodewright.io/cleanup"
AUTO_TAINT_ANNOTATION = f"{PREFIX}auto-taint"
RUNTIME_REQUIRED_TAINT_VALUE = "true"
# While any node has open work, look at least this often even without events (pods finishing
# are events too; this only bounds how long a missed event can delay a rollout).
POLL_SECONDS = 15.0
# Never requeue faster than this for a deadline: deadlines are seconds apart at best.
MIN_REQUEUE_SECONDS = 0.5
STALE_RETRY_SECONDS = 0.5
# A node no longer targeted is released once our pods on it have ended; look again this often.
RELEASE_RETRY_SECONDS = 2.0
DELETION_BLOCKED = "DeletionBlocked"


@dataclass(frozen=True, slots=True)
class ParsedCR:
    resource_version: str
    value: NodeWright | snapshot.InvalidCR


def _rv_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


def _targeted(cr: NodeWright, nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of the nodes ``cr`` targets (its node selectors match their labels)."""
    return [str(snapshot.meta_of(n).get("name")) for n in nodes if snapshot.targets(cr, n)]


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


class NodeWrightReconciler:
    """Implements ``nodewright_bridge.runtime.reconciling.Reconciler`` for NodeWright CRs."""

    def __init__(
        self,
        *,
        rest: Rest,
        writer: Writer,
        events: EventRecorder,
        stores: snapshot.Stores,
        namespace: str,
        metrics: ProductMetrics,
        clock: Clock,
        foreground: Foreground | None = None,
    ) -> None:
        self._rest = rest
        self._writer = writer
        self._stores = stores
        self._namespace = namespace
        self._metrics = metrics
        self._clock = clock
        self._lock = threading.Lock()
        self._parsed: dict[str, ParsedCR] = {}
        self._written: dict[str, int] = {}
        # The last status this process wrote per CR, with its resourceVersion: a reconcile that
        # starts before the cache has caught up must build on it, not on an older status
        # (recentFailures and batch states would otherwise be lost).
        self._statuses: dict[str, tuple[int, NodeWrightStatus]] = {}
        # Settled nodes' snapshots and plans, reused while nothing they depend on changed.
        self._settled = snapshot.SettledNodes()
        # Per CR: package key -> the interrupt its package declares, as its pods reported on any
        # node (node state ``declared``); later nodes start knowing it (drained before apply).
        self._declared: dict[str, dict[str, Interrupt]] = {}
        # Per CR: package -> digest of its secretVars' data, as last planned with. A change
        # drops the CR's kept plans: a complete node must see its package's new secret data.
        self._secret_data: dict[str, dict[str, str]] = {}
        self.executor = Executor(
            rest=rest,
            writer=writer,
            events=events,
            namespace=namespace,
            metrics=metrics,
            on_node_written=self._node_written,
            foreground=foreground,
        )

    # -- bookkeeping -------------------------------------------------------------------------

    def _node_written(self, node: str, resource_version: str) -> None:
        value = _rv_int(resource_version)
        with self._lock:
            if value > self._written.get(node, -1):
                self._written[node] = value

    def _stale(self, node: Mapping[str, Any]) -> bool:
        meta = snapshot.meta_of(node)
        name = str(meta.get("name", ""))
        with self._lock:
            written = self._written.get(name, -1)
        if written >= 0 and _rv_int(str(meta.get("resourceVersion", ""))) < written:
            return True
        return self.executor.awaiting_pods(name, self._stores.package_pods.__contains__)

    def _parse(self, obj: Mapping[str, Any]) -> NodeWright | snapshot.InvalidCR:
        meta = snapshot.meta_of(obj)
        name = str(meta.get("name", ""))
        rv = str(meta.get("resourceVersion", ""))
        with self._lock:
            cached = self._parsed.get(name)
        if cached is not None and cached.resource_version == rv:
            return cached.value
        value = snapshot.parse_nodewright(obj)
        if cached is not None and value == cached.value:
            # Only the status (or nothing we read) changed: keep the object itself, so caches
            # keyed on it (settled nodes' plans) survive the status writes of a rollout.
            value = cached.value
        with self._lock:
            self._parsed[name] = ParsedCR(rv, value)
        return value

    def _all_crs(self) -> list[NodeWright]:
        out = []
        for obj in self._stores.nodewrights.values():
            parsed = self._parse(obj)
            if isinstance(parsed, NodeWright):
                out.append(parsed)
        return out

    # -- event mapping -----------------------------------------------------------------------

    def keys_for(self, informer: str, obj: Mapping[str, Any]) -> Iterable[str]:
        if informer == caches.NODEWRIGHTS:
            name = str(snapshot.meta_of(obj).get("name", ""))
            parsed = self._parse(obj) if obj.get("spec") is not None else None
            later = []
            if isinstance(parsed, NodeWright):
                order = (parsed.spec.priority, name)
                later = [
                    c.metadata.name
                    for c in self._all_crs()
                    if (c.spec.priority, c.metadata.name) > order
                ]
            return [name, *later]
        if informer == caches.PACKAGE_PODS:
            cr = snapshot.labels_of(obj).get(snapshot.LABEL_CR)
            return [cr] if cr else []
        if informer == caches.POLICIES:
            policy = str(snapshot.meta_of(obj).get("name", ""))
            return [c.metadata.name for c in self._all_crs() if c.spec.deployment_policy == policy]
        if informer == caches.PDBS:
            return [c.metadata.name for c in self._all_crs()]
        if informer == caches.SECRETS:
            secret = str(snapshot.meta_of(obj).get("name", ""))
            return [
                c.metadata.name
                for c in self._all_crs()
                if any(
                    ref.secret_name == secret
                    for pkg in c.spec.packages.values()
                    for ref in pkg.secret_vars
                )
            ]
        if informer == caches.NODES:
            return self._crs_for_node(obj)
        if informer == caches.PODS:
            node_name = (obj.get("spec") or {}).get("nodeName")
            node = self._stores.nodes.get(node_name) if node_name else None
            return self._crs_for_node(node) if node is not None else []
        return []

    def _crs_for_node(self, node: Mapping[str, Any]) -> list[str]:
        labels = snapshot.labels_of(node)
        annotations = snapshot.annotations_of(node)
        out = []
        for cr in self._all_crs():
            name = cr.metadata.name
            if (
                selectors.matches(cr.spec.node_selectors, labels)
                or state_annotation(name) in annotations
                or batch_annotation(name) in annotations
            ):
                out.append(name)
        return out

    # -- reconcile ---------------------------------------------------------------------------

    def reconcile(self, key: str) -> Result:
        obj = self._stores.nodewrights.get(key)
        if obj is None:
            return Result()
        parsed = self._parse(obj)
        meta = snapshot.meta_of(obj)
        old = _old_status(obj)
        with self._lock:
            mine = self._statuses.get(key)
        if mine is not None and mine[0] > _rv_int(str(meta.get("resourceVersion", ""))):
            old = mine[1]
        now = self._clock.now()
        if meta.get("deletionTimestamp"):
            return self._delete(key, obj, parsed, old, now)
        if isinstance(parsed, snapshot.InvalidCR):
            status = aggregation.invalid_status(old, parsed.generation, parsed.problems, now)
            self._write_status(key, old, status)
            return Result()
        if not has_finalizer(obj, FINALIZER):
            self._writer.add_finalizer(resources.NODEWRIGHTS, key, FINALIZER)
        return self._run(parsed, old, now)

    def _policy(self, cr: NodeWright) -> DeploymentPolicy | None:
        name = cr.spec.deployment_policy
        if not name:
            return None
        raw = self._stores.policies.get(name)
        return snapshot.parse_policy(raw) if raw is not None else None

    def _run(
        self,
        cr: NodeWright,
        old: NodeWrightStatus,
        now: datetime,
        *,
        deleting: bool = False,
        uninstall_pending: Sequence[str] | None = None,
    ) -> Result:
        started = time.monotonic()
        name = cr.metadata.name
        policy = self._policy(cr)
        nodes = self._stores.nodes.values()
        pdbs = snapshot.PdbIndex.of(self._stores.pdbs.values())
        crs = self._all_crs() if not deleting else [cr]
        if all(c.metadata.name != name for c in crs):
            crs.append(cr)
        targeted_by = {id(c): _targeted(c, nodes) for c in crs}
        mine = frozenset(targeted_by[id(cr)] if id(cr) in targeted_by else _targeted(cr, nodes))
        progress = [
            sequencing.CRProgress.of(
                c,
                targets=targeted_by[id(c)],
                complete_on=snapshot.complete_on(c.metadata.name, nodes),
            )
            for c in crs
        ]
        ready_set = sequencing.ready_nodes(name, progress)
        waiting_all = sequencing.waiting_on_all(name, progress)
        paused = sequencing.is_paused(cr.metadata.annotations)
        disabled = sequencing.is_disabled(cr.metadata.annotations)
        secret_data = snapshot.secret_data(cr, self._stores.secrets, self._namespace)
        if self._secret_data.get(name, {}) != secret_data:
            self._settled.forget(name)
            self._secret_data[name] = secret_data

        outcome = Outcome()
        node_status: dict[str, Status] = {}  # every targeted node
        failures: list[stages.NodeFailure] = []
        malformed: dict[str, str] = {}  # node -> why its state annotation does not parse
        snaps: dict[str, snapshot.NodeSnapshot] = {}
        probes: dict[str, tuple[snapshot.PlanKey, stages.NodePlan]] = {}
        views: list[rollout.NodeView] = []
        stale: set[str] = set()
        record_key = batch_annotation(name)
        for node in nodes:
            node_name = str(snapshot.meta_of(node).get("name"))
            targeted = node_name in mine
            if not targeted and self._release(cr, node, now):
                outcome.soon(RELEASE_RETRY_SECONDS)  # our pods there must end first
            if not targeted and record_key not in snapshot.annotations_of(node):
                continue
            if targeted and self._auto_taint(cr, node):
                stale.add(node_name)
                outcome.soon(STALE_RETRY_SECONDS)
            kept = (
                self._settled.get(
                    cr,
                    node,
                    self._stores,
                    paused=paused,
                    disabled=disabled,
                    node_index=caches.BY_NODE,
                )
                if targeted
                else None
            )
            snap = (
                kept
                if kept is not None
                else snapshot.snapshot_node(cr, node, self._stores, pdbs, node_index=caches.BY_NODE)
            )
            if not targeted:
                views.append(_view(snap, None, ready=False))
                continue
            if snap.state_error is not None:
                malformed[node_name] = snap.state_error
                node_status[node_name] = snap.status or Status.UNKNOWN
                continue
            if node_name in stale or self._stale(node):
                # Not planned until the cache shows our write; judged by the status we wrote.
                stale.add(node_name)
                outcome.soon(STALE_RETRY_SECONDS)
                written = self.executor.written_status(name, node_name)
                node_status[node_name] = written or snap.status or Status.UNKNOWN
                views.append(_view(snap, None, ready=node_name in ready_set, status=written))
                continue
            probe_key = _plan_key(snap, allowed=False, paused=paused)
            probe = self._plan(cr, snap, probe_key, now, paused=paused, disabled=disabled)
            snaps[node_name] = snap
            probes[node_name] = (probe_key, probe)
            views.append(_view(snap, probe, ready=node_name in ready_set))

        batch_states = {
            cname: cstatus.batch_state
            for cname, cstatus in old.compartments.items()
            if cstatus.batch_state is not None
        }
        if (
            old.observed_generation is not None
            and old.observed_generation != cr.metadata.generation
            and old.status is Status.COMPLETE
            and batching.resolve_reset_flag(cr, policy)
        ):
            batch_states = {}  # a spec change after completion starts a fresh, paced rollout
        plan = rollout.plan_rollout(
            cr, policy, views, batch_states, now, next_node_order=old.node_order_offset
        )

        # (a) batch states and the order counter first.
        self._write_batch_states(name, old, plan)
        # (b) batch records on the Nodes. A planned node's record rides on its first write in (c):
        # one atomic patch, so its work never starts without it. The other nodes (stale cache,
        # malformed state) do no work in this reconcile; their records go in the same parallel
        # pass, after the nodes that work.
        records: dict[str, dict[str, str | None]] = {}
        for node_name, record in plan.records.items():
            records[node_name] = {batch_annotation(name): record.model_dump_json(by_alias=True)}
        for node_name in plan.released:
            if node_name not in malformed:
                records[node_name] = {batch_annotation(name): None}
        # (c) node plans.
        allowed = set(plan.allowed)
        unpickable = {n: "node has the ignore label" for n in plan.ignored}
        unpickable.update({b.node: b.reason for b in plan.blocked})
        wakeups: list[datetime] = []
        works = 0
        # Nodes that start pods are written while the rest are still planned. Once the rollout
        # is done, every node's record lands before the status says so (no deferral).
        with self.executor.applying(cr, outcome, defer=not plan.complete) as writes:
            for node_name, snap in snaps.items():
                key = _plan_key(
                    snap,
                    allowed=node_name in allowed,
                    paused=paused or plan.paused,
                    order=plan.orders.get(node_name),
                    unpickable=unpickable.get(node_name, ""),
                )
                probe_key, probe = probes[node_name]
                # The planner is pure: the probe already answered an identical input.
                node_plan = (
                    probe
                    if key == probe_key
                    else self._plan(cr, snap, key, now, paused=paused, disabled=disabled)
                )
                extra = self._runtime_taint_actions(cr, snap, node_plan, crs)
                node_actions = (*node_plan.actions, *extra)
                notes: list[EventNote] = []
                node_status[node_name] = node_plan.status
                failures.extend(node_plan.failures)
                if node_plan.requeue_at is not None:
                    wakeups.append(node_plan.requeue_at)
                if node_plan.status is Status.COMPLETE and snap.status is not Status.COMPLETE:
                    notes.append(
                        EventNote(
                            "Node",
                            node_name,
                            "NodeWrightComplete",
                            f"all packages of {name} complete",
                        )
                    )
                for failure in node_plan.failures:
                    if failure.final:
                        why = aggregation.describe_failure(failure)
                        notes.append(
                            EventNote("NodeWright", name, "PackageFailed", why, warning=True)
                        )
                if node_actions or notes or node_name in records:
                    works += 1
                    writes.add(
                        NodeWork(
                            node=snap,
                            actions=node_actions,
                            workload_pods=(
                                self._stores.pods.by_index(caches.BY_NODE, node_name)
                                if node_actions
                                else ()
                            ),
                            annotations=records.get(node_name, {}),
                            events=notes,
                        )
                    )
                if snap.blocking_pdbs and node_name in allowed and snap.facts.pods_to_evict:
                    outcome.pdb_blocked.setdefault(node_name, []).extend(snap.blocking_pdbs)
            planned = time.monotonic()
            writes.others({n: a for n, a in records.items() if n not in snaps})

        status = aggregation.aggregate(
            aggregation.rollout_input(
                cr,
                plan,
                node_status,
                now,
                previous=old,
                failures=failures,
                pdb_blocked=outcome.pdb_blocked,
                drain_blockers=outcome.drain_blockers,
                malformed=malformed,
                waiting_on=waiting_all,
                deletion_pending=uninstall_pending,
            )
        )
        self._announce_deletion_blocked(name, cr, old, status)
        if status.status is Status.COMPLETE and old.status is not Status.COMPLETE:
            self.executor.event(
                "NodeWright", name, "RolloutComplete", status.complete_nodes + " nodes", cr=cr
            )
        for cname, cplan in plan.compartments.items():
            if cplan.stop_reason and cname not in _stopped(old):
                self.executor.event(
                    "NodeWright", name, "Stalled", cplan.stop_reason, warning=True, cr=cr
                )
        self._write_status(name, old, status)
        self._observe(name, plan, node_status)
        logger.debug(
            "reconciled",
            extra={
                "cr": name,
                "nodes": len(node_status),
                "allowed": len(allowed),
                "works": works,
                "planning_seconds": round(planned - started, 3),
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        return Result(requeue_after=_requeue(now, wakeups, outcome, status))

    # -- helpers for _run --------------------------------------------------------------------

    def _plan(
        self,
        cr: NodeWright,
        snap: snapshot.NodeSnapshot,
        key: snapshot.PlanKey,
        now: datetime,
        *,
        paused: bool,
        disabled: bool,
    ) -> stages.NodePlan:
        """The stage planner's answer for ``snap`` and ``key``: kept if the node is settled."""
        kept = self._settled.plan(cr, snap.name, key, now)
        if kept is not None:
            return kept
        name = cr.metadata.name
        node_plan = stages.plan_node(
            _node_input(
                cr,
                snap,
                key,
                now,
                disabled=disabled,
                declared=self._declared.get(name, {}),
                secret_data=self._secret_data.get(name, {}),
            )
        )
        _learn_declared(self._declared, name, node_plan.state)
        self._settled.offer(
            cr,
            snap,
            key,
            node_plan,
            self._stores,
            paused=paused,
            disabled=disabled,
            node_index=caches.BY_NODE,
        )
        return node_plan

    def _auto_taint(self, cr: NodeWright, node: Mapping[str, Any]) -> bool:
        """Taint a brand-new node (no annotation of ours at all) for runtimeRequired CRs."""
        if not (cr.spec.runtime_required and cr.spec.auto_taint_new_nodes):
            return False
        annotations = snapshot.annotations_of(node)
        if any(k.startswith(PREFIX) for k in annotations):
            return False
        taints = (node.get("spec") or {}).get("taints") or []
        if any(t.get("key") == RUNTIME_REQUIRED_TAINT_KEY for t in taints):
            return False
        name = str(snapshot.meta_of(node).get("name"))
        wanted = [
            *taints,
            {
                "key": RUNTIME_REQUIRED_TAINT_KEY,
                "value": RUNTIME_REQUIRED_TAINT_VALUE,
                "effect": "NoSchedule",
            },
        ]
        body = {
            "metadata": {"annotations": {AUTO_TAINT_ANNOTATION: "true"}},
            "spec": {"taints": wanted},
        }
        rv = str(snapshot.meta_of(node).get("resourceVersion", ""))
        try:
            answer = self._writer.merge_patch(resources.NODES, name, body, resource_version=rv)
        except NotFoundError:
            return False
        self._node_written(name, str(snapshot.meta_of(answer).get("resourceVersion", "")))
        self.executor.event(
            "Node", name, "AutoTainted", f"runtime-required taint for {cr.metadata.name}"
        )
        return True

    def _runtime_taint_actions(
        self,
        cr: NodeWright,
        snap: snapshot.NodeSnapshot,
        node_plan: stages.NodePlan,
        crs: list[NodeWright],
    ) -> tuple[Any, ...]:
        """Remove the runtime-required taint once every runtimeRequired CR is complete here."""
        if not cr.spec.runtime_required or node_plan.status is not Status.COMPLETE:
            return ()
        taint = next((t for t in snap.taints if t.key == RUNTIME_REQUIRED_TAINT_KEY), None)
        if taint is None or _taint_kept_by(cr.metadata.name, snap.labels, crs):
            return ()
        return (actions.RemoveTaint(node=snap.name, key=taint.key, effect=taint.effect.value),)

    def _write_batch_states(
        self, name: str, old: NodeWrightStatus, plan: rollout.RolloutPlan
    ) -> None:
        wanted = plan.batch_states
        current = {
            c: s.batch_state for c, s in old.compartments.items() if s.batch_state is not None
        }
        if wanted == current and plan.next_node_order == old.node_order_offset:
            return
        body: dict[str, Any] = {
            "compartments": {
                c: {"batchState": s.model_dump(mode="json", by_alias=True)}
                for c, s in wanted.items()
            },
            "nodeOrderOffset": plan.next_node_order,
        }
        answer = self._writer.patch_status(resources.NODEWRIGHTS, name, body)
        self._remember_status(name, answer)

    def _remember_status(self, name: str, answer: Mapping[str, Any]) -> None:
        rv = _rv_int(str(snapshot.meta_of(answer).get("resourceVersion", "")))
        with self._lock:
            self._statuses[name] = (rv, _old_status(answer))

    def _write_status(self, name: str, old: NodeWrightStatus, new: NodeWrightStatus) -> None:
        old_wire = old.to_wire()
        new_wire = new.to_wire()
        if old_wire == new_wire:
            return
        body: dict[str, Any] = dict(new_wire)
        gone = {c: None for c in old.compartments if c not in new.compartments}
        if gone:
            compartments = dict(body.get("compartments") or {})
            compartments.update(gone)
            body["compartments"] = compartments
        try:
            answer = self._writer.patch_status(resources.NODEWRIGHTS, name, body)
        except NotFoundError:
            return
        self._remember_status(name, answer)

    def _observe(
        self, name: str, plan: rollout.RolloutPlan, statuses: Mapping[str, Status]
    ) -> None:
        for cname, cplan in plan.compartments.items():
            self._metrics.rollout_progress.labels(name, cname).set(cplan.status.progress_percent)
            self._metrics.rollout_batch.labels(name, cname).set(cplan.batch)
        for status in Status:
            count = sum(1 for s in statuses.values() if s is status)
            self._metrics.node_status.labels(name, status.value).set(count)

    # -- deletion ----------------------------------------------------------------------------

    def _delete(
        self,
        name: str,
        obj: Mapping[str, Any],
        parsed: NodeWright | snapshot.InvalidCR,
        old: NodeWrightStatus,
        now: datetime,
    ) -> Result:
        if not has_finalizer(obj, FINALIZER):
            return Result()
        cr = parsed if isinstance(parsed, NodeWright) else None
        malformed = self._malformed_states(name)
        if malformed:
            generation = int(snapshot.meta_of(obj).get("generation") or 0)
            self._block_deletion(
                name, cr=cr, old=old, generation=generation, malformed=malformed, now=now
            )
            return Result(requeue_after=POLL_SECONDS)  # a fix on an untargeted node maps to no CR
        if isinstance(parsed, NodeWright):
            variant = _uninstall_variant(parsed)
            pending = self._uninstall_pending(variant) if variant is not None else []
            if variant is not None and pending:
                return self._run(variant, old, now, deleting=True, uninstall_pending=pending)
        # The node cache may not hold yet a state corrupted just before the delete; cleaning up
        # would then remove it instead of blocking. Ask the API once before anything is removed.
        malformed = self._malformed_states(name, self._listed_nodes(name))
        if malformed:
            generation = int(snapshot.meta_of(obj).get("generation") or 0)
            self._block_deletion(
                name, cr=cr, old=old, generation=generation, malformed=malformed, now=now
            )
            return Result(requeue_after=POLL_SECONDS)
        live = [
            p
            for p in self._stores.package_pods.by_index(caches.BY_CR, name)
            if not snapshot.meta_of(p).get("deletionTimestamp")
        ]
        for pod in live:
            self.executor.delete_pod(str(snapshot.meta_of(pod).get("name")))
        others = [c for c in self._all_crs() if c.metadata.name != name]
        for node in self._stores.nodes.values():
            # The taint goes only from nodes this CR works on, and not while another CR needs it.
            remove_taint = (
                cr is not None
                and cr.spec.runtime_required
                and (_tracked(name, node) or snapshot.targets(cr, node))
                and not _taint_kept_by(name, snapshot.labels_of(node), others)
            )
            self._clean_node(name, node, remove_taint=remove_taint)
        self._writer.remove_finalizer(resources.NODEWRIGHTS, name, FINALIZER)
        self._metrics.forget_cr(name, list(old.compartments), [s.value for s in Status])
        with self._lock:
            self._parsed.pop(name, None)
            self._statuses.pop(name, None)
        self._settled.forget(name)
        self._declared.pop(name, None)
        self._secret_data.pop(name, None)
        self.executor.forget(name)
        logger.info("cleaned up after deleted NodeWright", extra={"cr": name})
        return Result()

    def _listed_nodes(self, name: str) -> list[Mapping[str, Any]]:
        """The nodes carrying CR ``name``'s status label, as the API has them now."""
        listed = self._rest.list(resources.NODES, label_selector=status_key(name))
        return list(listed.get("items") or ())

    def _malformed_states(
        self, name: str, nodes: Iterable[Mapping[str, Any]] | None = None
    ) -> dict[str, str]:
        """Nodes (default: the cached ones) whose state annotation of CR ``name`` does not parse,
        with the parse error."""
        key = state_annotation(name)
        out: dict[str, str] = {}
        for node in self._stores.nodes.values() if nodes is None else nodes:
            text = snapshot.annotations_of(node).get(key)
            try:
                snapshot.parse_state(text)
            except ValueError as exc:
                out[str(snapshot.meta_of(node).get("name", ""))] = str(exc) or "does not parse"
        return out

    def _block_deletion(
        self,
        name: str,
        *,
        cr: NodeWright | None,
        old: NodeWrightStatus,
        generation: int,
        malformed: Mapping[str, str],
        now: datetime,
    ) -> None:
        """Hold deletion: cleaning up would forget what those nodes run (reference §2.9)."""
        status = aggregation.deletion_blocked_by_malformed_state(
            old, cr=name, generation=generation, malformed=malformed, now=now
        )
        self._announce_deletion_blocked(name, cr, old, status)
        self._write_status(name, old, status)

    def _announce_deletion_blocked(
        self, name: str, cr: NodeWright | None, old: NodeWrightStatus, new: NodeWrightStatus
    ) -> None:
        """One Warning Event when DeletionBlocked turns True or changes its reason."""
        blocked = next((c for c in new.conditions if c.type == DELETION_BLOCKED), None)
        if blocked is None or blocked.status != "True":
            return
        was = next((c for c in old.conditions if c.type == DELETION_BLOCKED), None)
        if was is None or (was.status, was.reason) != (blocked.status, blocked.reason):
            self.executor.event(
                "NodeWright", name, DELETION_BLOCKED, blocked.message, warning=True, cr=cr
            )

    def _uninstall_pending(self, variant: NodeWright) -> list[str]:
        """Nodes whose state still records a package that deletion must uninstall."""
        key_names = {f"{n}|{p.version}" for n, p in variant.spec.packages.items()}
        out = []
        for node in self._stores.nodes.values():
            text = snapshot.annotations_of(node).get(state_annotation(variant.metadata.name))
            try:
                state = snapshot.parse_state(text)
            except ValueError:
                continue
            if key_names & set(state):
                out.append(str(snapshot.meta_of(node).get("name", "")))
        return sorted(out)

    def _release(self, cr: NodeWright, node: Mapping[str, Any], now: datetime) -> bool:
        """Let go of a node ``cr`` no longer targets; True while our pods there must end first.

        Our pods there finish (their results can no longer be recorded, but a change is not
        killed halfway unless it overran its own deadline); then the cordon hold is released
        (uncordon only if we were the last holder and the node was schedulable before) and the
        CR's state, status and batch keys go. Targeted again later, the node starts afresh.
        """
        name = cr.metadata.name
        if not _tracked(name, node):
            return False
        node_name = str(snapshot.meta_of(node).get("name", ""))
        waiting = False
        for pod in self._stores.package_pods.by_index(caches.BY_NODE, node_name):
            seen = snapshot.observe_pod(pod)
            if snapshot.labels_of(pod).get(snapshot.LABEL_CR) != name or seen is None:
                continue
            pod_name = str(snapshot.meta_of(pod).get("name", ""))
            created = snapshot.parse_time(snapshot.meta_of(pod).get("creationTimestamp"))
            overran = created is not None and now >= created + _pod_limit(cr, seen)
            if not seen.live or (overran and not seen.deleting):
                self.executor.delete_pod(pod_name)
            waiting = waiting or seen.live
        if waiting:
            return True
        # Nobody would finish this node for cr any more: its taint goes unless another
        # runtimeRequired CR still has work here.
        remove_taint = cr.spec.runtime_required and not _taint_kept_by(
            name, snapshot.labels_of(node), self._all_crs()
        )
        self._clean_node(name, node, remove_taint=remove_taint, why=f"no longer targeted by {name}")
        return False

    def _clean_node(
        self, cr: str, node: Mapping[str, Any], *, remove_taint: bool, why: str = ""
    ) -> None:
        annotations = snapshot.annotations_of(node)
        labels = snapshot.labels_of(node)
        ours = {state_annotation(cr), status_key(cr), batch_annotation(cr)}
        cordon = snapshot.parse_cordon(annotations.get(CORDON_ANNOTATION))
        holds = cordon is not None and cr in cordon.holders
        has_taint = remove_taint and any(
            t.get("key") == RUNTIME_REQUIRED_TAINT_KEY
            for t in (node.get("spec") or {}).get("taints") or ()
        )
        if not (ours & set(annotations) or status_key(cr) in labels or holds or has_taint):
            return
        name = str(snapshot.meta_of(node).get("name"))

        def decide(current: dict[str, Any]) -> list[dict[str, Any]]:
            meta = current.get("metadata") or {}
            notes = meta.get("annotations") or {}
            current_labels = meta.get("labels") or {}
            ops: list[dict[str, Any]] = []
            for key in sorted(ours):
                if key in notes:
                    ops.append({"op": "remove", "path": f"/metadata/annotations/{_escape(key)}"})
            if status_key(cr) in current_labels:
                ops.append({"op": "remove", "path": f"/metadata/labels/{_escape(status_key(cr))}"})
            record = snapshot.parse_cordon(notes.get(CORDON_ANNOTATION))
            if record is not None and cr in record.holders:
                holders = [h for h in record.holders if h != cr]
                path = f"/metadata/annotations/{_escape(CORDON_ANNOTATION)}"
                if holders:
                    kept = CordonRecord(holders=holders, was_unschedulable=record.was_unschedulable)
                    ops.append(
                        {
                            "op": "replace",
                            "path": path,
                            "value": kept.model_dump_json(by_alias=True),
                        }
                    )
                else:
                    ops.append({"op": "remove", "path": path})
                    if not record.was_unschedulable:
                        ops.append({"op": "add", "path": "/spec/unschedulable", "value": False})
            taints = (current.get("spec") or {}).get("taints") or []
            if remove_taint and any(t.get("key") == RUNTIME_REQUIRED_TAINT_KEY for t in taints):
                kept_taints = [t for t in taints if t.get("key") != RUNTIME_REQUIRED_TAINT_KEY]
                ops.append({"op": "replace", "path": "/spec/taints", "value": kept_taints})
            return ops

        answer = self._writer.modify(resources.NODES, name, decide)
        if answer is not None:
            self._node_written(name, str(snapshot.meta_of(answer).get("resourceVersion", "")))
        if holds:
            self.executor.event("Node", name, "Uncordoned", why or f"NodeWright {cr} deleted")


# ---- module helpers ----------------------------------------------------------------------------


def _pod_limit(cr: NodeWright, pod: stages.PodObservation) -> timedelta:
    """How long one of our pods may run: its package's stage or interrupt timeout."""
    pkg = cr.spec.packages.get(pod.package)
    text = (pkg.timeouts.interrupt if pod.interrupt else pkg.timeouts.stage) if pkg else "30m"
    try:
        return durations.parse_duration(text)
    except ValueError:
        return timedelta(minutes=30)


def _tracked(cr: str, node: Mapping[str, Any]) -> bool:
    """The node carries a key or cordon hold of CR ``cr``: it is ours to clean up."""
    notes = snapshot.annotations_of(node)
    cordon = snapshot.parse_cordon(notes.get(CORDON_ANNOTATION))
    keys = {state_annotation(cr), status_key(cr), batch_annotation(cr)}
    return bool(
        keys & set(notes)
        or status_key(cr) in snapshot.labels_of(node)
        or (cordon is not None and cr in cordon.holders)
    )


def _taint_kept_by(cr: str, labels: Mapping[str, str], crs: Iterable[NodeWright]) -> bool:
    """Another runtimeRequired CR targets the node and is not complete there (reference §6.3)."""
    return any(
        other.metadata.name != cr
        and other.spec.runtime_required
        and selectors.matches(other.spec.node_selectors, labels)
        and labels.get(status_key(other.metadata.name)) != Status.COMPLETE.value
        for other in crs
    )


def _old_status(obj: Mapping[str, Any]) -> NodeWrightStatus:
    try:
        return NodeWrightStatus.model_validate(obj.get("status") or {})
    except ValueError:
        return NodeWrightStatus()


def _stopped(status: NodeWrightStatus) -> set[str]:
    return {
        name
        for name, comp in status.compartments.items()
        if comp.batch_state is not None and comp.batch_state.should_stop
    }


def _view(
    snap: snapshot.NodeSnapshot,
    probe: stages.NodePlan | None,
    *,
    ready: bool,
    status: Status | None = None,
) -> rollout.NodeView:
    status = status or (probe.status if probe is not None else (snap.status or Status.UNKNOWN))
    return rollout.NodeView(
        name=snap.name,
        labels=snap.labels,
        taints=snap.taints,
        created=snap.created,
        status=status,
        has_pending_work=status is not Status.COMPLETE,
        record=snap.record,
        pdb_exhausted=bool(snap.blocking_pdbs),
        ready=ready,
    )


def _plan_key(
    snap: snapshot.NodeSnapshot,
    *,
    allowed: bool,
    paused: bool,
    order: int | None = None,
    unpickable: str = "",
) -> snapshot.PlanKey:
    if order is None:
        order = snap.record.order if snap.record is not None else 0
    return (allowed, paused, order, unpickable)


def _node_input(
    cr: NodeWright,
    snap: snapshot.NodeSnapshot,
    key: snapshot.PlanKey,
    now: datetime,
    *,
    disabled: bool,
    declared: Mapping[str, Interrupt],
    secret_data: Mapping[str, str],
) -> stages.NodeInput:
    allowed, paused, order, unpickable = key
    return stages.NodeInput(
        declared=declared,
        secret_data=secret_data,
        cr=cr,
        node=snap.facts,
        state=snap.state,
        now=now,
        allowed_to_start=allowed,
        pods=snap.pods,
        node_order=order,
        previous_status=snap.status,
        paused=paused,
        disabled=disabled,
        unpickable=unpickable,
    )


def _learn_declared(
    known: dict[str, dict[str, Interrupt]], cr: str, state: Mapping[str, PackageState]
) -> None:
    """Remember every package's declared interrupt a node's state shows (first report wins)."""
    for key, entry in state.items():
        if entry.declared is not None:
            known.setdefault(cr, {}).setdefault(key, entry.declared)


def _uninstall_variant(cr: NodeWright) -> NodeWright | None:
    """The CR as deletion runs it: only packages with uninstall enabled, each asked to uninstall."""
    packages = {
        name: pkg.model_copy(update={"uninstall": pkg.uninstall.model_copy(update={"apply": True})})
        for name, pkg in cr.spec.packages.items()
        if pkg.uninstall.enabled
    }
    if not packages:
        return None
    for name, pkg in list(packages.items()):
        deps = {d: v for d, v in pkg.depends_on.items() if d in packages}
        packages[name] = pkg.model_copy(update={"depends_on": deps})
    spec = cr.spec.model_copy(update={"packages": packages})
    return cr.model_copy(update={"spec": spec})


def _requeue(
    now: datetime, wakeups: list[datetime], outcome: Outcome, status: NodeWrightStatus
) -> float | None:
    candidates: list[float] = []
    if outcome.requeue_after is not None:
        candidates.append(outcome.requeue_after)
    for moment in wakeups:
        candidates.append(max((moment - now) / timedelta(seconds=1), MIN_REQUEUE_SECONDS))
    if status.status is not Status.COMPLETE:
        candidates.append(POLL_SECONDS)
    return min(candidates) if candidates else None
