"""Writes with optimistic concurrency: patches that fail if someone else wrote first, and retries
that re-read and re-decide.

Why: the cache is always a little stale, and other writers exist (kubectl, the kubelet on Node
status, a second controller replica in its last milliseconds of leadership). A write based on a
stale read must fail loudly (409) rather than overwrite, and the caller must re-read and decide
again. Three shapes are offered:

- :meth:`Writer.merge_patch` / :meth:`Writer.strategic_patch` with an optional
  ``resource_version``: the API server rejects the patch with 409 if the object moved on.
- :meth:`Writer.json_patch` with ``resource_version``: a ``test`` op on
  ``/metadata/resourceVersion`` is prepended. The API server reports a failed ``test`` as 422;
  we turn that into :class:`~nodewright_bridge.errors.ConflictError` so callers see one kind.
- :meth:`Writer.modify`: read fresh from the API server (not the cache), let a function compute
  the patch from the current object, write it conditionally, and on conflict repeat (bounded).

Every write first asks the ``guard`` (the leader elector): a replica that lost its Lease raises
:class:`~nodewright_bridge.errors.LeadershipLostError` instead of writing.

Finalizers (kube-rs style): add and remove are JSON patches with ``test`` ops, so a concurrent
writer fails the patch instead of our write dropping someone else's finalizer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nodewright_bridge.errors import (
    ConflictError,
    InvalidError,
    LeadershipLostError,
    NotFoundError,
)
from nodewright_bridge.k8s.resources import Resource
from nodewright_bridge.k8s.rest import JsonObject, PatchType, Rest

logger = logging.getLogger(__name__)

# Conflicts resolve in one or two rounds in practice; five bounds a pathological hot object
# (client-go's retry.DefaultRetry also allows five steps).
DEFAULT_CONFLICT_ATTEMPTS = 5

JsonPatch = list[dict[str, Any]]
Guard = Callable[[], bool]


class Writer:
    """Conditional writes through :class:`~nodewright_bridge.k8s.rest.Rest`.

    Args:
        rest: The REST helper.
        guard: Called before every write; False raises ``LeadershipLostError``. None: always
            allowed (CLI tools, tests).
        attempts: How often :meth:`modify` and the finalizer helpers try on conflict.
    """

    def __init__(
        self,
        rest: Rest,
        *,
        guard: Guard | None = None,
        attempts: int = DEFAULT_CONFLICT_ATTEMPTS,
    ) -> None:
        self.rest = rest
        self._guard = guard
        self._attempts = attempts

    def _check(self) -> None:
        if self._guard is not None and not self._guard():
            raise LeadershipLostError("not the leader: refusing to write")

    def ensure_leading(self) -> None:
        """Raise ``LeadershipLostError`` unless writes are allowed (for writes made elsewhere,
        e.g. creates and evictions through ``Rest``)."""
        self._check()

    # -- single conditional writes -----------------------------------------------------------

    def merge_patch(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str = "",
        resource_version: str | None = None,
        metadata_only: bool = False,
    ) -> JsonObject:
        """RFC 7386 merge patch; with ``resource_version`` it is conditional (409 if stale).
        ``metadata_only``: the answer may carry only the object's metadata."""
        return self._object_patch(
            patch_type=PatchType.MERGE,
            resource=resource,
            name=name,
            patch=patch,
            namespace=namespace,
            subresource=subresource,
            resource_version=resource_version,
            metadata_only=metadata_only,
        )

    def strategic_patch(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str = "",
        resource_version: str | None = None,
    ) -> JsonObject:
        """Strategic merge patch (built-in kinds only: merges lists such as taints by key)."""
        return self._object_patch(
            patch_type=PatchType.STRATEGIC,
            resource=resource,
            name=name,
            patch=patch,
            namespace=namespace,
            subresource=subresource,
            resource_version=resource_version,
        )

    def patch_status(
        self,
        resource: Resource,
        name: str,
        status: Mapping[str, Any],
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
    ) -> JsonObject:
        """Merge-patch the ``status`` subresource with ``{"status": status}``."""
        return self.merge_patch(
            resource,
            name,
            {"status": dict(status)},
            namespace=namespace,
            subresource="status",
            resource_version=resource_version,
        )

    def json_patch(
        self,
        resource: Resource,
        name: str,
        ops: Sequence[Mapping[str, Any]],
        *,
        namespace: str | None = None,
        subresource: str = "",
        resource_version: str | None = None,
    ) -> JsonObject:
        """RFC 6902 patch; with ``resource_version`` a ``test`` op makes it conditional."""
        self._check()
        body = [dict(op) for op in ops]
        if resource_version is not None:
            body.insert(
                0, {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}
            )
        try:
            return self.rest.patch(
                resource,
                name,
                body,
                patch_type=PatchType.JSON,
                namespace=namespace,
                subresource=subresource,
            )
        except InvalidError as exc:
            if not any(op.get("op") == "test" for op in body):
                raise
            # A failed "test" op comes back as a bare 422; tell a precondition failure (someone
            # wrote first) apart from a genuinely invalid patch by looking at the object.
            current = self.rest.get(resource, name, namespace=namespace)
            if resource_version is not None and _rv(current) != resource_version:
                raise ConflictError(
                    f"{resource.plural} {name!r} changed (resourceVersion {resource_version} -> "
                    f"{_rv(current)})",
                    status=409,
                    reason="Conflict",
                ) from exc
            raise

    def _object_patch(
        self,
        *,
        patch_type: PatchType,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None,
        subresource: str,
        resource_version: str | None,
        metadata_only: bool = False,
    ) -> JsonObject:
        self._check()
        body = dict(patch)
        if resource_version is not None:
            meta = dict(body.get("metadata") or {})
            meta["resourceVersion"] = resource_version
            body["metadata"] = meta
        return self.rest.patch(
            resource,
            name,
            body,
            patch_type=patch_type,
            namespace=namespace,
            subresource=subresource,
            metadata_only=metadata_only,
        )

    # -- read-decide-write loops -------------------------------------------------------------

    def modify(
        self,
        resource: Resource,
        name: str,
        decide: Callable[[JsonObject], Sequence[Mapping[str, Any]] | None],
        *,
        namespace: str | None = None,
        subresource: str = "",
    ) -> JsonObject | None:
        """Read ``name`` fresh, let ``decide`` return JSON patch ops (None/empty: nothing to do),
        apply them conditionally on the read's resourceVersion; on conflict read and decide again.

        Returns:
            The object after the write, the current object if nothing was to be done, or None if
            the object does not exist.

        Raises:
            ConflictError: Still conflicting after ``attempts`` rounds.
        """
        last: ConflictError | None = None
        for attempt in range(self._attempts):
            try:
                current = self.rest.get(resource, name, namespace=namespace)
            except NotFoundError:
                return None
            ops = decide(current)
            if not ops:
                return current
            try:
                return self.json_patch(
                    resource,
                    name,
                    ops,
                    namespace=namespace,
                    subresource=subresource,
                    resource_version=_rv(current),
                )
            except ConflictError as exc:
                last = exc
                logger.debug(
                    "write conflicted, re-reading",
                    extra={"resource": resource.plural, "object": name, "attempt": attempt + 1},
                )
            except NotFoundError:
                return None
        assert last is not None
        raise last

    def add_finalizer(
        self, resource: Resource, name: str, finalizer: str, *, namespace: str | None = None
    ) -> bool:
        """Ensure ``finalizer`` is set. Returns True if this call added it."""
        added = False

        def decide(obj: JsonObject) -> JsonPatch | None:
            nonlocal added
            finalizers = (obj.get("metadata") or {}).get("finalizers")
            if finalizers and finalizer in finalizers:
                added = False
                return None
            added = True
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                raise ConflictError(
                    f"{resource.plural} {name!r} is being deleted; not adding {finalizer}",
                    status=409,
                    reason="Conflict",
                )
            if not finalizers:
                return [{"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}]
            return [{"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}]

        self.modify(resource, name, decide, namespace=namespace)
        return added

    def remove_finalizer(
        self, resource: Resource, name: str, finalizer: str, *, namespace: str | None = None
    ) -> bool:
        """Ensure ``finalizer`` is absent (a missing object counts). True if removed here."""
        removed = False

        def decide(obj: JsonObject) -> JsonPatch | None:
            nonlocal removed
            finalizers = (obj.get("metadata") or {}).get("finalizers") or []
            if finalizer not in finalizers:
                removed = False
                return None
            removed = True
            index = finalizers.index(finalizer)
            path = f"/metadata/finalizers/{index}"
            return [
                {"op": "test", "path": path, "value": finalizer},
                {"op": "remove", "path": path},
            ]

        self.modify(resource, name, decide, namespace=namespace)
        return removed


def has_finalizer(obj: Mapping[str, Any], finalizer: str) -> bool:
    return finalizer in ((obj.get("metadata") or {}).get("finalizers") or ())


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
