"""Raw REST calls on :class:`~nodewright_bridge.k8s.resources.Resource` descriptors.

Why not the generated API classes: they deserialise every response into model objects (slow, and
several times the memory of the JSON), have one method per kind, and raise ``ApiException``. Here
every call returns the decoded JSON ``dict`` and raises :mod:`nodewright_bridge.errors` types;
this module is the edge where the client's exceptions are wrapped. Requests go out on
:mod:`nodewright_bridge.k8s.transport` (``http.client``; less than half the CPU per request);
watches, and every request when the configuration needs a proxy, on the official client's
urllib3 pool (``ApiClient.param_serialize`` / ``call_api``). Configuration and authentication are
the official client's either way.
"""

from __future__ import annotations

import datetime
import enum
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from nodewright_bridge.errors import (
    ApiError,
    from_api_exception,
    from_http,
    from_status_object,
    from_transport_error,
)
from nodewright_bridge.k8s import transport
from nodewright_bridge.k8s.client import (
    CONNECTION_POOL_SIZE,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    TRANSPORT_ERRORS,
)
from nodewright_bridge.k8s.resources import Resource

logger = logging.getLogger(__name__)

# Raw JSON objects as the API server sends them. Kept as plain dicts on purpose (see module doc);
# readers use the helpers in nodewright_bridge.k8s.objects rather than indexing blindly.
JsonObject = dict[str, Any]

# Extra seconds the client waits on a silent watch beyond the server-side timeoutSeconds, so the
# server always ends the watch first (cleanly) and a dead connection is still noticed.
WATCH_READ_MARGIN = 30.0


# Asked for when the caller reads only the answer's metadata (a write's new resourceVersion): the
# API server then encodes, and we decode, metadata instead of a whole Node or Pod (a real GPU
# node's status alone is tens of KB). The plain type after it keeps any server answering.
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json"


class PatchType(enum.StrEnum):
    """Content types of the PATCH flavours the API server accepts."""

    MERGE = "application/merge-patch+json"  # RFC 7386; lists replaced whole; CRs and built-ins
    STRATEGIC = "application/strategic-merge-patch+json"  # built-in kinds only; merges lists
    JSON = "application/json-patch+json"  # RFC 6902 operations, incl. "test" preconditions


class Rest:
    """Generic create/read/update/patch/delete/list/watch on raw JSON objects."""

    def __init__(self, api_client: k8s_client.ApiClient) -> None:
        self.api_client = api_client
        timeout = getattr(
            api_client, "default_timeout", (DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT)
        )
        self._transport = transport.for_configuration(
            api_client.configuration, timeout=timeout, pool_size=CONNECTION_POOL_SIZE
        )
        self._observe = getattr(api_client, "observe", None)

    def close(self) -> None:
        """Close the idle connections and the client's pool."""
        if self._transport is not None:
            self._transport.close()
        self.api_client.close()  # type: ignore[no-untyped-call]  # the client has no hints

    # -- reads -------------------------------------------------------------------------------

    def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> JsonObject:
        return self.request("GET", resource.path(namespace=namespace, name=name))

    def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> JsonObject:
        """One page of a list (``metadata.continue`` names the next page)."""
        query: list[tuple[str, str]] = []
        _maybe(query, "labelSelector", label_selector)
        _maybe(query, "fieldSelector", field_selector)
        _maybe(query, "limit", str(limit) if limit else None)
        _maybe(query, "continue", continue_token)
        _maybe(query, "resourceVersion", resource_version)
        return self.request("GET", resource.path(namespace=namespace), query=query)

    def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        timeout_seconds: int,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        bookmarks: bool = True,
    ) -> WatchStream:
        """Open a watch from ``resource_version``; iterate the returned stream for events."""
        query = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        _maybe(query, "labelSelector", label_selector)
        _maybe(query, "fieldSelector", field_selector)
        response = self._send(
            "GET",
            resource.path(namespace=namespace),
            query=query,
            body=None,
            content_type=None,
            timeout=(DEFAULT_CONNECT_TIMEOUT, timeout_seconds + WATCH_READ_MARGIN),
        )
        if not 200 <= response.status < 300:
            raise self._error(response, eviction=False)
        return WatchStream(response.response)

    # -- writes ------------------------------------------------------------------------------

    def create(
        self,
        resource: Resource,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str = "",
        metadata_only: bool = False,
    ) -> JsonObject:
        """POST ``body`` to the collection (or to ``name``'s subresource, e.g. ``eviction``)."""
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        return self.request(
            "POST",
            path,
            body=body,
            eviction=subresource == "eviction",
            metadata_only=metadata_only,
        )

    def replace(
        self,
        resource: Resource,
        name: str,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str = "",
    ) -> JsonObject:
        """PUT ``body``; its ``metadata.resourceVersion`` makes it conditional (409 if stale)."""
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        return self.request("PUT", path, body=body)

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        patch_type: PatchType,
        namespace: str | None = None,
        subresource: str = "",
        metadata_only: bool = False,
    ) -> JsonObject:
        if patch_type is PatchType.JSON and isinstance(patch, Mapping):
            raise TypeError("a JSON patch is a list of operations")
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        return self.request(
            "PATCH", path, body=patch, content_type=patch_type, metadata_only=metadata_only
        )

    def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        grace_period_seconds: int | None = None,
        propagation: str | None = None,
        metadata_only: bool = False,
    ) -> JsonObject:
        """DELETE, optionally only if the object still has ``uid`` / ``resource_version``."""
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        preconditions = {}
        if uid:
            preconditions["uid"] = uid
        if resource_version:
            preconditions["resourceVersion"] = resource_version
        if preconditions:
            options["preconditions"] = preconditions
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation:
            options["propagationPolicy"] = propagation
        path = resource.path(namespace=namespace, name=name)
        return self.request("DELETE", path, body=options, metadata_only=metadata_only)

    # -- the edge ----------------------------------------------------------------------------

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
        """One request: the decoded JSON answer, or raises an ``ApiError``.

        ``metadata_only``: the answer may be just the object's metadata (``PartialObjectMetadata``).
        """
        accept = METADATA_ONLY if metadata_only else "application/json"
        if self._transport is not None:
            return self._fast(
                method,
                path,
                query,
                body,
                content_type=content_type,
                accept=accept,
                eviction=eviction,
            )
        response = self._send(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            timeout=None,
            accept=accept,
        )
        if not 200 <= response.status < 300:
            raise self._error(response, eviction=eviction)
        try:
            data = response.read()
        except TRANSPORT_ERRORS as exc:
            raise from_transport_error(exc) from exc
        return _decoded(data)

    def _fast(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        body: object,
        *,
        content_type: str | None,
        accept: str,
        eviction: bool,
    ) -> JsonObject:
        assert self._transport is not None
        url = f"{path}?{urlencode(query)}" if query else path
        headers = _headers(accept, body, content_type)
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":"), default=_wire).encode()
        started = time.monotonic()
        code = "error"
        try:
            answer = self._transport.request(method, url, body=data, headers=headers)
            code = str(answer.status)
        except TRANSPORT_ERRORS as exc:
            raise from_transport_error(exc) from exc
        finally:
            if self._observe is not None:
                self._observe(method, url, code, time.monotonic() - started)
        if not 200 <= answer.status < 300:
            raise from_http(
                answer.status, answer.reason, answer.data, answer.headers, eviction=eviction
            )
        return _decoded(answer.data)

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]],
        body: object,
        content_type: str | None,
        timeout: tuple[float, float] | None,
        accept: str = "application/json",
    ) -> Any:
        headers = _headers(accept, body, content_type)
        serialized = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query) or None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        http_method, url, header_params, request_body, post_params = serialized
        try:
            return self.api_client.call_api(
                http_method,
                url,
                header_params=header_params,
                body=request_body,
                post_params=post_params,
                _request_timeout=timeout,
            )
        except ApiException as exc:
            raise from_api_exception(exc) from exc
        except TRANSPORT_ERRORS as exc:
            raise from_transport_error(exc) from exc

    @staticmethod
    def _error(response: Any, *, eviction: bool) -> ApiError:
        try:
            data = response.read()
        except TRANSPORT_ERRORS as exc:
            return from_transport_error(exc)
        return from_http(
            response.status, response.reason or "", data, response.headers, eviction=eviction
        )


