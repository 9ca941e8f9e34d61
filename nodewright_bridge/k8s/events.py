"""Kubernetes Events (``events.k8s.io/v1``) on our CRs and on Nodes, de-duplicated.

Why de-duplicate: a reconcile that finds "PDB web blocks the drain of node-17" runs every few
seconds until the PDB allows it; posting a new Event each time floods etcd and ``kubectl
describe``. As client-go's recorder does, the first occurrence creates an Event and repeats within
:data:`SERIES_WINDOW` patch its ``series`` (``count`` and ``lastObservedTime``) instead.

Events for cluster-scoped objects (Node, NodeWright, DeploymentPolicy) go to the ``default``
namespace, which is where ``kubectl describe node`` looks.

Posting is best effort: an Event that cannot be written is logged and dropped; it never fails a
reconcile. The de-duplication cache is bounded (LRU of :data:`CACHE_SIZE` entries).

With ``background=True`` (the controller) :meth:`EventRecorder.post` only queues: one sender
thread posts in order, so Events never hold up the Node and Pod writes of a rollout (a batch of
500 nodes finishing posts 500 Events), one at a time and at most :data:`BACKGROUND_RATE` per
second (a burst of :data:`BACKGROUND_BURST`): they trickle out while pods run instead of competing
with the writes that start the next batch. The queue is bounded
(:data:`QUEUE_SIZE`); when it is full new Events are dropped and counted (outcome ``dropped``), as
client-go's broadcaster does. :meth:`EventRecorder.close` posts what is queued, within a deadline.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodewright_bridge.clock import Clock, micro_time
from nodewright_bridge.errors import ApiError, LeadershipLostError, NotFoundError
from nodewright_bridge.k8s.foreground import Foreground
from nodewright_bridge.k8s.resources import EVENTS
from nodewright_bridge.k8s.rest import PatchType, Rest
from nodewright_bridge.metrics import Metrics

logger = logging.getLogger(__name__)

REPORTING_CONTROLLER = "bridge.nodewright.io/controller"
# client-go aggregates repeats into a series and refreshes it at most every 6 minutes' heartbeat;
# we keep one Event per identical message for 30 minutes, well inside the API server's 1 h TTL.
SERIES_WINDOW = 1800.0
# One entry per distinct (object, reason, message): 4,096 covers a rollout over thousands of
# nodes without unbounded growth.
CACHE_SIZE = 4096
CLUSTER_SCOPED_NAMESPACE = "default"
# The API server limits an Event note to 1 KiB.
MAX_NOTE = 1024
# Events waiting for the background sender; beyond this new ones are dropped (and counted).
QUEUE_SIZE = 8192
# The background sender's pace: a burst for the few Events of a small change, then a steady rate.
BACKGROUND_RATE = 25.0
BACKGROUND_BURST = 50.0


class EventType(enum.StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """What an Event is about (``regarding``)."""

    api_version: str
    kind: str
    name: str
    uid: str = ""
    namespace: str = ""
    resource_version: str = ""

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectRef:
        meta = obj.get("metadata") or {}
        return cls(
            api_version=str(obj.get("apiVersion", "")),
            kind=str(obj.get("kind", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            namespace=str(meta.get("namespace", "")),
            resource_version=str(meta.get("resourceVersion", "")),
        )

    def to_wire(self) -> dict[str, str]:
        out = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.uid:
            out["uid"] = self.uid
        if self.namespace:
            out["namespace"] = self.namespace
        return out


@dataclass
class _Series:
    name: str
    namespace: str
    count: int
    first_seen: float


class EventRecorder:
    """Posts Events, turning repeats into a series.

    Args:
        rest: The REST helper.
        clock: For ``eventTime`` and the series window.
        instance: ``reportingInstance`` (this replica's identity).
        guard: Called before posting; a replica that is not leading posts nothing.
        background: Queue Events for one sender thread instead of posting in the caller.
        foreground: The sender waits while foreground work (a batch's pod starts) runs.
    """

    def __init__(
        self,
        rest: Rest,
        *,
        clock: Clock,
        instance: str,
        metrics: Metrics | None = None,
        guard: Callable[[], bool] | None = None,
        background: bool = False,
        foreground: Foreground | None = None,
    ) -> None:
        self._rest = rest
        self._foreground = foreground
        self._clock = clock
        self._instance = instance[:128]
        self._metrics = metrics
        self._guard = guard
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, _Series] = OrderedDict()
        self._background = background
        self._queue: deque[tuple[ObjectRef, EventType, str, str, str]] = deque()
        self._ready = threading.Condition()
        self._closing = False
        self._sender: threading.Thread | None = None

    def normal(self, regarding: ObjectRef, reason: str, note: str, *, action: str = "") -> None:
        self.post(regarding, EventType.NORMAL, reason, note, action=action)

    def warning(self, regarding: ObjectRef, reason: str, note: str, *, action: str = "") -> None:
        self.post(regarding, EventType.WARNING, reason, note, action=action)

    def post(
        self,
        regarding: ObjectRef,
        type_: EventType,
        reason: str,
        note: str,
        *,
        action: str = "",
    ) -> None:
        """Post (or count a repeat of) one Event. Never raises for API failures."""
        if self._guard is not None and not self._guard():
            return
        note = note if len(note) <= MAX_NOTE else note[: MAX_NOTE - 1] + "…"
        action = action or reason
        if not self._background:
            self._post_now(regarding, type_, reason, note, action)
            return
        with self._ready:
            if self._closing or len(self._queue) >= QUEUE_SIZE:
                self._count("dropped", type_)
                return
            self._queue.append((regarding, type_, reason, note, action))
            if self._sender is None:
                self._sender = threading.Thread(
                    target=self._send_queued, name="events", daemon=True
                )
                self._sender.start()
            self._ready.notify()

    def close(self, timeout: float) -> None:
        """Stop queueing; post what is queued for at most ``timeout`` seconds, drop the rest."""
        with self._ready:
            self._closing = True
            sender = self._sender
            self._ready.notify()
        if sender is not None:
            sender.join(timeout)
        with self._ready:
            left = len(self._queue)
            self._queue.clear()
        if left:
            logger.warning("events not posted at shutdown", extra={"count": left})

    def pending(self) -> int:
        """Events queued and not yet posted."""
        with self._ready:
            return len(self._queue)

    def _send_queued(self) -> None:
        tokens, last = BACKGROUND_BURST, time.monotonic()
        while True:
            with self._ready:
                while not self._queue and not self._closing:
                    self._ready.wait()
                if not self._queue:
                    return
                regarding, type_, reason, note, action = self._queue.popleft()
            now = time.monotonic()
            tokens = min(BACKGROUND_BURST, tokens + (now - last) * BACKGROUND_RATE)
            last = now
            if tokens < 1.0 and not self._closing:
                time.sleep((1.0 - tokens) / BACKGROUND_RATE)
                tokens, last = 1.0, time.monotonic()
            tokens -= 1.0
            if self._foreground is not None and not self._closing:
                self._foreground.yield_to()
            self._post_now(regarding, type_, reason, note, action)

    def _post_now(
        self, regarding: ObjectRef, type_: EventType, reason: str, note: str, action: str
    ) -> None:
        key = _dedup_key(regarding, type_, reason, action, note)
        now_mono = self._clock.monotonic()
        with self._lock:
            series = self._cache.get(key)
            if series is not None and now_mono - series.first_seen > SERIES_WINDOW:
                del self._cache[key]
                series = None
            if series is not None:
                series.count += 1
                self._cache.move_to_end(key)
        try:
            if series is not None and self._bump(series):
                self._count("repeat", type_)
                return
            created = self._create(regarding, type_, reason, action, note)
        except LeadershipLostError:
            return
        except ApiError as exc:
            logger.warning(
                "event not posted",
                extra={"reason": reason, "object": regarding.name, "error": str(exc)},
            )
            return
        with self._lock:
            self._cache[key] = _Series(
                name=created, namespace=self._namespace(regarding), count=1, first_seen=now_mono
            )
            self._cache.move_to_end(key)
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        self._count("new", type_)

    def _namespace(self, regarding: ObjectRef) -> str:
        return regarding.namespace or CLUSTER_SCOPED_NAMESPACE

    def _create(
        self, regarding: ObjectRef, type_: EventType, reason: str, action: str, note: str
    ) -> str:
        now = micro_time(self._clock.now())
        namespace = self._namespace(regarding)
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            # client-go's naming: <object>.<unique hex>; generateName would reject "name." prefixes
            "metadata": {
                "name": f"{regarding.name[:200]}.{uuid.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            "eventTime": now,
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self._instance,
            "action": action[:128],
            "reason": reason[:128],
            "type": str(type_),
            "note": note,
            "regarding": regarding.to_wire(),
        }
        created = self._rest.create(EVENTS, body, namespace=namespace, metadata_only=True)
        return str((created.get("metadata") or {}).get("name", ""))

    def _bump(self, series: _Series) -> bool:
        """Patch the series of an existing Event; False if it is gone (expired) so we create."""
        patch = {
            "series": {
                "count": series.count,
                "lastObservedTime": micro_time(self._clock.now()),
            }
        }
        try:
            self._rest.patch(
                EVENTS, series.name, patch, patch_type=PatchType.MERGE, namespace=series.namespace
            )
        except NotFoundError:
            return False
        return True

    def _count(self, outcome: str, type_: EventType) -> None:
        if self._metrics is not None:
            self._metrics.events.labels(str(type_), outcome).inc()


def _dedup_key(regarding: ObjectRef, type_: EventType, reason: str, action: str, note: str) -> str:
    raw = "\x00".join(
        [regarding.kind, regarding.namespace, regarding.name, regarding.uid, type_, reason, action]
    )
    # hash the note: the key stays small even for 1 KiB notes
    return raw + "\x00" + hashlib.sha1(note.encode(), usedforsecurity=False).hexdigest()
