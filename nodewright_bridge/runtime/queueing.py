"""A de-duplicating, rate-limited work queue of object keys (client-go's workqueue semantics).

Why keys and not events: reconciliation is level-triggered. A burst of 300 pod updates on one node
must become one reconcile of the CR, not 300, and the reconciler reads current state from the
caches anyway. So the queue holds *keys* and merges duplicates.

Guarantees:
- A key added while it is already waiting is merged (it is processed once).
- A key is never handed to two workers at once. A key added while it is being processed is
  remembered ("dirty") and queued again when :meth:`WorkQueue.done` is called for it.
- Keys come out in the order they were (first) added.
- :meth:`WorkQueue.add_after` delays a key; if it is added again sooner, the earlier time wins.
- :meth:`WorkQueue.add_rate_limited` delays by the rate limiter (failures); :meth:`forget` resets.
- After :meth:`WorkQueue.shutdown`, adds are ignored and :meth:`WorkQueue.get` returns None at
  once, even if keys were waiting: the next leader relists and rebuilds the queue anyway.

Time comes from the injected :class:`~nodewright_bridge.clock.Clock`. With a fake clock,
tests advance the clock and call ``get(timeout=0)``; nothing sleeps.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading

from nodewright_bridge.clock import Clock
from nodewright_bridge.metrics import Metrics
from nodewright_bridge.runtime.ratelimiting import RateLimiter

logger = logging.getLogger(__name__)

# Longest single wait on the condition variable while delayed keys are pending. Bounds how late a
# delayed key can become ready if the clock and the condition's timer disagree (they share no
# source with a fake clock); real clocks make this irrelevant.
_MAX_WAIT = 1.0


class WorkQueue:
    """The queue. Thread-safe; any number of producers and workers."""

    def __init__(
        self,
        *,
        clock: Clock,
        rate_limiter: RateLimiter,
        metrics: Metrics | None = None,
        name: str = "nodewright",
    ) -> None:
        self._clock = clock
        self._limiter = rate_limiter
        self._metrics = metrics
        self.name = name
        self._cond = threading.Condition()
        self._queue: list[str] = []  # ready keys in order; no duplicates
        self._head = 0  # index of the next key in _queue (amortised O(1) pops)
        self._dirty: set[str] = set()  # keys that need processing (queued or to be re-queued)
        self._processing: set[str] = set()
        self._added_at: dict[str, float] = {}
        self._delayed: list[tuple[float, int, str]] = []  # heap of (ready_at, seq, key)
        self._delayed_at: dict[str, float] = {}  # key -> earliest ready_at among heap entries
        self._seq = itertools.count()
        self._shutting_down = False

    # -- producers ---------------------------------------------------------------------------

    def add(self, key: str) -> None:
        """Queue ``key`` for processing (merged if already waiting)."""
        with self._cond:
            self._add_locked(key)

    def add_after(self, key: str, delay: float) -> None:
        """Queue ``key`` after ``delay`` seconds; ``delay <= 0`` is :meth:`add`."""
        with self._cond:
            if self._shutting_down:
                return
            if delay <= 0:
                self._add_locked(key)
                return
            ready_at = self._clock.monotonic() + delay
            current = self._delayed_at.get(key)
            if current is not None and current <= ready_at:
                return  # an earlier wake-up is already scheduled
            self._delayed_at[key] = ready_at
            heapq.heappush(self._delayed, (ready_at, next(self._seq), key))
            self._cond.notify()

    def add_rate_limited(self, key: str) -> None:
        """Queue ``key`` again after a failure, delayed by the rate limiter."""
        delay = self._limiter.when(key)
        if self._metrics is not None:
            self._metrics.queue_retries.inc()
        self.add_after(key, delay)

    def forget(self, key: str) -> None:
        """``key`` was processed successfully: reset its failure back-off."""
        self._limiter.forget(key)

    def failures(self, key: str) -> int:
        """Failures of ``key`` since it was last forgotten."""
        return self._limiter.failures(key)

    # -- workers -----------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> str | None:
        """Take the next ready key, waiting up to ``timeout`` seconds (None: until one is ready).

        Returns None on timeout or once the queue is shut down. The caller must call
        :meth:`done` with the key when it finishes, whatever the outcome.
        """
        deadline = None if timeout is None else self._clock.monotonic() + timeout
        with self._cond:
            while True:
                if self._shutting_down:
                    return None
                now = self._clock.monotonic()
                self._promote_due_locked(now)
                if self._head < len(self._queue):
                    return self._take_locked(now)
                if deadline is not None and now >= deadline:
                    return None
                wait = _MAX_WAIT
                if self._delayed:
                    wait = min(wait, max(self._delayed[0][0] - now, 0.0))
                if deadline is not None:
                    wait = min(wait, deadline - now)
                self._cond.wait(wait)

    def done(self, key: str) -> None:
        """Finish processing ``key``; if it was added meanwhile, it is queued again now."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty and not self._shutting_down:
                self._queue.append(key)
                self._added_at.setdefault(key, self._clock.monotonic())
                self._set_depth_locked()
                self._cond.notify()

    # -- lifecycle ---------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop handing out keys and ignore further adds. Keys being processed may still finish."""
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait (real time) until no key is being processed; True if that happened in time."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._processing, timeout)

    @property
    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutting_down

    def __len__(self) -> int:
        """Keys ready to be taken (not delayed, not being processed)."""
        with self._cond:
            return len(self._queue) - self._head

    def delayed(self) -> int:
        """Keys waiting for a delay to pass."""
        with self._cond:
            return len(self._delayed_at)

    def processing(self) -> frozenset[str]:
        """Keys handed out and not yet :meth:`done`."""
        with self._cond:
            return frozenset(self._processing)

    # -- internals (lock held) ---------------------------------------------------------------

    def _add_locked(self, key: str) -> None:
        if self._shutting_down or key in self._dirty:
            return
        if self._metrics is not None:
            self._metrics.queue_adds.inc()
        self._dirty.add(key)
        if key in self._processing:
            return  # re-queued by done()
        self._queue.append(key)
        self._added_at[key] = self._clock.monotonic()
        self._set_depth_locked()
        self._cond.notify()

    def _promote_due_locked(self, now: float) -> None:
        while self._delayed and self._delayed[0][0] <= now:
            ready_at, _, key = heapq.heappop(self._delayed)
            if self._delayed_at.get(key) != ready_at:
                continue  # superseded by an earlier add_after of the same key
            del self._delayed_at[key]
            self._add_locked(key)

    def _take_locked(self, now: float) -> str:
        key = self._queue[self._head]
        self._head += 1
        if self._head > 1024 and self._head * 2 > len(self._queue):
            del self._queue[: self._head]
            self._head = 0
        self._processing.add(key)
        self._dirty.discard(key)
        added = self._added_at.pop(key, None)
        if self._metrics is not None and added is not None:
            self._metrics.queue_wait.observe(max(now - added, 0.0))
        self._set_depth_locked()
        return key

    def _set_depth_locked(self) -> None:
        if self._metrics is not None:
            self._metrics.queue_depth.set(len(self._queue) - self._head)
