"""Leader election on a ``coordination.k8s.io/v1`` Lease (client-go's algorithm).

Why: two replicas of the controller must never both act (two cordons, two drains, two reboots of
one node). Exactly one holds the Lease and works; the other waits, ready to take over.

How it stays safe:
- Writes are optimistic: every acquire or renew is a PUT carrying the ``resourceVersion`` we read,
  so of two replicas racing for an expired Lease exactly one wins (the other gets 409).
- A follower judges expiry by *its own* monotonic clock: the Lease is expired only when its
  record has not changed for ``lease_duration`` since the follower first saw that record. Clock
  skew between machines does not matter.
- The leader considers itself leading only until ``renew_deadline`` after the *start* of its last
  successful renew. Because ``renew_deadline < lease_duration``, the leader stops before any
  follower can possibly take over. :meth:`LeaderElector.is_leader` is that check; writers call it
  before every write (the ``guard`` of :class:`~nodewright_bridge.k8s.patching.Writer`).
- On graceful shutdown the leader releases: holder cleared, ``leaseDurationSeconds: 1``, so a
  follower takes over within one retry period instead of a full lease duration.

Guarantees: at no instant do two electors that share a Lease both return True from
``is_leader()``, provided their clocks advance at the same rate. Caveats: a process that is
frozen (SIGSTOP, swap) past ``renew_deadline`` in the middle of a write can still complete that
one in-flight request; the next write checks the guard again.
"""

from __future__ import annotations

import datetime
import logging
import random
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodewright_bridge.clock import Clock, micro_time
from nodewright_bridge.errors import (
    AlreadyExistsError,
    ApiError,
    ConflictError,
    NotFoundError,
)
from nodewright_bridge.k8s.resources import LEASES
from nodewright_bridge.k8s.rest import JsonObject, Rest
from nodewright_bridge.metrics import Metrics

logger = logging.getLogger(__name__)

LEASE_NAME = "nodewright-bridge-controller"


@dataclass(frozen=True, slots=True)
class ElectionSettings:
    """Lease timing (client-go / controller-runtime defaults: 15 s, 10 s, 2 s).

    ``lease_duration``: how long followers wait after the last change before taking over.
    ``renew_deadline``: how long the leader keeps acting without a successful renew; must be
    shorter than ``lease_duration``. ``retry_period``: how often everyone tries.
    """

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("need 0 < retry_period < renew_deadline < lease_duration")


def default_identity(base: str | None = None) -> str:
    """``<base (pod name) or hostname>_<uuid>``: unique even for two electors in one process."""
    return f"{base or socket.gethostname()}_{uuid.uuid4()}"


