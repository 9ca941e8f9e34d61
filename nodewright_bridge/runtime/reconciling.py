"""The reconciler contract and the worker loop that drives it from the work queue.

A reconciler is level-triggered (controller-runtime's FAQ, kube-rs' hidden ``ReconcileReason``):
``reconcile(key)`` gets only the key, reads whatever it needs from the caches, makes the world
match, and returns a :class:`Result`. It never learns which event caused the call.

Outcomes, as in controller-runtime's ``reconcileHandler``:
- ``Result()``: done; the key's failure back-off is forgotten.
- ``Result(requeue_after=s)``: done for now, look again in ``s`` seconds (deadlines, polling a
  pod); back-off forgotten.
- a retryable error (any :class:`~nodewright_bridge.errors.TemporaryApiError`, or any exception
  that is not a ``PermanentError``): re-queued with rate-limited back-off.
- :class:`PermanentError`: logged and counted, not retried until the next change of the object.
- :class:`~nodewright_bridge.errors.LeadershipLostError`: this replica stopped leading; the key
  is dropped (the new leader relists).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from nodewright_bridge.errors import LeadershipLostError, NodewrightError, PermanentApiError
from nodewright_bridge.metrics import Metrics
from nodewright_bridge.runtime.queueing import WorkQueue

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Result:
    """What a reconcile asks for next: nothing (None) or another look after ``requeue_after`` s."""

    requeue_after: float | None = None


class PermanentError(NodewrightError):
    """A reconcile failed in a way retrying cannot fix (an invalid spec): do not requeue.

    The reconciler reports it on the object (condition, Event) before raising or instead of it.
    """


class Reconciler(Protocol):
    """The plug-in point of the controller."""

    def reconcile(self, key: str) -> Result:
        """Make the world match the desired state of ``key``; idempotent."""
        ...

    def keys_for(self, informer: str, obj: Mapping[str, Any]) -> Iterable[str]:
        """Which keys to reconcile when ``obj`` in informer ``informer`` changed.

        ``informer`` is one of :mod:`nodewright_bridge.k8s.caches`' names (``nodes``, ``pods``,
        ``package-pods``, ``pdbs``, ``nodewrights``, ``policies``).
        """
        ...


def process_one(
    queue: WorkQueue,
    reconciler: Reconciler,
    *,
    metrics: Metrics | None = None,
    timeout: float | None = None,
) -> bool:
    """Take one key from ``queue``, reconcile it, and settle the outcome.

    Returns:
        False when the queue is shut down (the worker should exit), else True (including when
        ``timeout`` passed without a key).
    """
    key = queue.get(timeout=timeout)
    if key is None:
        return not queue.shutting_down
    reconcile_id = uuid.uuid4().hex[:12]
    extra = {"key": key, "reconcile_id": reconcile_id}
    started = time.monotonic()
    outcome = "success"
    logger.debug("reconciling", extra=extra)
    try:
        result = reconciler.reconcile(key)
        queue.forget(key)
        if result.requeue_after is not None:
            outcome = "requeue"
            queue.add_after(key, result.requeue_after)
    except LeadershipLostError:
        outcome = "error"
        logger.warning("reconcile stopped: not leading", extra=extra)
    except (PermanentError, PermanentApiError) as exc:
        outcome = "error"
        queue.forget(key)
        _count_error(metrics, exc)
        logger.error("reconcile failed permanently", extra={**extra, "error": str(exc)})
    except Exception as exc:  # worker boundary: log, count, retry with back-off
        outcome = "error"
        _count_error(metrics, exc)
        queue.add_rate_limited(key)
        logger.error(
            "reconcile failed, will retry",
            exc_info=not isinstance(exc, NodewrightError),
            extra={**extra, "error": str(exc), "failures": queue.failures(key)},
        )
    finally:
        queue.done(key)
        if metrics is not None:
            metrics.reconcile_duration.observe(time.monotonic() - started)
            metrics.reconciles.labels(outcome).inc()
    return True


def _count_error(metrics: Metrics | None, exc: BaseException) -> None:
    if metrics is not None:
        metrics.reconcile_errors.labels(type(exc).__name__).inc()
