"""Informers: keep a :class:`~nodewright_bridge.k8s.store.Store` in step with the API server.

One thread per informer runs this state machine::

    LIST (paged) --ok--> WATCH from the list's resourceVersion --server closed--> WATCH again
      ^                     |  every event advances the resourceVersion (bookmarks too)
      |                     |
      +--- 410 Gone --------+   (the resourceVersion fell out of the watch cache: relist,
      |                     |    diff against the store, emit add/update/delete for the diff)
      +--- other error -----+   (back off 0.5 s doubling to 30 s with jitter; resume the watch
                                 from the last resourceVersion, or relist if we never listed)

Every ``resync_period`` seconds the informer re-delivers every cached object as an update
(``on_update(obj, obj)``) so level-triggered consumers get a periodic nudge even when nothing
changed. The watch's server-side timeout is capped at the time left to the next resync, so the
single thread does both without a timer.

Handlers run on the informer thread and must be quick (enqueue a key, nothing more). An exception
in a handler is logged and does not stop the informer.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from nodewright_bridge.clock import Clock, SystemClock
from nodewright_bridge.errors import ApiError, ExpiredError
from nodewright_bridge.k8s.resources import Resource
from nodewright_bridge.k8s.rest import Rest, WatchStream
from nodewright_bridge.k8s.slimming import Slimmer, slim_generic
from nodewright_bridge.k8s.store import Indexer, Store, object_key
from nodewright_bridge.metrics import Metrics

logger = logging.getLogger(__name__)

JsonObject = dict[str, Any]

# client-go picks a random watch timeout in [5 min, 10 min) so watches of many clients do not all
# reconnect at once; we do the same.
WATCH_TIMEOUT_MIN = 300
# Pages of 500 keep the transient memory of a 5,000-node relist to a tenth of the full list.
DEFAULT_PAGE_SIZE = 500
# Reconnect back-off after errors: fast first retry, capped so an outage is noticed within 30 s.
BACKOFF_BASE = 0.5
BACKOFF_MAX = 30.0


class EventHandler(Protocol):
    """Receives cache changes. Called on the informer thread; must not block."""

    def on_add(self, obj: JsonObject) -> None: ...

    def on_update(self, old: JsonObject, new: JsonObject) -> None: ...

    def on_delete(self, obj: JsonObject) -> None: ...


@dataclass(frozen=True)
class InformerSpec:
    """What to watch and how to keep it.

    Attributes:
        name: Short name for logs and metrics (``nodes``, ``pods``, ...).
        resource: The resource to list and watch.
        namespace: Restrict to one namespace (None: all namespaces / cluster-scoped).
        label_selector: Server-side label filter.
        field_selector: Server-side field filter (e.g. ``spec.nodeName!=``).
        slim: Cuts each object to what the controller reads before it is stored.
        indexers: Secondary indexes of the store.
        resync_period: Seconds between re-deliveries of every object; 0 disables.
        page_size: Objects per list page.
    """

    name: str
    resource: Resource
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    slim: Slimmer = slim_generic
    indexers: Mapping[str, Indexer] = field(default_factory=dict)
    resync_period: float = 0.0
    page_size: int = DEFAULT_PAGE_SIZE


class Informer:
    """List + watch one resource into a store and notify handlers."""

    def __init__(
        self,
        rest: Rest,
        spec: InformerSpec,
        *,
        metrics: Metrics | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.spec = spec
        self.store = Store(spec.indexers)
        self._rest = rest
        self._metrics = metrics
        self._clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._handlers: list[EventHandler] = []
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._lock = threading.Lock()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None
        self._resource_version: str | None = None
        self._next_resync = 0.0
        self.relists = 0  # how many full lists were done (tests and logs)

    # -- public ------------------------------------------------------------------------------

    def add_handler(self, handler: EventHandler) -> None:
        """Register ``handler``; call before :meth:`start` to see the initial adds."""
        self._handlers.append(handler)

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"informer {self.spec.name} already started")
        self._thread = threading.Thread(
            target=self._run, name=f"informer-{self.spec.name}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching and join the thread."""
        self._stop.set()
        self._close_stream()
        if self._thread is not None:
            self._thread.join(timeout)

    def alive(self) -> bool:
        """True while the informer thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def has_synced(self) -> bool:
        """True once the first full list is in the store."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    @property
    def resource_version(self) -> str | None:
        """The resourceVersion the next watch resumes from."""
        with self._lock:
            return self._resource_version

    def restart_watch(self, resource_version: str | None = None) -> None:
        """Drop the current watch and resume from ``resource_version`` (default: the last one).

        Used by tests to force a 410 (pass an ancient resourceVersion) and by operators'
        debugging; the informer heals either way.
        """
        with self._lock:
            if resource_version is not None:
                self._resource_version = resource_version
        self._close_stream()

    # -- the loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        relist_reason = "initial"
        log_extra = {"informer": self.spec.name}
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self._relist(relist_reason)
                self._watch_once()
                failures = 0
            except ExpiredError:
                logger.info("watch expired, relisting", extra=log_extra)
                with self._lock:
                    self._resource_version = None
                relist_reason = "expired"
            except ApiError as exc:
                if self._stop.is_set():
                    break
                failures += 1
                relist_reason = "error"
                delay = self._backoff(failures)
                logger.warning(
                    "informer request failed, retrying",
                    extra={**log_extra, "error": str(exc), "retry_in": round(delay, 2)},
                )
                self._stop.wait(delay)
            except Exception:  # worker boundary: keep the cache alive whatever happens
                if self._stop.is_set():
                    break
                failures += 1
                relist_reason = "error"
                logger.exception("informer loop failed, relisting", extra=log_extra)
                with self._lock:
                    self._resource_version = None
                self._stop.wait(self._backoff(failures))

    def _relist(self, reason: str) -> None:
        spec = self.spec
        fresh: dict[str, JsonObject] = {}
        token: str | None = None
        resource_version = ""
        while True:
            page = self._rest.list(
                spec.resource,
                namespace=spec.namespace,
                label_selector=spec.label_selector,
                field_selector=spec.field_selector,
                limit=spec.page_size,
                continue_token=token,
            )
            kind = spec.resource.kind
            for item in page.get("items") or ():
                item.setdefault("kind", kind)  # list items carry no kind
                item.setdefault("apiVersion", spec.resource.api_version)
                slim = spec.slim(item)
                fresh[object_key(slim)] = slim
            meta = page.get("metadata") or {}
            resource_version = str(meta.get("resourceVersion") or resource_version)
            token = meta.get("continue") or None
            if token is None or self._stop.is_set():
                break
        self._replace(fresh)
        with self._lock:
            self._resource_version = resource_version
        self.relists += 1
        self._next_resync = self._clock.monotonic() + spec.resync_period
        if self._metrics is not None:
            self._metrics.informer_relists.labels(spec.name, reason).inc()
            self._metrics.informer_synced.labels(spec.name).set(1)
            self._metrics.informer_objects.labels(spec.name).set(len(self.store))
        if not self._synced.is_set():
            logger.info("informer synced", extra={"informer": spec.name, "objects": len(fresh)})
        self._synced.set()

    def _replace(self, fresh: dict[str, JsonObject]) -> None:
        for key in list(self.store.keys()):
            if key not in fresh:
                old = self.store.delete(key)
                if old is not None:
                    self._notify("delete", old, old)
        for key, obj in fresh.items():
            old = self.store.put(key, obj)
            if old is None:
                self._notify("add", obj, obj)
            elif _rv(old) != _rv(obj):
                self._notify("update", old, obj)

    def _watch_once(self) -> None:
        spec = self.spec
        timeout = self._rng.randint(WATCH_TIMEOUT_MIN, 2 * WATCH_TIMEOUT_MIN - 1)
        if spec.resync_period > 0:
            left = self._next_resync - self._clock.monotonic()
            if left <= 0:
                self._resync()
                left = spec.resync_period
            timeout = max(1, min(timeout, int(left) + 1))
        start_rv = self.resource_version
        if start_rv is None:
            return
        stream = self._rest.watch(
            spec.resource,
            resource_version=start_rv,
            timeout_seconds=timeout,
            namespace=spec.namespace,
            label_selector=spec.label_selector,
            field_selector=spec.field_selector,
        )
        with self._lock:
            self._stream = stream
            # restart_watch() ran while this watch was being opened: its close found no stream.
            moved = self._resource_version != start_rv
        if self._stop.is_set() or moved:
            stream.close()
        try:
            for kind, obj in stream:
                self._apply(kind, obj)
        finally:
            with self._lock:
                self._stream = None
            stream.close()

    def _apply(self, kind: str, raw: JsonObject) -> None:
        rv = _rv(raw)
        if kind == "BOOKMARK":
            if rv:
                with self._lock:
                    self._resource_version = rv
            return
        raw.setdefault("kind", self.spec.resource.kind)
        raw.setdefault("apiVersion", self.spec.resource.api_version)
        obj = self.spec.slim(raw)
        key = object_key(obj)
        if kind in ("ADDED", "MODIFIED"):
            old = self.store.put(key, obj)
            if old is None:
                self._notify("add", obj, obj)
            else:
                self._notify("update", old, obj)
        elif kind == "DELETED":
            old = self.store.delete(key)
            self._notify("delete", old if old is not None else obj, obj)
        if rv:
            with self._lock:
                self._resource_version = rv
        if self._metrics is not None:
            self._metrics.informer_objects.labels(self.spec.name).set(len(self.store))

    def _resync(self) -> None:
        for obj in self.store.values():
            self._notify("update", obj, obj)
        self._next_resync = self._clock.monotonic() + self.spec.resync_period

    def _notify(self, what: str, old: JsonObject, new: JsonObject) -> None:
        for handler in self._handlers:
            try:
                if what == "add":
                    handler.on_add(new)
                elif what == "update":
                    handler.on_update(old, new)
                else:
                    handler.on_delete(old)
            except Exception:  # handler boundary: one bad handler must not stop the cache
                logger.exception(
                    "informer handler failed", extra={"informer": self.spec.name, "event": what}
                )

    def _close_stream(self) -> None:
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()

    def _backoff(self, failures: int) -> float:
        delay = min(BACKOFF_BASE * float(2 ** min(failures - 1, 16)), BACKOFF_MAX)
        return delay * (0.5 + self._rng.random() / 2)  # jitter: many replicas, one API server


def _rv(obj: JsonObject) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
