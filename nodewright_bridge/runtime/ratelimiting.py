"""How long a failed work item waits before it is retried.

Two limits combine, as in client-go's default controller rate limiter, and the longer wait wins:

- per key, exponential back-off (:class:`ExponentialBackoff`): a CR whose reconcile keeps failing
  waits 5 ms, 10 ms, 20 ms, ... up to 1000 s, so one broken object cannot spin the controller;
  success calls ``forget`` and the next failure starts again from the base delay;
- overall, a token bucket (:class:`TokenBucket`): when *many* keys fail at once (API server down,
  RBAC broken after an upgrade) retries are spread to ``qps`` per second after a ``burst``, so we
  do not hammer a struggling API server.

Only retries of failures are limited. Fresh events and ``requeue_after`` are not.
"""

from __future__ import annotations

import threading
from typing import Protocol

from nodewright_bridge.clock import Clock

# client-go's DefaultControllerRateLimiter values: 5 ms doubling to 1000 s per item; 10 qps with a
# burst of 100 overall. Proven defaults for controllers of this size.
DEFAULT_BASE_DELAY = 0.005
DEFAULT_MAX_DELAY = 1000.0
DEFAULT_QPS = 10.0
DEFAULT_BURST = 100


class RateLimiter(Protocol):
    """Decides the delay before a failed key is retried."""

    def when(self, key: str) -> float:
        """Record one more failure of ``key`` and return the seconds to wait before retrying."""
        ...

    def forget(self, key: str) -> None:
        """``key`` succeeded: clear its failure history."""
        ...

    def failures(self, key: str) -> int:
        """How many times ``key`` failed since it was last forgotten."""
        ...


class ExponentialBackoff:
    """Per-key delay ``base * 2**failures``, capped at ``maximum``."""

    def __init__(
        self, *, base: float = DEFAULT_BASE_DELAY, maximum: float = DEFAULT_MAX_DELAY
    ) -> None:
        if base <= 0 or maximum < base:
            raise ValueError("need 0 < base <= maximum")
        self._base = base
        self._max = maximum
        self._failures: dict[str, int] = {}
        self._lock = threading.Lock()

    def when(self, key: str) -> float:
        with self._lock:
            count = self._failures.get(key, 0)
            self._failures[key] = count + 1
        if count >= 64:  # 2**64 * base overflows any sane cap; skip the float arithmetic
            return self._max
        return min(self._base * float(2**count), self._max)

    def forget(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        with self._lock:
            return self._failures.get(key, 0)


class TokenBucket:
    """An overall limit of ``qps`` retries per second after an initial ``burst``.

    Every call takes a token. Tokens may go negative: a caller that finds the bucket empty is told
    how long until *its* token will have been refilled (a reservation), so waits queue up fairly.
    """

    def __init__(
        self, *, clock: Clock, qps: float = DEFAULT_QPS, burst: int = DEFAULT_BURST
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("need qps > 0 and burst >= 1")
        self._clock = clock
        self._qps = qps
        self._burst = float(burst)
        self._tokens = float(burst)
        self._last = clock.monotonic()
        self._lock = threading.Lock()

    def when(self, key: str) -> float:
        with self._lock:
            now = self._clock.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
            self._last = now
            self._tokens -= 1.0
            if self._tokens >= 0:
                return 0.0
            return -self._tokens / self._qps

    def forget(self, key: str) -> None:
        """The bucket has no per-key memory."""

    def failures(self, key: str) -> int:
        return 0


class MaxOf:
    """Combine limiters; the longest delay wins, every limiter records the failure."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("need at least one limiter")
        self._limiters = limiters

    def when(self, key: str) -> float:
        return max(limiter.when(key) for limiter in self._limiters)

    def forget(self, key: str) -> None:
        for limiter in self._limiters:
            limiter.forget(key)

    def failures(self, key: str) -> int:
        return max(limiter.failures(key) for limiter in self._limiters)


def default_rate_limiter(clock: Clock) -> RateLimiter:
    """Per-key exponential back-off combined with the overall token bucket."""
    return MaxOf(ExponentialBackoff(), TokenBucket(clock=clock))
