"""Settled nodes: snapshots and plans kept between reconcile passes, so a pass costs what changed.

A node is *settled* when its plan has nothing to do (no failure, no action but deleting pods
whose result is recorded: asking again is harmless, a delete in flight or answered moments
ago is not sent again, and a gone pod answers 404). Most nodes of a large rollout are settled
at any moment: waiting for their batch, complete, or running a package pod that has not ended.
A plan is a pure function of the parsed CR, the Node, the pods on it, a few flags and the time,
and time enters only through deadlines, which the planner reports as ``requeue_at``. So a
settled node's snapshot and plans are reused until its Node's resourceVersion, the
resourceVersions of the package pods on it, the CR object or the paused/disabled flags change,
or a plan's ``requeue_at`` passes. A node with workload pods (drain, PodDisruptionBudgets) or a
state that does not parse is planned afresh every time. Inputs that are not per node (the CR's
secretVars data) drop a CR's entries when they change (``forget``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lifecycle.actions import DeletePod
from lifecycle.spec import NodeWright
from lifecycle.stages import NodePlan
from nodewright_bridge.controller.snapshot import NodeSnapshot, Stores, meta_of, pod_versions

# What a node's plan depends on besides its snapshot: (allowed to start, paused, node order, why
# the rollout cannot pick it). The probe is planned with (False, <CR paused>, <recorded order>, "").
PlanKey = tuple[bool, bool, int, str, bool]


@dataclass(slots=True)
class _Settled:
    cr: NodeWright
    paused: bool
    disabled: bool
    snap: NodeSnapshot
    plans: dict[PlanKey, NodePlan]


class SettledNodes:
    """Snapshots and plans of settled nodes, per (CR, node) (see the module docstring)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], _Settled] = {}

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
        """The kept snapshot of ``node``, or None (and the entry is dropped) if anything moved."""
        meta = meta_of(node)
        key = (cr.metadata.name, str(meta.get("name", "")))
        entry = self._entries.get(key)
        if entry is None:
            return None
        if (
            entry.cr is not cr
            or entry.snap.resource_version != str(meta.get("resourceVersion", ""))
            or (entry.paused, entry.disabled) != (paused, disabled)
            or entry.snap.package_pod_versions
            != pod_versions(stores.package_pods.by_index(node_index, key[1]))
            or stores.pods.by_index(node_index, key[1])
        ):
            del self._entries[key]
            return None
        return entry.snap

    def plan(self, cr: NodeWright, node: str, key: PlanKey, now: datetime) -> NodePlan | None:
        """The kept plan of ``node`` for ``key`` (after :meth:`get` returned its snapshot)."""
        entry = self._entries.get((cr.metadata.name, node))
        found = entry.plans.get(key) if entry is not None else None
        if found is None or entry is None:
            return None
        if found.requeue_at is not None and now >= found.requeue_at:
            del entry.plans[key]
            return None
        return found

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
    ) -> None:
        """Keep ``snap`` and ``plan`` (planned for ``key``) if the node is settled."""
        entry_key = (cr.metadata.name, snap.name)
        if (
            any(not isinstance(a, DeletePod) for a in plan.actions)
            or plan.failures
            or snap.state_error is not None
        ):
            self._entries.pop(entry_key, None)
            return
        entry = self._entries.get(entry_key)
        if entry is None or entry.snap is not snap:
            if stores.pods.by_index(node_index, snap.name):
                self._entries.pop(entry_key, None)
                return  # workload pods: drain and PDB checks read more than the Node
            entry = _Settled(cr, paused, disabled, snap, {})
            self._entries[entry_key] = entry
        entry.plans[key] = plan

    def forget(self, cr_name: str) -> None:
        for key in [k for k in self._entries if k[0] == cr_name]:
            del self._entries[key]
