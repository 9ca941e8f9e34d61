"""A small JSON-over-HTTPS client for the simulated kubelet.

Why not the generated ``kubernetes`` client: at a thousand nodes the kubelet spends its time
(de)serializing models. This client sends and receives plain dicts on the controller's stdlib
transport (:mod:`nodewright_bridge.k8s.transport`: on a 2-core machine every cycle the simulated
kubelets spend is one the API server does not get), and streams watches line by line on urllib3.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlencode, urlsplit

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

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
        configuration = k8s_client.Configuration()
        # The kubernetes package ships no type hints.
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=configuration
        )
        parts = urlsplit(configuration.host)
        self.host = configuration.host
        self._pool = urllib3.HTTPSConnectionPool(
            parts.hostname or "127.0.0.1",
            parts.port or 443,
            maxsize=POOL_SIZE,
            block=True,
            cert_reqs="CERT_REQUIRED",
            ca_certs=configuration.ssl_ca_cert,
            cert_file=configuration.cert_file,
            key_file=configuration.key_file,
            retries=False,
        )
        # A token kubeconfig: the client keeps "Bearer <token>" under api_key["BearerToken"].
        bearer = (configuration.api_key or {}).get("BearerToken")
        self._auth = {"Authorization": bearer} if bearer else {}
        self._transport = transport.Transport(
            configuration, timeout=(10.0, REQUEST_TIMEOUT_SECONDS), pool_size=POOL_SIZE
        )
        self._watches: set[urllib3.BaseHTTPResponse] = set()
        self._lock = threading.Lock()

    def close_watches(self) -> None:
        """End every open watch stream (their iterators then return)."""
        with self._lock:
            watches = list(self._watches)
        for resp in watches:
            _shutdown(resp)

    def close(self) -> None:
        self.close_watches()
        self._pool.close()
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
        resp = self._pool.request(
            "GET",
            path + "?" + urlencode(params),
            headers={"Accept": "application/json", **self._auth},
            preload_content=False,
            timeout=urllib3.Timeout(connect=10, read=timeout_seconds + 30),
        )
        if resp.status >= 300:
            body = resp.read().decode(errors="replace")
            resp.release_conn()
            raise ApiError(resp.status, body, f"WATCH {path}")
        with self._lock:
            self._watches.add(resp)
        buffer = b""
        try:
            for chunk in resp.stream(65536):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        event = json.loads(line)
                        yield WatchEvent(event["type"], event["object"])
        except (urllib3.exceptions.ProtocolError, urllib3.exceptions.ReadTimeoutError, OSError):
            return
        finally:
            with self._lock:
                self._watches.discard(resp)
            _shutdown(resp)


def _shutdown(resp: urllib3.BaseHTTPResponse) -> None:
    try:
        shutdown = getattr(resp, "shutdown", None)
        if shutdown is not None:
            shutdown()
        resp.close()
    except Exception:  # closing a half-dead stream; nothing to recover
        pass
