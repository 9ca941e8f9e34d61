"""Apply the planners' actions to the cluster: dumb, idempotent, and conditional on what was read.

The executor maps each ``lifecycle.actions`` value to API calls and decides nothing:

- A node's actions run in order through one :class:`node_writes.NodePatcher`: every Node change
  of the list is merged into one merge patch *conditional on the resourceVersion the plan was
  computed from*. If anything else wrote the Node in between (another CR's reconcile, a human,
  the kubelet) the API server answers 409, the rest of that node's actions are skipped and the
  reconcile asks to be requeued at once: the next plan is made from the fresh object. So a
  decision is only ever written on top of exactly the state it was based on (an interrupt is
  never recorded twice, a cordon record never loses a holder).
- Pods and ConfigMaps have deterministic names: create-if-absent (``pod_starts``), delete soon,
  in the background, after the Node write that recorded the pod's result (``pod_deletes``).
- A drain is one round of evictions from the snapshot's plan (``evicting``).
- Actions outside one node's list - releasing a node, removing a CR's finalizer - go through
  :meth:`Executor.apply_outside`; a node release is computed on the Node as it is when written
  (``lifecycle.releasing.release_changes``), so a concurrent change by someone else is kept.

Guarantees: an action list is applied in order and stops at the first failed Node write, so a pod
is never created without the node-state record that precedes it in the list. An interrupt pod is
created only once the API, asked just before, lists no pod on the node that its drain would
still evict or wait for (the pass judged the drain from a cache that may lag).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any

from lifecycle import actions, nodestate, releasing, selectors
from lifecycle.nodestate import CORDON_ANNOTATION, CordonRecord, state_annotation, status_key
from lifecycle.selectors import TaintEffect
from lifecycle.spec import NodeWright
from lifecycle.status import Status
from nodewright_bridge.clock import Clock
from nodewright_bridge.controller import snapshot
from nodewright_bridge.controller.evicting import Evictions
from nodewright_bridge.controller.node_writes import (
    NodeConflictError,
    NodePatcher,
    NodeWork,
    NodeWrites,
    Outcome,
)
from nodewright_bridge.controller.pod_deletes import PodDeletes
from nodewright_bridge.controller.pod_starts import PodStarts
from nodewright_bridge.controller.productmetrics import ProductMetrics
from nodewright_bridge.errors import NotFoundError
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.events import EventRecorder, EventType, ObjectRef
from nodewright_bridge.k8s.foreground import Foreground
from nodewright_bridge.k8s.patching import Writer
from nodewright_bridge.k8s.rest import Rest

logger = logging.getLogger(__name__)

# After a conflicting Node write, look again almost at once: the cache is catching up.
CONFLICT_RETRY_SECONDS = 0.5

# Actions that act on the world: the node's queued changes are written before any of them.
_ACTS_ON_WORLD = (
    actions.Drain,
    actions.CreatePackagePod,
    actions.CreateInterruptPod,
    actions.DeletePod,
)


class InterruptHeldError(Exception):
    """The API lists pods on a node the pass judged drained: no interrupt pod now."""

    def __init__(self, node: str, pods: Sequence[str]) -> None:
        super().__init__(f"{node}: {', '.join(pods)}")
        self.pods = tuple(pods)


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
        clock: Clock,
        foreground: Foreground | None = None,
        on_pod_started: Callable[[str], None] = lambda node: None,
    ) -> None:
        # Pod starts run as foreground work; background pod deletes (and Events) wait for them.
        self.foreground = foreground or Foreground()
        self._rest = rest
        self._writer = writer
        self._events = events
        self._metrics = metrics
        self._on_node_written = on_node_written
        self._deletes = PodDeletes(rest, writer, namespace, self.foreground, clock)
        self._starts = PodStarts(
            rest,
            writer,
            namespace,
            metrics,
            clock,
            creating=self._deletes.forget,
            started=on_pod_started,
        )
        self._evictions = Evictions(rest, writer, metrics)
        self._written_statuses: dict[tuple[str, str], Status] = {}
        self._written_lock = threading.Lock()

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

    def _emit(self, cr_name: str, action: actions.EmitEvent, cr: NodeWright | None = None) -> None:
        warning = action.type is actions.EventType.WARNING
        self.event(action.kind, action.name, action.reason, action.message, warning=warning, cr=cr)
        if action.reason == "PackageFailed":
            self._metrics.pod_failures.labels(cr_name).inc()

    # -- a pass's node work ------------------------------------------------------------------

    def applying(
        self, cr: NodeWright, outcome: Outcome, *, defer: bool = True, hold: bool = True
    ) -> NodeWrites:
        """Start applying node work for ``cr`` (see :class:`NodeWrites`); use as a context.

        ``defer=False``: write all bookkeeping now (``node_writes.BOOKKEEPING_PER_PASS``).
        ``hold=False``: the pass starts no batch; write every node's work as it is handed over.
        """
        return NodeWrites(self, cr, outcome, defer=defer, hold=hold)

    def ensure_config_map_soon(self, cr: NodeWright, package: str) -> Future[None]:
        return self._starts.config_map_soon(cr, package)

    def start_validation_pod(self, cr: NodeWright, package: str, pod: dict[str, Any]) -> bool:
        """Create a validation pod (and its package's vars ConfigMap); False if it existed."""
        return self._starts.validation_pod(cr, package, pod)

    def delete_pod_soon(self, name: str) -> None:
        """Delete a pod of the controller namespace in the background (sent once)."""
        self._deletes.soon(name)

    def wait_for_deletes(self, timeout: float) -> bool:
        """Wait until the background pod deletes are sent; False if ``timeout`` passed first."""
        return self._deletes.wait_idle(timeout)

    def write_annotations(self, node: str, annotations: Mapping[str, str | None]) -> None:
        """An unconditional annotation write (a batch record that must land on its own)."""
        body = {"metadata": {"annotations": dict(annotations)}}
        try:
            answer = self._writer.merge_patch(resources.NODES, node, body, metadata_only=True)
        except NotFoundError:
            return
        meta = answer.get("metadata") or {}
        self._on_node_written(node, str(meta.get("resourceVersion", "")))

    def apply_work(
        self,
        cr: NodeWright,
        work: NodeWork,
        outcome: Outcome,
        config_maps: Mapping[str, Future[None]],
    ) -> None:
        """One node's actions, in order, through one patcher (see the module docstring)."""
        patcher = NodePatcher(self._writer, work.node, self._on_node_written)
        if work.annotations:
            patcher.patch({"metadata": {"annotations": dict(work.annotations)}})
        try:
            for action in work.actions:
                if isinstance(action, _ACTS_ON_WORLD):
                    patcher.flush()  # the node's recorded state (and record) precede the work
                self._apply(
                    cr, patcher, action, work=work, outcome=outcome, config_maps=config_maps
                )
            patcher.flush()
        except InterruptHeldError as held:
            outcome.soon(CONFLICT_RETRY_SECONDS)
            pods = ", ".join(held.pods)
            why = f"{cr.metadata.name}: interrupt held: the API lists pods to drain first: {pods}"
            logger.warning(why, extra={"node": work.node.name})
            self.event("Node", work.node.name, "InterruptHeld", why, warning=True)
        except NodeConflictError:
            outcome.conflicts += 1
            outcome.node_patches += 1  # the write that lost the race
            outcome.soon(CONFLICT_RETRY_SECONDS)
            logger.debug("node changed under us; replanning", extra={"node": work.node.name})
            if work.annotations and patcher.writes == 0:
                # The batch record does not depend on the node's state (the rollout planner
                # chose the node); as a write of its own it was unconditional, so it still lands
                # and the node stays a member of its batch. Its work is planned again.
                self.write_annotations(work.node.name, work.annotations)
                outcome.node_patches += 1
        outcome.node_patches += patcher.writes
        for note in work.events:
            self.event(
                note.kind,
                note.name,
                note.reason,
                note.note,
                warning=note.warning,
                cr=cr if note.kind == "NodeWright" else None,
            )

    def _apply(
        self,
        cr: NodeWright,
        node: NodePatcher,
        action: actions.Action,
        *,
        work: NodeWork,
        outcome: Outcome,
        config_maps: Mapping[str, Future[None]],
    ) -> None:
        cr_name = cr.metadata.name
        if isinstance(action, actions.PatchNodeState):
            self._patch_state(cr_name, node, action)
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
            self._evictions.drain(
                cr_name,
                node.name,
                plan=work.node.drain,
                evictions=work.node.evictions,
                outcome=outcome,
                announce=self._announce,
                options=action.options,
            )
        elif isinstance(action, actions.CreatePackagePod):
            carried = work.pod_annotations if action.carries is not None else {}
            self._starts.package_pod(cr, action, config_maps.get(action.package), carried)
        elif isinstance(action, actions.CreateInterruptPod):
            self._check_drained(cr, action.node)
            announce = partial(self._announce_interrupt, cr, action.node)
            self._starts.interrupt_pod(cr, action, config_maps.get(action.package), announce)
        elif isinstance(action, actions.DeletePod):
            self._deletes.soon(action.name)
        elif isinstance(action, actions.AddTaint):
            self._add_taint(node, action.key, action.value, action.effect)
        elif isinstance(action, actions.RemoveTaint):
            self._remove_taint(node, action.key, action.effect)
        elif isinstance(action, actions.SetAnnotations):
            node.patch({"metadata": {"annotations": dict(action.annotations)}})
        elif isinstance(action, actions.SetLabels):
            node.patch({"metadata": {"labels": dict(action.labels)}})
        elif isinstance(action, actions.EmitEvent):
            node.after_write(lambda: self._emit(cr_name, action, cr))
        # VerifyReboot: the planner judges the next snapshot (new bootID + Ready); we requeue.
        # ReleaseNode / RemoveFinalizer are not node-list actions: see apply_outside.

    def _check_drained(self, cr: NodeWright, node: str) -> None:
        """The pass judged ``node`` drained from the pod cache; ask the API before the interrupt.

        The cache can lag (a watch relisting after an API server restart), and a scheduler whose
        own cache lags can bind a pod to a node after its cordon. Such a pod holds the interrupt
        (:class:`InterruptHeldError`): the node's recorded interrupt has no pod, so the next
        pass drains the node again before it creates one (``lifecycle.stage_interrupts``).
        """
        listed = self._rest.list(
            resources.PODS,
            field_selector=f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed",
        )
        left = snapshot.undrained_pods(cr, listed.get("items") or ())
        if left:
            raise InterruptHeldError(node, left)

    def _announce(self, node: str, reason: str, note: str, warning: bool) -> None:
        self.event("Node", node, reason, note, warning=warning)

    def _announce_interrupt(self, cr: NodeWright, node: str, note: str) -> None:
        self.event("Node", node, "Interrupt", note)
        self.event("NodeWright", cr.metadata.name, "Interrupt", f"{node}: {note}", cr=cr)

    # -- node bookkeeping --------------------------------------------------------------------

    def _patch_state(self, cr_name: str, node: NodePatcher, action: actions.PatchNodeState) -> None:
        state = dict(node.state)
        state.update(action.set)
        for key in action.remove:
            state.pop(key, None)
        value = snapshot.dump_state(state) if state else None
        node.patch({"metadata": {"annotations": {state_annotation(cr_name): value}}})
        node.state = state

    def _remember_status(self, cr_name: str, node: str, status: Status) -> None:
        with self._written_lock:
            self._written_statuses[(cr_name, node)] = status

    def written_status(self, cr_name: str, node: str) -> Status | None:
        """The node status this process last wrote for ``cr_name`` on ``node`` (a node whose
        cache lags our write is judged by it, so a batch completes without waiting a pass)."""
        with self._written_lock:
            return self._written_statuses.get((cr_name, node))

    def forget(self, cr_name: str) -> None:
        self._starts.forget(cr_name)
        with self._written_lock:
            for key in [k for k in self._written_statuses if k[0] == cr_name]:
                del self._written_statuses[key]

    # -- cordon ------------------------------------------------------------------------------

    def _cordon(self, cr: NodeWright, node: NodePatcher, action: actions.Cordon) -> None:
        if node.cordon is not None and action.holder in node.cordon.holders and node.unschedulable:
            return
        record = nodestate.hold(node.cordon, action.holder, unschedulable=node.unschedulable)

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
        change = nodestate.release(node.cordon, holder)
        if change is None:
            return
        kept = _dump_cordon(change.record) if change.record is not None else None
        body: dict[str, Any] = {"metadata": {"annotations": {CORDON_ANNOTATION: kept}}}
        if change.uncordon:
            body["spec"] = {"unschedulable": False}
            node.unschedulable = False
        node.cordon = change.record
        note = _release_note(holder, uncordoned=change.uncordon)

        def announce() -> None:
            reason = "Uncordoned" if change.uncordon else "CordonReleased"
            self.event("Node", node.name, reason, note)
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

    # -- pods --------------------------------------------------------------------------------

    def awaiting_pods(self, node: str, seen: Callable[[str], bool]) -> bool:
        """True while a pod this process created on ``node`` is not in the pod cache yet."""
        return self._starts.awaiting(node, seen)

    # -- outside one node's list -------------------------------------------------------------

    def apply_outside(self, cr_name: str, planned: Sequence[actions.Action]) -> None:
        """Release nodes, delete pods now, remove a finalizer, post Events, in order."""
        for action in planned:
            if isinstance(action, actions.DeletePod):
                self._deletes.delete(action.name)
            elif isinstance(action, actions.ReleaseNode):
                self._release_node(action)
            elif isinstance(action, actions.RemoveFinalizer):
                self._writer.remove_finalizer(resources.NODEWRIGHTS, action.cr, action.finalizer)
            elif isinstance(action, actions.EmitEvent):
                self._emit(cr_name, action)
            else:
                raise TypeError(f"{type(action).__name__} is a node-list action")

    def _release_node(self, action: actions.ReleaseNode) -> None:
        held: list[bool] = []

        def decide(current: dict[str, Any]) -> list[dict[str, Any]]:
            node = snapshot.held_node(action.cr, current)
            change = releasing.release_changes(action.cr, node, remove_taint=action.remove_taint)
            held[:] = [change.cordon_changed]
            return _release_ops(change, current)

        answer = self._writer.modify(resources.NODES, action.node, decide)
        if answer is not None:
            meta = answer.get("metadata") or {}
            self._on_node_written(action.node, str(meta.get("resourceVersion", "")))
        if held and held[0]:
            self.event("Node", action.node, "Uncordoned", action.why)


def _release_ops(change: releasing.NodeRelease, current: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``change`` as JSON Patch operations on ``current``."""
    ops: list[dict[str, Any]] = []
    for key in change.remove_annotations:
        ops.append({"op": "remove", "path": f"/metadata/annotations/{_escape(key)}"})
    for key in change.remove_labels:
        ops.append({"op": "remove", "path": f"/metadata/labels/{_escape(key)}"})
    if change.cordon_changed:
        path = f"/metadata/annotations/{_escape(CORDON_ANNOTATION)}"
        if change.cordon is not None:
            ops.append({"op": "replace", "path": path, "value": _dump_cordon(change.cordon)})
        else:
            ops.append({"op": "remove", "path": path})
        if change.uncordon:
            ops.append({"op": "add", "path": "/spec/unschedulable", "value": False})
    if change.remove_taint:
        taints = (current.get("spec") or {}).get("taints") or []
        kept = [t for t in taints if t.get("key") != nodestate.RUNTIME_REQUIRED_TAINT_KEY]
        ops.append({"op": "replace", "path": "/spec/taints", "value": kept})
    return ops


def _release_note(holder: str, *, uncordoned: bool) -> str:
    if uncordoned:
        return f"uncordoned after NodeWright {holder}"
    return f"NodeWright {holder} released its cordon; node stays cordoned"


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _dump_cordon(record: CordonRecord) -> str:
    return record.model_dump_json(by_alias=True)


def _taint_wire(key: str, value: str, effect: str) -> dict[str, str]:
    out = {"key": key, "effect": str(effect)}
    if value:
        out["value"] = value
    return out
