"""A small JSON-over-HTTPS client for the simulated kubelet.

Why not the generated ``kubernetes`` client: at a thousand nodes the kubelet spends its time
(de)serializing models. This client sends and receives plain dicts on the controller's stdlib
transport (:mod:`nodewright_bridge.k8s.transport`: on a 2-core machine every cycle the simulated
kubelets spend is one the API server does not get), watches included, read line by line.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlencode

from nodewright_bridge.k8s import kubeconfig as kubeconfigs
from nodewright_bridge.k8s import transport

# One object as the API returns it; the kubelet reads only a few well-known fields.
Obj = dict[str, Any]

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
# Enough parallel requests for batched node registration without starving the apiserver (2 cores).
POOL_SIZE = 32
REQUEST_TIMEOUT_SECONDS = 30.0


class ApiError(Exception):
    def __init__(self, status: int, body: str, what: str) -> None:
        super().__init__(f"{what}: HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED | BOOKMARK | ERROR
    object: Obj


class RawApi:
    """Plain-JSON access to one apiserver, configured from a kubeconfig file."""

    def __init__(self, kubeconfig: Path) -> None:
        connection = kubeconfigs.from_kubeconfig([str(kubeconfig)])
        self.host = connection.server
        self._transport = transport.Transport(
            connection, timeout=(10.0, REQUEST_TIMEOUT_SECONDS), pool_size=POOL_SIZE
        )
        self._watches: set[transport.Stream] = set()
        self._lock = threading.Lock()

    def close_watches(self) -> None:
        """End every open watch stream (their iterators then return)."""
        with self._lock:
            watches = list(self._watches)
        for stream in watches:
            stream.close()

    def close(self) -> None:
        self.close_watches()
        self._transport.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: object | None = None,
        query: Mapping[str, str | int] | None = None,
        content_type: str = "application/json",
        ok_missing: bool = False,
    ) -> Obj | None:
        """One request; returns the decoded body, or None for a 404 when ``ok_missing``."""
        url = path + ("?" + urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        resp = self._transport.request(method, url, body=data, headers=headers)
        if resp.status == 404 and ok_missing:
            return None
        if resp.status >= 300:
            raise ApiError(resp.status, resp.data.decode(errors="replace"), f"{method} {path}")
        return cast(Obj, json.loads(resp.data)) if resp.data else {}

    def get(self, path: str, **kw: Any) -> Obj | None:
        return self.request("GET", path, **kw)

    def watch(
        self, path: str, query: Mapping[str, str | int], *, timeout_seconds: int = 300
    ) -> Iterator[WatchEvent]:
        """Stream a watch until the server ends it (``timeoutSeconds``) or ``close()``."""
        params = {**query, "watch": "true", "timeoutSeconds": timeout_seconds}
        stream = self._transport.stream(
            "GET",
            path + "?" + urlencode(params),
            headers={"Accept": "application/json"},
            read_timeout=timeout_seconds + 30,
        )
        if stream.status >= 300:
            body = stream.read().decode(errors="replace")
            raise ApiError(stream.status, body, f"WATCH {path}")
        with self._lock:
            self._watches.add(stream)
        try:
            for line in stream.lines():
                event = json.loads(line)
                yield WatchEvent(event["type"], event["object"])
        except (http.client.HTTPException, OSError):
            return
        finally:
            with self._lock:
                self._watches.discard(stream)
            stream.close()
