"""The e2e invariant checker: what must hold in every e2e test, observed on the sandbox's API.

``Invariants`` lists and then watches Nodes, Pods, PodDisruptionBudgets, Namespaces and NodeWright
CRs (plain JSON, one stream per kind) from the moment a ``World`` is created, and keeps every
change with its resourceVersion. The sandbox runs one etcd, so a resourceVersion is the revision of
one global counter: replaying the changes of all kinds in revision order rebuilds the cluster as it
stood after each single write, whatever order the streams delivered them in, and no window is too
short to be seen. ``collect()`` brings the streams up to date (a fresh list of each kind must agree
with what was streamed), replays and checks what follows. A stream cut off (an API server restarted
under the test) watches on from its last revision; a server whose watch cache starts later answers
410 Gone, and the stream lists again: the report names that gap, where only end states are seen.

- ``pdb``: no covered pod stops being healthy (Running, Ready, not deleting) so that a
  PodDisruptionBudget with an integer minAvailable, whose expected pods reach it, is left with fewer
  healthy pods than minAvailable, outside a namespace being deleted (pods not yet healthy after
  a start do not count: only a disruption can break a budget; nor do pods of a tracked node the
  test deleted: losing a node is an involuntary disruption no budget covers); ``allow_pdb_breach``
  exempts a budget the test breaks on purpose (``spec.drain.disableEviction`` deletes without
  asking).
- ``undrained``: whenever one of our interrupt pods (namespace nodewright-system, managed by
  nodewright-bridge, stage ``interrupt`` or ``uninstall-interrupt``) is Running on a node, and at
  every bootID change of a node, the node is unschedulable and carries no pod a drain evicts:
  a pod bound to it that has not finished, outside nodewright-system, not ours, not a mirror pod,
  not owned by a DaemonSet, and selected by ``spec.drain.podSelector`` of at least one CR whose
  interrupt pod is on the node (every such pod when there is none). Pods being deleted count:
  the controller's drain waits until they are gone.
- ``reboots``: a node changes bootID at most once per test, unless ``allow_reboots`` says more;
  a node deleted and registered again is a new machine and counts afresh. And one interrupt
  reboots a node at most once: a bootID change while only interrupt pods (CR, package and
  ``bridge.nodewright.io/resource-id``) are on the node that already rebooted it is reported
  whatever ``allow_reboots`` says.
- ``human-cordon``: a node cordoned while no controller hold was recorded (no holders in
  ``bridge.nodewright.io/cordon``, and unschedulable was just switched on or the node was first
  seen so) stays unschedulable at every later revision, until the Node is deleted or the test
  declares that it lifted the cordon itself (``allow_uncordon(node, revision)``).
- ``leak`` (end state only, after a short settle for a release in flight): every node of the test
  still present that the controller held is schedulable again (unless a human cordoned it), lists
  no holders, and, if the controller left any trace on it, has no
  ``bridge.nodewright.io/runtime-required`` taint; ``expect_held`` exempts a node whose intended
  end state keeps a hold (a paused CR, a controller stopped on purpose, an erroring node).
- ``compliant``: a node check mode recorded compliant for a CR (an entry of
  ``bridge.nodewright.io/state-<cr>`` turning ``preflight: compliant``) was neither cordoned by
  that CR nor rebooted since the CR was last complete on it: a compliant node is never
  disrupted for the change it did not need.
- ``unobserved``: every node the test added was seen at least once, so nothing passes vacuously.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from lifecycle import selectors
from lifecycle.spec import LabelSelector
from nodewright_bridge.sandbox.kubelet.api import ApiError, RawApi

NAMESPACE = "nodewright-system"
PREFIX = "bridge.nodewright.io/"
CORDON = f"{PREFIX}cordon"
TAINT = f"{PREFIX}runtime-required"
IGNORE = f"{PREFIX}ignore"
STAGE = f"{PREFIX}stage"
CR_LABEL = f"{PREFIX}cr"
MANAGED_BY = ("app.kubernetes.io/managed-by", "nodewright-bridge")
INTERRUPT_STAGES = frozenset({"interrupt", "uninstall-interrupt"})
MIRROR = "kubernetes.io/config.mirror"
# A release the controller has decided on may still be in flight when the test body ends.
LEAK_SETTLE_SECONDS = 10.0
SYNC_SECONDS = 5.0
WATCH_SECONDS = 60
# Answers of an API server that is starting or overloaded: watch again from the same revision.
UNAVAILABLE_STATUS = frozenset({429, 500, 502, 503, 504})

RESOURCE_ID = f"{PREFIX}resource-id"
PACKAGE_LABEL = f"{PREFIX}package"
PDB, UNDRAINED, REBOOTS, HUMAN, LEAK, UNOBSERVED, COMPLIANT = (
    "pdb",
    "undrained",
    "reboots",
    "human-cordon",
    "leak",
    "unobserved",
    "compliant",
)
STATE_PREFIX = f"{PREFIX}state-"
STATUS_PREFIX = f"{PREFIX}status-"


def _clock(at: float) -> str:
    return datetime.fromtimestamp(at).strftime("%H:%M:%S.%f")[:-3]


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    subject: str  # a node, or namespace/name of a PodDisruptionBudget
    at: float  # when the checker received the change (wall clock)
    revision: int
    message: str

    def __str__(self) -> str:
        when = f"{_clock(self.at)} (rv {self.revision})" if self.revision >= 0 else "the end"
        return f"[{self.kind}] {self.subject} at {when}: {self.message}"


@dataclass(frozen=True, slots=True)
class Report:
    violations: tuple[Violation, ...]
    changes: int
    observed: dict[str, int]  # tracked node -> how many of its revisions were seen
    gaps: tuple[str, ...]  # relists after a broken stream; what happened in between is unseen
    waited: float = 0.0  # seconds the end-state check waited for a release in flight
    context: tuple[str, ...] = ()  # what the test said happened (``Invariants.add_context``)
    notes: tuple[str, ...] = ()  # what the checker saw that is no violation (``Replay.notes``)

    def kinds(self) -> set[str]:
        return {v.kind for v in self.violations}

    def text(self) -> str:
        lines = [str(v) for v in self.violations]
        lines.append(
            f"({self.changes} changes replayed; node revisions seen: {self.observed}"
            + (f"; gaps: {list(self.gaps)}" if self.gaps else "")
            + (f"; waited {self.waited:.1f}s for releases" if self.waited else "")
            + ")"
        )
        if self.context:
            lines += ["context:", *self.context]
        if self.notes:
            lines += ["seen, not counted:", *self.notes]
        return "\n".join(lines)


# ---- what is kept of each object --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeFacts:
    unschedulable: bool
    holders: tuple[str, ...]
    tainted: bool  # carries the runtime-required taint
    traced: bool  # carries an annotation or label of ours (other than the user's ignore label)
    boot_id: str
    complete: frozenset[str] = frozenset()  # CRs whose status label says complete
    compliant: frozenset[str] = frozenset()  # "<cr>/<package>|<version>" recorded compliant


@dataclass(frozen=True, slots=True)
class PodFacts:
    namespace: str
    name: str
    node: str
    labels: Mapping[str, str]
    phase: str
    deleting: bool
    ready: bool
    controller_kind: str
    mirror: bool
    resource_id: str = ""  # bridge.nodewright.io/resource-id of our pods

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def interrupt(self) -> bool:
        return (
            self.namespace == NAMESPACE
            and self.labels.get(MANAGED_BY[0]) == MANAGED_BY[1]
            and self.labels.get(STAGE) in INTERRUPT_STAGES
        )

    @property
    def workload(self) -> bool:
        """A pod a drain evicts (or waits for) if the CR's podSelector selects it."""
        return (
            self.phase not in ("Succeeded", "Failed")
            and self.namespace != NAMESPACE
            and self.labels.get(MANAGED_BY[0]) != MANAGED_BY[1]
            and not self.mirror
            and self.controller_kind != "DaemonSet"
        )

    @property
    def healthy(self) -> bool:
        """What a PodDisruptionBudget counts as healthy."""
        return self.phase == "Running" and self.ready and not self.deleting

    def describe(self) -> str:
        return f"{self.key} ({self.phase}{', deleting' if self.deleting else ''})"

    @property
    def change(self) -> str:
        """Which change of which CR's package an interrupt pod acts on."""
        cr, package = self.labels.get(CR_LABEL, ""), self.labels.get(PACKAGE_LABEL, "")
        return f"{cr}/{package}@{self.resource_id[:12]}"


