"""The Node writes of one reconcile pass: merged per node, written in parallel, critical path first.

Why: a rollout must stay close to the sum of its batches' durations, and every Node write is an
API round trip the next batch may wait for.

- Consecutive Node changes of one node's action list (state, status label, cordon, taints, and
  the batch record the reconciler hands along) are merged into ONE merge patch
  (:class:`NodePatcher`), conditional on the resourceVersion the plan was computed from, sent
  before the first action that acts on the world (pod create/delete, drain) and at the end. One
  patch is atomic, so "record before work" and "state before pod" hold exactly as with separate
  writes; Events that followed a Node change are posted after the merged write succeeded. A lost
  race (409) skips the node's remaining actions and asks for a prompt requeue.
- Different nodes are independent: :class:`NodeWrites` runs each node's list on a bounded thread
  pool (:data:`NODE_CONCURRENCY`), one node's actions in order on one thread, a node that starts
  pods as soon as the pass has planned it; in a pass that picks no batch, every node so.
- While a pass writes pod starts or Node results, background senders (pod deletes, Events)
  wait (``Foreground``); work that only queues deletes or Events holds nobody back. Work that
  only deletes pods is queued on the pass's own thread, never handed to the node threads.
- The vars ConfigMap of a package is created once per pass, while the first Node writes go out
  (pod creates wait for it).
- Bookkeeping (nodes that start no pod and take no batch record) is written at most
  :data:`BOOKKEEPING_PER_PASS` nodes per pass; the rest is left to the next pass (requeued at
  once), so no pass over thousands of nodes holds up the one that starts the next batch.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from lifecycle import actions
from lifecycle.nodestate import PackageState
from lifecycle.spec import NodeWright
from nodewright_bridge.controller import snapshot
from nodewright_bridge.errors import ConflictError
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.foreground import Foreground
from nodewright_bridge.k8s.patching import Writer

# Nodes written at once. A batch of hundreds of nodes is started within a second or two instead
# of tens of seconds of sequential round trips; 16 keeps well inside the client's connection
# pool (32) and the API server's default in-flight limits.
NODE_CONCURRENCY = 16
# Nodes written per pass that neither start a pod nor take a batch record (bookkeeping: status
# labels, recording finished pods); the rest wait for the next pass, moments later. A pass over
# thousands of such nodes (every complete node turning "waiting" when a spec changes, a 2,048-node
# batch finishing) would otherwise take tens of seconds of API time, and the pass that notices
# the batch is done - and starts the next one - would wait for it. 64 writes take ~0.2 s at
# NODE_CONCURRENCY, so short passes notice a batch's last pod sooner.
BOOKKEEPING_PER_PASS = 64
# When bookkeeping was left for the next pass, that pass comes this soon.
DEFERRED_RETRY_SECONDS = 0.2


@dataclass(slots=True)
class Outcome:
    """What applying the actions of one reconcile learned (feeds status and requeue)."""

    requeue_after: float | None = None
    pdb_blocked: dict[str, list[str]] = field(default_factory=dict)  # node -> "ns/pdb"
    drain_blockers: dict[str, list[str]] = field(default_factory=dict)  # node -> messages
    evicted: int = 0
    conflicts: int = 0
    node_patches: int = 0  # Node patches sent, lost races included (pod deletes send none)

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
        self.node_patches += other.node_patches


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
            first write; its drain plan and evictions are what a ``Drain`` evicts).
        actions: The planner's actions, applied in order.
        annotations: Annotation changes (the batch record) that ride on the node's first write,
            before any of its work starts; written alone when nothing else is.
        events: Posted after the actions (whatever became of them).
        pod_annotations: What a package pod that carries its start also carries (the batch
            record instead of ``annotations``; ``lifecycle.pod_records``).
    """

    node: snapshot.NodeSnapshot
    actions: Sequence[actions.Action] = ()
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    events: Sequence[EventNote] = ()
    pod_annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class WriteCounts:
    """What one pass handed to the API (the reconciler's debug log): nodes that start pods, other
    nodes' work applied (work that only deletes pods or posts Events included: the Node patches
    sent are ``Outcome.node_patches``), and nodes left for the next pass."""

    starting: int = 0
    written: int = 0
    deferred: int = 0


class WorkApplier(Protocol):
    """What :class:`NodeWrites` needs of the executor."""

    @property
    def foreground(self) -> Foreground: ...

    def ensure_config_map_soon(self, cr: NodeWright, package: str) -> Future[None]: ...

    def apply_work(
        self,
        cr: NodeWright,
        work: NodeWork,
        outcome: Outcome,
        config_maps: Mapping[str, Future[None]],
    ) -> None: ...

    def write_annotations(self, node: str, annotations: Mapping[str, str | None]) -> None: ...

    def delete_pod_soon(self, name: str) -> None: ...


_STARTS_PODS = (actions.CreatePackagePod, actions.CreateInterruptPod)
# Actions a pass only hands to background senders (or that send nothing).
_FREE = (actions.DeletePod, actions.EmitEvent, actions.VerifyReboot)


def writes_node(work: NodeWork) -> bool:
    """The work writes the Node (or drains it): more than queueing pod deletes and Events."""
    return bool(work.annotations) or any(not isinstance(a, _FREE) for a in work.actions)