class LeaderElector:
    """Acquires, renews and releases one Lease in a background thread.

    Args:
        rest: The REST helper.
        namespace: Where the Lease lives (the controller namespace).
        name: The Lease's name.
        identity: This replica's holder identity.
        clock: Monotonic time for deadlines, wall time for the Lease's timestamps.
        on_started_leading: Called (on the elector thread) right after acquiring.
        on_stopped_leading: Called (on the elector thread) once leadership ended for any reason:
            lost renewal, release, or stop.
    """

    def __init__(
        self,
        rest: Rest,
        *,
        namespace: str,
        name: str = LEASE_NAME,
        identity: str,
        clock: Clock,
        settings: ElectionSettings | None = None,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        metrics: Metrics | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._rest = rest
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self._clock = clock
        self.settings = settings or ElectionSettings()
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._metrics = metrics
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # leadership: valid until this monotonic instant (None: not leading)
        self._valid_until: float | None = None
        # what we last saw of the Lease, and when (our clock) it last changed
        self._observed: JsonObject | None = None
        self._observed_key: tuple[str, str] | None = None
        self._observed_at = 0.0

    # -- public ------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        """True while this elector may act (see the module doc for why this is safe)."""
        with self._lock:
            return self._valid_until is not None and self._clock.monotonic() < self._valid_until

    def holder(self) -> str:
        """The holder identity we last observed ("" if none)."""
        with self._lock:
            spec = (self._observed or {}).get("spec") or {}
            return str(spec.get("holderIdentity") or "")

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("elector already started")
        self._thread = threading.Thread(target=self._run, name="leader-elector", daemon=True)
        self._thread.start()

    def stop(self, *, release: bool = True, timeout: float = 10.0) -> None:
        """Stop campaigning; release the Lease first if we hold it and ``release`` is set."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self.is_leader() or self._valid_until is not None:
            if release:
                self._release()
            self._lose("stopped")

    # -- the loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        settings = self.settings
        while not self._stop.is_set():
            started = self._clock.monotonic()
            ok = self._try_acquire_or_renew()
            if ok:
                with self._lock:
                    was_leading = self._valid_until is not None
                    self._valid_until = started + settings.renew_deadline
                if not was_leading:
                    self._gain()
                self._stop.wait(settings.retry_period)
                continue
            if self._valid_until is not None and not self.is_leader():
                self._lose("renew deadline passed")
            jitter = 1.0 + 0.2 * self._rng.random()  # spread followers' attempts
            self._stop.wait(settings.retry_period * (jitter if self._valid_until is None else 1))

    def _try_acquire_or_renew(self) -> bool:
        now = micro_time(self._clock.now())
        try:
            lease = self._rest.get(LEASES, self.name, namespace=self.namespace)
        except NotFoundError:
            return self._create(now)
        except ApiError as exc:
            logger.warning("cannot read the leader lease", extra={"error": str(exc)})
            return False
        # The *end* of the read is the safe instant for a follower: the record existed by then.
        self._observe(lease, self._clock.monotonic())
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        if holder and holder != self.identity:
            duration = float(spec.get("leaseDurationSeconds") or self.settings.lease_duration)
            with self._lock:
                fresh = self._clock.monotonic() < self._observed_at + duration
            if fresh:
                return False
        transitions = int(spec.get("leaseTransitions") or 0)
        new_spec: dict[str, Any] = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.settings.lease_duration),
            "renewTime": now,
        }
        if holder != self.identity:
            new_spec["acquireTime"] = now
            new_spec["leaseTransitions"] = transitions + 1
        body = {**lease, "spec": new_spec}
        try:
            updated = self._rest.replace(LEASES, self.name, body, namespace=self.namespace)
        except ConflictError:
            return False  # someone else wrote first; re-read next round
        except ApiError as exc:
            logger.warning("cannot update the leader lease", extra={"error": str(exc)})
            return False
        self._observe(updated, self._clock.monotonic())
        return True

    def _create(self, now: str) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.settings.lease_duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        try:
            created = self._rest.create(LEASES, body, namespace=self.namespace)
        except (AlreadyExistsError, ConflictError):
            return False
        except ApiError as exc:
            logger.warning("cannot create the leader lease", extra={"error": str(exc)})
            return False
        self._observe(created, self._clock.monotonic())
        return True

    def _observe(self, lease: JsonObject, at: float) -> None:
        spec = lease.get("spec") or {}
        key = (str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or ""))
        with self._lock:
            if key != self._observed_key:
                self._observed_key = key
                self._observed_at = at
            self._observed = lease

    def _release(self) -> None:
        """Hand the Lease over: clear the holder so a follower acquires at its next attempt."""
        try:
            lease = self._rest.get(LEASES, self.name, namespace=self.namespace)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            now = micro_time(self._clock.now())
            spec = {**spec, "holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": now}
            self._rest.replace(LEASES, self.name, {**lease, "spec": spec}, namespace=self.namespace)
            logger.info("leader lease released", extra={"identity": self.identity})
        except ApiError as exc:
            logger.warning("cannot release the leader lease", extra={"error": str(exc)})

    def _gain(self) -> None:
        logger.info("became leader", extra={"identity": self.identity, "lease": self.name})
        if self._metrics is not None:
            self._metrics.leader.set(1)
        if self._on_started is not None:
            self._on_started()

    def _lose(self, why: str) -> None:
        with self._lock:
            if self._valid_until is None:
                return
            self._valid_until = None
        logger.warning("stopped leading", extra={"identity": self.identity, "why": why})
        if self._metrics is not None:
            self._metrics.leader.set(0)
        if self._on_stopped is not None:
            self._on_stopped()


def lease_age(lease: JsonObject, now: datetime.datetime) -> float | None:
    """Seconds since the Lease's ``renewTime`` (for status displays), or None."""
    raw = (lease.get("spec") or {}).get("renewTime")
    if not raw:
        return None
    renewed = datetime.datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    return (now - renewed).total_seconds()
