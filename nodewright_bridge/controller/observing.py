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

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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


@dataclass(frozen=True, slots=True)
class Caches:
    """The stores and the controller's own write memory an observation reads."""

    stores: snapshot.Stores
    settled: SettledNodes
    stale: Callable[[Mapping[str, Any]], bool]  # the node's cache lags a write of ours
    targeting: Targeting = field(default_factory=Targeting)


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
    nodes = stores.nodes.values()
    targeted_by = {c.metadata.name: cached.targeting.targeted(c, nodes) for c in crs}
    cached.targeting.keep_only(targeted_by)
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
    record_key = batch_annotation(name)
    auto_taint = cr.spec.runtime_required and cr.spec.auto_taint_new_nodes
    for node in nodes:
        node_name = str(snapshot.meta_of(node).get("name"))
        if node_name not in mine:
            held = snapshot.held_node(
                name, node, stores.package_pods.by_index(caches.BY_NODE, node_name)
            )
            if releasing.tracked(name, held):
                seen.held.append(held)
            if record_key in snapshot.annotations_of(node):
                seen.departed.append(
                    snapshot.snapshot_node(
                        cr, node, stores, pdbs, node_index=caches.BY_NODE, crs=crs
                    )
                )
            continue
        if auto_taint:
            seen.new_nodes.append(snapshot.held_node(name, node))
        kept = cached.settled.get(
            cr, node, stores, paused=paused, disabled=disabled, node_index=caches.BY_NODE
        )
        snap = kept or snapshot.snapshot_node(
            cr, node, stores, pdbs, node_index=caches.BY_NODE, crs=crs
        )
        if snap.state_error is not None:
            seen.malformed[node_name] = snap
        elif cached.stale(node):
            seen.stale[node_name] = snap
        else:
            seen.snaps[node_name] = snap
    return seen


def node_statuses(seen: Observation, written: Callable[[str], Status | None]) -> dict[str, Status]:
    """The status of every targeted node that is not planned this pass (malformed or stale)."""
    out = {n: s.status or Status.UNKNOWN for n, s in seen.malformed.items()}
    for node, snap in seen.stale.items():
        out[node] = written(node) or snap.status or Status.UNKNOWN
    return out
