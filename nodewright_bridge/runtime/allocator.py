"""The C heap of the controller process: fewer arenas, free pages handed back after each reconcile.

Why: glibc's ``malloc`` gives each thread that contends for the heap an arena of its own (up to
8 per core). The controller runs about 35 threads (informers, 16 Node writers, pod deletes,
workers, Events); every response body, big ``bytes`` and dict table over 512 bytes is a C heap
allocation, and what a thread frees stays in its arena, unusable by the others. Two arenas
cost no measurable CPU here (the GIL serialises most allocations anyway) and keep that memory
shared. An operator's own ``MALLOC_ARENA_MAX`` wins; other C libraries are left alone.

After each reconcile the workers call :func:`release_free` (``malloc_trim``): a pass frees most of
what it allocated, and glibc gives back only the top of a heap by itself; whole free pages inside
it stay resident until something reuses them.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable

M_ARENA_MAX = -8  # glibc's mallopt parameter number (malloc.h)
ARENAS = 2


def limit_arenas(count: int = ARENAS) -> bool:
    """Cap glibc's arenas at ``count`` (call before threads start); True if it took effect."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc: nothing to tune
        return False
    return bool(mallopt(M_ARENA_MAX, count))


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


def release_free() -> bool:
    """Hand the C heap's free pages back to the system; True if any were (glibc only)."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
