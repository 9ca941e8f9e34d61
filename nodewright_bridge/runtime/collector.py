"""CPython's cycle collector, tuned for a process whose heap is mostly long-lived caches.

Why: a reconcile pass over a large fleet allocates hundreds of thousands of small dicts, lists
and tuples, and with CPython's default thresholds (700, 10, 10) that runs the cycle collector
hundreds of times per pass, with a full collection every pass or two. A full collection walks
every tracked object: the imported modules (the ``kubernetes`` client alone is about half the
startup heap) and the informer caches. At 5,000 nodes those collections were a fifth to a third
of each pass's CPU, and they find nothing: the caches and the pass's own data are freed by
reference counting, cycles are rare. So:

- what exists at startup (modules, classes, functions: never garbage) is frozen out of the
  collector's view (``gc.freeze``), so a full collection walks only what the controller made;
- the youngest generation is collected after :data:`YOUNG_THRESHOLD` new objects instead of 700,
  so a pass runs a few young collections, not hundreds. Cycles are still collected, only later:
  what they hold is bounded by that many objects.
"""

from __future__ import annotations

import gc

# New container objects between young collections (CPython's default is 700).
YOUNG_THRESHOLD = 50_000
# Young collections between middle-generation ones (default 10).
MIDDLE_THRESHOLD = 20
# Middle collections before a full one is considered (default 10; CPython also waits until the
# objects that survived into the oldest generation since the last full one grew by a quarter).
OLD_THRESHOLD = 10


def tune() -> None:
    """Freeze the startup heap out of the collector's view and raise the thresholds.

    Call once, after imports and before the caches fill.
    """
    gc.collect()  # what startup left as garbage goes now, not into the frozen set
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
