"""Settled nodes: snapshots and plans kept between reconcile passes, so a pass costs what changed.

A node is *settled* when its plan has nothing to do (no failure, no action but deleting pods
whose result is recorded: asking again is harmless, a delete in flight or answered moments
ago is not sent again, and a gone pod answers 404). Most nodes of a large rollout are settled
at any moment: waiting for their batch, complete, or running a package pod that has not ended.
A plan is a pure function of the parsed CR, the Node, the pods on it, the PodDisruptionBudgets,
the other CRs (a node's peers), a few flags and the time, and time enters only through
deadlines, which the planner reports as ``requeue_at``. So a settled node's snapshot is reused
until its Node's resourceVersion, the package pods or the workload pods on it (the stores'
``index_serial``: two numbers, not a walk of the pods), the CR object or the paused/disabled
flags change; a node with workload pods also until a PodDisruptionBudget changes. Its plans
are kept with everything the stage planner read but the time (``NodePlanner.plan``) and reused
while that is equal and the plan's ``requeue_at`` has not passed: a node that moved without
changing any of it (a kubelet's status update, a label nobody reads) has its snapshot made
again, not its plan. A node whose state does not parse is planned afresh every time. Inputs
that are not per node drop a CR's entries when they change (``forget``): the CR's secretVars
data, any CR object of the pass (``use_pass_inputs``: a node's peers come from them).

``KeptValues`` keeps what the rest of a pass derives from a node's snapshot (the rollout's node
view, the drain view of the report, the validation candidate), keyed by the inputs it read.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from lifecycle.actions import DeletePod
from lifecycle.spec import NodeWright
from lifecycle.stages import NodePlan
from nodewright_bridge.controller.snapshot import NodeSnapshot, Stores, meta_of

# What a node's plan depends on besides its snapshot: (allowed to start, paused, node order, why
# the rollout cannot pick it). The probe is planned with (False, <CR paused>, <recorded order>, "").
PlanKey = tuple[bool, bool, int, str, bool]
V = TypeVar("V")


@dataclass(slots=True)
class _Settled:
    cr: NodeWright
    paused: bool
    disabled: bool
    snap: NodeSnapshot | None  # None once the node moved (its plans stay, see ``plan``)
    # per key: what the plan was made from besides the time (``NodePlanner.plan``), and the plan
    plans: dict[PlanKey, tuple[tuple[object, ...], NodePlan]]
    pdbs: tuple[tuple[str, str], ...] = ()  # the PDB versions of the pass that made ``snap``


class SettledNodes:
    """Snapshots and plans of settled nodes, per (CR, node) (see the module docstring)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], _Settled] = {}
        # per CR: the PodDisruptionBudgets' (key, resourceVersion) its last pass read, and
        # every CR object that pass saw (other CRs' specs enter a node's peers)
        self._pdbs: dict[str, tuple[tuple[str, str], ...]] = {}
        self._crs: dict[str, tuple[NodeWright, ...]] = {}

    def use_pass_inputs(
        self, cr: str, crs: Sequence[NodeWright], pdbs: Iterable[Mapping[str, Any]]
    ) -> None:
        """What one pass of ``cr`` reads besides each node: the CR objects (any change drops
        the CR's entries: the nodes' peers come from them) and the PDBs (kept as one value,
        the same object while nothing changed, which nodes with workload pods are kept by)."""
        seen = tuple(crs)
        before = self._crs.get(cr)
        if (
            before is None
            or len(before) != len(seen)
            or any(a is not b for a, b in zip(before, seen, strict=True))
        ):
            self.forget(cr)
            self._crs[cr] = seen
        versions = tuple(
            sorted(
                (f"{m.get('namespace', '')}/{m.get('name', '')}", str(m.get("resourceVersion", "")))
                for m in (meta_of(p) for p in pdbs)
            )
        )
        if self._pdbs.get(cr) != versions:
            self._pdbs[cr] = versions

    def get(
        self,
        cr: NodeWright,
        node: Mapping[str, Any],
        stores: Stores,
        *,
        paused: bool,
        disabled: bool,
        node_index: str = "node",
    ) -> NodeSnapshot | None:
        """The kept snapshot of ``node``, or None (and the snapshot is dropped) if anything
        moved. Its plans stay: they are kept by what they were made from (``plan``)."""
        meta = meta_of(node)
        key = (cr.metadata.name, str(meta.get("name", "")))
        entry = self._entries.get(key)
        if entry is None:
            return None
        snap = entry.snap
        if snap is None:
            return None
        if (
            entry.cr is not cr
            or snap.resource_version != str(meta.get("resourceVersion", ""))
            or (entry.paused, entry.disabled) != (paused, disabled)
            or snap.package_pods_serial != stores.package_pods.index_serial(node_index, key[1])
            or snap.workload_pods_serial != stores.pods.index_serial(node_index, key[1])
            or (snap.workload_pods_serial and entry.pdbs is not self._pdbs.get(key[0]))
        ):
            entry.snap = None
            return None
        return snap

    def plan(
        self,
        cr: NodeWright,
        node: str,
        key: PlanKey,
        now: datetime,
        inputs: tuple[object, ...] = (),
    ) -> NodePlan | None:
        """The kept plan of ``node`` for ``key``, if it was made from equal ``inputs`` (all the
        stage planner reads but the time: a node whose Node or pods moved without changing any
        of them, a kubelet's status update, keeps its plan) and its deadline has not passed."""
        entry = self._entries.get((cr.metadata.name, node))
        found = entry.plans.get(key) if entry is not None else None
        if found is None or entry is None:
            return None
        made_from, kept = found
        if (kept.requeue_at is not None and now >= kept.requeue_at) or made_from != inputs:
            del entry.plans[key]
            return None
        return kept

    def offer(
        self,
        cr: NodeWright,
        snap: NodeSnapshot,
        key: PlanKey,
        plan: NodePlan,
        stores: Stores,
        *,
        paused: bool,
        disabled: bool,
        node_index: str = "node",
        inputs: tuple[object, ...] = (),
    ) -> None:
        """Keep ``snap`` and ``plan`` (planned for ``key`` from ``inputs``) if the node is
        settled."""
        entry_key = (cr.metadata.name, snap.name)
        if (
            any(not isinstance(a, DeletePod) for a in plan.actions)
            or plan.failures
            or snap.state_error is not None
        ):
            self._entries.pop(entry_key, None)
            return
        entry = self._entries.get(entry_key)
        if entry is None:
            entry = _Settled(cr, paused, disabled, snap, {}, self._pdbs.get(cr.metadata.name, ()))
            self._entries[entry_key] = entry
        else:
            self.attach(cr, snap, paused=paused, disabled=disabled)
        entry.plans[key] = (inputs, plan)

    def attach(self, cr: NodeWright, snap: NodeSnapshot, *, paused: bool, disabled: bool) -> None:
        """``snap`` is the node's snapshot to keep from now on (its kept plan was reused: the
        node moved without changing what the plan read), so the next pass need not make it."""
        entry = self._entries.get((cr.metadata.name, snap.name))
        if entry is not None and entry.snap is not snap and snap.state_error is None:
            entry.cr, entry.paused, entry.disabled, entry.snap = cr, paused, disabled, snap
            entry.pdbs = self._pdbs.get(cr.metadata.name, ())

    def forget(self, cr_name: str) -> None:
        for key in [k for k in self._entries if k[0] == cr_name]:
            del self._entries[key]
        self._crs.pop(cr_name, None)


