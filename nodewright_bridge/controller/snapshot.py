"""One consistent view of the world for one reconcile of one NodeWright, read from the caches.

Why a separate step: the planners in ``lifecycle`` take plain values (``NodeView``,
``NodeFacts``, ``PodObservation``, ``PdbView``/``PodView``); turning raw API objects into those is
where malformed input shows up, and it must never crash a reconcile or leak into another CR:

- a CR that does not validate becomes :class:`InvalidCR` with one ``path: message`` line per
  problem (the ``InvalidSpec`` condition); other CRs carry on;
- a node whose ``state-<cr>`` annotation does not parse gets ``state_error`` and is left untouched
  (no pod, no patch) until someone fixes or removes the annotation (``NodeStateMalformed``);
- a termination message that is not an agent result becomes an ``unparseable`` result (the pod
  counts as failed with the raw text in the message), via ``lifecycle.results``;
- validation pods (label ``bridge.nodewright.io/validate``) are not package pods: they are read
  by ``controller.validating`` only, never shown to the stage planner (which would delete a pod
  it does not know), never counted as another CR's package pod on the node.

Cost: one pass over the cached Nodes per reconcile, pods looked up by node index, PDBs grouped by
namespace once. Nothing is copied out of the stores beyond the small views.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from lifecycle import (
    draining,
    peering,
    pod_records,
    preflight,
    releasing,
    results,
    selectors,
    sequencing,
    stages,
    validating,
)
from lifecycle.errors import SpecError
from lifecycle.nodestate import (
    CORDON_ANNOTATION,
    BatchRecord,
    CordonRecord,
    PackageState,
    batch_annotation,
    drift_label,
    preflight_annotation,
    state_annotation,
    status_key,
)
from lifecycle.preflight import PreflightRecord
from lifecycle.spec import DeploymentPolicy, LabelSelector, NodeWright
from lifecycle.stages import INTERRUPT_STAGES, NodeFacts, PodObservation, PodPhase
from lifecycle.status import Status
from lifecycle.validation import load_nodewright, load_policy
from nodewright_bridge.k8s import caches, slimming, store

logger = logging.getLogger(__name__)

JsonObject = dict[str, Any]

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
ATTEMPT_ANNOTATION = "bridge.nodewright.io/attempt"
STAGES_ANNOTATION = "bridge.nodewright.io/stages"
RESOURCE_ID_ANNOTATION = "bridge.nodewright.io/resource-id"
LABEL_CR = "bridge.nodewright.io/cr"
LABEL_PACKAGE = "bridge.nodewright.io/package"
LABEL_VERSION = "bridge.nodewright.io/version"
LABEL_STAGE = "bridge.nodewright.io/stage"
_LIVE_PHASES = ("Pending", "Running", "Unknown", "")


# ---- parsing objects -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InvalidCR:
    """A NodeWright that does not validate: its name and one line per problem."""

    name: str
    generation: int
    problems: tuple[str, ...]


def parse_nodewright(obj: Mapping[str, Any]) -> NodeWright | InvalidCR:
    """The validated CR, or :class:`InvalidCR` (never raises)."""
    meta = obj.get("metadata") or {}
    try:
        return load_nodewright(obj)
    except SpecError as exc:
        problems = tuple(exc.problems)
    except (ValidationError, ValueError, TypeError) as exc:  # defensive: never crash a reconcile
        problems = (str(exc),)
    return InvalidCR(
        name=str(meta.get("name", "")),
        generation=int(meta.get("generation") or 0),
        problems=problems,
    )


def parse_policy(obj: Mapping[str, Any]) -> DeploymentPolicy | None:
    try:
        return load_policy(obj)
    except (SpecError, ValidationError, ValueError, TypeError):
        return None


def parse_time(text: object) -> datetime | None:
    """An RFC 3339 time of an API object (``Z`` or an offset), or None: the planner's parser."""
    return stages.parse_time(text) if isinstance(text, str) else None


def parse_state(text: str | None) -> dict[str, PackageState]:
    """The ``state-<cr>`` annotation. Raises ValueError when it does not parse."""
    if not text:
        return {}
    return dict(_parse_state_items(text))


