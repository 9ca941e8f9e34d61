"""Letting go of nodes: a node a CR no longer targets, a deleted CR's cleanup, new nodes' taint.

Why a planner of its own: these decisions touch Nodes outside the stage planner's per-node walk
(a node that left the CR's selector, every node when the CR is deleted, a brand-new node), yet
they carry the same promises - a change in flight is not killed halfway, the cordon rule decides
when a node becomes schedulable, the runtime-required taint goes only when no CR still needs it.
The controller decodes small views (``HeldNode``) and executes the actions; nothing here knows
object shapes beyond the Node keys in ``nodestate``.

Rules:
- A node no longer targeted keeps our pods until they end (or overrun their own deadline: the
  package's stage or interrupt timeout); then ``ReleaseNode``: the CR's state, status and batch
  keys go, its cordon hold is released, and the runtime-required taint goes unless another
  runtimeRequired CR targeting the node is incomplete there. Targeted again, it starts afresh.
- A deleted CR (once its uninstalls are done) loses every live pod, every node it tracks is
  released the same way (the taint only from nodes it tracks or targets), then its finalizer.
- Deletion runs only the packages with uninstall enabled, each asked to uninstall
  (``uninstall_variant``).
- A brand-new node (no annotation of ours at all) of a runtimeRequired CR with
  ``autoTaintNewNodes`` gets the runtime-required taint and a marker annotation.
- A node's runtime-required taint goes once every runtimeRequired CR targeting it is complete
  there (``plan_runtime_taint``).
- A spec change after a completed rollout starts fresh batches when the reset flag says so
  (``reset_batches``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from lifecycle import batching, durations, selectors
from lifecycle.actions import (
    Action,
    AddTaint,
    DeletePod,
    EmitEvent,
    ReleaseNode,
    RemoveFinalizer,
    RemoveTaint,
    SetAnnotations,
)
from lifecycle.nodestate import (
    RUNTIME_REQUIRED_TAINT_KEY,
    CordonRecord,
    batch_annotation,
    drift_label,
    preflight_annotation,
    release,
    state_annotation,
    status_key,
)
from lifecycle.spec import PREFIX, DeploymentPolicy, NodeWright
from lifecycle.status import NodeWrightStatus, Status

AUTO_TAINT_ANNOTATION = f"{PREFIX}auto-taint"
RUNTIME_REQUIRED_TAINT_VALUE = "true"
FINALIZER = f"{PREFIX}cleanup"
# A pod whose package is gone from the spec may run this long before it counts as overrun.
DEFAULT_POD_LIMIT = timedelta(minutes=30)


@dataclass(frozen=True, slots=True)
class PodSeen:
    """One of the CR's pods on the node, as far as letting go of the node cares."""

    name: str
    package: str
    interrupt: bool
    live: bool
    deleting: bool
    created: datetime | None
    carries: bool = False  # it carries its start (``lifecycle.pod_records``): the node is ours


@dataclass(frozen=True, slots=True)
class HeldNode:
    """A node as the release rules see it for one CR."""

    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    cordon: CordonRecord | None
    taint_keys: frozenset[str] = frozenset()
    pods: tuple[PodSeen, ...] = ()  # this CR's package pods on the node


@dataclass(frozen=True, slots=True)
class ReleasePlan:
    actions: tuple[Action, ...] = ()
    waiting: bool = False  # our pods there must end first: look again soon


@dataclass(frozen=True, slots=True)
class NodeRelease:
    """The changes ``ReleaseNode`` makes to a Node, computed on the Node as written."""

    remove_annotations: tuple[str, ...] = ()
    remove_labels: tuple[str, ...] = ()
    cordon_changed: bool = False  # the CR held a cordon: ``cordon`` is the record left
    cordon: CordonRecord | None = None
    uncordon: bool = False
    remove_taint: bool = False

    @property
    def changes(self) -> bool:
        return bool(
            self.remove_annotations
            or self.remove_labels
            or self.cordon_changed
            or self.remove_taint
        )


def keys_of(cr: str) -> tuple[str, ...]:
    """The annotation keys a CR writes on a Node (the status key is a label too)."""
    return (state_annotation(cr), status_key(cr), batch_annotation(cr), preflight_annotation(cr))


def label_keys_of(cr: str) -> tuple[str, ...]:
    """The label keys a CR writes on a Node."""
    return (status_key(cr), drift_label(cr))


def tracked(cr: str, node: HeldNode) -> bool:
    """The node carries a key or cordon hold of CR ``cr``, or a pod of it that carries its
    start (the Node records nothing yet): it is ours to clean up."""
    return bool(
        set(keys_of(cr)) & set(node.annotations)
        or set(label_keys_of(cr)) & set(node.labels)
        or (node.cordon is not None and cr in node.cordon.holders)
        or any(pod.carries for pod in node.pods)
    )


def pod_limit(cr: NodeWright, pod: PodSeen) -> timedelta:
    """How long one of our pods may run: its package's stage or interrupt timeout."""
    pkg = cr.spec.packages.get(pod.package)
    if pkg is None:
        return DEFAULT_POD_LIMIT
    text = pkg.timeouts.interrupt if pod.interrupt else pkg.timeouts.stage
    try:
        return durations.parse_duration(text)
    except ValueError:
        return DEFAULT_POD_LIMIT


