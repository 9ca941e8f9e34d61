"""An informer's in-memory cache: objects by key, plus secondary indexes.

Why indexes: the reconciler asks "which pods run on node X" and "which pods carry label L" for
thousands of nodes per pass. Scanning every pod each time is O(pods x nodes); an index answers in
O(result). Indexers are functions ``object -> index values`` evaluated on every write.

Guarantees / caveats:
- Thread-safe: one writer (the informer thread), any number of readers.
- Objects handed out are the stored ``dict`` itself, not a copy (copies of a 5,000-node cache on
  every read would dominate CPU). **Treat them as read-only.** The informer replaces objects, it
  never mutates one in place, so a reader's reference stays consistent.
- Keys are ``namespace/name`` for namespaced objects and ``name`` for cluster-scoped ones.
- ``index_serial`` tells a reader whether what it derived from one index value still holds
  (a number, not a walk of the objects: a pass over 5,000 settled nodes asks it twice per node).
- ``changed_since`` / ``index_changed_since`` tell a reader which keys (index values) were
  written since a ``serial`` it read, in O(changed): a pass that keeps what it derived per node
  re-derives only those. The journal forgets the oldest deletions once it outgrows the live
  objects (bounded memory under pod churn); a reader older than that gets None and re-reads all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

JsonObject = dict[str, Any]
Indexer = Callable[[JsonObject], Iterable[str]]


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name``, or ``name`` for cluster-scoped objects."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    name = str(meta.get("name", ""))
    return f"{namespace}/{name}" if namespace else name


def by_node_name(obj: JsonObject) -> Iterable[str]:
    """Index pods by ``spec.nodeName`` (unscheduled pods are not indexed)."""
    node = (obj.get("spec") or {}).get("nodeName")
    return (node,) if node else ()


def by_label(label: str) -> Indexer:
    """Index objects by the value of ``label`` (objects without it are not indexed)."""

    def index(obj: JsonObject) -> Iterable[str]:
        value = ((obj.get("metadata") or {}).get("labels") or {}).get(label)
        return (value,) if value is not None else ()

    return index


def by_namespace(obj: JsonObject) -> Iterable[str]:
    namespace = (obj.get("metadata") or {}).get("namespace")
    return (namespace,) if namespace else ()


class Store:
    """Objects by key with named secondary indexes."""

    def __init__(self, indexers: Mapping[str, Indexer] | None = None) -> None:
        self._lock = threading.RLock()
        self._items: dict[str, JsonObject] = {}
        self._indexers: dict[str, Indexer] = dict(indexers or {})
        # index name -> index value -> keys
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}
        # index name -> key -> the values the key was indexed under (for removal)
        self._indexed: dict[str, dict[str, tuple[str, ...]]] = {n: {} for n in self._indexers}
        # index name -> index value -> the write serial that last changed its objects
        self._serial = 0
        self._changed: dict[str, dict[str, int]] = {n: {} for n in self._indexers}
        # what changed when: every key, and every value of each index (``_Journal``)
        self._journal = _Journal()
        self._index_journals: dict[str, _Journal] = {n: _Journal() for n in self._indexers}

    # -- readers -----------------------------------------------------------------------------

    def get(self, key: str) -> JsonObject | None:
        with self._lock:
            return self._items.get(key)

    def values(self) -> list[JsonObject]:
        with self._lock:
            return list(self._items.values())

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._items)

    def by_index(self, index: str, value: str) -> list[JsonObject]:
        """Objects whose indexer ``index`` produced ``value``.

        Raises:
            KeyError: No indexer of that name.
        """
        with self._lock:
            keys = self._indices[index].get(value, ())
            return [self._items[k] for k in keys]

    def index_serial(self, index: str, value: str) -> int:
        """A number that changes whenever an object indexed under ``value`` is added, replaced or
        removed, and is 0 while nothing is indexed there: what a reader derived from
        ``by_index(index, value)`` still holds while it is the same. Read it *before*
        ``by_index``: a write in between then shows as a change, never the reverse.

        Raises:
            KeyError: No indexer of that name.
        """
        with self._lock:
            return self._changed[index].get(value, 0)

    @property
    def serial(self) -> int:
        """The serial of the last write: what ``changed_since`` is later asked with."""
        with self._lock:
            return self._serial

    def changed_since(self, serial: int) -> list[str] | None:
        """Keys put or deleted after ``serial`` (each once, newest first), or None when the
        journal no longer reaches back that far: then anything may have changed."""
        with self._lock:
            return self._journal.since(serial)

    def index_changed_since(self, index: str, serial: int) -> list[str] | None:
        """Values of index ``index`` whose objects were added, replaced or removed after
        ``serial`` (newest first), or None when the journal no longer reaches back that far.

        Raises:
            KeyError: No indexer of that name.
        """
        with self._lock:
            return self._index_journals[index].since(serial)

    def index_values(self, index: str) -> list[str]:
        with self._lock:
            return [v for v, keys in self._indices[index].items() if keys]

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    # -- the writer (the informer) -----------------------------------------------------------

    def put(self, key: str, obj: JsonObject) -> JsonObject | None:
        """Insert or replace; returns the previous object."""
        with self._lock:
            old = self._items.get(key)
            self._items[key] = obj
            self._reindex(key, obj)
            self._journal.note(key, self._serial, live=len(self._items), gone=False)
            return old

    def delete(self, key: str) -> JsonObject | None:
        """Remove; returns the removed object (None if it was not there)."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._reindex(key, None)
                self._journal.note(key, self._serial, live=len(self._items), gone=True)
            return old

    def _reindex(self, key: str, obj: JsonObject | None) -> None:
        self._serial += 1
        for name, indexer in self._indexers.items():
            previous = self._indexed[name].pop(key, ())
            index = self._indices[name]
            changed = self._changed[name]
            journal = self._index_journals[name]
            for value in previous:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]
                changed[value] = self._serial
            values = tuple(indexer(obj)) if obj is not None else ()
            if values:
                self._indexed[name][key] = values
                for value in values:
                    index.setdefault(value, set()).add(key)
                    changed[value] = self._serial
            for value in (*previous, *values):
                gone = value not in index
                if gone:
                    changed.pop(value, None)  # nothing there: 0, and memory stays bounded
                journal.note(value, self._serial, live=len(index), gone=gone)


