"""Observe: what one reconcile pass of one NodeWright sees, read from the informer caches.

The first of the pass's four steps (observe -> plan -> apply -> report, see ``reconciler``). It
reads and decodes, and decides nothing: every targeted node becomes a ``snapshot.NodeSnapshot``
(kept from an earlier pass while the node is settled, ``settled``), nodes it no longer targets
but still carries keys of are collected for release, and two kinds of node are set apart:

- a node whose state annotation of the CR does not parse (``malformed``): left untouched until
  someone fixes or removes the annotation;
- a node whose cached resourceVersion is older than one this process wrote, or with a pod this
  process created that the pod cache does not show yet (``stale``): not planned until the cache
  catches up (a decision is never re-made from state we already changed), and judged meanwhile
  by the status we last wrote for it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from lifecycle import releasing, selectors, sequencing
from lifecycle.nodestate import batch_annotation
from lifecycle.spec import DeploymentPolicy, NodeWright
from lifecycle.status import NodeWrightStatus, Status
from nodewright_bridge.controller import snapshot
from nodewright_bridge.controller.settled import SettledNodes
from nodewright_bridge.k8s import caches


@dataclass(slots=True)
class Observation:
    """What one pass of ``cr`` saw (built by :func:`observe`)."""

    cr: NodeWright
    old: NodeWrightStatus
    now: datetime
    policy: DeploymentPolicy | None
    crs: list[NodeWright]  # every CR in the cache (runtime-required taint rules)
    paused: bool
    disabled: bool
    ready: frozenset[str]  # targeted nodes the CR's priority/sequencing lets it work on
    waiting_on: list[str]  # CRs of lower priority with sequencing "all" still incomplete
    snaps: dict[str, snapshot.NodeSnapshot] = field(default_factory=dict)  # to plan
    stale: dict[str, snapshot.NodeSnapshot] = field(default_factory=dict)
    malformed: dict[str, snapshot.NodeSnapshot] = field(default_factory=dict)
    # Nodes not targeted any more that carry the CR's batch record (their record is released).
    departed: list[snapshot.NodeSnapshot] = field(default_factory=list)
    held: list[releasing.HeldNode] = field(default_factory=list)  # not targeted, to let go
    new_nodes: list[releasing.HeldNode] = field(default_factory=list)  # auto-taint candidates


class Targeting:
    """Which nodes each CR targets, kept per node with the labels object it was judged from.

    Why: every pass asks it of every CR and every node. The informer replaces a Node's object
    on each change and never edits one in place, so the very same labels object gives the same
    answer, and a pass over unchanged nodes matches no selector. A CR whose selectors changed
    is judged afresh; rows of nodes and CRs that went away are dropped (bounded memory)."""

    def __init__(self) -> None:
        # CR name -> (its node selectors, node name -> (labels judged, targeted))
        self._rows: dict[str, tuple[object, dict[str, tuple[object, bool]]]] = {}

    def targeted(self, cr: NodeWright, nodes: Sequence[Mapping[str, Any]]) -> list[str]:
        """Names of the nodes ``cr`` targets (its node selectors match their labels)."""
        wanted = cr.spec.node_selectors
        row = self._rows.get(cr.metadata.name)
        if row is None or (row[0] is not wanted and row[0] != wanted):
            row = (wanted, {})
            self._rows[cr.metadata.name] = row
        kept = row[1]
        out = []
        for node in nodes:
            meta = snapshot.meta_of(node)
            name = str(meta.get("name"))
            labels = meta.get("labels")
            judged = kept.get(name)
            if judged is None or judged[0] is not labels:
                judged = (labels, selectors.matches(wanted, labels or {}))
                kept[name] = judged
            if judged[1]:
                out.append(name)
        if len(kept) > len(nodes):
            live = {str(snapshot.meta_of(n).get("name")) for n in nodes}
            for name in [n for n in kept if n not in live]:
                del kept[name]
        return out

    def keep_only(self, crs: Iterable[str]) -> None:
        """Drop the rows of CRs not in ``crs``."""
        alive = set(crs)
        for name in [n for n in self._rows if n not in alive]:
            del self._rows[name]


class Touched:
    """Nodes whose "stale" answer may have changed without a cache event: this process wrote
    the Node or created a pod there (any CR). Numbered like a store's journal, so a pass asks
    for the nodes touched since the one before it in O(touched)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._serial = 0
        self._nodes: dict[str, int] = {}  # node -> serial of its last touch, oldest first

    @property
    def serial(self) -> int:
        with self._lock:
            return self._serial

    def touch(self, node: str) -> None:
        """Call *after* the write is in the memory ``stale`` reads."""
        with self._lock:
            self._serial += 1
            self._nodes.pop(node, None)
            self._nodes[node] = self._serial

    def since(self, serial: int) -> list[str]:
        with self._lock:
            out = []
            for node in reversed(self._nodes):
                if self._nodes[node] <= serial:
                    break
                out.append(node)
            return out