class KeptValues(Generic[V]):
    """Values derived from a node's snapshot (the rollout's and the report's views of it), kept
    per (CR, node) with the inputs they were made from, so a pass over unchanged nodes makes
    none of them again. The inputs compare with ``==``, which is identity first: a snapshot kept
    between passes (``settled``, ``observing``) is the very same object. Memory stays bounded by
    the nodes a CR targets (:meth:`prune`)."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, tuple[tuple[object, ...], V]]] = {}

    def get(self, cr: str, node: str, inputs: tuple[object, ...]) -> V | None:
        row = self._rows.get(cr, {}).get(node)
        if row is None or row[0] != inputs:
            return None
        return row[1]

    def put(self, cr: str, node: str, inputs: tuple[object, ...], value: V) -> V:
        self._rows.setdefault(cr, {})[node] = (inputs, value)
        return value

    def made(self, cr: str, node: str, inputs: tuple[object, ...], make: Callable[[], V]) -> V:
        """The value kept for ``inputs``, or ``make()`` kept from now on."""
        value = self.get(cr, node, inputs)
        return self.put(cr, node, inputs, make()) if value is None else value

    def prune(self, cr: str, count: int, alive: Callable[[], Collection[str]]) -> None:
        """Drop the rows of nodes not ``alive`` once there are more rows than the ``count`` live
        nodes (checking costs nothing while no node went away)."""
        rows = self._rows.get(cr)
        if rows is not None and len(rows) > count:
            live = alive()
            for node in [n for n in rows if n not in live]:
                del rows[node]

    def forget(self, cr: str) -> None:
        self._rows.pop(cr, None)
