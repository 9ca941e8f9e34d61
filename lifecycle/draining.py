"""Which pods a drain must evict, which it skips, and which PodDisruptionBudgets stand in the way.

Pure: the controller turns API objects into the small views below, asks these functions, and the
executor does the evictions. Keeping the rules here means ``nwb plan`` can tell, before anything is
applied, which PDBs would block which nodes (docs/architecture.md, "Drain and
PodDisruptionBudgets").

Rules (what an operator of a GPU fleet expects from ``kubectl drain``, plus our own pods):
- DaemonSet pods are skipped: their controller would recreate them on the same node at once.
  With ``drain.ignoreDaemonSets: false`` they block the drain instead, as ``kubectl drain``
  without ``--ignore-daemonsets`` refuses to go on.
- Mirror (static) pods are skipped: the API cannot delete them; the kubelet owns them.
- Our own package pods are skipped: they are how the work gets done.
- Pods already finished (Succeeded/Failed) need no eviction.
- Unmanaged pods (no controller owner) block the drain unless ``drain.force``: nothing would
  recreate them, so evicting them loses work.
- ``drain.podSelector`` narrows eviction to matching pods; the rest are left in place.
- ``drain.disableEviction`` deletes the pods instead of evicting them: no PodDisruptionBudget is
  consulted, so none blocks and none is protected (``blocking_pdbs`` finds none). For nodes
  whose workloads have budgets that can never be met (single-replica apps, a stuck budget) and
  an operator who accepts losing availability during the drain.
- ``drain.gracePeriod`` is the grace period each eviction or delete asks for;
  unset, each pod's own ``terminationGracePeriodSeconds`` applies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from lifecycle import selectors
from lifecycle.spec import Drain, LabelSelector

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_US = "nodewright-bridge"


@dataclass(frozen=True, slots=True)
class PodView:
    """The facts about a pod that drain decisions need."""

    namespace: str
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    controller_kind: str | None = None  # kind of the ownerReference with controller=true
    is_mirror: bool = False
    phase: str = "Running"
    deleting: bool = False
    uses_empty_dir: bool = False
    uid: str = ""  # a delete (disableEviction) is made only for this very pod

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PdbView:
    """A PodDisruptionBudget as drain decisions see it."""

    namespace: str
    name: str
    selector: LabelSelector
    disruptions_allowed: int

    def covers(self, pod: PodView) -> bool:
        # An empty selector in policy/v1 selects every pod in the namespace.
        return pod.namespace == self.namespace and selectors.matches(self.selector, pod.labels)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class PodDisposition(StrEnum):
    EVICT = "evict"
    SKIP_DAEMONSET = "skip-daemonset"
    SKIP_MIRROR = "skip-mirror"
    SKIP_OURS = "skip-ours"
    SKIP_FINISHED = "skip-finished"
    SKIP_NOT_SELECTED = "skip-not-selected"
    SKIP_DELETING = "skip-deleting"  # already going; we only wait for it
    BLOCK_UNMANAGED = "block-unmanaged"
    BLOCK_EMPTY_DIR = "block-empty-dir"
    BLOCK_DAEMONSET = "block-daemonset"


BLOCKING = frozenset(
    {PodDisposition.BLOCK_UNMANAGED, PodDisposition.BLOCK_EMPTY_DIR, PodDisposition.BLOCK_DAEMONSET}
)


@dataclass(frozen=True, slots=True)
class DrainPlan:
    """What a drain of one node has to do."""

    evict: tuple[PodView, ...]
    waiting_for: tuple[PodView, ...]  # being deleted already; the drain is done when they are gone
    blockers: tuple[tuple[PodView, PodDisposition], ...]  # pods that stop the drain, with why

    @property
    def done(self) -> bool:
        return not self.evict and not self.waiting_for and not self.blockers


def classify(pod: PodView, drain: Drain) -> PodDisposition:
    """Decide what a drain does with one pod."""
    if pod.phase in ("Succeeded", "Failed"):
        return PodDisposition.SKIP_FINISHED
    if pod.labels.get(MANAGED_BY_LABEL) == MANAGED_BY_US:
        return PodDisposition.SKIP_OURS
    if pod.is_mirror:
        return PodDisposition.SKIP_MIRROR
    if pod.controller_kind == "DaemonSet":
        if drain.ignore_daemon_sets:
            return PodDisposition.SKIP_DAEMONSET
        return PodDisposition.BLOCK_DAEMONSET
    if drain.pod_selector is not None and not selectors.matches(drain.pod_selector, pod.labels):
        return PodDisposition.SKIP_NOT_SELECTED
    if pod.deleting:
        return PodDisposition.SKIP_DELETING
    if pod.controller_kind is None and not drain.force:
        return PodDisposition.BLOCK_UNMANAGED
    if pod.uses_empty_dir and not drain.delete_empty_dir_data:
        return PodDisposition.BLOCK_EMPTY_DIR
    return PodDisposition.EVICT


def plan_drain(pods: Iterable[PodView], drain: Drain) -> DrainPlan:
    """Sort the pods on a node into evict / wait / blocking, in a stable order."""
    evict: list[PodView] = []
    waiting: list[PodView] = []
    blockers: list[tuple[PodView, PodDisposition]] = []
    for pod in sorted(pods, key=lambda p: p.key):
        disposition = classify(pod, drain)
        if disposition is PodDisposition.EVICT:
            evict.append(pod)
        elif disposition is PodDisposition.SKIP_DELETING:
            waiting.append(pod)
        elif disposition in BLOCKING:
            blockers.append((pod, disposition))
    return DrainPlan(evict=tuple(evict), waiting_for=tuple(waiting), blockers=tuple(blockers))


@dataclass(frozen=True, slots=True)
class Eviction:
    """A pod a drain evicts, with the keys of the PodDisruptionBudgets covering it (a refusal
    names them without parsing the API server's message)."""

    pod: PodView
    budgets: tuple[str, ...] = ()


def evictions(to_evict: Sequence[PodView], pdbs: Sequence[PdbView]) -> tuple[Eviction, ...]:
    return tuple(
        Eviction(pod, tuple(sorted(pdb.key for pdb in pdbs if pdb.covers(pod)))) for pod in to_evict
    )


def blocking_pdbs(
    to_evict: Sequence[PodView], pdbs: Sequence[PdbView], drain: Drain | None = None
) -> list[PdbView]:
    """PDBs that currently allow no disruption and cover a pod the drain would evict
    (``to_evict``: ``plan_drain(...).evict``); none when ``drain.disableEviction`` (pods are
    deleted, budgets are not consulted).

    Used for PDB-aware node picking: a node whose pods are protected by an exhausted budget is
    picked only when no other candidate exists, and ``PDBBlocked`` names these budgets.
    """
    if drain is not None and drain.disable_eviction:
        return []
    found: dict[str, PdbView] = {}
    for pdb in pdbs:
        if pdb.disruptions_allowed > 0:
            continue
        if any(pdb.covers(pod) for pod in to_evict):
            found[pdb.key] = pdb
    return [found[k] for k in sorted(found)]


def pdb_protected(
    to_evict: Sequence[PodView], pdbs: Sequence[PdbView], drain: Drain | None = None
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each blocking budget (``blocking_pdbs``) with the pods it keeps on the node, as
    ``("namespace/pdb", ("namespace/pod", ...))``: the status names both."""
    return tuple(
        (pdb.key, tuple(sorted(p.key for p in to_evict if pdb.covers(p))))
        for pdb in blocking_pdbs(to_evict, pdbs, drain)
    )


def describe_blocker(pod: PodView, disposition: PodDisposition) -> str:
    """One line an operator can act on."""
    if disposition is PodDisposition.BLOCK_UNMANAGED:
        return (
            f"pod {pod.key} has no controller and would be lost by eviction; delete it or set "
            "spec.drain.force: true"
        )
    if disposition is PodDisposition.BLOCK_DAEMONSET:
        return (
            f"pod {pod.key} belongs to a DaemonSet and spec.drain.ignoreDaemonSets is false; "
            "set it true (the default) to leave DaemonSet pods in place"
        )
    if disposition is PodDisposition.BLOCK_EMPTY_DIR:
        return (
            f"pod {pod.key} uses emptyDir data that eviction deletes; set "
            "spec.drain.deleteEmptyDirData: true to allow it"
        )
    return f"pod {pod.key}: {disposition.value}"