def only_deletes(work: NodeWork) -> bool:
    """The work only queues pod deletes: nothing to write, post or wait for on a thread."""
    return (
        bool(work.actions)
        and all(isinstance(a, actions.DeletePod) for a in work.actions)
        and not work.annotations
        and not work.events
    )


def is_bookkeeping(work: NodeWork) -> bool:
    """Work that may wait for the next pass: it writes the Node (or drains) but starts no pod and
    takes no batch record (a deferred node is planned again, its Events included; a release of a
    record may wait). Work that only queues pod deletes or Events costs a pass nothing and is
    never deferred."""
    if any(isinstance(a, _STARTS_PODS) for a in work.actions):
        return False
    if any(value is not None for value in work.annotations.values()):
        return False
    return writes_node(work)


class NodeWrites:
    """The node work of one pass, applied while the pass is still planning it.

    A node that starts pods is written the moment :meth:`add` hands it over (a batch's first
    pods start while the planner still works through its last nodes, and the API server, idle
    while a pass plans, gets the writes sooner). In a pass that starts a batch (``hold``), any
    other work waits until the pass ends, so the nodes on the rollout's critical path go first;
    in any other pass the results and records are that path (the next batch waits for them),
    so they go out as handed over too, bookkeeping up to its cap. Nodes run in parallel on at most
    :data:`NODE_CONCURRENCY` threads, each node's actions in order on one thread. Leaving the
    context writes the held work (bookkeeping capped, see :data:`BOOKKEEPING_PER_PASS`) and the
    batch records of nodes without work, waits for everything, and raises the first error in
    the order the work was handed over (after every node was tried, as a loop that carried on
    past failures would); lost write races only requeue (the pass's ``Outcome``).
    """

    def __init__(
        self,
        executor: WorkApplier,
        cr: NodeWright,
        outcome: Outcome,
        *,
        defer: bool,
        hold: bool = True,
    ):
        self._executor = executor
        self._cr = cr
        self._outcome = outcome
        self._defer = defer
        self._hold = hold
        self._bookkeeping_sent = 0  # bookkeeping written as handed over (``hold=False``)
        self._held: list[NodeWork] = []
        self._others: dict[str, Mapping[str, str | None]] = {}
        self._config_maps: dict[str, Future[None]] = {}
        self._futures: list[Future[None]] = []
        self._shares: list[Outcome] = []
        self._pool: ThreadPoolExecutor | None = None
        self._stack = contextlib.ExitStack()
        self._foreground_held = False
        self.counts = WriteCounts()

    def __enter__(self) -> NodeWrites:
        return self

    def add(self, work: NodeWork) -> None:
        """Hand over one node's work: started now if it starts pods or nothing is held (see
        the class docstring), else held until the end."""
        if only_deletes(work):
            # Queued here, not on a node thread: a finished pod waits for its delete over many
            # passes (the senders yield to pod starts and results), and handing thousands of
            # such nodes to the pool each pass cost a 5,000-node pass with 2,000 pods awaiting
            # their delete 0.30 s CPU instead of 0.12 s (the senders drop repeated names).
            for action in work.actions:
                if isinstance(action, actions.DeletePod):
                    self._executor.delete_pod_soon(action.name)
            self.counts.written += 1
            return
        starts = [a for a in work.actions if isinstance(a, _STARTS_PODS)]
        if not starts:
            bookkeeping = is_bookkeeping(work)
            over_cap = self._defer and self._bookkeeping_sent >= BOOKKEEPING_PER_PASS
            if self._hold or (bookkeeping and over_cap):
                self._held.append(work)  # an over-cap bookkeeping one is deferred at the end
                return
            if bookkeeping:
                self._bookkeeping_sent += 1
            if writes_node(work):
                self._in_foreground()  # a result the next batch may wait for
            self.counts.written += 1
            self._submit(work)
            return
        self.counts.starting += 1
        self._in_foreground()
        for action in starts:
            package = action.package
            if package in self._cr.spec.packages and package not in self._config_maps:
                # created once per pass, while the Node writes before the pods go out
                self._config_maps[package] = self._executor.ensure_config_map_soon(
                    self._cr, package
                )
        self._submit(work)

    def _in_foreground(self) -> None:
        """From now until the pass's writes are done, background senders wait (``Foreground``)."""
        if not self._foreground_held:
            self._foreground_held = True
            self._stack.enter_context(self._executor.foreground.running())

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
        room = BOOKKEEPING_PER_PASS - self._bookkeeping_sent
        bookkeeping = [w for w in held if is_bookkeeping(w)]
        if self._defer and len(bookkeeping) > room:
            deferred = {id(w) for w in bookkeeping[room:]}
            held = [w for w in held if id(w) not in deferred]
            self._outcome.soon(DEFERRED_RETRY_SECONDS)
            self.counts.deferred = len(deferred)
        self.counts.written += len(held)
        for work in held:
            self._submit(work)
        self._outcome.node_patches += len(self._others)
        for node, notes in sorted(self._others.items()):
            self._futures.append(
                self._threads().submit(self._executor.write_annotations, node, notes)
            )

    def _submit(self, work: NodeWork) -> None:
        share = Outcome()
        self._shares.append(share)
        call = partial(self._executor.apply_work, self._cr, work, share, self._config_maps)
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
