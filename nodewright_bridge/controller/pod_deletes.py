"""Deleting our finished pods in the background, so a reconcile pass never waits for them.

Why it is safe: a pod is deleted only after the Node write that recorded its result, and a delete
that never happens (the process died, the API refused) is planned again from the next snapshot,
where the pod still is. Each name is sent once however often it is asked while in flight, and the
senders yield to foreground work (pod starts, Node results) so they never slow down a batch
start, nor the results the next batch waits for.

Why a sent delete is remembered: a finished pod is gone the moment its delete returns, but the
pod cache shows that only when the watch event arrives, and every pass before it (the other pods
of a batch ending are passes too) plans the same delete again. Sending it would only earn a 404:
about 300 of them in a 1,000-node rollout. So a name whose delete was answered is not sent again
for :data:`SENT_MEMORY_SECONDS` (a watch shows the delete long before), unless a pod of that name
is created again (:meth:`PodDeletes.forget`). A restarted controller remembers nothing and sends
the deletes its first pass plans: the pods are still there, or answer 404 once.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections import OrderedDict

from nodewright_bridge.clock import Clock
from nodewright_bridge.errors import LeadershipLostError, NotFoundError
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.foreground import Foreground
from nodewright_bridge.k8s.patching import Writer
from nodewright_bridge.k8s.rest import Rest

logger = logging.getLogger(__name__)

# Background pod deletes at once (each is one DELETE; the kubelet then stops the containers).
DELETE_CONCURRENCY = 8
# A delete that was answered is not sent again for this long (the pod cache shows it by then).
SENT_MEMORY_SECONDS = 30.0
# Answered deletes remembered at most (oldest forgotten first): a 5,000-node batch fits.
SENT_MEMORY_SIZE = 16384


class PodDeletes:
    """Deletes pods of the controller namespace, now (:meth:`delete`) or soon (:meth:`soon`)."""

    def __init__(
        self,
        rest: Rest,
        writer: Writer,
        namespace: str,
        foreground: Foreground,
        clock: Clock,
    ) -> None:
        self._rest = rest
        self._writer = writer
        self._namespace = namespace
        self._foreground = foreground
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._in_flight: set[str] = set()
        self._clock = clock
        self._sent: OrderedDict[str, float] = OrderedDict()  # name -> when its delete answered
        self._lock = threading.Condition()
        # daemon threads: a stop never waits for them (an unsent delete is planned again)
        for index in range(DELETE_CONCURRENCY):
            threading.Thread(target=self._loop, name=f"pod-deletes-{index}", daemon=True).start()

    def delete(self, name: str) -> None:
        """Delete at once (a pod already gone is fine)."""
        self._writer.ensure_leading()
        with contextlib.suppress(NotFoundError):
            self._rest.delete(resources.PODS, name, namespace=self._namespace, metadata_only=True)
        with self._lock:
            self._sent[name] = self._clock.monotonic()
            self._sent.move_to_end(name)
            while len(self._sent) > SENT_MEMORY_SIZE:
                self._sent.popitem(last=False)

    def soon(self, name: str) -> None:
        """Delete on the background senders: once however often it is asked while in flight,
        and not again while its answered delete is remembered (see the module docstring)."""
        self._writer.ensure_leading()
        with self._lock:
            if name in self._in_flight or self._answered(name):
                return
            self._in_flight.add(name)
        self._queue.put(name)

    def forget(self, name: str) -> None:
        """A pod named ``name`` was created: a later delete of it must be sent."""
        with self._lock:
            self._sent.pop(name, None)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no delete is queued or in flight; False if ``timeout`` passed first."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._in_flight, timeout)

    def _answered(self, name: str) -> bool:
        """True while ``name``'s answered delete is remembered (caller holds the lock)."""
        answered = self._sent.get(name)
        if answered is None:
            return False
        if self._clock.monotonic() - answered < SENT_MEMORY_SECONDS:
            return True
        del self._sent[name]
        return False

    def _loop(self) -> None:
        while True:
            name = self._queue.get()
            self._foreground.yield_to()
            try:
                self.delete(name)
            except LeadershipLostError:
                pass  # the new leader plans this delete again
            except Exception:  # the next snapshot still shows the pod and plans it again
                logger.warning("pod delete failed; retried on a later pass", extra={"pod": name})
            finally:
                with self._lock:
                    self._in_flight.discard(name)
                    self._lock.notify_all()
