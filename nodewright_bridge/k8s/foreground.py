"""Give work on a rollout's critical path the API server first, for a moment.

A batch of hundreds of nodes starts with a burst of Node writes and Pod creates, and the batch
ends only when its last pod does: every request sent meanwhile for something that can wait
(Events, deletes of finished pods) pushes the last start, and so the whole rollout, later. In a
1,000-node rollout those are about a fifth of the requests while the last batch starts.

The same holds while a batch ends: the results written to its Nodes are what the next batch
waits for. Foreground work (a pass's pod starts and Node writes) runs inside
:meth:`Foreground.running`; background senders call :meth:`Foreground.yield_to` before each
request. It returns at once when no foreground work runs, else when it ends or after
``max_wait`` seconds: background work is delayed, never starved.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

# Longest a background request waits for foreground work (a 2,048-node batch takes ~20 s to
# start on a small API server; Events and deletes still trickle out meanwhile).
MAX_WAIT_SECONDS = 5.0


class Foreground:
    """Counts foreground work in flight; background senders wait while there is any."""

    def __init__(self) -> None:
        self._idle = threading.Condition()
        self._running = 0

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Mark the enclosed work as foreground (nests; thread-safe)."""
        with self._idle:
            self._running += 1
        try:
            yield
        finally:
            with self._idle:
                self._running -= 1
                if not self._running:
                    self._idle.notify_all()

    def busy(self) -> bool:
        with self._idle:
            return self._running > 0

    def yield_to(self, max_wait: float = MAX_WAIT_SECONDS) -> float:
        """Wait until no foreground work runs, at most ``max_wait`` s; returns seconds waited."""
        began = time.monotonic()
        with self._idle:
            self._idle.wait_for(lambda: not self._running, timeout=max_wait)
        return time.monotonic() - began
