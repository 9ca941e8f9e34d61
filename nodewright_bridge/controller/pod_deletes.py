"""Deleting our finished pods in the background, so a reconcile pass never waits for them.

Why it is safe: a pod is deleted only after the Node write that recorded its result, and a delete
that never happens (the process died, the API refused) is planned again from the next snapshot,
where the pod still is. Each name is sent once however often it is asked while in flight, and the
senders yield to foreground work (pod starts) so they never slow down a batch start.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading

from nodewright_bridge.errors import LeadershipLostError, NotFoundError
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.foreground import Foreground
from nodewright_bridge.k8s.patching import Writer
from nodewright_bridge.k8s.rest import Rest

logger = logging.getLogger(__name__)

# Background pod deletes at once (each is one DELETE; the kubelet then stops the containers).
DELETE_CONCURRENCY = 8


class PodDeletes:
    """Deletes pods of the controller namespace, now (:meth:`delete`) or soon (:meth:`soon`)."""

    def __init__(self, rest: Rest, writer: Writer, namespace: str, foreground: Foreground) -> None:
        self._rest = rest
        self._writer = writer
        self._namespace = namespace
        self._foreground = foreground
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._in_flight: set[str] = set()
        self._lock = threading.Lock()
        # daemon threads: a stop never waits for them (an unsent delete is planned again)
        for index in range(DELETE_CONCURRENCY):
            threading.Thread(target=self._loop, name=f"pod-deletes-{index}", daemon=True).start()

    def delete(self, name: str) -> None:
        """Delete at once (a pod already gone is fine)."""
        self._writer.ensure_leading()
        with contextlib.suppress(NotFoundError):
            self._rest.delete(resources.PODS, name, namespace=self._namespace, metadata_only=True)

    def soon(self, name: str) -> None:
        """Delete on the background senders (once, however often it is asked while in flight)."""
        self._writer.ensure_leading()
        with self._lock:
            if name in self._in_flight:
                return
            self._in_flight.add(name)
        self._queue.put(name)

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