@dataclass(frozen=True, slots=True)
class _Row:
    """What one pass made of one node (``_NodeObserver.row``)."""

    mine: bool
    held: releasing.HeldNode | None = None  # not targeted, still tracked by the CR
    departed: snapshot.NodeSnapshot | None = None  # not targeted, carries the batch record
    new_node: releasing.HeldNode | None = None  # an auto-taint candidate
    kind: str = ""  # "snaps", "stale" or "malformed" for a targeted node
    snap: snapshot.NodeSnapshot | None = None


@dataclass(slots=True)
class _Observed:
    inputs: tuple[object, ...]  # what every row depends on besides its own node
    serials: tuple[int, int, int, int]  # nodes, package pods, pods, touched: when it was read
    rows: dict[str, _Row]


class ObservedRows:
    """Each CR's rows of its last pass, so the next one re-observes only the nodes that changed
    (the Node, the pods on it, a write or pod of ours there) and the ones that were stale; any
    change of what every row depends on (the CR objects, the PDBs, the paused or disabled flags)
    re-observes all. The walk over the nodes stays, in the store's order (what the planners'
    output order comes from), but an unchanged node costs a lookup."""

    def __init__(self) -> None:
        self._kept: dict[str, _Observed] = {}

    def get(self, cr: str) -> _Observed | None:
        return self._kept.get(cr)

    def put(self, cr: str, observed: _Observed) -> None:
        self._kept[cr] = observed

    def keep_only(self, crs: Iterable[str]) -> None:
        alive = set(crs)
        for name in [n for n in self._kept if n not in alive]:
            del self._kept[name]


# Debugging and tests: each pass also observes every node afresh and fails if the two differ.
VERIFY_ENV = "NWB_VERIFY_OBSERVE"


@dataclass(frozen=True, slots=True)
class Caches:
    """The stores and the controller's own write memory an observation reads (``touched`` and
    ``observed``: both or neither; without them every pass observes every node)."""

    stores: snapshot.Stores
    settled: SettledNodes
    stale: Callable[[Mapping[str, Any]], bool]  # the node's cache lags a write of ours
    targeting: Targeting = field(default_factory=Targeting)
    touched: Touched | None = None
    observed: ObservedRows | None = None


