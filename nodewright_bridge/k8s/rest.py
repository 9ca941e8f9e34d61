"""Raw REST calls on :class:`~nodewright_bridge.k8s.resources.Resource` descriptors.

Why not the official client's generated API classes: they deserialise every response into model
objects (slow, and several times the memory of the JSON), have one method per kind, and the
client's import alone is ~14 MB of resident memory. Here every call returns the decoded JSON
``dict`` and raises :mod:`nodewright_bridge.errors` types; requests and watches go out on
:mod:`nodewright_bridge.k8s.transport` (``http.client``), configured by
:mod:`nodewright_bridge.k8s.kubeconfig`. Each request is counted into the process's metrics here.
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

from nodewright_bridge.errors import (
    ConfigurationError,
    UnreachableError,
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
    ClientSettings,
    classify_request,
    load_connection,
)
from nodewright_bridge.k8s.kubeconfig import Connection
from nodewright_bridge.k8s.resources import Resource
from nodewright_bridge.metrics import Metrics

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
    """Generic create/read/update/patch/delete/list/watch on raw JSON objects.

    Args:
        connection: From :func:`~nodewright_bridge.k8s.client.load_connection`.
        metrics: Where to count requests by verb, resource and code; None counts nothing.
        timeout: ``(connect, read)`` seconds of every request but watches and followed logs.
    """

    def __init__(
        self,
        connection: Connection,
        *,
        metrics: Metrics | None = None,
        timeout: tuple[float, float] = (DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT),
    ) -> None:
        self.connection = connection
        self._metrics = metrics
        self._transport = transport.Transport(
            connection, timeout=timeout, pool_size=CONNECTION_POOL_SIZE
        )

    @classmethod
    def connect(cls, settings: ClientSettings, *, metrics: Metrics | None = None) -> Rest:
        """A client for the cluster ``settings`` name (raises ``ConfigurationError``)."""
        return cls(
            load_connection(settings),
            metrics=metrics,
            timeout=(settings.connect_timeout, settings.read_timeout),
        )

    def close(self) -> None:
        """Close the idle connections."""
        self._transport.close()

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
        stream = self.stream(
            resource.path(namespace=namespace),
            query=query,
            read_timeout=timeout_seconds + WATCH_READ_MARGIN,
        )
        return WatchStream(stream)

    def stream(
        self,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        read_timeout: float | None,
        accept: str = "application/json",
    ) -> transport.Stream:
        """A GET whose answer is read as it comes (a watch, a followed log), or an ``ApiError``."""
        url = f"{path}?{urlencode(query)}" if query else path
        started = time.monotonic()
        code = "error"
        try:
            stream = self._transport.stream(
                "GET", url, headers={"Accept": accept}, read_timeout=read_timeout
            )
            code = str(stream.status)
        except TRANSPORT_ERRORS as exc:
            raise from_transport_error(exc) from exc
        except ConfigurationError as exc:
            raise UnreachableError(f"no credentials for the API server: {exc}") from exc
        finally:
            self._observe("GET", url, code, time.monotonic() - started)
        if not 200 <= stream.status < 300:
            try:
                data = stream.read()
            except TRANSPORT_ERRORS as exc:
                raise from_transport_error(exc) from exc
            raise from_http(stream.status, stream.reason, data, stream.headers)
        return stream

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
        answer = self._answer(method, path, query, body, content_type=content_type, accept=accept)
        if not 200 <= answer.status < 300:
            raise from_http(
                answer.status, answer.reason, answer.data, answer.headers, eviction=eviction
            )
        return _decoded(answer.data)

    def read_text(self, path: str, *, query: Sequence[tuple[str, str]] = ()) -> str:
        """A GET whose answer is text (a pod's log), or raises an ``ApiError``."""
        answer = self._answer("GET", path, query, None, content_type=None, accept="*/*")
        if not 200 <= answer.status < 300:
            raise from_http(answer.status, answer.reason, answer.data, answer.headers)
        return answer.data.decode("utf-8", "replace")

    def _observe(self, method: str, url: str, code: str, seconds: float) -> None:
        if self._metrics is not None:
            verb, resource = classify_request(method, url)
            self._metrics.api_requests.labels(verb, resource, code).inc()
            self._metrics.api_latency.labels(verb).observe(seconds)

    def _answer(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        body: object,
        *,
        content_type: str | None,
        accept: str,
    ) -> transport.Answer:
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
        except ConfigurationError as exc:  # a token file gone, an exec plugin failing
            raise UnreachableError(f"no credentials for the API server: {exc}") from exc
        finally:
            self._observe(method, url, code, time.monotonic() - started)
        return answer


class WatchStream:
    """The events of one open watch: ``(type, object)`` pairs until the server ends it.

    ``type`` is ``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK``. An ``ERROR`` event is raised
    as its classified error (410 Gone becomes :class:`~nodewright_bridge.errors.ExpiredError`).
    :meth:`close` may be called from another thread to unblock a reader.
    """

    def __init__(self, stream: transport.Stream) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[tuple[str, JsonObject]]:
        try:
            for line in self._stream.lines():
                yield self._decode(line)
        except TRANSPORT_ERRORS as exc:  # a closed stream just ends (transport.Stream)
            raise from_transport_error(exc) from exc
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
        """Unblocks a reader in another thread; the connection is never reused."""
        self._stream.close()

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
