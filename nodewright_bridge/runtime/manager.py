"""The manager: informers, work queue, workers, leader election and the health endpoint, together.

Order of operations (``run``):
1. serve ``/metrics``, ``/healthz``, ``/readyz``;
2. start the informers; their handlers map every change to keys (``Reconciler.keys_for``) and
   add them to the queue (de-duplicated, so a standby's queue stays small);
3. wait for the caches to sync (``/readyz`` turns 200 once synced and leading-or-standby);
4. campaign for the Lease (or, with ``leader_elect=False``, act at once); on becoming leader start
   the workers;
5. on :meth:`Manager.stop` (SIGTERM/SIGINT): shut the queue, let each worker finish its current
   key, release the Lease, stop the informers and the server. Exit code 0.
   On *losing* the Lease: stop at once (writes are already refused by the guard), exit code 1 so
   the pod restarts as a clean standby (as controller-runtime does).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nodewright_bridge.clock import Clock
from nodewright_bridge.k8s.caches import InformerSet, standard_specs
from nodewright_bridge.k8s.events import EventRecorder
from nodewright_bridge.k8s.foreground import Foreground
from nodewright_bridge.k8s.patching import Writer
from nodewright_bridge.k8s.rest import Rest
from nodewright_bridge.k8s.watching import InformerSpec
from nodewright_bridge.metrics import Metrics
from nodewright_bridge.runtime import allocator
from nodewright_bridge.runtime.leadership import ElectionSettings, LeaderElector
from nodewright_bridge.runtime.queueing import WorkQueue
from nodewright_bridge.runtime.ratelimiting import default_rate_limiter
from nodewright_bridge.runtime.reconciling import Reconciler, process_one
from nodewright_bridge.runtime.serving import HealthServer

logger = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "nodewright-system"
DEFAULT_METRICS_ADDR = ":8080"
# CR keys are few; two workers let one slow reconcile (a drain) not delay another CR.
DEFAULT_WORKERS = 2
# First list of 5,000 nodes and their pods takes seconds; a minute means the API is unhealthy.
SYNC_TIMEOUT = 120.0
# How long a graceful stop waits for the current reconciles to finish.
DRAIN_TIMEOUT = 30.0
# Queued Events are posted for at most this long at a graceful stop.
EVENT_FLUSH_SECONDS = 5.0


@dataclass(frozen=True)
class ManagerSettings:
    identity: str
    namespace: str = DEFAULT_NAMESPACE
    metrics_addr: str = DEFAULT_METRICS_ADDR
    leader_elect: bool = True
    election: ElectionSettings = field(default_factory=ElectionSettings)
    workers: int = DEFAULT_WORKERS


@dataclass(frozen=True)
class ReconcilerContext:
    """Everything a reconciler may use; built by the manager, handed to the factory."""

    rest: Rest
    writer: Writer
    events: EventRecorder
    informers: InformerSet
    metrics: Metrics
    clock: Clock
    namespace: str
    identity: str
    is_leader: Callable[[], bool]
    foreground: Foreground


ReconcilerFactory = Callable[[ReconcilerContext], Reconciler]


class _Enqueue:
    """Informer handler: map each changed object to keys and queue them."""

    def __init__(self, informer: str, reconciler: Reconciler, queue: WorkQueue) -> None:
        self._informer = informer
        self._reconciler = reconciler
        self._queue = queue

    def _keys(self, obj: Mapping[str, Any]) -> None:
        for key in self._reconciler.keys_for(self._informer, obj):
            self._queue.add(key)

    def on_add(self, obj: dict[str, Any]) -> None:
        self._keys(obj)

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        # An update that changed nothing the controller caches (a Node heartbeat: the slimmed
        # object differs only in resourceVersion) cannot change a reconcile's outcome; at
        # thousands of nodes such updates would keep the CR's key busy all the time. A resync
        # re-delivers the same object (``old is new``) and always counts.
        if old is not new and same_but_version(old, new):
            return
        self._keys(new)

    def on_delete(self, obj: dict[str, Any]) -> None:
        self._keys(obj)


def same_but_version(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """True if two cached objects differ at most in ``metadata.resourceVersion``."""
    if old.keys() != new.keys():
        return False
    for key, value in new.items():
        if key != "metadata":
            if old[key] != value:
                return False
            continue
        before = old[key] or {}
        after = value or {}
        if before.keys() != after.keys():
            return False
        if any(k != "resourceVersion" and before[k] != v for k, v in after.items()):
            return False
    return True


class Manager:
    """Runs one controller process. Construct, then :meth:`run` on the main thread."""

    def __init__(
        self,
        rest: Rest,
        factory: ReconcilerFactory,
        settings: ManagerSettings,
        *,
        clock: Clock,
        metrics: Metrics,
        specs: list[InformerSpec] | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._workers: list[threading.Thread] = []
        self._workers_lock = threading.Lock()
        self.queue = WorkQueue(
            clock=clock, rate_limiter=default_rate_limiter(clock), metrics=metrics
        )
        self.informers = InformerSet(
            rest,
            specs if specs is not None else standard_specs(settings.namespace),
            metrics=metrics,
            clock=clock,
        )
        self.elector: LeaderElector | None = None
        if settings.leader_elect:
            self.elector = LeaderElector(
                rest,
                namespace=settings.namespace,
                identity=settings.identity,
                clock=clock,
                settings=settings.election,
                on_started_leading=self._start_workers,
                on_stopped_leading=self._on_stopped_leading,
                metrics=metrics,
            )
        guard = self.is_leader
        writer = Writer(rest, guard=guard)
        foreground = Foreground()
        events = EventRecorder(
            rest,
            clock=clock,
            instance=settings.identity,
            metrics=metrics,
            guard=guard,
            background=True,
            foreground=foreground,
        )
        self.events = events
        self.context = ReconcilerContext(
            rest=rest,
            writer=writer,
            events=events,
            informers=self.informers,
            metrics=metrics,
            clock=clock,
            namespace=settings.namespace,
            identity=settings.identity,
            is_leader=guard,
            foreground=foreground,
        )
        self.reconciler = factory(self.context)
        for informer in self.informers:
            informer.add_handler(_Enqueue(informer.spec.name, self.reconciler, self.queue))
        self.server = HealthServer(
            settings.metrics_addr, metrics=metrics, healthz=self._healthz, readyz=self._readyz
        )

    # -- state -------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        if self._stop.is_set() or self._lost.is_set():
            return False
        return self.elector.is_leader() if self.elector is not None else True

    def _healthz(self) -> tuple[bool, str]:
        dead = [i.spec.name for i in self.informers if not i.alive()]
        if dead:
            return False, f"informer threads dead: {', '.join(dead)}"
        with self._workers_lock:
            if any(not w.is_alive() for w in self._workers) and not self._stop.is_set():
                return False, "a worker thread died"
        return True, "ok"

    def _readyz(self) -> tuple[bool, str]:
        if not self.informers.synced():
            pending = [i.spec.name for i in self.informers if not i.has_synced()]
            return False, f"caches not synced: {', '.join(pending)}"
        if self._lost.is_set() or self._stop.is_set():
            return False, "shutting down"
        if self.elector is None or self.elector.is_leader():
            return True, "leader"
        return True, f"standby (leader: {self.elector.holder() or 'none'})"

    # -- lifecycle ---------------------------------------------------------------------------

    def run(self) -> int:
        """Run until :meth:`stop` (returns 0) or until leadership is lost (returns 1)."""
        self.server.start()
        self.informers.start()
        logger.info("waiting for caches", extra={"namespace": self.settings.namespace})
        if not self._wait(self.informers.synced, SYNC_TIMEOUT) and not self._stop.is_set():
            logger.error("caches did not sync in time", extra={"timeout": SYNC_TIMEOUT})
            self._shutdown()
            return 1
        if not self._stop.is_set():
            if self.elector is not None:
                self.elector.start()
            else:
                self._start_workers()
        while not self._stop.is_set() and not self._lost.is_set():
            self._stop.wait(1.0)  # short waits keep the main thread responsive to signals
        self._shutdown()
        return 1 if self._lost.is_set() and not self._stop.is_set() else 0

    def stop(self) -> None:
        """Request a graceful stop (signal-handler safe)."""
        self._stop.set()

    def _wait(self, condition: Callable[[], bool], timeout: float) -> bool:
        waited = 0.0
        while not condition():
            if self._stop.is_set() or waited >= timeout:
                return False
            self._stop.wait(0.2)
            waited += 0.2
        return True

    def _start_workers(self) -> None:
        with self._workers_lock:
            if self._workers:
                return
            for index in range(self.settings.workers):
                worker = threading.Thread(target=self._work, name=f"worker-{index}", daemon=True)
                worker.start()
                self._workers.append(worker)
        logger.info("workers started", extra={"workers": self.settings.workers})

    def _work(self) -> None:
        while process_one(self.queue, self.reconciler, metrics=self.metrics, timeout=1.0):
            allocator.release_free()  # what the pass freed (peak RSS, see allocator)

    def _on_stopped_leading(self) -> None:
        if not self._stop.is_set():
            self._lost.set()
        self.queue.shutdown()

    def _shutdown(self) -> None:
        logger.info("shutting down")
        self.queue.shutdown()
        with self._workers_lock:
            workers = list(self._workers)
        for worker in workers:
            worker.join(DRAIN_TIMEOUT)
        # Events the workers queued; none after losing the lease (a new leader speaks now).
        self.events.close(0.0 if self._lost.is_set() else EVENT_FLUSH_SECONDS)
        if self.elector is not None:
            self.elector.stop(release=True)
        self.informers.stop()
        self.server.stop()
        logger.info("stopped")