class WatchStream:
    """The events of one open watch: ``(type, object)`` pairs until the server ends it.

    ``type`` is ``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK``. An ``ERROR`` event is raised
    as its classified error (410 Gone becomes :class:`~nodewright_bridge.errors.ExpiredError`).
    :meth:`close` may be called from another thread to unblock a reader.
    """

    def __init__(self, response: Any) -> None:
        self._response = response
        self._closed = False

    def __iter__(self) -> Iterator[tuple[str, JsonObject]]:
        buffer = b""
        try:
            for chunk in self._response.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield self._decode(line)
            if buffer.strip():
                yield self._decode(buffer)
        except Exception as exc:
            if self._closed:
                return  # closed from another thread: whatever the read raised is expected
            if isinstance(exc, TRANSPORT_ERRORS):
                raise from_transport_error(exc) from exc
            raise
        finally:
            self.close()

    @staticmethod
    def _decode(line: bytes) -> tuple[str, JsonObject]:
        event = json.loads(line)
        kind = str(event.get("type", ""))
        obj = event.get("object")
        if kind == "ERROR":
            raise from_status_object(obj if isinstance(obj, dict) else {})
        return kind, obj if isinstance(obj, dict) else {}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._response.shutdown()  # unblocks a reader in another thread (urllib3 >= 2.3)
        except (AttributeError, RuntimeError, ValueError):
            # old urllib3; or the stream ended and the connection went back to the pool; or the
            # server already dropped the connection (urllib3 raises ValueError: no socket to shut
            # down). None of these may turn a clean watch end into an informer failure + relist.
            pass
        except TRANSPORT_ERRORS:
            pass
        try:
            # Close the connection itself: a half-read watch must not go back into the pool.
            self._response.close()
            self._response.release_conn()
        except TRANSPORT_ERRORS:
            pass

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _headers(accept: str, body: object, content_type: str | None) -> dict[str, str]:
    headers = {"Accept": accept}
    if body is not None:
        headers["Content-Type"] = content_type or "application/json"
    return headers


def _decoded(data: bytes) -> JsonObject:
    """A JSON answer as a dict (a bare list, which no API answer is, kept under ``items``)."""
    if not data:
        return {}
    decoded = json.loads(data)
    return decoded if isinstance(decoded, dict) else {"items": decoded}


def _wire(value: object) -> str:
    """JSON for the few non-JSON values a body may hold (timestamps), as the client sends them."""
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    raise TypeError(f"cannot send {type(value).__name__} to the API server as JSON")


def _maybe(query: list[tuple[str, str]], key: str, value: str | None) -> None:
    if value:
        query.append((key, value))
