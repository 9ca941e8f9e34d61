"""Recording ended pods in the background while the next batch is still to come.

Why: while a batch ends, each pass records the pods that ended since the pass before: one Node
write each (the pod's result, the status label and the batch record a pod carried,
``lifecycle.pod_records``). For a few hundred nodes that held a pass for 0.4-0.75 s in the
1,000-node benchmark, and the pass that sees the batch's last pod end - the one that starts the
next batch - waited behind it. Such a write blocks nothing but the node's own next step, so the
pass hands it over (:meth:`Finishing.submit`) and goes on.

Why it is safe:
- A node whose write is in flight counts as stale (:meth:`Finishing.busy`): passes do not plan
  it, and judge it by the status it is being written with (set when it is handed over), as they
  already judge a node whose cache lags our write. So the batch counts the node done at once.
- A write that fails (a lost race, an API error) takes that status back; the next pass (the one
  that handed it over asks for one, ``node_writes.FINISH_RETRY_SECONDS``) plans the node again
  from the cache, where the pod that carried its start still is.
- A process that dies loses nothing: a node's pod deletes come after its Node write, and a new
  leader plans the node again from its pods.
- The senders yield to foreground work (pod starts), so they never slow down a batch start.
Only work that only records (``node_writes.may_finish``), and only while a batch start is still
to come: once the rollout is done, every record lands before the status says so.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

from lifecycle import actions
from lifecycle.spec import NodeWright
from lifecycle.status import Status
from nodewright_bridge.controller.node_writes import NodeWork, Outcome
from nodewright_bridge.errors import LeadershipLostError
from nodewright_bridge.k8s.foreground import Foreground

logger = logging.getLogger(__name__)

# Background Node writes at once (as many as a pass's own, ``node_writes.NODE_CONCURRENCY``).
FINISH_CONCURRENCY = 16

Apply = Callable[[NodeWright, NodeWork, Outcome, Mapping[str, Future[None]]], None]
Statuses = Callable[[str, str, Status | None], Status | None]


class Finishing:
    """Applies handed-over node work on background threads (see the module docstring)."""

    def __init__(self, apply: Apply, foreground: Foreground, swap_status: Statuses) -> None:
        self._apply = apply
        self._foreground = foreground
        self._swap_status = swap_status
        self._busy: Counter[str] = Counter()
        self._idle = threading.Condition()
        self._pool = ThreadPoolExecutor(
            max_workers=FINISH_CONCURRENCY, thread_name_prefix="node-finish"
        )

    def submit(self, cr: NodeWright, work: NodeWork) -> None:
        """Write ``work`` soon; its node is stale, judged by its new status, until then."""
        node = work.node.name
        status = next(
            (a.status for a in reversed(work.actions) if isinstance(a, actions.SetNodeStatus)),
            None,
        )
        before = self._swap_status(cr.metadata.name, node, status) if status else None
        with self._idle:
            self._busy[node] += 1
        self._pool.submit(self._run, cr, work, status is not None, before)

    def busy(self, node: str) -> bool:
        """True while work handed over for ``node`` is not written yet."""
        with self._idle:
            return node in self._busy

    def wait_idle(self, timeout: float) -> bool:
        """Wait until everything handed over is written; False if ``timeout`` passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._busy, timeout=timeout)

    def _run(self, cr: NodeWright, work: NodeWork, swapped: bool, before: Status | None) -> None:
        node = work.node.name
        share = Outcome()
        failed = True
        try:
            self._foreground.yield_to()
            self._apply(cr, work, share, {})
            failed = share.conflicts > 0
        except LeadershipLostError:
            logger.debug("not leading: background node write dropped", extra={"node": node})
        except Exception:
            logger.exception("background node write failed; replanned", extra={"node": node})
        finally:
            if failed and swapped:
                self._swap_status(cr.metadata.name, node, before)
            with self._idle:
                self._busy[node] -= 1
                if self._busy[node] <= 0:
                    del self._busy[node]
                if not self._busy:
                    self._idle.notify_all()
