"""Hashes of a spec object, kept by the object's identity.

Why: a batch start plans thousands of nodes from one parsed CR, and each new cycle hashed the
same package's whole spec again (its fingerprint and its config hash were a fifth of the
planning of a 2,000-node batch start). The reconciler keeps a parsed CR per resourceVersion,
so the same ``Package`` objects come back pass after pass; spec models are frozen and nothing
changes their contents in place, which is what makes identity a safe key. The cache holds the
object itself, so an id is never mistaken for a later object's, and it is bounded.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TypeVar

T = TypeVar("T")

# Objects remembered per function at most; a new CR generation brings new ones, so the cache is
# emptied when full rather than aged.
LIMIT = 1024


def by_identity(fn: Callable[[T, str], str]) -> Callable[[T, str], str]:
    """``fn(obj, text)`` computed once per ``obj`` (by identity) and ``text``."""
    cache: dict[tuple[int, str], tuple[T, str]] = {}

    @wraps(fn)
    def kept(obj: T, text: str) -> str:
        key = (id(obj), text)
        hit = cache.get(key)
        if hit is not None and hit[0] is obj:
            return hit[1]
        value = fn(obj, text)
        if len(cache) >= LIMIT:
            cache.clear()
        cache[key] = (obj, value)
        return value

    return kept
