"""The one place the controller runtime reads time.

Why a seam: the work queue's back-off, the token bucket and the leader elector are all about time;
their unit tests drive a fake clock (``nodewright_bridge.testing.FakeClock``) instead of sleeping.
``monotonic`` is for durations and deadlines (immune to wall-clock jumps); ``now`` is for
timestamps written to the API (Lease ``renewTime``, Event ``eventTime``).
"""

from __future__ import annotations

import datetime
import time
from typing import Protocol


class Clock(Protocol):
    """Source of time for the runtime."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards; only differences are meaningful."""
        ...

    def now(self) -> datetime.datetime:
        """The current wall-clock time, timezone-aware UTC."""
        ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.UTC)


def micro_time(moment: datetime.datetime) -> str:
    """Format ``moment`` as a Kubernetes ``MicroTime`` (RFC 3339, microseconds, ``Z``)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