# Nodes of one batch usually carry the very same state text (same resource id, timestamps to
# the second), and a reconcile parses every node's: parse each distinct text once and share the
# (frozen) PackageState objects. Bounded; at 5,000 nodes this is a few hundred distinct texts.
@functools.lru_cache(maxsize=1024)
def _parse_state_items(text: str) -> tuple[tuple[str, PackageState], ...]:
    raw = json.loads(text)
    if not isinstance(raw, dict):
        raise ValueError("expected a JSON object")
    try:
        return tuple((str(k), PackageState.model_validate(v)) for k, v in raw.items())
    except ValidationError as exc:
        raise ValueError(str(exc).splitlines()[0]) from None


def dump_state(state: Mapping[str, PackageState]) -> str:
    data = {
        k: v.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        for k, v in sorted(state.items())
    }
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def parse_cordon(text: str | None) -> CordonRecord | None:
    if not text:
        return None
    try:
        return CordonRecord.model_validate_json(text)
    except ValidationError:
        logger.warning("cordon annotation does not parse; treating as absent")
        return None


def parse_record(text: str | None) -> BatchRecord | None:
    if not text:
        return None
    try:
        return BatchRecord.model_validate_json(text)
    except ValidationError:
        return None


def parse_status(text: str | None) -> Status | None:
    try:
        return Status(text) if text else None
    except ValueError:
        return None


def node_taints(node: Mapping[str, Any]) -> tuple[selectors.Taint, ...]:
    out: list[selectors.Taint] = []
    for raw in (node.get("spec") or {}).get("taints") or ():
        try:
            effect = selectors.TaintEffect(raw.get("effect", ""))
        except ValueError:
            continue
        out.append(
            selectors.Taint(
                key=str(raw.get("key", "")), effect=effect, value=raw.get("value") or ""
            )
        )
    return tuple(out)


def node_ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def boot_id(node: Mapping[str, Any]) -> str:
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or "")


def meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if type(meta) is dict:  # decoded JSON: skips the (slow) ABC check on every hot-path call
        return meta
    return meta if isinstance(meta, Mapping) else {}


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta_of(obj).get("labels") or {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta_of(obj).get("annotations") or {}


# ---- pods ----------------------------------------------------------------------------------


def pod_view(pod: Mapping[str, Any]) -> draining.PodView:
    meta = meta_of(pod)
    controller = None
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            controller = str(ref.get("kind", ""))
    volumes = (pod.get("spec") or {}).get("volumes") or ()
    return draining.PodView(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        labels=dict(meta.get("labels") or {}),
        controller_kind=controller,
        is_mirror=MIRROR_ANNOTATION in (meta.get("annotations") or {}),
        phase=str((pod.get("status") or {}).get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        uses_empty_dir=any("emptyDir" in v for v in volumes),
        uid=str(meta.get("uid") or ""),
    )


def pdb_view(pdb: Mapping[str, Any]) -> draining.PdbView | None:
    meta = meta_of(pdb)
    raw = (pdb.get("spec") or {}).get("selector") or {}
    try:
        selector = LabelSelector.model_validate(raw)
    except ValidationError:
        return None
    status = pdb.get("status") or {}
    return draining.PdbView(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        selector=selector,
        disruptions_allowed=int(status.get("disruptionsAllowed") or 0),
    )


def agent_state(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The state of one of our pods' ``agent`` container (or its first container)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    for status in statuses:
        if status.get("name") == "agent":
            return status.get("state") or {}
    return statuses[0].get("state") or {} if statuses else {}


def pod_attempt(annotations: Mapping[str, Any]) -> int:
    """The attempt one of our pods runs (its annotation; 1 when missing or garbled)."""
    try:
        return int(annotations.get(ATTEMPT_ANNOTATION, "1"))
    except ValueError:
        return 1


def pod_phase(pod: Mapping[str, Any]) -> PodPhase:
    """The pod's phase (Pending when not reported, Unknown when not one we know)."""
    try:
        return PodPhase((pod.get("status") or {}).get("phase") or "Pending")
    except ValueError:
        return PodPhase.UNKNOWN


def is_validation_pod(pod: Mapping[str, Any]) -> bool:
    return validating.VALIDATION_LABEL in labels_of(pod)


def observe_pod(pod: Mapping[str, Any]) -> PodObservation | None:
    """One of our package pods as the stage planner sees it (None if it lacks our labels, or is
    a validation pod)."""
    meta = meta_of(pod)
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    package = labels.get(LABEL_PACKAGE)
    version = labels.get(LABEL_VERSION)
    if not package or not version or validating.VALIDATION_LABEL in labels:
        return None
    stages = tuple(s for s in str(annotations.get(STAGES_ANNOTATION, "")).split(",") if s)
    if not stages and labels.get(LABEL_STAGE):
        stages = (labels[LABEL_STAGE],)
    attempt = pod_attempt(annotations)
    status = pod.get("status") or {}
    phase = pod_phase(pod)
    state = agent_state(pod)
    result = None
    waiting = ""
    finished = None
    terminated = state.get("terminated")
    if terminated:
        finished = parse_time(terminated.get("finishedAt"))
        message = terminated.get("message") or ""
        if message:
            result = results.parse_termination_message(message)
        elif phase is PodPhase.FAILED:
            reason = terminated.get("reason") or status.get("reason") or "Error"
            code = terminated.get("exitCode")
            result = results.parse_termination_message(f"exit code {code} ({reason})")
    elif phase is PodPhase.FAILED and status.get("reason"):
        result = results.parse_termination_message(
            f"{status.get('reason')}: {status.get('message') or ''}".strip()
        )
    if state.get("waiting"):
        waiting = str(state["waiting"].get("reason") or "")
    interrupt = bool(stages) and stages[0] in {s.value for s in INTERRUPT_STAGES}
    return PodObservation(
        name=str(meta.get("name", "")),
        package=package,
        version=version,
        stages=stages,
        attempt=attempt,
        phase=phase,
        interrupt=interrupt,
        result=result,
        waiting_reason=waiting,
        deleting=bool(meta.get("deletionTimestamp")),
        finished=finished,
        created=parse_time(meta.get("creationTimestamp")),
        resource_id=str(annotations.get(RESOURCE_ID_ANNOTATION, "")),
        carried=parse_entry(annotations.get(pod_records.ENTRY_ANNOTATION)),
        carried_record=parse_record(annotations.get(pod_records.BATCH_ANNOTATION)),
    )


def parse_entry(text: object) -> PackageState | None:
    """The entry a pod carries (``lifecycle.pod_records``); None if absent or unreadable (the
    pod then counts as one the node does not record)."""
    if not isinstance(text, str) or not text:
        return None
    return _parse_entry(text)


# The pods one pass starts carry the very same entry text (same resource id, timestamps to the
# second): as with node states, parse each distinct text once and share the (frozen) entry. A
# parsed entry costs about 2 KB; a 2,048-pod batch kept them apart at 4 MB.
@functools.lru_cache(maxsize=1024)
def _parse_entry(text: str) -> PackageState | None:
    try:
        return PackageState.model_validate_json(text)
    except ValidationError:
        return None


def dump_entry(entry: PackageState) -> str:
    return entry.model_dump_json(by_alias=True, exclude_defaults=True)


def carrying_by_node(pods: Iterable[Mapping[str, Any]]) -> dict[str, list[PodObservation]]:
    """Node -> the pods among ``pods`` that carry a start (``lifecycle.pod_records``)."""
    out: dict[str, list[PodObservation]] = {}
    for pod in pods:
        observed = observe_pod(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if observed is not None and observed.carried is not None and node:
            out.setdefault(str(node), []).append(observed)
    return out


# ---- the snapshot ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """One targeted node as the planners of one CR see it."""

    name: str
    resource_version: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    taints: tuple[selectors.Taint, ...]
    created: datetime | None
    facts: NodeFacts
    state: Mapping[str, PackageState]
    state_error: str | None
    status: Status | None
    record: BatchRecord | None
    pods: tuple[PodObservation, ...]
    drain: draining.DrainPlan
    evictions: tuple[draining.Eviction, ...] = ()  # drain.evict with their covering PDBs
    blocking_pdbs: tuple[str, ...] = ()
    # the stores' ``index_serial`` of the node's package pods (any CR's) and of its workload
    # pods, read before them: while both are the same, the pods this snapshot read are too
    package_pods_serial: int = 0
    workload_pods_serial: int = 0
    # each blocking PDB with the pods it keeps here; the podNonInterruptLabels pods running here
    pdb_pods: tuple[tuple[str, tuple[str, ...]], ...] = ()
    protected_pods: tuple[str, ...] = ()
    # check mode (``lifecycle.preflight``): the node's records and whether it is labelled drifted
    preflight: Mapping[str, PreflightRecord] = field(default_factory=dict)
    drift_labelled: bool = False
    # entries (and the batch record) that the node's pods carry (``lifecycle.pod_records``)
    carried: frozenset[str] = frozenset()
    record_from_pod: bool = False


@dataclass(frozen=True, slots=True)
class Stores:
    """The informer stores a snapshot reads (duck-typed: ``values``, ``get``, ``by_index``)."""

    nodes: Any
    pods: Any
    package_pods: Any
    pdbs: Any
    nodewrights: Any
    policies: Any
    secrets: Any  # the controller namespace's Secrets, slimmed to ``digests`` per key


def stores_from(
    *,
    nodes: Iterable[Mapping[str, Any]] = (),
    pods: Iterable[Mapping[str, Any]] = (),
    pdbs: Iterable[Mapping[str, Any]] = (),
    nodewrights: Iterable[Mapping[str, Any]] = (),
    policies: Iterable[Mapping[str, Any]] = (),
    secrets: Iterable[Mapping[str, Any]] = (),
) -> Stores:
    """Stores filled from listed objects, slimmed and indexed as the controller's informers do
    (our own pods, by the managed-by label, go to ``package_pods``): ``nwb plan --live`` and tests
    decode a cluster exactly as the controller does."""
    out = Stores(
        nodes=store.Store(),
        pods=store.Store(
            {caches.BY_NODE: store.by_node_name, caches.BY_NAMESPACE: store.by_namespace}
        ),
        package_pods=store.Store(
            {caches.BY_NODE: store.by_node_name, caches.BY_CR: store.by_label(caches.CR_LABEL)}
        ),
        pdbs=store.Store({caches.BY_NAMESPACE: store.by_namespace}),
        nodewrights=store.Store(),
        policies=store.Store(),
        secrets=store.Store(),
    )
    for obj in nodes:
        out.nodes.put(store.object_key(obj), slimming.slim_node(dict(obj)))
    for obj in pods:
        ours = labels_of(obj).get(caches.MANAGED_BY_LABEL) == caches.MANAGED_BY_VALUE
        target = out.package_pods if ours else out.pods
        target.put(store.object_key(obj), slimming.slim_pod(dict(obj)))
    for target, objs in (
        (out.pdbs, pdbs),
        (out.nodewrights, nodewrights),
        (out.policies, policies),
    ):
        for obj in objs:
            target.put(store.object_key(obj), dict(obj))
    for obj in secrets:
        out.secrets.put(store.object_key(obj), slimming.slim_secret(dict(obj)))
    return out


@dataclass(slots=True)
class PdbIndex:
    """PDBs grouped by namespace, parsed once per reconcile."""

    by_namespace: dict[str, list[draining.PdbView]] = field(default_factory=dict)

    @classmethod
    def of(cls, pdbs: Iterable[Mapping[str, Any]]) -> PdbIndex:
        index = cls()
        for raw in pdbs:
            view = pdb_view(raw)
            if view is not None:
                index.by_namespace.setdefault(view.namespace, []).append(view)
        return index

    def relevant(self, pods: Sequence[draining.PodView]) -> list[draining.PdbView]:
        namespaces = {p.namespace for p in pods}
        return [pdb for ns in sorted(namespaces) for pdb in self.by_namespace.get(ns, ())]


def held_node(
    cr_name: str, node: Mapping[str, Any], package_pods: Iterable[Mapping[str, Any]] = ()
) -> releasing.HeldNode:
    """``node`` as the release rules see it for ``cr_name``, with that CR's pods among
    ``package_pods`` (the pods on the node)."""
    meta = meta_of(node)
    annotations = meta.get("annotations") or {}
    pods: list[releasing.PodSeen] = []
    for raw in package_pods:
        if labels_of(raw).get(LABEL_CR) != cr_name:
            continue
        seen = observe_pod(raw)
        if seen is None:
            continue
        pods.append(
            releasing.PodSeen(
                name=seen.name,
                package=seen.package,
                interrupt=seen.interrupt,
                live=seen.live,
                deleting=seen.deleting,
                created=parse_time(meta_of(raw).get("creationTimestamp")),
                carries=seen.carried is not None,
            )
        )
    return releasing.HeldNode(
        name=str(meta.get("name", "")),
        labels=meta.get("labels") or {},
        annotations=annotations,
        cordon=parse_cordon(annotations.get(CORDON_ANNOTATION)),
        taint_keys=frozenset(
            str(t.get("key", "")) for t in (node.get("spec") or {}).get("taints") or ()
        ),
        pods=tuple(pods),
    )


def secret_data(cr: NodeWright, secrets: Any, namespace: str) -> dict[str, str]:
    """Package name -> digest of the data its ``secretVars`` Secrets hold (packages with any).

    A missing Secret or key is part of the digest too (``missing``): creating it later is a
    change. Only the slimmed per-key digests are read; secret values never reach the controller.
    """
    out: dict[str, str] = {}
    for name, pkg in cr.spec.packages.items():
        if not pkg.secret_vars:
            continue
        parts: list[object] = []
        for ref in pkg.secret_vars:
            obj = secrets.get(f"{namespace}/{ref.secret_name}")
            if obj is None:
                parts.append([ref.secret_name, "missing"])
                continue
            digests = obj.get("digests") or {}
            if ref.key:
                parts.append([ref.secret_name, ref.key, digests.get(ref.key, "missing")])
            else:
                parts.append([ref.secret_name, sorted(digests.items())])
        text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
        out[name] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return out


def protected_pods(cr: NodeWright, workload: Sequence[draining.PodView]) -> tuple[str, ...]:
    """The podNonInterruptLabels pods among ``workload`` that an interrupt waits for."""
    selector = cr.spec.pod_non_interrupt_labels
    if selector is None:
        return ()
    return tuple(
        sorted(
            p.key
            for p in workload
            if p.phase in ("Running", "Pending") and selectors.matches(selector, p.labels)
        )
    )


def undrained_pods(cr: NodeWright, pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """The pods among ``pods`` (a node's, as the API lists them) that keep ``cr``'s interrupt
    from starting: what a drain would still evict, wait for or stop at, and the
    podNonInterruptLabels pods; the same judgement ``snapshot_node`` makes from the cache."""
    workload = [pod_view(p) for p in pods]
    plan = draining.plan_drain(workload, cr.spec.drain)
    left = {p.key for p in (*plan.evict, *plan.waiting_for)}
    left.update(p.key for p, _ in plan.blockers)
    left.update(protected_pods(cr, workload))
    return sorted(left)


def snapshot_node(
    cr: NodeWright,
    node: Mapping[str, Any],
    stores: Stores,
    pdbs: PdbIndex,
    *,
    node_index: str = "node",
    crs: Sequence[NodeWright] = (),
) -> NodeSnapshot:
    """Everything the planners need about ``node`` for ``cr`` (``crs``: every CR, for the
    other rollouts' work on the node)."""
    meta = meta_of(node)
    name = str(meta.get("name", ""))
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    cr_name = cr.metadata.name
    state_error = None
    try:
        state = parse_state(annotations.get(state_annotation(cr_name)))
    except ValueError as exc:
        state = {}
        state_error = str(exc) or "does not parse"

    workload_serial = stores.pods.index_serial(node_index, name)
    package_serial = stores.package_pods.index_serial(node_index, name)
    workload = [pod_view(p) for p in stores.pods.by_index(node_index, name)]
    plan = draining.plan_drain(workload, cr.spec.drain)
    relevant = pdbs.relevant(workload)
    blocking = draining.blocking_pdbs(plan.evict, relevant, cr.spec.drain)
    protected = protected_pods(cr, workload)
    non_interrupt = len(protected)
    ours: list[PodObservation] = []
    foreign = 0
    package_pods = [
        p for p in stores.package_pods.by_index(node_index, name) if not is_validation_pod(p)
    ]
    for raw in package_pods:
        pod_labels = labels_of(raw)
        if pod_labels.get(LABEL_CR) == cr_name:
            observed = observe_pod(raw)
            if observed is not None:
                ours.append(observed)
        elif str((raw.get("status") or {}).get("phase") or "") in _LIVE_PHASES:
            foreign += 1
    facts = NodeFacts(
        name=name,
        boot_id=boot_id(node),
        ready=node_ready(node),
        unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
        cordon=parse_cordon(annotations.get(CORDON_ANNOTATION)),
        pods_to_evict=len(plan.evict) + len(plan.waiting_for) + len(plan.blockers),
        non_interrupt_pods=non_interrupt,
        foreign_package_pods=foreign,
        peers=peer_outlooks(cr, node, crs) if len(crs) > 1 else (),
        blocking_pdbs=tuple(p.key for p in blocking),
        unevictable_pods=len(plan.blockers),
        pdb_pods=draining.pdb_protected(plan.evict, relevant, cr.spec.drain),
    )
    status = parse_status(annotations.get(status_key(cr_name)))
    record = parse_record(annotations.get(batch_annotation(cr_name)))
    carried = pod_records.Carried(state, record, frozenset(), False)
    if state_error is None:
        carried = pod_records.overlay(state, record, ours, status)
    return NodeSnapshot(
        name=name,
        resource_version=str(meta.get("resourceVersion", "")),
        labels=labels,
        annotations=annotations,
        taints=node_taints(node),
        created=parse_time(meta.get("creationTimestamp")),
        facts=facts,
        state=carried.state,
        state_error=state_error,
        status=status,
        record=carried.record,
        carried=carried.keys,
        record_from_pod=carried.record_from_pod,
        pods=tuple(sorted(ours, key=lambda p: p.name)),
        drain=plan,
        evictions=draining.evictions(plan.evict, relevant),
        blocking_pdbs=facts.blocking_pdbs,
        package_pods_serial=package_serial,
        workload_pods_serial=workload_serial,
        pdb_pods=facts.pdb_pods,
        protected_pods=protected,
        preflight=preflight.parse_records(annotations.get(preflight_annotation(cr_name))),
        drift_labelled=labels.get(drift_label(cr_name)) == "true",
    )


def peer_outlooks(
    cr: NodeWright, node: Mapping[str, Any], crs: Sequence[NodeWright]
) -> tuple[peering.PeerOutlook, ...]:
    """The work the other CRs that target ``node`` recorded on it (``lifecycle.peering``).

    A disabled CR is left out (sequencing ignores it too); one whose state does not parse
    is left out as well (its own reconcile reports it)."""
    meta = meta_of(node)
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    me = cr.metadata.name
    rank = (cr.spec.priority, me)
    cordon = parse_cordon(annotations.get(CORDON_ANNOTATION))
    holders = set(cordon.holders) if cordon is not None else set()
    out: list[peering.PeerOutlook] = []
    for other in crs:
        name = other.metadata.name
        text = annotations.get(state_annotation(name))
        if name == me or (not text and name not in holders):
            continue
        if sequencing.is_disabled(other.metadata.annotations):
            continue
        if not selectors.matches(other.spec.node_selectors, labels):
            continue
        try:
            state = parse_state(text)
        except ValueError:
            continue
        out.append(
            peering.outlook(
                other,
                state,
                me=me,
                earlier=(other.spec.priority, name) < rank,
                holds_cordon=name in holders,
                complete=labels.get(status_key(name)) == Status.COMPLETE.value,
                idle=sequencing.is_paused(other.metadata.annotations),
            )
        )
    return tuple(out)


def joinable_on(cr: NodeWright, nodes: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Nodes ``cr`` holds cordoned while in progress there: a later CR may join its cordon
    (``lifecycle.sequencing``). None while the CR is paused: it blocks later CRs."""
    name = cr.metadata.name
    if sequencing.is_paused(cr.metadata.annotations):
        return frozenset()
    key = status_key(name)
    out: set[str] = set()
    for n in nodes:
        if labels_of(n).get(key) != Status.IN_PROGRESS.value:
            continue
        text = annotations_of(n).get(CORDON_ANNOTATION) or ""
        if name not in text:
            continue
        record = parse_cordon(text)
        if record is not None and name in record.holders:
            out.add(str(meta_of(n).get("name", "")))
    return frozenset(out)


def complete_on(cr_name: str, nodes: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Nodes whose status label for ``cr_name`` says complete (sequencing input)."""
    key = status_key(cr_name)
    return frozenset(
        str(meta_of(n).get("name", "")) for n in nodes if labels_of(n).get(key) == "complete"
    )
