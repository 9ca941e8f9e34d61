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

Guarantees: an action list is applied in order and stops at the first failed Node write, so a pod
is never created without the node-state record that precedes it in the list.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lifecycle import actions, draining
from lifecycle.nodestate import (
    CORDON_ANNOTATION,
    CordonRecord,
    PackageState,
    state_annotation,
    status_key,
)
from lifecycle.spec import NodeWright
from nodewright_bridge import podspec
from nodewright_bridge.controller import snapshot
from nodewright_bridge.controller.productmetrics import ProductMetrics
from nodewright_bridge.errors import (
    AlreadyExistsError,
    ConflictError,
    DisruptionBudgetError,
    NotFoundError,
    TooManyRequestsError,
)
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.events import EventRecorder, EventType, ObjectRef
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


class NodeConflictError(Exception):
    """A conditional Node write lost a race: skip this node's remaining actions."""


class NodePatcher:
    """Merge patches on one Node, each conditional on the last resourceVersion seen."""

    def __init__(
        self,
        writer: Writer,
        node: snapshot.NodeSnapshot,
        on_written: Callable[[str, str], None],
    ) -> None:
        self._writer = writer
        self.name = node.name
        self.resource_version = node.resource_version
        self.annotations: dict[str, str] = dict(node.annotations)
        self.state: dict[str, PackageState] = dict(node.state)
        self.cordon = node.facts.cordon
        self.unschedulable = node.facts.unschedulable
        self.taints = list(node.taints)
        self._on_written = on_written

    def patch(self, body: Mapping[str, Any]) -> None:
        try:
            answer = self._writer.merge_patch(
                resources.NODES, self.name, body, resource_version=self.resource_version or None
            )
        except ConflictError as exc:
            raise NodeConflictError(self.name) from exc
        meta = answer.get("metadata") or {}
        self.resource_version = str(meta.get("resourceVersion", ""))
        self.annotations = dict(meta.get("annotations") or {})
        self._on_written(self.name, self.resource_version)


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
    ) -> None:
        self._rest = rest
        self._writer = writer
        self._events = events
        self._namespace = namespace
        self._metrics = metrics
        self._on_node_written = on_node_written

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

    # -- one node ----------------------------------------------------------------------------

    def apply_node(
        self,
        cr: NodeWright,
        node: snapshot.NodeSnapshot,
        plan: Sequence[actions.Action],
        outcome: Outcome,
        workload_pods: Sequence[Mapping[str, Any]],
    ) -> None:
        """Apply one node's actions in order; a lost write race stops them (and requeues)."""
        patcher = NodePatcher(self._writer, node, self._on_node_written)
        try:
            for action in plan:
                self._apply(cr, patcher, action, outcome, workload_pods)
        except NodeConflictError:
            outcome.conflicts += 1
            outcome.soon(CONFLICT_RETRY_SECONDS)
            logger.debug("node changed under us; replanning", extra={"node": node.name})

    def _apply(
        self,
        cr: NodeWright,
        node: NodePatcher,
        action: actions.Action,
        outcome: Outcome,
        workload_pods: Sequence[Mapping[str, Any]],
    ) -> None:
        cr_name = cr.metadata.name
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
            node.patch({"metadata": {"labels": {key: value}, "annotations": {key: value}}})
        elif isinstance(action, actions.Cordon):
            self._cordon(cr, node, action)
        elif isinstance(action, actions.Uncordon):
            self._uncordon(cr, node, action.holder)
        elif isinstance(action, actions.WaitForPods):
            self.event(
                "Node",
                node.name,
                "WaitingForPods",
                f"{cr_name}: waiting for podNonInterruptLabels pods to finish before the interrupt",
            )
        elif isinstance(action, actions.Drain):
            self._drain(cr, node.name, action, outcome, workload_pods)
        elif isinstance(action, actions.CreatePackagePod):
            self._create_package_pod(cr, action)
        elif isinstance(action, actions.CreateInterruptPod):
            self._create_interrupt_pod(cr, action)
        elif isinstance(action, actions.DeletePod):
            self.delete_pod(action.name)
        elif isinstance(action, actions.AddTaint):
            self._add_taint(node, action.key, action.value, action.effect)
        elif isinstance(action, actions.RemoveTaint):
            self._remove_taint(node, action.key, action.effect)
        elif isinstance(action, actions.VerifyReboot):
            pass  # the planner judges the next snapshot (new bootID + Ready); we only requeue
        elif isinstance(action, actions.EmitEvent):
            warning = action.type is actions.EventType.WARNING
            self.event(action.kind, action.name, action.reason, action.message, warning=warning)
            if action.reason == "PackageFailed":
                self._metrics.pod_failures.labels(cr_name).inc()
        elif isinstance(action, actions.WriteStatus):  # the reconciler writes status itself
            logger.debug("WriteStatus ignored by the node executor")

    # -- cordon ------------------------------------------------------------------------------

    def _cordon(self, cr: NodeWright, node: NodePatcher, action: actions.Cordon) -> None:
        record = node.cordon or CordonRecord(holders=[], was_unschedulable=node.unschedulable)
        if action.holder in record.holders and node.unschedulable:
            return
        holders = sorted({*record.holders, action.holder})
        record = record.model_copy(update={"holders": holders})
        node.patch(
            {
                "metadata": {"annotations": {CORDON_ANNOTATION: _dump_cordon(record)}},
                "spec": {"unschedulable": True},
            }
        )
        node.cordon = record
        node.unschedulable = True
        self.event("Node", node.name, "Cordoned", f"cordoned for NodeWright {action.holder}")
        self.event("NodeWright", cr.metadata.name, "Cordoned", f"cordoned node {node.name}", cr=cr)

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
        node.patch(body)
        node.cordon = record.model_copy(update={"holders": holders}) if holders else None
        released = not holders and not record.was_unschedulable
        if released:
            node.unschedulable = False
        note = (
            f"uncordoned after NodeWright {holder}"
            if released
            else f"NodeWright {holder} released its cordon; node stays cordoned"
        )
        self.event("Node", node.name, "Uncordoned" if released else "CordonReleased", note)
        self.event("NodeWright", cr.metadata.name, "Uncordoned", f"{node.name}: {note}", cr=cr)

    # -- taints ------------------------------------------------------------------------------

    def _add_taint(self, node: NodePatcher, key: str, value: str, effect: str) -> None:
        if any(t.key == key and t.effect == effect for t in node.taints):
            return
        wire = [_taint_wire(t.key, t.value, t.effect) for t in node.taints]
        wire.append(_taint_wire(key, value, effect))
        node.patch({"spec": {"taints": wire}})

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
            self._rest.create(resource, body, namespace=self._namespace)
        except AlreadyExistsError:
            return False
        return True

    def _start_pod(self, request: podspec.PodRequest, kind: str) -> JsonObject | None:
        """Create the pod (and its package's vars ConfigMap); None when it already existed."""
        self._ensure_config_map(request.cr, request.package_name)
        pod = podspec.build_pod(request)
        pod["metadata"]["namespace"] = self._namespace
        if not self._create(resources.PODS, pod):
            return None
        self._metrics.pods_created.labels(request.cr.metadata.name, kind).inc()
        return pod

    def _create_package_pod(self, cr: NodeWright, action: actions.CreatePackagePod) -> None:
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
        pod = self._start_pod(request, "package")
        if pod is not None:
            logger.info(
                "package pod created",
                extra={"pod": pod["metadata"]["name"], "node": action.node, "cr": cr.metadata.name},
            )

    def _create_interrupt_pod(self, cr: NodeWright, action: actions.CreateInterruptPod) -> None:
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
        if self._start_pod(request, "interrupt") is not None:
            members = ", ".join(action.members)
            note = f"{action.interrupt_type.value} interrupt for {members} ({cr.metadata.name})"
            self.event("Node", action.node, "Interrupt", note)
            self.event("NodeWright", cr.metadata.name, "Interrupt", f"{action.node}: {note}", cr=cr)

    def delete_pod(self, name: str) -> None:
        self._writer_check()
        with contextlib.suppress(NotFoundError):
            self._rest.delete(resources.PODS, name, namespace=self._namespace)


def _dump_cordon(record: CordonRecord) -> str:
    return record.model_dump_json(by_alias=True)


def _taint_wire(key: str, value: str, effect: str) -> dict[str, str]:
    out = {"key": key, "effect": str(effect)}
    if value:
        out["value"] = value
    return out