@dataclass(frozen=True, slots=True)
class PdbFacts:
    namespace: str
    name: str
    min_available: int | None  # None: a percentage or maxUnavailable, not checked
    selector: LabelSelector | None
    expected: int
    deleting: bool


@dataclass(frozen=True, slots=True)
class CrFacts:
    pod_selector: LabelSelector | None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _selector(raw: object) -> LabelSelector | None:
    if not isinstance(raw, dict):
        return None
    return LabelSelector.model_validate(raw)


def _holders(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    try:
        holders = json.loads(text).get("holders") or []
    except (ValueError, AttributeError):
        return ("<unparsable cordon record>",)  # counts as held: never taken for a human's cordon
    return tuple(sorted(str(h) for h in holders))


def node_facts(obj: Mapping[str, Any]) -> NodeFacts:
    meta = _meta(obj)
    notes = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    spec = obj.get("spec") or {}
    ours = [k for k in (*notes, *labels) if k.startswith(PREFIX) and k != IGNORE]
    return NodeFacts(
        unschedulable=bool(spec.get("unschedulable")),
        holders=_holders(notes.get(CORDON)),
        tainted=any(t.get("key") == TAINT for t in spec.get("taints") or ()),
        traced=bool(ours),
        boot_id=str(((obj.get("status") or {}).get("nodeInfo") or {}).get("bootID") or ""),
        complete=frozenset(
            k.removeprefix(STATUS_PREFIX)
            for k, v in labels.items()
            if k.startswith(STATUS_PREFIX) and v == "complete"
        ),
        compliant=_compliant_entries(notes),
    )


def _compliant_entries(notes: Mapping[str, str]) -> frozenset[str]:
    found: set[str] = set()
    for key, text in notes.items():
        if not key.startswith(STATE_PREFIX) or "compliant" not in text:
            continue
        try:
            entries = json.loads(text)
        except ValueError:
            continue
        cr = key.removeprefix(STATE_PREFIX)
        for name, entry in entries.items() if isinstance(entries, dict) else ():
            if isinstance(entry, dict) and entry.get("preflight") == "compliant":
                found.add(f"{cr}/{name}")
    return frozenset(found)


def pod_facts(obj: Mapping[str, Any]) -> PodFacts:
    meta = _meta(obj)
    status = obj.get("status") or {}
    refs = meta.get("ownerReferences") or ()
    owner: Mapping[str, Any] = next((r for r in refs if r.get("controller")), {})
    return PodFacts(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        node=str((obj.get("spec") or {}).get("nodeName") or ""),
        labels=dict(meta.get("labels") or {}),
        phase=str(status.get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        ready=any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        ),
        controller_kind=str(owner.get("kind", "")),
        mirror=MIRROR in (meta.get("annotations") or {}),
        resource_id=str((meta.get("annotations") or {}).get(RESOURCE_ID, "")),
    )


def pdb_facts(obj: Mapping[str, Any]) -> PdbFacts:
    meta = _meta(obj)
    spec = obj.get("spec") or {}
    minimum = spec.get("minAvailable")
    return PdbFacts(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        min_available=minimum if isinstance(minimum, int) else None,
        selector=_selector(spec.get("selector")),
        expected=int((obj.get("status") or {}).get("expectedPods") or 0),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def namespace_deleting(obj: Mapping[str, Any]) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def cr_facts(obj: Mapping[str, Any]) -> CrFacts:
    drain = (obj.get("spec") or {}).get("drain") or {}
    return CrFacts(pod_selector=_selector(drain.get("podSelector")))


# ---- recording --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    revision: int
    seq: int
    kind: str
    key: str
    facts: object | None  # None: the object was deleted
    at: float


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    path: str
    key: Callable[[Mapping[str, Any]], str]
    facts: Callable[[Mapping[str, Any]], object]
    keep: Callable[[Mapping[str, Any]], bool] = lambda obj: True


def _by_uid(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("uid", ""))


def _by_name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def _revision(obj: Mapping[str, Any]) -> int:
    return int(str(_meta(obj).get("resourceVersion", "")))


class _Stream:
    """List, then watch, one kind; relist (and note a gap) when the watch cannot resume."""

    def __init__(self, owner: Invariants, kind: Kind) -> None:
        self.owner = owner
        self.kind = kind
        self.latest: dict[str, int] = {}  # key -> revision of its last change (live or deleted)
        self.live: set[str] = set()
        self.listed = threading.Event()
        self.error = ""
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"inv-{kind.name}")

    def _run(self) -> None:
        version = ""
        while not self.owner.stopping.is_set():
            try:
                if not version:
                    version = self.fold(self.owner.api.get(self.kind.path) or {})
                    self.listed.set()
                query = {"resourceVersion": version, "allowWatchBookmarks": "true"}
                for event in self.owner.api.watch(
                    self.kind.path, query, timeout_seconds=WATCH_SECONDS
                ):
                    if event.type == "ERROR":  # 410 Gone: list again
                        version = ""
                        break
                    version = str(_meta(event.object).get("resourceVersion", version))
                    if event.type != "BOOKMARK":
                        self.record(event.object, deleted=event.type == "DELETED")
            except ApiError as exc:
                if exc.status not in UNAVAILABLE_STATUS:  # 410 Gone and the like: list again
                    version = ""
                self.error = str(exc)
                self.owner.stopping.wait(0.2)
            except Exception as exc:
                # The API may restart under a test: watch on from the same revision (etcd kept
                # it), which the new server serves or answers 410 (then the stream lists again).
                self.error = f"{type(exc).__name__}: {exc}"
                self.owner.stopping.wait(0.1)  # soon: what changes before the relist is unseen

    def record(self, obj: Mapping[str, Any], *, deleted: bool, revision: int | None = None) -> None:
        if not self.kind.keep(obj):
            return
        key = self.kind.key(obj)
        rev = _revision(obj) if revision is None else revision
        with self.owner.lock:
            if self.latest.get(key, -1) >= rev:
                return
            self.latest[key] = rev
            if deleted:
                self.live.discard(key)
            else:
                self.live.add(key)
            self.owner.append(rev, self.kind.name, key, None if deleted else self.kind.facts(obj))

    def fold(self, listed: Mapping[str, Any]) -> str:
        """Take a list in: what changed since the stream last saw it, and what vanished."""
        version = str(_meta(listed).get("resourceVersion", ""))
        items = [i for i in listed.get("items") or () if self.kind.keep(i)]
        with self.owner.lock:
            if self.latest:
                self.owner.gaps.append(f"{self.kind.name} relisted at rv {version}")
            vanished = self.live - {self.kind.key(i) for i in items}
        for item in items:
            self.record(item, deleted=False)
        for key in vanished:
            self.record(
                {"metadata": {"uid": key, "name": key}}, deleted=True, revision=int(version)
            )
        return version

    def caught_up(self, listed: Mapping[str, Any]) -> bool:
        version = int(str(_meta(listed).get("resourceVersion", "0")))
        items = [i for i in listed.get("items") or () if self.kind.keep(i)]
        keys = {self.kind.key(i) for i in items}
        with self.owner.lock:
            if any(self.latest.get(self.kind.key(i), -1) < _revision(i) for i in items):
                return False
            return all(self.latest[k] > version for k in self.live - keys)


# ---- replay -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reboot:
    at: float
    revision: int
    boot_id: str
    incarnation: int  # how many times the Node had been deleted before
    changes: tuple[str, ...]  # the interrupt pods on the node (``PodFacts.change``)


@dataclass
class NodeHistory:
    revisions: int = 0
    gone: bool = False
    held: bool = False  # a controller hold was seen on it (this incarnation)
    traced: bool = False
    human: tuple[float, int] | None = None  # when a human's cordon was first seen
    reboots: list[Reboot] = field(default_factory=list)
    incarnation: int = 0  # bumped when the Node is deleted: a node registered again is new
    holds: int = 0  # controller hold episodes (no holders -> some), over all incarnations
    rebooted_by: dict[str, Reboot] = field(default_factory=dict)  # change -> its first reboot
    complete_at: dict[str, int] = field(default_factory=dict)  # CR -> last revision complete
    hold_starts: list[tuple[int, str]] = field(default_factory=list)  # (revision, CR) cordons
    boot_changes: list[int] = field(default_factory=list)  # revisions of bootID changes

    def forget(self) -> None:
        """The Node was deleted: what is tied to the machine goes with it."""
        self.gone = True
        self.incarnation += 1
        self.held = self.traced = False
        self.human = None
        self.rebooted_by.clear()


class Replay:
    """The cluster rebuilt revision by revision, checked after every change."""

    def __init__(
        self, tracked: Callable[[str], bool], lifted: Iterable[tuple[str, int]] = ()
    ) -> None:
        self.tracked = tracked
        self.lifted = frozenset(lifted)  # (node, revision): the test lifted a human's cordon
        self.nodes: dict[str, NodeFacts] = {}
        self.pods: dict[str, PodFacts] = {}
        self.on_node: dict[str, set[str]] = {}
        self.in_namespace: dict[str, set[str]] = {}
        self.pdbs: dict[str, PdbFacts] = {}
        self.doomed: set[str] = set()  # namespaces being deleted
        # Pods bound to a node when its Node was deleted: the machine went away under them, so
        # their status turning unhealthy (the node registered again restarts them) is no
        # drain's doing, until they are healthy again. A delete of one still counts.
        self.lost: set[str] = set()
        # Per pod: the bootID of its node when it was last healthy, and its last few states
        # (what a violation or a note shows).
        self.healthy_on_boot: dict[str, str] = {}
        self.pod_history: dict[str, list[str]] = {}
        # Pods that turned unhealthy by themselves (no delete, no reboot of their node): no
        # disruption of ours, but worth showing when something else failed.
        self.notes: list[str] = []
        self.crs: dict[str, CrFacts] = {}
        self.history: dict[str, NodeHistory] = {}
        self.violations: list[Violation] = []
        self._said: set[tuple[object, ...]] = set()

    def run(self, changes: Iterable[Change]) -> Replay:
        for change in sorted(changes, key=lambda c: (c.revision, c.seq)):
            getattr(self, f"_{change.kind}")(change)
        return self

    def _say(self, once: tuple[object, ...], kind: str, subject: str, c: Change, text: str) -> None:
        if once not in self._said:
            self._said.add(once)
            self.violations.append(Violation(kind, subject, c.at, c.revision, text))

    # -- per kind

    def _nodes(self, c: Change) -> None:
        if not self.tracked(c.key):
            return
        history = self.history.setdefault(c.key, NodeHistory())
        before = self.nodes.pop(c.key, None)
        if not isinstance(c.facts, NodeFacts):
            if not history.gone:
                history.forget()
            self.lost.update(self.on_node.get(c.key, ()))
            return
        now = self.nodes[c.key] = c.facts
        history.revisions += 1
        history.gone = False
        history.traced |= now.traced
        if now.holders:
            if before is None or not before.holders:
                history.holds += 1
            history.held = True
        elif now.unschedulable and (before is None or not before.unschedulable):
            history.human = history.human or (c.at, c.revision)
        if history.human and not now.unschedulable and (c.key, c.revision) in self.lifted:
            history.human = None  # the test lifted its own "human" cordon, and said so
        if history.human and not now.unschedulable:
            since = _clock(history.human[0])
            self._say(
                ("human", c.key, c.revision),
                HUMAN,
                c.key,
                c,
                f"a human's cordon (seen since {since}, rv {history.human[1]}) was lifted: "
                f"the node became schedulable, cordon holders {list(now.holders)}",
            )
            history.human = None
        if before is not None and before.boot_id and now.boot_id != before.boot_id:
            interrupts = [p for p in self._pods_on(c.key) if p.interrupt]
            self._rebooted(c, history, before, now, interrupts)
            self._quiet(
                c.key,
                c,
                ("reboot", c.key, now.boot_id),
                f"rebooted (bootID {before.boot_id[:8]} -> {now.boot_id[:8]})",
                interrupts,
            )
        for pod in self._running_interrupts(c.key):
            self._quiet(c.key, c, ("interrupt", pod.key), f"interrupt pod {pod.key} Running", [pod])
        self._compliance(c, history, before, now)

    def _compliance(
        self, c: Change, history: NodeHistory, before: NodeFacts | None, now: NodeFacts
    ) -> None:
        """The ``compliant`` rule: no cordon by the CR and no reboot since it was last complete
        on the node, up to the revision that records an entry of it compliant."""
        for cr in set(now.holders) - set(before.holders if before else ()):
            history.hold_starts.append((c.revision, cr))
        if before is not None and before.boot_id and now.boot_id != before.boot_id:
            history.boot_changes.append(c.revision)
        for entry in sorted(now.compliant - (before.compliant if before else frozenset())):
            cr = entry.partition("/")[0]
            since = history.complete_at.get(cr, 0)
            cordons = [r for r, holder in history.hold_starts if holder == cr and r > since]
            boots = [r for r in history.boot_changes if r > since]
            if cordons or boots:
                self._say(
                    ("compliant", c.key, entry, c.revision),
                    COMPLIANT,
                    c.key,
                    c,
                    f"recorded {entry} compliant, yet since {cr} was last complete here (rv "
                    f"{since}) it was cordoned by {cr} at rv {cordons} and rebooted at rv {boots}",
                )
        for cr in now.complete:
            history.complete_at[cr] = c.revision

    def _pods(self, c: Change) -> None:
        before = self.pods.pop(c.key, None)
        if before is not None:
            self.on_node.get(before.node, set()).discard(c.key)
            self.in_namespace.get(before.namespace, set()).discard(c.key)
        pod = c.facts if isinstance(c.facts, PodFacts) else None
        if pod is not None:
            self.pods[c.key] = pod
            self.on_node.setdefault(pod.node, set()).add(c.key)
            self.in_namespace.setdefault(pod.namespace, set()).add(c.key)
        either = pod or before
        assert either is not None
        if self.tracked(either.node):
            for running in self._running_interrupts(either.node):
                self._quiet(
                    either.node,
                    c,
                    ("interrupt", running.key),
                    f"interrupt pod {running.key} Running",
                    [running],
                )
        self._remember(c, pod)
        restarted = pod is not None and not pod.deleting and c.key in self.lost
        lost = before is not None and (
            restarted or (self.tracked(before.node) and before.node not in self.nodes)
        )
        if pod is None or pod.deleting or pod.healthy:
            self.lost.discard(c.key)  # gone, going or healthy again: what happens next counts
        if (
            before is not None
            and before.healthy
            and not (pod is not None and pod.healthy)
            and not lost  # its node was deleted: no drain's doing
            and not self._by_itself(c, pod)
        ):
            for key, pdb in list(self.pdbs.items()):
                if pdb.namespace == before.namespace:
                    self._disrupted(key, pdb, before, c)

    def _remember(self, c: Change, pod: PodFacts | None) -> None:
        history = self.pod_history.setdefault(c.key, [])
        state = "deleted"
        if pod is not None:
            flags = (" ready" if pod.ready else "") + (" deleting" if pod.deleting else "")
            state = pod.phase + flags
        history.append(f"rv {c.revision} {_clock(c.at)} {state}")
        del history[:-6]
        node = self.nodes.get(pod.node) if pod is not None else None
        if pod is not None and pod.healthy and node is not None:
            self.healthy_on_boot[c.key] = node.boot_id

    def _by_itself(self, c: Change, pod: PodFacts | None) -> bool:
        """A healthy pod turned unhealthy (``pod``) while still there, not being deleted, and its
        node did not reboot since: no drain, eviction or interrupt of ours did that (a reboot
        turns pods unready, which counts; so does any delete)."""
        if pod is None or pod.deleting:
            return False
        node = self.nodes.get(pod.node)
        if node is None or self.healthy_on_boot.get(c.key, node.boot_id) != node.boot_id:
            return False
        self.notes.append(
            f"{pod.key} on {pod.node} turned unhealthy by itself (no delete, no reboot): "
            + "; ".join(self.pod_history.get(c.key, ()))
        )
        return True

    def _rebooted(
        self,
        c: Change,
        history: NodeHistory,
        before: NodeFacts,
        now: NodeFacts,
        interrupts: list[PodFacts],
    ) -> None:
        live = [p for p in interrupts if p.phase not in ("Succeeded", "Failed")]
        changes = tuple(sorted({p.change for p in live}))
        reboot = Reboot(c.at, c.revision, now.boot_id, history.incarnation, changes)
        history.reboots.append(reboot)
        if changes and all(ch in history.rebooted_by for ch in changes):
            first = history.rebooted_by[changes[0]]
            self._say(
                ("again", c.key, c.revision),
                REBOOTS,
                c.key,
                c,
                f"rebooted again (bootID {before.boot_id[:8]} -> {now.boot_id[:8]}) for the "
                f"interrupt that already rebooted it at {_clock(first.at)} (rv {first.revision}): "
                f"{', '.join(changes)}",
            )
        for change in changes:
            history.rebooted_by.setdefault(change, reboot)

    def _pdbs(self, c: Change) -> None:
        self.pdbs.pop(c.key, None)
        if isinstance(c.facts, PdbFacts):
            self.pdbs[c.key] = c.facts

    def _namespaces(self, c: Change) -> None:
        if c.facts is True:
            self.doomed.add(c.key)
        else:
            self.doomed.discard(c.key)

    def _crs(self, c: Change) -> None:
        self.crs.pop(c.key, None)
        if isinstance(c.facts, CrFacts):
            self.crs[c.key] = c.facts

    # -- the checks

    def _pods_on(self, node: str) -> list[PodFacts]:
        return [self.pods[k] for k in sorted(self.on_node.get(node, ()))]

    def _running_interrupts(self, node: str) -> list[PodFacts]:
        return [p for p in self._pods_on(node) if p.interrupt and p.phase == "Running"]

    def _drained(self, pod: PodFacts, interrupts: list[PodFacts]) -> bool:
        """Whether no interrupting CR's drain would evict ``pod``."""
        crs = {p.labels.get(CR_LABEL, "") for p in interrupts}
        for name in crs or {""}:
            cr = self.crs.get(name)
            selector = cr.pod_selector if cr is not None else None
            if selector is None or selectors.matches(selector, pod.labels):
                return False
        return True

    def _quiet(
        self,
        node: str,
        c: Change,
        episode: tuple[object, ...],
        what: str,
        interrupts: list[PodFacts],
    ) -> None:
        facts = self.nodes.get(node)
        if facts is None:
            return
        problems = [] if facts.unschedulable else ["the node was schedulable"]
        left = [
            p.describe()
            for p in self._pods_on(node)
            if p.workload and not self._drained(p, interrupts)
        ]
        if left:
            problems.append(f"workload pods still on it: {', '.join(left)}")
        if problems:
            self._say(
                (*episode, *problems),
                UNDRAINED,
                node,
                c,
                f"{what} on an undrained node: {'; '.join(problems)}",
            )

    def _disrupted(self, key: str, pdb: PdbFacts, gone: PodFacts, c: Change) -> None:
        """``gone`` stopped being healthy: below what ``pdb`` protects is a violation."""
        if (
            pdb.deleting
            or pdb.min_available is None
            or pdb.selector is None
            or pdb.namespace in self.doomed
            or pdb.expected < pdb.min_available
            or not selectors.matches(pdb.selector, gone.labels)
        ):
            return
        selector = pdb.selector
        covered = [
            self.pods[k]
            for k in sorted(self.in_namespace.get(pdb.namespace, ()))
            if selectors.matches(selector, self.pods[k].labels)
        ]
        healthy = [p for p in covered if p.healthy]
        if len(healthy) >= pdb.min_available:
            return
        now = self.pods.get(c.key)
        how = f"became {now.describe()}" if now is not None else "was deleted"
        self._say(
            ("pdb", key, c.revision),
            PDB,
            f"{pdb.namespace}/{pdb.name}",
            c,
            f"{gone.key} on {gone.node or '-'} {how}: {len(healthy)} healthy < minAvailable "
            f"{pdb.min_available} (expected pods {pdb.expected}); its last states: "
            + "; ".join(self.pod_history.get(c.key, ())),
        )

    # -- after the last change

    def reboots(self, allowed: Mapping[str, int]) -> list[Violation]:
        """Per node and incarnation: more reboots than allowed (default one)."""
        out = []
        for node, history in sorted(self.history.items()):
            limit = allowed.get(node, 1)
            incarnations = sorted({r.incarnation for r in history.reboots})
            for incarnation in incarnations:
                seen = [r for r in history.reboots if r.incarnation == incarnation]
                if len(seen) <= limit:
                    continue
                times = ", ".join(
                    f"{_clock(r.at)} (rv {r.revision}; {', '.join(r.changes) or 'no interrupt'})"
                    for r in seen
                )
                again = f" after it was registered anew ({incarnation}x)" if incarnation else ""
                text = f"rebooted {len(seen)} times (allowed {limit}){again}: at {times}"
                out.append(Violation(REBOOTS, node, seen[limit].at, seen[limit].revision, text))
        return out

    def leaks(self, nodes: Iterable[str], exempt: Mapping[str, str], at: float) -> list[Violation]:
        out = []
        for node in sorted(nodes):
            history = self.history.get(node)
            facts = self.nodes.get(node)
            if node in exempt or history is None or history.gone or facts is None:
                continue
            problems = []
            if facts.holders:
                problems.append(f"{CORDON} still lists holders {list(facts.holders)}")
            if facts.unschedulable and history.held and history.human is None:
                problems.append("still unschedulable after the controller's hold")
            if facts.tainted and (history.traced or history.held):
                problems.append(f"still carries the {TAINT} taint")
            if problems:
                out.append(Violation(LEAK, node, at, -1, "; ".join(problems)))
        return out


# ---- the checker ------------------------------------------------------------------------------


class Invariants:
    """Records the sandbox from construction on; ``collect``/``verify`` check what it saw."""

    def __init__(self, kubeconfig: Path, *, node_prefix: str) -> None:
        self.node_prefix = node_prefix
        self.api = RawApi(kubeconfig)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.changes: list[Change] = []
        self.gaps: list[str] = []
        self.nodes: list[str] = []
        self._reboots: dict[str, int] = {}
        self._held: dict[str, str] = {}
        self._breachable: dict[str, str] = {}
        self._lifted: set[tuple[str, int]] = set()
        self._context: list[str] = []
        self._seq = 0
        node_kind = Kind("nodes", "/api/v1/nodes", _by_name, node_facts, self._ours)
        self.streams = [
            _Stream(self, node_kind),
            _Stream(self, Kind("pods", "/api/v1/pods", _by_uid, pod_facts)),
            _Stream(self, Kind("pdbs", "/apis/policy/v1/poddisruptionbudgets", _by_uid, pdb_facts)),
            _Stream(self, Kind("namespaces", "/api/v1/namespaces", _by_name, namespace_deleting)),
            _Stream(
                self,
                Kind("crs", "/apis/bridge.nodewright.io/v1alpha1/nodewrights", _by_name, cr_facts),
            ),
        ]
        for stream in self.streams:
            stream.thread.start()
        for stream in self.streams:
            if not stream.listed.wait(30):
                self.stop()
                raise AssertionError(
                    f"invariants: could not list {stream.kind.name}: {stream.error}"
                )

    def _ours(self, obj: Mapping[str, Any]) -> bool:
        return _by_name(obj).startswith(self.node_prefix)

    def append(self, revision: int, kind: str, key: str, facts: object | None) -> None:
        """Called with ``lock`` held."""
        self._seq += 1
        self.changes.append(Change(revision, self._seq, kind, key, facts, time.time()))

    # -- what a test declares

    def track(self, nodes: Iterable[str]) -> None:
        """Nodes the test added: each must be observed, and is checked for leaks at the end."""
        self.nodes += [n for n in nodes if n not in self.nodes]

    def allow_reboots(self, node: str, count: int, why: str) -> None:
        """``node`` may legitimately reboot ``count`` times in this test (``why``: one line)."""
        assert why.strip(), "say why the node reboots more than once"
        self._reboots[node] = count

    def expect_held(self, node: str, why: str) -> None:
        """``node`` legitimately ends the test held (cordon, holders or taint) (``why``)."""
        assert why.strip(), "say why the node keeps its hold"
        self._held[node] = why

    def allow_pdb_breach(self, pdb: str, why: str) -> None:
        """The PodDisruptionBudget ``namespace/name`` may be broken in this test (``why``)."""
        assert why.strip(), "say why the budget may be broken"
        self._breachable[pdb] = why

    def allow_uncordon(self, node: str, revision: int) -> None:
        """The test itself, as the human who cordoned ``node``, made it schedulable with the write
        whose resourceVersion is ``revision``: no ``human-cordon`` violation then."""
        self._lifted.add((node, revision))

    def add_context(self, lines: Iterable[str]) -> None:
        """Lines every report ends with (what the test did, to make a failure reproducible)."""
        self._context.extend(lines)

    # -- checking

    def sync(self) -> None:
        """Wait until every stream has delivered what a fresh list shows (else take the list in)."""
        for stream in self.streams:
            deadline = time.monotonic() + SYNC_SECONDS
            while True:
                listed = self.api.get(stream.kind.path) or {}
                if stream.caught_up(listed):
                    break
                if time.monotonic() > deadline:
                    stream.fold(listed)
                    break
                time.sleep(0.05)

    def replay(self) -> Replay:
        with self.lock:
            changes = list(self.changes)
        lifted = set(self._lifted)
        return Replay(lambda n: n.startswith(self.node_prefix), lifted).run(changes)

    def collect(
        self, *, end_state: bool = True, settle_seconds: float = LEAK_SETTLE_SECONDS
    ) -> Report:
        """Replay everything seen so far and return what was violated.

        ``end_state``: also check for leaked holds (the test body has reached its end); a leak
        gets ``settle_seconds`` to be released by a controller still at work.
        """
        self.sync()
        replay = self.replay()
        leaks: list[Violation] = []
        waited = 0.0
        if end_state:
            while leaks := replay.leaks(self.nodes, self._held, time.time()):
                if waited >= settle_seconds:
                    break
                time.sleep(0.5)
                waited += 0.5
                self.sync()
                replay = self.replay()
        unseen = [
            Violation(UNOBSERVED, n, time.time(), -1, "never observed: the checker saw no revision")
            for n in self.nodes
            if not replay.history.get(n, NodeHistory()).revisions
        ]
        kept = [
            v for v in replay.violations if not (v.kind == PDB and v.subject in self._breachable)
        ]
        found = kept + replay.reboots(self._reboots) + leaks + unseen
        with self.lock:
            changes, gaps = len(self.changes), tuple(self.gaps)
        observed = {n: replay.history.get(n, NodeHistory()).revisions for n in self.nodes}
        context = tuple(self._context)
        return Report(tuple(found), changes, observed, gaps, waited, context, tuple(replay.notes))

    def verify(self, *, end_state: bool = True) -> Report:
        report = self.collect(end_state=end_state)
        if report.violations:
            raise AssertionError("invariant violated:\n" + report.text())
        return report

    def stop(self) -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        deadline = time.monotonic() + 10
        # A stream may open its next watch just after a close: close until every thread is out.
        while any(s.thread.is_alive() for s in self.streams) and time.monotonic() < deadline:
            self.api.close_watches()
            for stream in self.streams:
                stream.thread.join(0.1)
        self.api.close()
