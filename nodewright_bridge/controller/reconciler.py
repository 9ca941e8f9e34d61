"""The NodeWright reconciler: one key per CR, level-triggered, restart-safe.

One reconcile of CR ``name`` (it never learns which event caused it):

- Invalid -> ``InvalidSpec`` (the first five field-path problems), no requeue (the next edit
  triggers a new reconcile). Being deleted -> see :meth:`NodeWrightReconciler._delete`. Else the
  finalizer is ensured and one *pass* runs, in four steps, each a function of its own:

  1. **observe** (``observing.observe``): snapshots of the targeted nodes from the caches, nodes
     to let go, nodes set apart (malformed state, a cache that lags our own write);
  2. **plan** (``planning``): every decision is ``lifecycle``'s - the validation of the package
     specs (check before cordon: no new work until they pass), the rollout's batches, each
     node's stage plan, the release of nodes no longer targeted;
  3. **apply** (:meth:`NodeWrightReconciler._apply`): the validation pods to create, then in
     the restart-safe order the rollout planner's docstring gives - (a) batch states and the
     node-order counter into ``status``, then the handled ``bridge.nodewright.io/reset-compartment``
     annotation removed (only if its value is still the one handled; handling it again resets
     nothing), (b)+(c) each node's batch record riding on its first write (one atomic patch, so
     work never starts without it) and its actions, written by the executor in parallel, the
     nodes that start pods while the rest are still planned; then the releases;
  4. **report** (:meth:`NodeWrightReconciler._report`): the aggregated status with the
     validation records (written when it changed), then the finished validation pods deleted,
     Events, metrics, and the requeue at the earliest deadline the planners reported (bounded
     by ``POLL_SECONDS`` while work is open).

Restart safety comes from the planners' ordering (the node state is written before any pod acts
on it, or, for a fresh install's first attempt, carried by the pod: ``lifecycle.pod_records``),
the executor's conditional Node writes, and the stale-node guard of the observe step.

Event mapping (``keys_for``) lives in ``event_mapping``.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from lifecycle import (
    actions,
    aggregation,
    batching,
    preflight,
    recovery,
    releasing,
    rollout,
    stages,
)
from lifecycle.nodestate import RESET_COMPARTMENT_ANNOTATION, status_key
from lifecycle.spec import DeploymentPolicy, NodeWright
from lifecycle.status import NodeWrightStatus, Status
from nodewright_bridge.clock import Clock
from nodewright_bridge.controller import (
    deleting,
    event_mapping,
    observing,
    planning,
    snapshot,
    validating,
)
from nodewright_bridge.controller.executor import Executor
from nodewright_bridge.controller.failure_logs import FailureLogs
from nodewright_bridge.controller.node_writes import NodeWork, Outcome, WriteCounts
from nodewright_bridge.controller.productmetrics import ProductMetrics
from nodewright_bridge.controller.settled import SettledNodes
from nodewright_bridge.errors import NotFoundError
from nodewright_bridge.k8s import caches, resources
from nodewright_bridge.k8s.events import EventRecorder
from nodewright_bridge.k8s.foreground import Foreground
from nodewright_bridge.k8s.patching import Writer, has_finalizer
from nodewright_bridge.k8s.rest import Rest
from nodewright_bridge.runtime.reconciling import Result

logger = logging.getLogger(__name__)

FINALIZER = releasing.FINALIZER
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
        outside_retry: recovery.OutsideRetry = recovery.DEFAULT_OUTSIDE_RETRY,
        validation: validating.ValidationSettings | None = None,
        failed_pod_ttl: timedelta = stages.DEFAULT_FAILED_POD_TTL,
        check_concurrency: int = preflight.DEFAULT_CONCURRENCY,
    ) -> None:
        self._rest = rest
        self._check_concurrency = check_concurrency
        self._validation = validation or validating.ValidationSettings()
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
        self._targeting = observing.Targeting()
        self._touched = observing.Touched()  # nodes whose "stale" answer may have changed
        self._observed = observing.ObservedRows()
        self._planner = planning.NodePlanner(
            stores, SettledNodes(), outside_retry, failed_pod_ttl=failed_pod_ttl
        )
        self._failure_logs = FailureLogs(rest, namespace)
        self.executor = Executor(
            rest=rest,
            writer=writer,
            events=events,
            namespace=namespace,
            metrics=metrics,
            on_node_written=self._node_written,
            clock=clock,
            foreground=foreground,
            on_pod_started=self._touched.touch,
        )

    # -- bookkeeping -------------------------------------------------------------------------

    def _node_written(self, node: str, resource_version: str) -> None:
        value = _rv_int(resource_version)
        with self._lock:
            if value > self._written.get(node, -1):
                self._written[node] = value
        self._touched.touch(node)

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
        """The CRs an informer event may concern (see ``event_mapping``)."""
        return event_mapping.keys_for(informer, obj, self._stores, self._parse, self._all_crs)

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
        """One pass: observe -> plan -> apply -> report (see the module docstring)."""
        started = self._clock.monotonic()
        name = cr.metadata.name
        crs = [cr] if deleting else self._all_crs()
        if all(c.metadata.name != name for c in crs):
            crs.append(cr)
        self._planner.use_secret_data(
            name, snapshot.secret_data(cr, self._stores.secrets, self._namespace)
        )
        cached = observing.Caches(
            self._stores,
            self._planner.settled,
            self._stale,
            self._targeting,
            touched=self._touched,
            observed=self._observed,
        )
        seen = observing.observe(cr, old, now, crs=crs, policy=self._policy(cr), cached=cached)
        written = {n: self.executor.written_status(name, n) for n in seen.stale}
        checking = None
        if not deleting:
            checking = planning.ValidationInputs(
                pods=validating.observe_pods(self._stores, name),
                missing_secrets=validating.missing_secrets(
                    cr, self._stores.secrets, self._namespace
                ),
                settings=self._validation,
            )
        passed = planning.plan_pass(
            seen, self._planner, written, checking, check_limit=self._check_concurrency
        )
        outcome, results, planned, counts = self._apply(seen, passed)
        if results.failures:
            self._keep_failure_logs(name, results.failures)
        results.status.update(observing.node_statuses(seen, written.get))
        if passed.validation.requeue_at is not None:
            results.wakeups.append(passed.validation.requeue_at)
        status = self._report(seen, passed, outcome, results, uninstall_pending)
        logger.debug(
            "reconciled",
            extra={
                "cr": name,
                "nodes": len(results.status),
                "allowed": len(passed.rollout.allowed),
                "works": results.works,
                "starting": counts.starting,
                "written": counts.written,
                "deferred": counts.deferred,
                "node_patches": outcome.node_patches,
                "planning_seconds": round(planned - started, 3),
                "seconds": round(self._clock.monotonic() - started, 3),
            },
        )
        return Result(requeue_after=_requeue(now, results.wakeups, outcome, status))

    def _keep_failure_logs(self, cr: str, failures: Sequence[stages.NodeFailure]) -> None:
        """The failures' log tails, kept in the nodes' ConfigMaps (``failure_logs``)."""
        uids = {}
        for failure in failures:
            node = self._stores.nodes.get(failure.node)
            if node is not None:
                uids[failure.node] = str(snapshot.meta_of(node).get("uid", ""))
        self._failure_logs.keep(cr, failures, uids)

    def _apply(
        self, seen: observing.Observation, passed: planning.PassPlan
    ) -> tuple[Outcome, planning.NodeResults, float, WriteCounts]:
        """Step 3: batch states, then every node's work (planned while written), releases."""
        cr = seen.cr
        outcome = Outcome()
        results = planning.NodeResults()
        if passed.waiting_release:
            outcome.soon(RELEASE_RETRY_SECONDS)  # our pods there must end first
        if seen.stale or passed.tainting:
            outcome.soon(STALE_RETRY_SECONDS)
        validating.start_pods(self.executor, cr, passed.validation)
        self._write_batch_states(cr, seen.old, passed.rollout)
        self._handled_reset(cr, passed.rollout)
        # Bookkeeping is paced only while a batch start is still to come (``picks_ahead``); so
        # once the rollout is done, every node's record lands before the status says so. Only a
        # pass that picks a batch holds other work behind its pod starts; in the others the
        # results are what the next batch waits for, so they go out while the pass plans.
        picks = bool(passed.rollout.records)
        defer = passed.rollout.picks_ahead
        with self.executor.applying(cr, outcome, defer=defer, hold=picks) as writes:
            for work in planning.node_works(seen, passed, self._planner, results):
                writes.add(work)
            planned = self._clock.monotonic()
            writes.others({n: a for n, a in passed.records.items() if n not in seen.snaps})
            for node, taint in passed.tainting.items():
                record = passed.records.get(node, {})
                writes.add(NodeWork(node=seen.snaps[node], actions=taint, annotations=record))
        self.executor.apply_outside(cr.metadata.name, passed.outside)
        return outcome, results, planned, writes.counts

    def _report(
        self,
        seen: observing.Observation,
        passed: planning.PassPlan,
        outcome: Outcome,
        results: planning.NodeResults,
        uninstall_pending: Sequence[str] | None,
    ) -> NodeWrightStatus:
        """Step 4: aggregate and write the status, post the rollout's Events, set metrics."""
        cr, old, plan = seen.cr, seen.old, passed.rollout
        name = cr.metadata.name
        checks, drifted = planning.check_views(seen, results)
        status = aggregation.aggregate(
            aggregation.rollout_input(
                cr,
                plan,
                results.status,
                seen.now,
                previous=old,
                failures=results.failures,
                pdb_blocked=outcome.pdb_blocked,
                drain_blockers=outcome.drain_blockers,
                drains=planning.drain_views(seen, results.status, self._planner.drain_views),
                ignored=planning.ignored_nodes(seen),
                malformed={n: s.state_error or "" for n, s in seen.malformed.items()},
                waiting_on=seen.waiting_on,
                deletion_pending=uninstall_pending,
                validation=passed.validation,
                checks=checks,
                drifted=drifted,
            )
        )
        self._announce_deletion_blocked(name, cr, old, status)
        if status.status is Status.COMPLETE and old.status is not Status.COMPLETE:
            note = status.complete_nodes + " nodes"
            self.executor.event("NodeWright", name, "RolloutComplete", note, cr=cr)
        for cname, cplan in plan.compartments.items():
            if cplan.stop_reason and cname not in _stopped(old):
                self.executor.event(
                    "NodeWright", name, "Stalled", cplan.stop_reason, warning=True, cr=cr
                )
        self._write_status(name, old, status)
        # The outcome is in the status now: its pods may go, its Events be told.
        validating.delete_pods(self.executor, passed.validation.delete)
        for told in passed.validation.events:
            warning = told.type is actions.EventType.WARNING
            self.executor.event(
                told.kind, told.name, told.reason, told.message, warning=warning, cr=cr
            )
        self._set_metrics(name, plan, results.status)
        return status

    # -- status ------------------------------------------------------------------------------

    def _write_batch_states(
        self, cr: NodeWright, old: NodeWrightStatus, plan: rollout.RolloutPlan
    ) -> None:
        name = cr.metadata.name
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
        # The evaluations are in the status now: tell each one (once: the next pass reads it).
        for note in batching.batch_notes(current, wanted):
            self.executor.event(
                "NodeWright", name, note.reason, note.message, warning=note.batch_failed, cr=cr
            )

    def _handled_reset(self, cr: NodeWright, plan: rollout.RolloutPlan) -> None:
        """The reset annotation was acted on (its batch states are written): announce it and
        remove it, unless someone changed its value since (then the next pass handles that)."""
        request = plan.reset_request
        if request is None:
            return
        name = cr.metadata.name
        for compartment in plan.compartment_resets:
            note = f"compartment {compartment} resumed by {RESET_COMPARTMENT_ANNOTATION}"
            self.executor.event("NodeWright", name, "CompartmentReset", note, cr=cr)
        for target, why in plan.reset_ignored.items():
            note = f"{RESET_COMPARTMENT_ANNOTATION}: {target}: {why}; nothing reset"
            self.executor.event(
                "NodeWright", name, "CompartmentResetIgnored", note, warning=True, cr=cr
            )
        path = "/metadata/annotations/" + RESET_COMPARTMENT_ANNOTATION.replace("/", "~1")

        def decide(obj: Mapping[str, Any]) -> list[dict[str, Any]] | None:
            if snapshot.annotations_of(obj).get(RESET_COMPARTMENT_ANNOTATION) != request:
                return None
            return [{"op": "remove", "path": path}]

        self._writer.modify(resources.NODEWRIGHTS, name, decide)

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
        for field_name, before, after in (
            ("compartments", old.compartments, new.compartments),
            ("validations", old.validations, new.validations),
        ):
            gone = {c: None for c in before if c not in after}
            if gone:  # a merge patch removes a map key only when told so
                kept = dict(body.get(field_name) or {})
                kept.update(gone)
                body[field_name] = kept
        try:
            answer = self._writer.patch_status(resources.NODEWRIGHTS, name, body)
        except NotFoundError:
            return
        self._remember_status(name, answer)

    def _set_metrics(
        self, name: str, plan: rollout.RolloutPlan, statuses: Mapping[str, Status]
    ) -> None:
        for cname, cplan in plan.compartments.items():
            self._metrics.rollout_progress.labels(name, cname).set(cplan.status.progress_percent)
            self._metrics.rollout_batch.labels(name, cname).set(cplan.batch)
        counts = Counter(statuses.values())
        for status in Status:
            self._metrics.node_status.labels(name, status.value).set(counts[status])

    # -- deletion ----------------------------------------------------------------------------

    def _delete(
        self,
        name: str,
        obj: Mapping[str, Any],
        parsed: NodeWright | snapshot.InvalidCR,
        old: NodeWrightStatus,
        now: datetime,
    ) -> Result:
        """Uninstall where enabled, then let go of every node and drop the finalizer.

        ``DeletionBlocked`` holds it while the CR is paused or disabled with uninstalls pending,
        or while a node's state annotation of the CR does not parse (asked of the cache, and
        once more of the API just before anything is removed: the cache may not show yet a
        state corrupted just before the delete).
        """
        if not has_finalizer(obj, FINALIZER):
            return Result()
        cr = parsed if isinstance(parsed, NodeWright) else None
        generation = int(snapshot.meta_of(obj).get("generation") or 0)
        cached = self._stores.nodes.values()
        if self._blocked_by_malformed(name, cr, old, generation=generation, now=now, nodes=cached):
            return Result(requeue_after=POLL_SECONDS)  # a fix on an untargeted node maps to no CR
        variant = releasing.uninstall_variant(cr) if cr is not None else None
        if variant is not None:
            ours = self._stores.package_pods.by_index(caches.BY_CR, name)
            pending = deleting.uninstall_pending(variant, self._stores.nodes.values(), ours)
            if pending:
                return self._run(variant, old, now, deleting=True, uninstall_pending=pending)
        listed = self._rest.list(resources.NODES, label_selector=status_key(name))
        fresh = listed.get("items") or ()
        if self._blocked_by_malformed(name, cr, old, generation=generation, now=now, nodes=fresh):
            return Result(requeue_after=POLL_SECONDS)
        live = [
            str(snapshot.meta_of(p).get("name"))
            for p in self._stores.package_pods.by_index(caches.BY_CR, name)
            if not snapshot.meta_of(p).get("deletionTimestamp")
        ]
        nodes = [snapshot.held_node(name, n) for n in self._stores.nodes.values()]
        others = [c for c in self._all_crs() if c.metadata.name != name]
        cleanup = releasing.plan_deletion(name, cr, nodes, live, others)
        self.executor.apply_outside(name, cleanup)
        self._metrics.forget_cr(name, list(old.compartments), [s.value for s in Status])
        with self._lock:
            self._parsed.pop(name, None)
            self._statuses.pop(name, None)
        self._planner.forget(name)
        self.executor.forget(name)
        logger.info("cleaned up after deleted NodeWright", extra={"cr": name})
        return Result()

    def _blocked_by_malformed(
        self,
        name: str,
        cr: NodeWright | None,
        old: NodeWrightStatus,
        *,
        generation: int,
        now: datetime,
        nodes: Iterable[Mapping[str, Any]],
    ) -> bool:
        """Hold deletion while a node's state does not parse (cleanup would forget what it
        runs): ``DeletionBlocked``/``MalformedNodeState`` names the nodes."""
        malformed = deleting.malformed_states(name, nodes)
        if not malformed:
            return False
        status = aggregation.deletion_blocked_by_malformed_state(
            old, cr=name, generation=generation, malformed=malformed, now=now
        )
        self._announce_deletion_blocked(name, cr, old, status)
        self._write_status(name, old, status)
        return True

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


# ---- module helpers ----------------------------------------------------------------------------


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


def _requeue(
    now: datetime, wakeups: list[datetime], outcome: Outcome, status: NodeWrightStatus
) -> float | None:
    candidates: list[float] = []
    if outcome.requeue_after is not None:
        candidates.append(outcome.requeue_after)
    if wakeups:  # the earliest of thousands (a running batch: one deadline per node)
        candidates.append(max((min(wakeups) - now) / timedelta(seconds=1), MIN_REQUEUE_SECONDS))
    if status.status is not Status.COMPLETE:
        candidates.append(POLL_SECONDS)
    return min(candidates) if candidates else None
