"""HTTP/1.1 to the API server on the standard library, for every request that is not a watch.

Why not urllib3 through the kubernetes client: one Node patch costs the caller ~700 µs of CPU
through ``ApiClient.param_serialize``/``call_api`` and urllib3, ~300 µs on ``http.client``. A
489-node batch start is ~1,000 such requests on a machine whose API server wants every cycle it
can get. Watches stay on the kubernetes client's urllib3 pool: one long
request each, where the per-request cost does not matter.

Configuration (host, TLS, client certificates, bearer token and its refresh hook) is the
kubernetes client's ``Configuration``, so kubeconfig and in-cluster behave exactly as on the
client's own path. A configuration that needs what this transport does not do (an HTTP proxy) gets
no transport (:func:`for_configuration` returns None) and the caller keeps the urllib3 path.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client as k8s_client

from nodewright_bridge.errors import retry_after_seconds

# The API server answers 429 (max-in-flight, flow control, a watch cache still initializing) and
# 503 with Retry-After; an idempotent request waits that long and goes again, at most this often
# (as the client's urllib3 retry did, and client-go does), each wait capped.
RETRIES_AFTER = 3
RETRY_AFTER_CAP_SECONDS = 10.0
_RETRY_AFTER_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE"})
_RETRY_AFTER_STATUS = frozenset({429, 503})
# A pooled connection that failed this way before any answer came back was closed by the server
# while idle; the request is sent once more on a fresh connection (a create that did land then
# answers 409 AlreadyExists, which every caller already handles).
_STALE_ERRORS = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP answer, read in full."""

    status: int
    reason: str
    headers: Mapping[str, str]
    data: bytes


class Transport:
    """A small keep-alive connection pool that sends one request and reads its whole answer.

    Thread-safe: each request takes an idle connection (or opens one) and gives it back after
    reading the answer; at most ``pool_size`` idle connections are kept.
    """

    def __init__(
        self,
        configuration: k8s_client.Configuration,
        *,
        timeout: tuple[float, float],
        pool_size: int,
    ) -> None:
        parts = urlsplit(configuration.host)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"cannot reach API server at {configuration.host!r}")
        self._configuration = configuration
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._context = _ssl_context(configuration) if self._https else None
        self._server_hostname = getattr(configuration, "tls_server_name", None) or None
        self._connect_timeout, self._read_timeout = timeout
        self._pool_size = pool_size
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._user_agent = "nodewright-bridge"

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        """Send ``method path`` (path includes the query) and return the whole answer.

        Raises the transport's own exceptions (``OSError``, ``http.client.HTTPException``) when
        no answer came back; the caller classifies them.
        """
        sent = dict(headers or {})
        sent.setdefault("User-Agent", self._user_agent)
        # Every request, as the client does: the refresh hook renews expiring tokens.
        settings: Mapping[str, Any] = self._configuration.auth_settings()
        for setting in settings.values():
            if setting.get("in") == "header" and setting.get("value"):
                sent[str(setting["key"])] = str(setting["value"])
        url = self._prefix + path
        answer = self._send(method, url, body, sent)
        for _ in range(RETRIES_AFTER if method in _RETRY_AFTER_METHODS else 0):
            wait = _retry_after(answer)
            if wait is None:
                break
            time.sleep(wait)
            answer = self._send(method, url, body, sent)
        return answer

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- internals ---------------------------------------------------------------------------

    def _send(self, method: str, url: str, body: bytes | None, headers: dict[str, str]) -> Answer:
        conn, reused = self._take()
        try:
            try:
                answer = _exchange(conn, method, url, body, headers)
            except _STALE_ERRORS:
                conn.close()
                if not reused:
                    raise
                conn = self._open()
                answer = _exchange(conn, method, url, body, headers)
        except BaseException:
            conn.close()
            raise
        self._give(conn)
        return answer

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._open(), False
            if not closed_by_peer(conn):
                return conn, True
            conn.close()

    def _give(self, conn: http.client.HTTPConnection) -> None:
        if conn.sock is None:  # the server asked to close ("Connection: close")
            conn.close()
            return
        with self._lock:
            if len(self._idle) < self._pool_size:
                self._idle.append(conn)
                return
        conn.close()

    def _open(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self._https:
            conn = _HTTPSConnection(
                self._host,
                self._port,
                timeout=self._connect_timeout,
                context=self._context,
                server_hostname=self._server_hostname,
            )
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self._connect_timeout)
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(self._read_timeout)
        return conn


class _HTTPSConnection(http.client.HTTPSConnection):
    """``HTTPSConnection`` that can verify the certificate against ``tls-server-name``."""

    def __init__(self, *args: Any, server_hostname: str | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._server_hostname = server_hostname

    def connect(self) -> None:
        if self._server_hostname is None:
            super().connect()
            return
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(  # type: ignore[attr-defined]
            self.sock, server_hostname=self._server_hostname
        )


def for_configuration(
    configuration: k8s_client.Configuration,
    *,
    timeout: tuple[float, float],
    pool_size: int,
) -> Transport | None:
    """A transport for ``configuration``, or None when it needs a proxy (urllib3 does those)."""
    if configuration.proxy:
        return None
    return Transport(configuration, timeout=timeout, pool_size=pool_size)


def _exchange(
    conn: http.client.HTTPConnection,
    method: str,
    url: str,
    body: bytes | None,
    headers: dict[str, str],
) -> Answer:
    conn.request(method, url, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    return Answer(response.status, response.reason or "", dict(response.getheaders()), data)


def _retry_after(answer: Answer) -> float | None:
    """Seconds to wait before sending again, when the answer asks for it."""
    if answer.status not in _RETRY_AFTER_STATUS:
        return None
    seconds = retry_after_seconds(answer.headers)
    return min(seconds, RETRY_AFTER_CAP_SECONDS) if seconds is not None else None


def closed_by_peer(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle connection was closed by the other side (readable while idle = EOF)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _ssl_context(configuration: k8s_client.Configuration) -> ssl.SSLContext:
    context = ssl.create_default_context(
        cafile=configuration.ssl_ca_cert or None,
        cadata=getattr(configuration, "ca_cert_data", None) or None,
    )
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif configuration.assert_hostname is False:
        context.check_hostname = False
    return context
