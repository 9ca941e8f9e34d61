"""HTTP/1.1 to the API server on the standard library: every request, and every watch.

Why not urllib3 through the kubernetes client: one Node patch costs the caller ~700 µs of CPU
through ``ApiClient.param_serialize``/``call_api`` and urllib3, ~300 µs on ``http.client``. A
489-node batch start is ~1,000 such requests on a machine whose API server wants every cycle it
can get; and the client's import alone is ~14 MB of resident memory.

The :class:`~nodewright_bridge.k8s.kubeconfig.Connection` says where and how (TLS context,
``tls-server-name``, credentials asked for on every request so expiring tokens renew, and an HTTP
proxy reached by ``CONNECT``).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from nodewright_bridge.errors import ConfigurationError, retry_after_seconds
from nodewright_bridge.k8s.kubeconfig import Connection

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
        connection: Connection,
        *,
        timeout: tuple[float, float],
        pool_size: int,
    ) -> None:
        parts = urlsplit(connection.server)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"cannot reach API server at {connection.server!r}")
        self._credentials = connection.credentials
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._context = (connection.tls or ssl.create_default_context()) if self._https else None
        self._server_hostname = connection.tls_server_name
        self._proxy = _proxy(connection.proxy)
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
        self._authorize(sent)
        url = self._prefix + path
        answer = self._send(method, url, body, sent)
        for _ in range(RETRIES_AFTER if method in _RETRY_AFTER_METHODS else 0):
            wait = _retry_after(answer)
            if wait is None:
                break
            time.sleep(wait)
            answer = self._send(method, url, body, sent)
        return answer

    def stream(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        read_timeout: float | None,
    ) -> Stream:
        """Send ``method path`` on a connection of its own and return the answer unread.

        For watches and followed logs: the answer is read as it comes, for as long as it lasts,
        and the connection is closed after it (never pooled half-read).
        """
        sent = dict(headers or {})
        sent.setdefault("User-Agent", self._user_agent)
        self._authorize(sent)
        conn = self._open()
        try:
            if conn.sock is not None:
                conn.sock.settimeout(read_timeout)
            conn.request(method, self._prefix + path, headers=sent)
            response = conn.getresponse()
        except BaseException:
            conn.close()
            raise
        return Stream(conn, response)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- internals ---------------------------------------------------------------------------

    def _authorize(self, headers: dict[str, str]) -> None:
        # Asked on every request: a token file or exec plugin renews an expiring token.
        value = self._credentials.authorization()
        if value:
            headers["Authorization"] = value

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
        host, port = (
            (self._proxy.host, self._proxy.port) if self._proxy else (self._host, self._port)
        )
        if self._https:
            conn = _HTTPSConnection(
                host,
                port,
                timeout=self._connect_timeout,
                context=self._context,
                server_hostname=self._server_hostname or self._host,
            )
        else:
            conn = http.client.HTTPConnection(host, port, timeout=self._connect_timeout)
        if self._proxy:
            conn.set_tunnel(self._host, self._port, headers=self._proxy.headers)
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(self._read_timeout)
        return conn


class _HTTPSConnection(http.client.HTTPSConnection):
    """``HTTPSConnection`` that verifies the certificate against a name of our choosing: the
    ``tls-server-name``, or the API server's host also when connected through a proxy tunnel."""

    def __init__(self, *args: Any, server_hostname: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._server_hostname = server_hostname

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # TCP, and the proxy's CONNECT when tunnelled
        self.sock = self._context.wrap_socket(  # type: ignore[attr-defined]
            self.sock, server_hostname=self._server_hostname
        )


class Stream:
    """One answer read as it arrives (a watch, a followed log); :meth:`close` from any thread."""

    def __init__(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse):
        self._conn = conn
        self._response = response
        self._closed = False
        self.status = response.status
        self.reason = response.reason or ""
        self.headers: Mapping[str, str] = dict(response.getheaders())

    def read(self) -> bytes:
        """The rest of the answer (an error's ``Status`` body)."""
        try:
            return self._response.read()
        finally:
            self.close()

    def chunks(self, size: int = 65536) -> Iterator[bytes]:
        """The answer's bytes as they come, until the server ends it or :meth:`close`."""
        while True:
            try:
                data = self._response.read1(size)
            except Exception:
                # close() from another thread may leave the response half torn down under the
                # read (ValueError, AttributeError on its file): that is the end asked for.
                if self._closed:
                    return
                raise
            if not data:
                return
            yield data

    def lines(self) -> Iterator[bytes]:
        """The answer's non-blank lines as they complete (a watch sends one event a line)."""
        pending: list[bytes] = []  # a large object arrives in several chunks
        for chunk in self.chunks():
            pending.append(chunk)
            if b"\n" not in chunk:
                continue
            *complete, rest = b"".join(pending).split(b"\n")
            pending = [rest] if rest else []
            for line in complete:
                if line.strip():
                    yield line
        last = b"".join(pending)
        if last.strip() and not self._closed:  # closed: the cut-off rest of a line, not a line
            yield last

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Unblock a reader in another thread, then close the connection."""
        if self._closed:
            return
        self._closed = True
        sock = self._conn.sock
        if sock is not None:
            # socket.socket's own shutdown: on a TLS socket this leaves the TLS object alone, so
            # the reader in another thread just sees the end of the stream. OSError: the server
            # already closed it.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
        self._conn.close()


@dataclass(frozen=True, slots=True)
class _Proxy:
    host: str
    port: int
    headers: Mapping[str, str]


def _proxy(url: str | None) -> _Proxy | None:
    """An HTTP proxy URL as host, port and its ``Proxy-Authorization`` (user:password@)."""
    if not url:
        return None
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme != "http" or not parts.hostname:
        raise ConfigurationError(
            f"proxy-url {url!r}: only http:// proxies are supported (HTTPS goes through CONNECT)"
        )
    headers = {}
    if parts.username:
        login = f"{parts.username}:{parts.password or ''}".encode()
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(login).decode()
    return _Proxy(parts.hostname, parts.port or 80, headers)


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