class _Journal:
    """Names (keys or index values) by the serial of their last change, oldest first.

    Why a dict: re-inserting a name moves it to the end, so the names changed after a serial are
    a walk back from the end that stops at the first older one, O(changed). A name whose object
    is gone stays (a reader must learn of the removal) until the gone ones outnumber the live
    ones by ``SLACK``; then the oldest half are dropped and ``_horizon`` (the newest serial
    dropped) turns away readers older than it."""

    __slots__ = ("_gone", "_horizon", "_serials")

    SLACK = 1024

    def __init__(self) -> None:
        self._serials: dict[str, int] = {}
        self._gone: set[str] = set()
        self._horizon = 0

    def note(self, name: str, serial: int, *, live: int, gone: bool) -> None:
        self._serials.pop(name, None)
        self._serials[name] = serial
        if gone:
            self._gone.add(name)
            if len(self._gone) > live + self.SLACK:
                self._forget_oldest_gone(keep=live // 2)
        else:
            self._gone.discard(name)

    def since(self, serial: int) -> list[str] | None:
        if serial < self._horizon:
            return None
        out = []
        for name in reversed(self._serials):
            if self._serials[name] <= serial:
                break
            out.append(name)
        return out

    def _forget_oldest_gone(self, keep: int) -> None:
        drop = len(self._gone) - keep
        for name in list(self._serials):
            if drop <= 0:
                break
            if name in self._gone:
                self._horizon = max(self._horizon, self._serials.pop(name))
                self._gone.discard(name)
                drop -= 1
