"""Test seams that ship with the product (house style: fakes live next to the code they fake).

Only pure, deterministic stand-ins belong here; anything that needs API-server behaviour is tested
against the real sandbox control plane instead.
"""

from __future__ import annotations

import datetime
import threading


class FakeClock:
    """A :class:`nodewright_bridge.runtime.clock.Clock` that only moves when told to.

    Thread-safe, so a test can advance it while a queue or elector reads it.
    """

    def __init__(self, *, start: float = 1000.0) -> None:
        self._lock = threading.Lock()
        self._mono = start
        self._epoch = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def now(self) -> datetime.datetime:
        with self._lock:
            return self._epoch + datetime.timedelta(seconds=self._mono)

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (never backwards)."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        with self._lock:
            self._mono += seconds
