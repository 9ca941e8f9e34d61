"""Test seams that ship with the product (house style: fakes live next to the code they fake).

Only deterministic stand-ins belong here: a clock, and an in-memory API with the few server rules
the controller depends on (``InMemoryApi``); anything that needs real API-server behaviour
(admission, watches, field selectors) is tested against the sandbox control plane instead.
"""

from __future__ import annotations

import copy
import datetime
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from nodewright_bridge import errors
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.resources import Resource
from nodewright_bridge.k8s.rest import PatchType, Rest

JsonObject = dict[str, Any]


class FakeClock:
    """A :class:`nodewright_bridge.clock.Clock` that only moves when told to.

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


class InMemoryApi(Rest):
    """A :class:`nodewright_bridge.k8s.rest.Rest` served from memory, for unit tests of the
    controller and executor.

    It keeps the API server rules the controller relies on, and no more: every write bumps one
    global resourceVersion; a merge patch carrying ``metadata.resourceVersion`` and a JSON patch
    ``test`` op are conditional (409 Conflict when stale); a create of an existing name answers
    409 AlreadyExists, a read or delete of a missing one 404; an eviction deletes the pod, or
    answers 429 with a DisruptionBudget cause when the test put the pod in ``refuse_evictions``.
    Errors are classified by ``errors.from_http`` exactly as real answers are. Anything that
    needs real admission, field selectors or watches belongs in the sandbox tests.
    """

    def __init__(self) -> None:  # no HTTP client: requests never leave this object
        self.objects: dict[str, JsonObject] = {}
        self.requests: list[tuple[str, str]] = []
        self.refuse_evictions: dict[str, str] = {}  # pod path -> refusing budget's name
        self._rv = 0
        self._lock = threading.Lock()

    def close(self) -> None:
        return None

    def put(self, resource: Resource, obj: Mapping[str, Any]) -> JsonObject:
        """Store ``obj`` as the cluster's (a fresh resourceVersion); returns the stored copy."""
        meta = obj.get("metadata") or {}
        path = resource.path(namespace=meta.get("namespace"), name=str(meta.get("name")))
        with self._lock:
            return self._store(path, copy.deepcopy(dict(obj)))

    def stored(self) -> list[tuple[str, JsonObject]]:
        """Every stored object by its path, taken under the lock: the executor's background
        writes (deletes, Events) may still be storing while a test looks."""
        with self._lock:
            return list(self.objects.items())

    def get_object(self, resource: Resource, name: str, namespace: str | None = None) -> JsonObject:
        return copy.deepcopy(self.objects[resource.path(namespace=namespace, name=name)])

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: object = None,
        content_type: str | None = None,
        eviction: bool = False,
        metadata_only: bool = False,
    ) -> JsonObject:
        with self._lock:
            self.requests.append((method, path))
            if path.endswith("/eviction"):
                return self._evict(path.removesuffix("/eviction"))
            target = path.removesuffix("/status") if path.endswith("/status") else path
            if method == "GET":
                return self._get(target, dict(query))
            if method == "POST":
                assert isinstance(body, Mapping)
                name = str((body.get("metadata") or {}).get("name"))
                if f"{path}/{name}" in self.objects:
                    raise _error(409, "AlreadyExists", f"{name} already exists")
                return self._store(f"{path}/{name}", copy.deepcopy(dict(body)))
            current = self.objects.get(target)
            if current is None:
                raise _error(404, "NotFound", f"{target} not found")
            if method == "DELETE":
                return self.objects.pop(target)
            if method == "PUT":
                assert isinstance(body, Mapping)
                self._check_version(current, (body.get("metadata") or {}).get("resourceVersion"))
                return self._store(target, copy.deepcopy(dict(body)))
            if content_type == PatchType.JSON:
                assert isinstance(body, list)
                return self._store(target, _json_patch(current, body))
            assert isinstance(body, Mapping)
            self._check_version(current, (body.get("metadata") or {}).get("resourceVersion"))
            merged = _merge_patch(current, body)
            return self._store(target, merged)

    def _get(self, path: str, query: Mapping[str, str]) -> JsonObject:
        if path.rsplit("/", 1)[-1] not in _PLURALS:  # one object
            if path not in self.objects:
                raise _error(404, "NotFound", f"{path} not found")
            return copy.deepcopy(self.objects[path])
        prefix = path + "/"
        items = [
            copy.deepcopy(obj)
            for key, obj in sorted(self.objects.items())
            if (key.startswith(prefix) and "/" not in key[len(prefix) :])
            or _across_namespaces(path, key)
        ]
        for term in (t for t in query.get("fieldSelector", "").split(",") if t):
            field, sep, value = term.partition("!=") if "!=" in term else term.partition("=")
            items = [i for i in items if (_field(i, field) != value) == (sep == "!=")]
        wanted = query.get("labelSelector", "")
        for term in (t for t in wanted.split(",") if t):
            key, _, value = term.partition("=")
            items = [
                i
                for i in items
                if key in ((i.get("metadata") or {}).get("labels") or {})
                and (not value or i["metadata"]["labels"][key] == value)
            ]
        return {"metadata": {"resourceVersion": str(self._rv)}, "items": items}

    def _evict(self, pod_path: str) -> JsonObject:
        if pod_path not in self.objects:
            raise _error(404, "NotFound", f"{pod_path} not found")
        budget = self.refuse_evictions.get(pod_path)
        if budget is not None:
            message = f"The disruption budget {budget} needs 1 healthy pods and has 1 currently"
            raise _error(429, "TooManyRequests", "Cannot evict pod", cause=message)
        del self.objects[pod_path]
        return {"kind": "Status", "status": "Success"}

    def _check_version(self, current: Mapping[str, Any], wanted: object) -> None:
        have = (current.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != have:
            raise _error(409, "Conflict", "the object has been modified")

    def _store(self, path: str, obj: JsonObject) -> JsonObject:
        self._rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        self.objects[path] = obj
        return copy.deepcopy(obj)


_PLURALS = frozenset(
    r.plural for r in vars(resources).values() if isinstance(r, resources.Resource)
)


def _error(code: int, reason: str, message: str, *, cause: str = "") -> errors.ApiError:
    body: dict[str, Any] = {"kind": "Status", "code": code, "reason": reason, "message": message}
    if cause:
        body["details"] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    return errors.from_http(code, reason, json.dumps(body), None, eviction=code == 429)


def _merge_patch(target: object, patch: object) -> Any:
    """RFC 7386: objects merge key by key, null removes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge_patch(out.get(key), value)
    return out


def _json_patch(target: JsonObject, ops: Sequence[Mapping[str, Any]]) -> JsonObject:
    """RFC 6902 add / replace / remove / test on objects and lists (what the controller sends)."""
    doc = copy.deepcopy(target)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op["path"]).split("/")[1:]]
        parent: Any = doc
        for part in parts[:-1]:
            if isinstance(parent, list):
                parent = parent[int(part)]
            else:
                parent = parent.setdefault(part, {}) if op["op"] == "add" else parent[part]
        last = parts[-1]
        kind = op["op"]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if kind == "test" and (index >= len(parent) or parent[index] != op.get("value")):
                raise _error(409, "Conflict", f"test failed at {op['path']}")
            if kind == "remove":
                del parent[index]
            elif kind == "add":
                parent.insert(index, copy.deepcopy(op["value"]))
            elif kind == "replace":
                parent[index] = copy.deepcopy(op["value"])
        elif kind == "test":
            if parent.get(last) != op.get("value"):
                raise _error(409, "Conflict", f"test failed at {op['path']}")
        elif kind == "remove":
            if last not in parent:
                raise _error(422, "Invalid", f"nothing to remove at {op['path']}")
            del parent[last]
        else:
            parent[last] = copy.deepcopy(op["value"])
    return doc


def _across_namespaces(path: str, key: str) -> bool:
    """``key`` is an object that the cluster-wide list ``path`` (``/api/v1/pods``) holds."""
    base, _, plural = path.rpartition("/")
    parts = key[len(base) :].split("/") if key.startswith(base + "/namespaces/") else []
    return len(parts) == 5 and parts[1] == "namespaces" and parts[3] == plural


def _field(obj: Mapping[str, Any], path: str) -> str:
    """A field selector's field of ``obj`` (``spec.nodeName``), as text ("" when absent)."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)