def targeted(cr: NodeWright, nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of the nodes ``cr`` targets (its node selectors match their labels)."""
    return Targeting().targeted(cr, list(nodes))


def observe(
    cr: NodeWright,
    old: NodeWrightStatus,
    now: datetime,
    *,
    crs: list[NodeWright],
    policy: DeploymentPolicy | None,
    cached: Caches,
) -> Observation:
    """Read everything one pass of ``cr`` plans from (see the module docstring)."""
    stores = cached.stores
    name = cr.metadata.name
    # Serials first, objects after (``store.Store.index_serial``): a write in between shows as
    # a change next time, never the reverse.
    serials = (
        stores.nodes.serial,
        stores.package_pods.serial,
        stores.pods.serial,
        cached.touched.serial if cached.touched is not None else 0,
    )
    pdb_serial = stores.pdbs.serial
    nodes = stores.nodes.values()
    targeted_by = {c.metadata.name: cached.targeting.targeted(c, nodes) for c in crs}
    cached.targeting.keep_only(targeted_by)
    if cached.observed is not None:
        cached.observed.keep_only(targeted_by)
    mine = frozenset(targeted_by[name])
    progress = [
        sequencing.CRProgress.of(
            c,
            targets=targeted_by[c.metadata.name],
            complete_on=snapshot.complete_on(c.metadata.name, nodes),
            joinable_on=snapshot.joinable_on(c, nodes) if c.metadata.name != name else (),
        )
        for c in crs
    ]
    paused = sequencing.is_paused(cr.metadata.annotations)
    disabled = sequencing.is_disabled(cr.metadata.annotations)
    seen = Observation(
        cr=cr,
        old=old,
        now=now,
        policy=policy,
        crs=crs,
        paused=paused,
        disabled=disabled,
        ready=frozenset(sequencing.ready_nodes(name, progress)),
        waiting_on=sequencing.waiting_on_all(name, progress),
    )
    budgets = stores.pdbs.values()
    pdbs = snapshot.PdbIndex.of(budgets)
    cached.settled.use_pass_inputs(name, crs, budgets)
    auto_taint = bool(cr.spec.runtime_required and cr.spec.auto_taint_new_nodes)
    observer = _NodeObserver(cr, crs, stores, pdbs, cached, paused, disabled, auto_taint)
    observed = cached.observed
    if observed is None or cached.touched is None:
        for node in nodes:
            node_name = str(snapshot.meta_of(node).get("name"))
            _add(seen, node_name, observer.row(node, node_name, node_name in mine))
        return seen
    inputs = (cr, *crs, pdb_serial, paused, disabled, auto_taint)
    kept = observed.get(name)
    dirty = _changed(stores, cached.touched, kept, inputs)
    rows: dict[str, _Row] = {}
    reused: set[str] = set()
    for node in nodes:
        node_name = str(snapshot.meta_of(node).get("name"))
        targeted = node_name in mine
        row = None
        if kept is not None and dirty is not None and node_name not in dirty:
            row = kept.rows.get(node_name)
            if row is not None and row.mine != targeted:
                row = None
        if row is None:
            row = observer.row(node, node_name, targeted)
        else:
            reused.add(node_name)
        rows[node_name] = row
        _add(seen, node_name, row)
    made = _Observed(inputs, serials, rows)
    observed.put(name, made)
    if os.environ.get(VERIFY_ENV):
        moved = _changed(stores, cached.touched, replace(made, rows={}), inputs)
        if moved is not None:  # else the journal overflowed meanwhile: nothing to compare
            _verify(rows, observer, nodes, mine, reused - moved)
    return seen


def _changed(
    stores: snapshot.Stores, touched: Touched, kept: _Observed | None, inputs: tuple[object, ...]
) -> set[str] | None:
    """The nodes to observe afresh since ``kept`` was made, or None for all of them."""
    if kept is None or kept.inputs != inputs:
        return None
    nodes, package_pods, pods, touches = kept.serials
    changed = stores.nodes.changed_since(nodes)
    on_package = stores.package_pods.index_changed_since(caches.BY_NODE, package_pods)
    on_pods = stores.pods.index_changed_since(caches.BY_NODE, pods)
    if changed is None or on_package is None or on_pods is None:
        return None
    dirty = {*changed, *on_package, *on_pods, *touched.since(touches)}
    # a stale node turns fresh without an event (an awaited pod forgotten after a while)
    dirty.update(n for n, row in kept.rows.items() if row.kind == "stale")
    return dirty


def _add(seen: Observation, node: str, row: _Row) -> None:
    if row.held is not None:
        seen.held.append(row.held)
    if row.departed is not None:
        seen.departed.append(row.departed)
    if row.new_node is not None:
        seen.new_nodes.append(row.new_node)
    if row.snap is not None:
        getattr(seen, row.kind)[node] = row.snap


@dataclass(frozen=True, slots=True)
class _NodeObserver:
    """Observes one node for one pass (``row``)."""

    cr: NodeWright
    crs: list[NodeWright]
    stores: snapshot.Stores
    pdbs: snapshot.PdbIndex
    cached: Caches
    paused: bool
    disabled: bool
    auto_taint: bool

    def row(self, node: Mapping[str, Any], name: str, targeted: bool) -> _Row:
        cr, stores = self.cr, self.stores
        cr_name = cr.metadata.name
        if not targeted:
            held = snapshot.held_node(
                cr_name, node, stores.package_pods.by_index(caches.BY_NODE, name)
            )
            departed = None
            if batch_annotation(cr_name) in snapshot.annotations_of(node):
                departed = snapshot.snapshot_node(
                    cr, node, stores, self.pdbs, node_index=caches.BY_NODE, crs=self.crs
                )
            return _Row(
                mine=False,
                held=held if releasing.tracked(cr_name, held) else None,
                departed=departed,
            )
        new_node = snapshot.held_node(cr_name, node) if self.auto_taint else None
        kept = self.cached.settled.get(
            cr,
            node,
            stores,
            paused=self.paused,
            disabled=self.disabled,
            node_index=caches.BY_NODE,
        )
        snap = kept or snapshot.snapshot_node(
            cr, node, stores, self.pdbs, node_index=caches.BY_NODE, crs=self.crs
        )
        if snap.state_error is not None:
            kind = "malformed"
        elif self.cached.stale(node):
            kind = "stale"
        else:
            kind = "snaps"
        return _Row(mine=True, new_node=new_node, kind=kind, snap=snap)


def _verify(
    rows: Mapping[str, _Row],
    observer: _NodeObserver,
    nodes: Sequence[Mapping[str, Any]],
    mine: frozenset[str],
    reused: set[str],
) -> None:
    """``VERIFY_ENV``: observe afresh every node whose row was ``reused`` from the pass before
    and fail if it says otherwise. Left out: nodes that changed while the pass ran, and rows
    made afresh this pass (a fresh look moments later can only differ by what time changed
    meanwhile: a node whose awaited pod was forgotten turns from stale to plannable)."""
    for node in nodes:
        name = str(snapshot.meta_of(node).get("name"))
        if name not in reused:
            continue
        fresh = observer.row(node, name, name in mine)
        if rows.get(name) != fresh:
            raise AssertionError(f"incremental observe of {name}: {rows.get(name)} != {fresh}")


def node_statuses(seen: Observation, written: Callable[[str], Status | None]) -> dict[str, Status]:
    """The status of every targeted node that is not planned this pass (malformed or stale)."""
    out = {n: s.status or Status.UNKNOWN for n, s in seen.malformed.items()}
    for node, snap in seen.stale.items():
        out[node] = written(node) or snap.status or Status.UNKNOWN
    return out