def taint_kept_by(cr: str, labels: Mapping[str, str], crs: Iterable[NodeWright]) -> bool:
    """Another runtimeRequired CR targets the node and is not complete there."""
    return any(
        other.metadata.name != cr
        and other.spec.runtime_required
        and selectors.matches(other.spec.node_selectors, labels)
        and labels.get(status_key(other.metadata.name)) != Status.COMPLETE.value
        for other in crs
    )


def plan_release(
    cr: NodeWright, node: HeldNode, crs: Sequence[NodeWright], now: datetime
) -> ReleasePlan:
    """Let go of a node ``cr`` no longer targets (see the module docstring)."""
    name = cr.metadata.name
    if not tracked(name, node):
        return ReleasePlan()
    deletes: list[Action] = []
    waiting = False
    for pod in node.pods:
        overran = pod.created is not None and now >= pod.created + pod_limit(cr, pod)
        if not pod.live or (overran and not pod.deleting):
            deletes.append(DeletePod(name=pod.name, node=node.name, reason="node released"))
        waiting = waiting or pod.live
    if waiting:
        return ReleasePlan(actions=tuple(deletes), waiting=True)
    remove_taint = cr.spec.runtime_required and not taint_kept_by(name, node.labels, crs)
    why = f"no longer targeted by {name}"
    return ReleasePlan(
        actions=(*deletes, ReleaseNode(node=node.name, cr=name, remove_taint=remove_taint, why=why))
    )


def plan_deletion(
    cr_name: str,
    cr: NodeWright | None,
    nodes: Sequence[HeldNode],
    live_pods: Sequence[str],
    others: Sequence[NodeWright],
) -> tuple[Action, ...]:
    """A deleted CR's cleanup, once nothing holds it: pods, every node it touched, finalizer."""
    out: list[Action] = [DeletePod(name=p, node="", reason="CR deleted") for p in live_pods]
    for node in nodes:
        remove_taint = (
            cr is not None
            and cr.spec.runtime_required
            and (tracked(cr_name, node) or selectors.matches(cr.spec.node_selectors, node.labels))
            and not taint_kept_by(cr_name, node.labels, others)
        )
        if tracked(cr_name, node) or (
            remove_taint and RUNTIME_REQUIRED_TAINT_KEY in node.taint_keys
        ):
            why = f"NodeWright {cr_name} deleted"
            out.append(ReleaseNode(node=node.name, cr=cr_name, remove_taint=remove_taint, why=why))
    out.append(RemoveFinalizer(cr=cr_name, finalizer=FINALIZER))
    return tuple(out)


def release_changes(cr: str, node: HeldNode, *, remove_taint: bool) -> NodeRelease:
    """What ``ReleaseNode`` changes on ``node`` as it is now (nothing when nothing is ours)."""
    remove_annotations = tuple(k for k in sorted(keys_of(cr)) if k in node.annotations)
    remove_labels = tuple(k for k in label_keys_of(cr) if k in node.labels)
    change = release(node.cordon, cr)
    return NodeRelease(
        remove_annotations=remove_annotations,
        remove_labels=remove_labels,
        cordon_changed=change is not None,
        cordon=change.record if change is not None else None,
        uncordon=change is not None and change.uncordon,
        remove_taint=remove_taint and RUNTIME_REQUIRED_TAINT_KEY in node.taint_keys,
    )


def plan_runtime_taint(
    cr: NodeWright,
    node: str,
    *,
    taints: Sequence[selectors.Taint],
    labels: Mapping[str, str],
    status: Status,
    crs: Sequence[NodeWright],
) -> tuple[Action, ...]:
    """The runtime-required taint leaves a node once every runtimeRequired CR is complete there."""
    if not cr.spec.runtime_required or status is not Status.COMPLETE:
        return ()
    taint = next((t for t in taints if t.key == RUNTIME_REQUIRED_TAINT_KEY), None)
    if taint is None or taint_kept_by(cr.metadata.name, labels, crs):
        return ()
    return (RemoveTaint(node=node, key=taint.key, effect=taint.effect.value),)


def plan_auto_taint(cr: NodeWright, node: HeldNode) -> tuple[Action, ...]:
    """Taint a brand-new node (no annotation of ours at all) for a runtimeRequired CR."""
    if not (cr.spec.runtime_required and cr.spec.auto_taint_new_nodes):
        return ()
    if any(k.startswith(PREFIX) for k in node.annotations):
        return ()
    if RUNTIME_REQUIRED_TAINT_KEY in node.taint_keys:
        return ()
    return (
        AddTaint(
            node=node.name,
            key=RUNTIME_REQUIRED_TAINT_KEY,
            value=RUNTIME_REQUIRED_TAINT_VALUE,
            effect="NoSchedule",
        ),
        SetAnnotations(node=node.name, annotations={AUTO_TAINT_ANNOTATION: "true"}),
        EmitEvent(
            kind="Node",
            name=node.name,
            reason="AutoTainted",
            message=f"runtime-required taint for {cr.metadata.name}",
        ),
    )


def uninstall_variant(cr: NodeWright) -> NodeWright | None:
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


def reset_batches(old: NodeWrightStatus, cr: NodeWright, policy: DeploymentPolicy | None) -> bool:
    """A spec change after a completed rollout starts a fresh, paced rollout (the reset flag)."""
    return (
        old.observed_generation is not None
        and old.observed_generation != cr.metadata.generation
        and old.status is Status.COMPLETE
        and batching.resolve_reset_flag(cr, policy)
    )
