"""Apply the planners' actions to the cluster: dumb, idempotent, and conditional on what was read.

Every Node write of one node's plan is a merge patch *conditional on the resourceVersion the plan
was computed from* (the snapshot's, then each write's answer). If anything else wrote the Node in
between (another CR's reconcile, a human, the kubelet) the API server answers 409, the rest of
that node's actions are skipped and the reconcile asks to be requeued at once: the next plan is
made from the fresh object. This is what makes "plan from a stale cache" harmless: a decision is
only ever written on top of exactly the state it was based on (so an interrupt is never recorded
twice and a cordon record never loses a holder).

Pods and ConfigMaps have deterministic names: create-if-absent (409 AlreadyExists is success),
delete-if-present (404 is success).

Drains never block the reconcile: one round of evictions (concurrent, through the Eviction API so
the API server enforces every PodDisruptionBudget) per reconcile; a 429 names the refusing PDB and
the reconcile is requeued after a short back-off; the stage planner sees the pods that are left
(``pods_to_evict``) and gives up at the drain deadline.

Fewer, parallel writes (issue 5: a rollout must stay within 10 % of its batches' durations):

- consecutive Node changes of one node's action list (state, status label, cordon, taints, and
  the batch record the reconciler hands along) are merged into ONE conditional merge patch, sent
  before the first action that acts on the world (pod create/delete, drain) and at the end. One
  patch is atomic, so "record before work" and "state before pod" hold exactly as with separate
  writes; Events that followed a Node change are posted after the merged write succeeded;
- different nodes are independent: :class:`NodeWrites` runs each node's list on a bounded thread
  pool (:data:`NODE_CONCURRENCY`), one node's actions always in order on one thread, a node that
  starts pods as soon as the pass has planned it; a conflict on one node skips only that node's
  remaining actions;
- the vars ConfigMap of a package is created once per pass, not once per pod, while the first
  Node writes go out (pod creates wait for it);
- pods whose result is recorded (or that must go) are deleted by a small background pool, not
  by the pass: the Node write that recorded the result came first, and a delete that never
  happens (the process died) is planned again from the next snapshot, where the pod still is;
- bookkeeping (nodes that start no pod and take no batch record) is written at most
  :data:`BOOKKEEPING_PER_PASS` nodes per call; the rest is left to the next pass (requeued at
  once), so no pass over thousands of nodes holds up the one that starts the next batch.

Guarantees: an action list is applied in order and stops at the first failed Node write, so a pod
is never created without the node-state record that precedes it in the list.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from lifecycle import actions, draining, selectors
from lifecycle.nodestate import (
    CORDON_ANNOTATION,
    CordonRecord,
    PackageState,
    state_annotation,
    status_key,
)
from lifecycle.selectors import TaintEffect
from lifecycle.spec import NodeWright
from lifecycle.status import Status
from nodewright_bridge import podspec
from nodewright_bridge.controller import snapshot
from nodewright_bridge.controller.productmetrics import ProductMetrics
from nodewright_bridge.errors import (
    AlreadyExistsError,
    ConflictError,
    DisruptionBudgetError,
    LeadershipLostError,
    NotFoundError,
    TooManyRequestsError,
)
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.events import EventRecorder, EventType, ObjectRef
from nodewright_bridge.k8s.foreground import Foreground
from nodewright_bridge.k8s.patching import Writer
from nodewright_bridge.k8s.rest import Rest

logger = logging.getLogger(__name__)

JsonObject = dict[str, Any]

# Evictions are independent API calls; 8 at once drains a busy GPU node in one round without
# flooding the API server when many nodes drain in the same reconcile.
EVICTION_CONCURRENCY = 8
# A PDB refusal is re-tried on the next reconcile; 5 s lets the budget's controller observe a
# replacement pod becoming Ready without hammering the API server.
PDB_RETRY_SECONDS = 5.0
# After a conflicting Node write, look again almost at once: the cache is catching up.
CONFLICT_RETRY_SECONDS = 0.5
# Nodes written at once by apply_nodes. A batch of hundreds of nodes is started within a second or
# two instead of tens of seconds of sequential round trips; 16 keeps well inside the client's
# connection pool (32) and the API server's default in-flight limits.
NODE_CONCURRENCY = 16
# Nodes written per pass that neither start a pod nor take a batch record (bookkeeping: status
# labels, recording finished pods); the rest wait for the next pass, moments later.
# A pass over thousands of such nodes (every node turning "waiting" in a CR's first reconcile,
# a 2,048-node batch finishing) would otherwise take tens of seconds of API time, and the pass
# that notices the batch is done - and starts the next one - would wait for it. 64 writes are
# ~0.2 s at NODE_CONCURRENCY: short passes notice a batch's last pod sooner (measured: 1,000
# nodes, gaps between batches 0.2-0.6 s instead of 0.3-0.75 s with 256).
BOOKKEEPING_PER_PASS = 64
# A pod we created that the cache has not shown after this long is no longer waited for (a watch
# normally shows it within milliseconds; a relist may have skipped a pod created and deleted).
UNSEEN_POD_SECONDS = 30.0
# Background pod deletes at once (each is one DELETE; the kubelet then stops the containers).
DELETE_CONCURRENCY = 8
# When bookkeeping was left for the next pass, that pass comes this soon.
DEFERRED_RETRY_SECONDS = 0.2
_BUDGET_NAME = re.compile(r"disruption budget (\S+)", re.IGNORECASE)


@dataclass(slots=True)
class Outcome:
    """What applying the actions of one reconcile learned (feeds status and requeue)."""

    requeue_after: float | None = None
    pdb_blocked: dict[str, list[str]] = field(default_factory=dict)  # node -> "ns/pdb"
    drain_blockers: dict[str, list[str]] = field(default_factory=dict)  # node -> messages
    evicted: int = 0
    conflicts: int = 0

    def soon(self, seconds: float) -> None:
        if self.requeue_after is None or seconds < self.requeue_after:
            self.requeue_after = seconds

    def absorb(self, other: Outcome) -> None:
        """Add what ``other`` (one node's share, applied on another thread) learned."""
        if other.requeue_after is not None:
            self.soon(other.requeue_after)
        for node, budgets in other.pdb_blocked.items():
            self.pdb_blocked.setdefault(node, []).extend(budgets)
        for node, lines in other.drain_blockers.items():
            self.drain_blockers.setdefault(node, []).extend(lines)
        self.evicted += other.evicted
        self.conflicts += other.conflicts


class NodeConflictError(Exception):
    """A conditional Node write lost a race: skip this node's remaining actions."""


class NodePatcher:
    """The Node changes of one node's action list, merged and written conditionally.

    :meth:`patch` only queues a change; :meth:`flush` writes everything queued as one merge patch
    conditional on the last resourceVersion seen (the snapshot's, then each write's answer).
    Callbacks queued with ``then`` (Events about the change) run only after that write succeeded.
    """

    def __init__(
        self,
        writer: Writer,
        node: snapshot.NodeSnapshot,
        on_written: Callable[[str, str], None],
    ) -> None:
        self._writer = writer
        self.name = node.name
        self.resource_version = node.resource_version
        self.state: dict[str, PackageState] = dict(node.state)
        self.cordon = node.facts.cordon
        self.unschedulable = node.facts.unschedulable
        self.taints = list(node.taints)
        self._on_written = on_written
        self._pending: dict[str, Any] = {}
        self._after: list[Callable[[], None]] = []
        self.writes = 0

    def patch(self, body: Mapping[str, Any], *, then: Callable[[], None] | None = None) -> None:
        """Queue ``body`` (a merge patch) for the next write; ``then`` runs once it is written."""
        merge_patch_into(self._pending, body)
        if then is not None:
            self._after.append(then)

    def after_write(self, call: Callable[[], None]) -> None:
        """Run ``call`` after the queued changes are written (at once if nothing is queued)."""
        if self._pending:
            self._after.append(call)
        else:
            call()

    def flush(self) -> None:
        """Write the queued changes (if any). A lost race raises :class:`NodeConflictError`."""
        if not self._pending:
            return
        body, self._pending = self._pending, {}
        after, self._after = self._after, []
        try:
            answer = self._writer.merge_patch(
                resources.NODES,
                self.name,
                body,
                resource_version=self.resource_version or None,
                metadata_only=True,
            )
        except ConflictError as exc:
            raise NodeConflictError(self.name) from exc
        meta = answer.get("metadata") or {}
        self.resource_version = str(meta.get("resourceVersion", ""))
        self.writes += 1
        self._on_written(self.name, self.resource_version)
        for call in after:
            call()


def merge_patch_into(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """Fold merge patch ``patch`` into merge patch ``target`` (RFC 7386: objects merge key by
    key, anything else - a value, a list, null - replaces), so sending ``target`` once has the
    effect of sending both in order."""
    for key, value in patch.items():
        current = target.get(key)
        if isinstance(value, Mapping) and isinstance(current, dict):
            merge_patch_into(current, value)
        else:
            target[key] = copy.deepcopy(value)


@dataclass(frozen=True, slots=True)
class EventNote:
    """An Event to post once a node's actions were applied (kind ``Node`` or ``NodeWright``)."""

    kind: str
    name: str
    reason: str
    note: str
    warning: bool = False


@dataclass(frozen=True, slots=True)
class NodeWork:
    """One node's share of a reconcile.

    Attributes:
        node: The snapshot the actions were planned from (its resourceVersion conditions the
            first write).
        actions: The planner's actions, applied in order.
        workload_pods: Workload pods on the node (for a drain).
        annotations: Annotation changes (the batch record) that ride on the node's first write,
            before any of its work starts; written alone when nothing else is.
        events: Posted after the actions (whatever became of them).
    """

    node: snapshot.NodeSnapshot
    actions: Sequence[actions.Action] = ()
    workload_pods: Sequence[Mapping[str, Any]] = ()
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    events: Sequence[EventNote] = ()


def _event_ref(kind: str, name: str, cr: NodeWright | None = None) -> ObjectRef:
    if kind == "Node":
        return ObjectRef(api_version="v1", kind="Node", name=name)
    uid = cr.metadata.uid if cr is not None and cr.metadata.name == name else ""
    return ObjectRef(api_version=resources.NODEWRIGHTS.api_version, kind=kind, name=name, uid=uid)


class Executor:
    """Maps ``lifecycle.actions`` to API calls (see the module docstring)."""

    def __init__(
        self,
        *,
        rest: Rest,
        writer: Writer,
        events: EventRecorder,
        namespace: str,
        metrics: ProductMetrics,
        on_node_written: Callable[[str, str], None],
        foreground: Foreground | None = None,
    ) -> None:
        self._rest = rest
        # Pod starts run as foreground work; background pod deletes (and Events) wait for them.
        self._foreground = foreground or Foreground()
        self._writer = writer
        self._events = events
        self._namespace = namespace
        self._metrics = metrics
        self._on_node_written = on_node_written
        # daemon threads: a stop never waits for them (an unsent delete is planned again)
        # node -> {pod key: when created} for pods this process created that the pod cache has
        # not shown yet: the node is not planned again until it has (else it plans the create
        # again, and a busy API server answers hundreds of needless 409s).
        self._unseen: dict[str, dict[str, float]] = {}
        self._unseen_lock = threading.Lock()
        self._written_statuses: dict[tuple[str, str], Status] = {}
        self._written_lock = threading.Lock()
        self._deletes: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._deleting: set[str] = set()
        self._deleting_lock = threading.Lock()
        for index in range(DELETE_CONCURRENCY):
            threading.Thread(
                target=self._delete_loop, name=f"pod-deletes-{index}", daemon=True
            ).start()

    # -- events ------------------------------------------------------------------------------

    def event(
        self,
        kind: str,
        name: str,
        reason: str,
        note: str,
        *,
        warning: bool = False,
        cr: NodeWright | None = None,
    ) -> None:
        type_ = EventType.WARNING if warning else EventType.NORMAL
        self._events.post(_event_ref(kind, name, cr), type_, reason, note)

    # -- nodes -------------------------------------------------------------------------------

    def applying(self, cr: NodeWright, outcome: Outcome, *, defer: bool = True) -> NodeWrites:
        """Start applying node work for ``cr`` (see :class:`NodeWrites`); use as a context.

        ``defer=False``: write all bookkeeping now (see :data:`BOOKKEEPING_PER_PASS`).
        """
        return NodeWrites(self, cr, outcome, defer=defer)

    def _write_annotations(self, node: str, annotations: Mapping[str, str | None]) -> None:
        body = {"metadata": {"annotations": dict(annotations)}}
        try:
            answer = self._writer.merge_patch(resources.NODES, node, body, metadata_only=True)
        except NotFoundError:
            return
        meta = answer.get("metadata") or {}
        self._on_node_written(node, str(meta.get("resourceVersion", "")))

    def _apply_work(
        self,
        cr: NodeWright,
        work: NodeWork,
        outcome: Outcome,
        config_maps: Mapping[str, Future[None]],
    ) -> None:
        patcher = NodePatcher(self._writer, work.node, self._on_node_written)
        if work.annotations:
            patcher.patch({"metadata": {"annotations": dict(work.annotations)}})
        try:
            for action in work.actions:
                self._apply(
                    cr,
                    patcher,
                    action,
                    outcome=outcome,
                    workload_pods=work.workload_pods,
                    config_maps=config_maps,
                )
            patcher.flush()
        except NodeConflictError:
            outcome.conflicts += 1
            outcome.soon(CONFLICT_RETRY_SECONDS)
            logger.debug("node changed under us; replanning", extra={"node": work.node.name})
            if work.annotations and patcher.writes == 0:
                # The batch record does not depend on the node's state (the rollout planner
                # chose the node); as a write of its own it was unconditional, so it still lands
                # and the node stays a member of its batch. Its work is planned again.
                self._write_annotations(work.node.name, work.annotations)
        for note in work.events:
            self.event(
                note.kind,
                note.name,
                note.reason,
                note.note,
                warning=note.warning,
                cr=cr if note.kind == "NodeWright" else None,
            )

    def _ensure_config_map_soon(self, cr: NodeWright, package: str) -> Future[None]:
        done: Future[None] = Future()

        def create() -> None:
            try:
                self._ensure_config_map(cr, package)
            except BaseException as exc:  # handed to the pod creates that wait for it
                done.set_exception(exc)
            else:
                done.set_result(None)

        threading.Thread(target=create, name="vars-configmap", daemon=True).start()
        return done

    def _apply(
        self,
        cr: NodeWright,
        node: NodePatcher,
        action: actions.Action,
        *,
        outcome: Outcome,
        workload_pods: Sequence[Mapping[str, Any]],
        config_maps: Mapping[str, Future[None]],
    ) -> None:
        cr_name = cr.metadata.name
        if isinstance(action, _ACTS_ON_WORLD):
            node.flush()  # the node's recorded state (and batch record) precedes the work
        if isinstance(action, actions.PatchNodeState):
            state = dict(node.state)
            state.update(action.set)
            for key in action.remove:
                state.pop(key, None)
            value = snapshot.dump_state(state) if state else None
            node.patch({"metadata": {"annotations": {state_annotation(cr_name): value}}})
            node.state = state
        elif isinstance(action, actions.SetNodeStatus):
            key = status_key(cr_name)
            value = action.status.value
            node.patch(
                {"metadata": {"labels": {key: value}, "annotations": {key: value}}},
                then=partial(self._remember_status, cr_name, node.name, action.status),
            )
        elif isinstance(action, actions.Cordon):
            self._cordon(cr, node, action)
        elif isinstance(action, actions.Uncordon):
            self._uncordon(cr, node, action.holder)
        elif isinstance(action, actions.WaitForPods):
            note = (
                f"{cr_name}: waiting for podNonInterruptLabels pods to finish before the interrupt"
            )
            node.after_write(lambda: self.event("Node", node.name, "WaitingForPods", note))
        elif isinstance(action, actions.Drain):
            self._drain(cr, node.name, action, outcome, workload_pods)
        elif isinstance(action, actions.CreatePackagePod):
            self._create_package_pod(cr, action, config_map=config_maps.get(action.package))
        elif isinstance(action, actions.CreateInterruptPod):
            self._create_interrupt_pod(cr, action, config_map=config_maps.get(action.package))
        elif isinstance(action, actions.DeletePod):
            self.delete_pod_soon(action.name)
        elif isinstance(action, actions.AddTaint):
            self._add_taint(node, action.key, action.value, action.effect)
        elif isinstance(action, actions.RemoveTaint):
            self._remove_taint(node, action.key, action.effect)
        elif isinstance(action, actions.VerifyReboot):
            pass  # the planner judges the next snapshot (new bootID + Ready); we only requeue
        elif isinstance(action, actions.EmitEvent):
            node.after_write(lambda: self._emit(cr_name, action))
        elif isinstance(action, actions.WriteStatus):  # the reconciler writes status itself
            logger.debug("WriteStatus ignored by the node executor")

    def _remember_status(self, cr_name: str, node: str, status: Status) -> None:
        with self._written_lock:
            self._written_statuses[(cr_name, node)] = status

    def written_status(self, cr_name: str, node: str) -> Status | None:
        """The node status this process last wrote for ``cr_name`` on ``node`` (a node whose
        cache lags our write is judged by it, so a batch completes without waiting a pass)."""
        with self._written_lock:
            return self._written_statuses.get((cr_name, node))

    def forget(self, cr_name: str) -> None:
        with self._written_lock:
            for key in [k for k in self._written_statuses if k[0] == cr_name]:
                del self._written_statuses[key]

    def _emit(self, cr_name: str, action: actions.EmitEvent) -> None:
        warning = action.type is actions.EventType.WARNING
        self.event(action.kind, action.name, action.reason, action.message, warning=warning)
        if action.reason == "PackageFailed":
            self._metrics.pod_failures.labels(cr_name).inc()

    # -- cordon ------------------------------------------------------------------------------

    def _cordon(self, cr: NodeWright, node: NodePatcher, action: actions.Cordon) -> None:
        record = node.cordon or CordonRecord(holders=[], was_unschedulable=node.unschedulable)
        if action.holder in record.holders and node.unschedulable:
            return
        holders = sorted({*record.holders, action.holder})
        record = record.model_copy(update={"holders": holders})

        def announce() -> None:
            self.event("Node", node.name, "Cordoned", f"cordoned for NodeWright {action.holder}")
            note = f"cordoned node {node.name}"
            self.event("NodeWright", cr.metadata.name, "Cordoned", note, cr=cr)

        node.patch(
            {
                "metadata": {"annotations": {CORDON_ANNOTATION: _dump_cordon(record)}},
                "spec": {"unschedulable": True},
            },
            then=announce,
        )
        node.cordon = record
        node.unschedulable = True

    def _uncordon(self, cr: NodeWright, node: NodePatcher, holder: str) -> None:
        record = node.cordon
        if record is None or holder not in record.holders:
            return
        holders = [h for h in record.holders if h != holder]
        body: dict[str, Any]
        if holders:
            body = {
                "metadata": {
                    "annotations": {
                        CORDON_ANNOTATION: _dump_cordon(
                            record.model_copy(update={"holders": holders})
                        )
                    }
                }
            }
        else:
            body = {"metadata": {"annotations": {CORDON_ANNOTATION: None}}}
            if not record.was_unschedulable:
                body["spec"] = {"unschedulable": False}
        node.cordon = record.model_copy(update={"holders": holders}) if holders else None
        released = not holders and not record.was_unschedulable
        if released:
            node.unschedulable = False
        note = (
            f"uncordoned after NodeWright {holder}"
            if released
            else f"NodeWright {holder} released its cordon; node stays cordoned"
        )

        def announce() -> None:
            self.event("Node", node.name, "Uncordoned" if released else "CordonReleased", note)
            self.event("NodeWright", cr.metadata.name, "Uncordoned", f"{node.name}: {note}", cr=cr)

        node.patch(body, then=announce)

    # -- taints ------------------------------------------------------------------------------

    def _add_taint(self, node: NodePatcher, key: str, value: str, effect: str) -> None:
        if any(t.key == key and t.effect == effect for t in node.taints):
            return
        wire = [_taint_wire(t.key, t.value, t.effect) for t in node.taints]
        wire.append(_taint_wire(key, value, effect))
        node.patch({"spec": {"taints": wire}})
        # later taint actions of the same list build on this one (they are merged into one write)
        node.taints = [
            *node.taints,
            selectors.Taint(key=key, effect=TaintEffect(effect), value=value),
        ]

    def _remove_taint(self, node: NodePatcher, key: str, effect: str) -> None:
        kept = [t for t in node.taints if not (t.key == key and t.effect == effect)]
        if len(kept) == len(node.taints):
            return
        node.patch({"spec": {"taints": [_taint_wire(t.key, t.value, t.effect) for t in kept]}})
        node.taints = kept

    # -- drain -------------------------------------------------------------------------------

    def _drain(
        self,
        cr: NodeWright,
        node: str,
        action: actions.Drain,
        outcome: Outcome,
        workload_pods: Sequence[Mapping[str, Any]],
    ) -> None:
        views = [snapshot.pod_view(p) for p in workload_pods]
        plan = draining.plan_drain(views, action.options)
        if plan.blockers:
            lines = [draining.describe_blocker(p, d) for p, d in plan.blockers]
            outcome.drain_blockers[node] = lines
            self.event("Node", node, "DrainBlocked", "; ".join(lines), warning=True)
        if plan.waiting_for or plan.evict:
            outcome.soon(2.0)
        if not plan.evict:
            return
        self.event(
            "Node",
            node,
            "Draining",
            f"evicting {len(plan.evict)} pod(s) for NodeWright {cr.metadata.name}",
        )
        with ThreadPoolExecutor(max_workers=EVICTION_CONCURRENCY) as pool:
            answers = list(pool.map(self._evict, plan.evict))
        for _pod, refused in zip(plan.evict, answers, strict=True):
            if refused is None:
                outcome.evicted += 1
                self._metrics.evictions.labels(cr.metadata.name).inc()
                continue
            self._metrics.pdb_refusals.labels(cr.metadata.name).inc()
            outcome.pdb_blocked.setdefault(node, []).extend(refused)
            outcome.soon(PDB_RETRY_SECONDS)
        if outcome.pdb_blocked.get(node):
            names = ", ".join(sorted(set(outcome.pdb_blocked[node])))
            self.event(
                "Node",
                node,
                "PDBBlocked",
                f"eviction refused by PodDisruptionBudget {names}; retrying",
                warning=True,
            )

    def _evict(self, pod: draining.PodView) -> list[str] | None:
        """Evict one pod. None on success (or already gone), else the refusing PDB names."""
        path = resources.PODS.path(namespace=pod.namespace, name=pod.name, subresource="eviction")
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
        }
        try:
            self._writer_check()
            self._rest.request("POST", path, body=body, eviction=True)
        except NotFoundError:
            return None
        except DisruptionBudgetError as exc:
            names = []
            for text in exc.budgets or (exc.message,):
                found = _BUDGET_NAME.search(text)
                names.append(f"{pod.namespace}/{found.group(1)}" if found else text)
            return names or [f"{pod.namespace}/(unknown)"]
        except TooManyRequestsError as exc:
            return [f"{pod.namespace}/(throttled: {exc.message})"]
        return None

    def _writer_check(self) -> None:
        # Evictions go through Rest directly; they must obey the leader guard like every write.
        self._writer.ensure_leading()

    # -- pods --------------------------------------------------------------------------------

    def _ensure_config_map(self, cr: NodeWright, package: str) -> None:
        body = podspec.build_vars_configmap(cr, cr.spec.packages[package])
        body["metadata"]["namespace"] = self._namespace
        self._create(resources.CONFIG_MAPS, body)

    def _create(self, resource: resources.Resource, body: JsonObject) -> bool:
        self._writer_check()
        try:
            self._rest.create(resource, body, namespace=self._namespace, metadata_only=True)
        except AlreadyExistsError:
            return False
        return True

    def _start_pod(
        self, request: podspec.PodRequest, kind: str, *, config_map: Future[None] | None
    ) -> JsonObject | None:
        """Create the pod once its package's vars ConfigMap exists (``config_map``: being
        created; None: create it here); None when the pod already existed."""
        if config_map is None:
            self._ensure_config_map(request.cr, request.package_name)
        else:
            config_map.result()
        pod = podspec.build_pod(request)
        pod["metadata"]["namespace"] = self._namespace
        if not self._create(resources.PODS, pod):
            return None
        with self._unseen_lock:
            key = f"{self._namespace}/{pod['metadata']['name']}"
            self._unseen.setdefault(request.node, {})[key] = time.monotonic()
        self._metrics.pods_created.labels(request.cr.metadata.name, kind).inc()
        return pod

    def _create_package_pod(
        self,
        cr: NodeWright,
        action: actions.CreatePackagePod,
        *,
        config_map: Future[None] | None,
    ) -> None:
        if action.package not in cr.spec.packages:
            return
        request = podspec.PodRequest(
            cr=cr,
            package_name=action.package,
            node=action.node,
            stages=action.stages,
            resource_id=action.resource_id,
            node_order=action.node_order,
            previous_version=action.previous_version,
            attempt=action.attempt,
        )
        pod = self._start_pod(request, "package", config_map=config_map)
        if pod is not None:
            logger.info(
                "package pod created",
                extra={"pod": pod["metadata"]["name"], "node": action.node, "cr": cr.metadata.name},
            )

    def _create_interrupt_pod(
        self,
        cr: NodeWright,
        action: actions.CreateInterruptPod,
        *,
        config_map: Future[None] | None,
    ) -> None:
        if action.package not in cr.spec.packages:
            return
        request = podspec.PodRequest(
            cr=cr,
            package_name=action.package,
            node=action.node,
            stages=(action.stage.value,),
            resource_id=action.resource_id,
            node_order=action.node_order,
            interrupt_type=action.interrupt_type.value,
            interrupt_services=action.services,
            attempt=max(action.attempt, 1),
        )
        if self._start_pod(request, "interrupt", config_map=config_map) is not None:
            members = ", ".join(action.members)
            note = f"{action.interrupt_type.value} interrupt for {members} ({cr.metadata.name})"
            self.event("Node", action.node, "Interrupt", note)
            self.event("NodeWright", cr.metadata.name, "Interrupt", f"{action.node}: {note}", cr=cr)

    def awaiting_pods(self, node: str, seen: Callable[[str], bool]) -> bool:
        """True while a pod this process created on ``node`` is not in the cache yet (``seen``
        answers for a ``namespace/name`` key); forgotten after :data:`UNSEEN_POD_SECONDS`."""
        with self._unseen_lock:
            pending = self._unseen.get(node)
            if not pending:
                return False
            now = time.monotonic()
            for key, created in list(pending.items()):
                if seen(key) or now - created > UNSEEN_POD_SECONDS:
                    del pending[key]
            if not pending:
                del self._unseen[node]
                return False
            return True

    def delete_pod(self, name: str) -> None:
        self._writer_check()
        with contextlib.suppress(NotFoundError):
            self._rest.delete(resources.PODS, name, namespace=self._namespace, metadata_only=True)

    def delete_pod_soon(self, name: str) -> None:
        """Delete on the background pool (once, however often it is asked while in flight)."""
        self._writer_check()
        with self._deleting_lock:
            if name in self._deleting:
                return
            self._deleting.add(name)
        self._deletes.put(name)

    def _delete_loop(self) -> None:
        while True:
            name = self._deletes.get()
            self._foreground.yield_to()
            try:
                self.delete_pod(name)
            except LeadershipLostError:
                pass  # the new leader plans this delete again
            except Exception:  # the next snapshot still shows the pod and plans it again
                logger.warning("pod delete failed; retried on a later pass", extra={"pod": name})
            finally:
                with self._deleting_lock:
                    self._deleting.discard(name)


# Actions that act on the world: the node's queued changes are written before any of them.
_ACTS_ON_WORLD = (
    actions.Drain,
    actions.CreatePackagePod,
    actions.CreateInterruptPod,
    actions.DeletePod,
)


_STARTS_PODS = (actions.CreatePackagePod, actions.CreateInterruptPod)
# Actions a pass only hands to background senders (or that send nothing).
_FREE = (actions.DeletePod, actions.EmitEvent, actions.VerifyReboot, actions.WriteStatus)


def _bookkeeping(work: NodeWork) -> bool:
    """Work that may wait for the next pass: it writes the Node (or drains) but starts no pod and
    takes no batch record (a deferred node is planned again, its Events included; a release of a
    record may wait). Work that only queues pod deletes or Events costs a pass nothing and is
    never deferred."""
    if any(isinstance(a, _STARTS_PODS) for a in work.actions):
        return False
    if any(value is not None for value in work.annotations.values()):
        return False
    return bool(work.annotations) or any(not isinstance(a, _FREE) for a in work.actions)


class NodeWrites:
    """The node work of one pass, applied while the pass is still planning it.

    A node that starts pods is written the moment :meth:`add` hands it over (a batch's first
    pods start while the planner still works through its last nodes, and the API server, idle
    while a pass plans, gets the writes sooner); any other work waits until the pass ends, so
    the nodes on the rollout's critical path go first. Nodes run in parallel on at most
    :data:`NODE_CONCURRENCY` threads, each node's actions in order on one thread. Leaving the
    context writes the held work (bookkeeping capped, see :data:`BOOKKEEPING_PER_PASS`) and the
    batch records of nodes without work, waits for everything, and raises the first error in
    the order the work was handed over (after every node was tried, as a loop that carried on
    past failures would); lost write races only requeue (the pass's ``Outcome``).
    """

    def __init__(self, executor: Executor, cr: NodeWright, outcome: Outcome, *, defer: bool):
        self._executor = executor
        self._cr = cr
        self._outcome = outcome
        self._defer = defer
        self._held: list[NodeWork] = []
        self._others: dict[str, Mapping[str, str | None]] = {}
        self._config_maps: dict[str, Future[None]] = {}
        self._futures: list[Future[None]] = []
        self._shares: list[Outcome] = []
        self._pool: ThreadPoolExecutor | None = None
        self._stack = contextlib.ExitStack()
        self._starting = False

    def __enter__(self) -> NodeWrites:
        return self

    def add(self, work: NodeWork) -> None:
        """Hand over one node's work: started now if it starts pods, else held until the end."""
        starts = [a for a in work.actions if isinstance(a, _STARTS_PODS)]
        if not starts:
            self._held.append(work)
            return
        if not self._starting:
            self._starting = True
            self._stack.enter_context(self._executor._foreground.running())
        for action in starts:
            package = action.package
            if package in self._cr.spec.packages and package not in self._config_maps:
                # created once per pass, while the Node writes before the pods go out
                self._config_maps[package] = self._executor._ensure_config_map_soon(
                    self._cr, package
                )
        self._submit(work)

    def others(self, annotations: Mapping[str, Mapping[str, str | None]]) -> None:
        """Annotation changes (batch records) of nodes without work here, written at the end,
        unconditionally."""
        self._others.update(annotations)

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        try:
            if error is None:
                self._submit_held()
            self._wait()
        finally:
            self._stack.close()
        if error is None:
            for future in self._futures:
                failure = future.exception()
                if failure is not None:
                    raise failure

    def _submit_held(self) -> None:
        held = self._held
        bookkeeping = [w for w in held if _bookkeeping(w)]
        if self._defer and len(bookkeeping) > BOOKKEEPING_PER_PASS:
            deferred = {id(w) for w in bookkeeping[BOOKKEEPING_PER_PASS:]}
            held = [w for w in held if id(w) not in deferred]
            self._outcome.soon(DEFERRED_RETRY_SECONDS)
        for work in held:
            self._submit(work)
        for node, notes in sorted(self._others.items()):
            self._futures.append(
                self._threads().submit(self._executor._write_annotations, node, notes)
            )

    def _submit(self, work: NodeWork) -> None:
        share = Outcome()
        self._shares.append(share)
        call = partial(self._executor._apply_work, self._cr, work, share, self._config_maps)
        self._futures.append(self._threads().submit(call))

    def _threads(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=NODE_CONCURRENCY, thread_name_prefix="node-writes"
            )
        return self._pool

    def _wait(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for share in self._shares:
            self._outcome.absorb(share)


def _dump_cordon(record: CordonRecord) -> str:
    return record.model_dump_json(by_alias=True)


def _taint_wire(key: str, value: str, effect: str) -> dict[str, str]:
    out = {"key": key, "effect": str(effect)}
    if value:
        out["value"] = value
    return out
