"""The stdlib HTTP transport against a real local HTTP/1.1 server (plain TCP, keep-alive).

The server is scripted per connection, so the awkward cases are exact: a pooled connection the
server closed while idle, one it closes on the next request without answering, Retry-After
answers, error bodies. TLS and authentication are covered against the sandbox API server.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from waiting import wait_for

from nodewright_bridge import errors
from nodewright_bridge.k8s import resources, transport
from nodewright_bridge.k8s.kubeconfig import Connection, StaticToken
from nodewright_bridge.k8s.rest import PatchType, Rest
from nodewright_bridge.metrics import Metrics

# (connection number, request number on it, request line, body) -> raw response or None (close).
Script = Callable[[int, int, str, bytes], bytes | None]


def respond(status: int, body: object, *, headers: dict[str, str] | None = None) -> bytes:
    data = json.dumps(body).encode()
    reason = {200: "OK", 201: "Created", 409: "Conflict", 429: "Too Many Requests"}[status]
    head = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    head.append(f"Content-Length: {len(data)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + data


def chunked(status: int, body: object) -> bytes:
    data = json.dumps(body).encode()
    half = len(data) // 2
    chunks = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (data[:half], data[half:]))
    head = f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\n"
    return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunks + b"0\r\n\r\n"


@dataclass
class Server:
    script: Script
    sock: socket.socket = field(default_factory=socket.socket)
    connections: int = 0
    requests: list[tuple[int, str, dict[str, str], bytes]] = field(default_factory=list)
    close_after: set[tuple[int, int]] = field(default_factory=set)
    closed: threading.Event = field(default_factory=threading.Event)

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            number = self.connections
            threading.Thread(target=self._connection, args=(conn, number), daemon=True).start()

    def _connection(self, conn: socket.socket, number: int) -> None:
        reader = conn.makefile("rb")
        with conn, reader:
            for index in range(1_000):  # far more than any test sends on one connection
                line = reader.readline().decode().strip()
                if not line:
                    return
                headers = {}
                while (header := reader.readline().decode().strip()) != "":
                    key, _, value = header.partition(":")
                    headers[key.strip().lower()] = value.strip()
                body = reader.read(int(headers.get("content-length", "0")))
                self.requests.append((number, line, headers, body))
                answer = self.script(number, index, line, body)
                if answer is None:
                    return  # close without answering
                conn.sendall(answer)
                if (number, index) in self.close_after:
                    break
        self.closed.set()


@pytest.fixture
def serve() -> Iterator[Callable[[Script], Server]]:
    servers: list[Server] = []

    def start(script: Script) -> Server:
        server = Server(script)
        server.sock.bind(("127.0.0.1", 0))
        server.sock.listen()
        threading.Thread(target=server.serve, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.sock.close()


def rest_for(server: Server, metrics: Metrics | None = None) -> Rest:
    connection = Connection(server=server.host, tls=None, credentials=StaticToken("sekret"))
    return Rest(connection, metrics=metrics, timeout=(2.0, 5.0))


def test_requests_reuse_one_connection_and_send_auth_and_json(serve) -> None:
    server = serve(
        lambda n, i, line, body: respond(200, {"n": i, "echo": json.loads(body or b"{}")})
    )
    rest = rest_for(server)
    for i in range(3):
        answer = rest.patch(
            resources.NODES,
            "node-1",
            {"metadata": {"labels": {"a": str(i)}}},
            patch_type=PatchType.MERGE,
        )
        assert answer == {"n": i, "echo": {"metadata": {"labels": {"a": str(i)}}}}
    assert server.connections == 1
    _, line, headers, _ = server.requests[0]
    assert line == "PATCH /api/v1/nodes/node-1 HTTP/1.1"
    assert headers["authorization"] == "Bearer sekret"
    assert headers["content-type"] == "application/merge-patch+json"


def test_chunked_answers_are_read_whole(serve) -> None:
    items = [{"metadata": {"name": f"node-{i}"}} for i in range(50)]
    server = serve(lambda n, i, line, body: chunked(200, {"items": items}))
    assert rest_for(server).list(resources.NODES)["items"] == items


def test_a_connection_the_server_closed_while_idle_is_not_reused(serve) -> None:
    server = serve(lambda n, i, line, body: respond(200, {"connection": n}))
    server.close_after = {(1, 0)}  # connection 1 hangs up right after its first answer
    rest = rest_for(server)
    assert rest.get(resources.NODES, "a") == {"connection": 1}
    assert server.closed.wait(5)
    assert rest.get(resources.NODES, "a") == {"connection": 2}
    assert [number for number, *_ in server.requests] == [1, 2]


def test_an_idle_connection_the_server_closed_is_told_from_one_it_keeps_open(serve) -> None:
    """What the pool checks before it reuses an idle connection (a closed one is not used)."""
    server = serve(lambda n, i, line, body: respond(200, {"connection": n}))
    server.close_after = {(1, 0)}  # the first connection is closed after its answer
    port = server.sock.getsockname()[1]
    closed, kept = (http.client.HTTPConnection("127.0.0.1", port, timeout=5) for _ in range(2))
    try:
        for conn in (closed, kept):
            conn.request("GET", "/api/v1/nodes/a")
            conn.getresponse().read()
        assert server.closed.wait(5)
        wait_for(lambda: transport.closed_by_peer(closed), timeout=5, what="the server's close")
        assert not transport.closed_by_peer(kept)
    finally:
        closed.close()
        kept.close()
    assert transport.closed_by_peer(closed)  # closed here too: no socket left


def test_a_pooled_connection_closed_on_the_next_request_is_retried_on_a_new_one(serve) -> None:
    def script(n: int, i: int, line: str, body: bytes) -> bytes | None:
        if n == 1 and i == 1:
            return None  # the server hangs up instead of answering the second request
        return respond(200, {"connection": n, "request": i})

    server = serve(script)
    rest = rest_for(server)
    assert rest.get(resources.NODES, "a") == {"connection": 1, "request": 0}
    assert rest.get(resources.NODES, "a") == {"connection": 2, "request": 0}


def test_a_fresh_connection_that_fails_is_an_unreachable_error(serve) -> None:
    server = serve(lambda n, i, line, body: None)
    with pytest.raises(errors.UnreachableError, match="API server unreachable"):
        rest_for(server).get(resources.NODES, "a")
    assert server.connections == 1  # not retried: nothing says the server is merely stale


def test_an_unreachable_api_server_is_a_clear_error() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there
    rest = Rest(Connection(server=f"http://127.0.0.1:{port}", tls=None), timeout=(1.0, 1.0))
    with pytest.raises(errors.UnreachableError, match="ConnectionRefused"):
        rest.get(resources.NODES, "a")


def test_error_answers_are_classified_with_their_status_body(serve) -> None:
    status = {"kind": "Status", "reason": "Conflict", "message": "the object has been modified"}
    server = serve(lambda n, i, line, body: respond(409, status))
    with pytest.raises(errors.ConflictError, match="has been modified"):
        rest_for(server).get(resources.NODES, "a")


def test_retry_after_is_honoured_for_reads_but_not_for_creates(serve) -> None:
    def script(n: int, i: int, line: str, body: bytes) -> bytes | None:
        if line.startswith("GET") and sum(1 for r in server.requests if "GET" in r[1]) == 1:
            return respond(429, {"reason": "TooManyRequests"}, headers={"Retry-After": "0"})
        if line.startswith("POST"):
            return respond(429, {"reason": "TooManyRequests"}, headers={"Retry-After": "0"})
        return respond(200, {"ok": True})

    server = serve(script)
    rest = rest_for(server)
    assert rest.get(resources.NODES, "a") == {"ok": True}
    with pytest.raises(errors.TooManyRequestsError):
        rest.create(resources.NODES, {"metadata": {"name": "a"}})
    posts = [r for r in server.requests if r[1].startswith("POST")]
    assert len(posts) == 1


def test_requests_are_counted_by_verb_resource_and_code(serve) -> None:
    server = serve(lambda n, i, line, body: respond(201, {"metadata": {"name": "p"}}))
    metrics = Metrics()
    rest_for(server, metrics).create(resources.PODS, {"metadata": {"name": "p"}}, namespace="ns")
    value = metrics.registry.get_sample_value(
        "nwb_api_requests_total", {"verb": "create", "resource": "pods", "code": "201"}
    )
    assert value == 1.0


def connect_proxy(seen: list[str]) -> int:
    """A real HTTP CONNECT proxy on a free port: tunnels each connection to where it is asked."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def pipe(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)

    def tunnel(client: socket.socket) -> None:
        reader = client.makefile("rb")
        head = []
        while (line := reader.readline().decode().strip()) != "":
            head.append(line)
        seen.append("\n".join(head))
        host, port = head[0].split()[1].rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
        pipe(client, upstream)

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=tunnel, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return int(listener.getsockname()[1])


def test_a_proxy_url_tunnels_requests_with_connect_and_its_credentials(serve) -> None:
    server = serve(lambda n, i, line, body: respond(200, {"via": "tunnel"}))
    seen: list[str] = []
    port = connect_proxy(seen)
    connection = Connection(server=server.host, tls=None, proxy=f"http://user:pw@127.0.0.1:{port}")
    rest = Rest(connection, timeout=(2.0, 5.0))
    assert rest.get(resources.NODES, "a") == {"via": "tunnel"}
    assert rest.get(resources.NODES, "b") == {"via": "tunnel"}
    (head,) = seen  # one tunnel, kept alive for both requests
    assert head.startswith(f"CONNECT 127.0.0.1:{server.sock.getsockname()[1]} HTTP/")
    assert "Proxy-Authorization: Basic dXNlcjpwdw==" in head  # user:pw
    assert server.requests[0][1] == "GET /api/v1/nodes/a HTTP/1.1"


def test_an_https_proxy_url_is_refused_naming_the_field() -> None:
    connection = Connection(server="https://10.0.0.1:6443", tls=None, proxy="socks5://p:1080")
    with pytest.raises(errors.ConfigurationError, match="proxy-url 'socks5://p:1080'"):
        Rest(connection)


def watch_head() -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def test_a_watch_yields_events_split_across_chunks_and_ends_when_closed(serve) -> None:
    first = json.dumps({"type": "ADDED", "object": {"metadata": {"name": "a"}}}).encode()
    second = json.dumps({"type": "MODIFIED", "object": {"metadata": {"name": "b"}}}).encode()
    # the second event comes in three pieces; the stream stays open after it (no last chunk)
    pieces = [first + b"\n" + second[:7], second[7:20], second[20:] + b"\n"]
    server = serve(lambda n, i, line, body: watch_head() + b"".join(chunk(p) for p in pieces))
    rest = rest_for(server)
    stream = rest.watch(resources.NODES, resource_version="1", timeout_seconds=300)
    events: list[tuple[str, str]] = []

    def read() -> None:
        for kind, obj in stream:
            events.append((kind, obj["metadata"]["name"]))

    reader = threading.Thread(target=read)
    reader.start()
    wait_for(lambda: len(events) == 2, timeout=5)
    assert reader.is_alive()  # blocked on the open stream
    stream.close()
    reader.join(timeout=5)
    assert not reader.is_alive()
    assert events == [("ADDED", "a"), ("MODIFIED", "b")]
    line = server.requests[0][1]
    assert line.startswith("GET /api/v1/nodes?watch=true&resourceVersion=1&timeoutSeconds=300")


def test_a_watch_error_answer_is_classified(serve) -> None:
    status = {"kind": "Status", "reason": "Expired", "message": "too old", "code": 410}
    body = json.dumps(status).encode()
    head = f"HTTP/1.1 410 Gone\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
    server = serve(lambda n, i, line, b: (head + "\r\n\r\n").encode() + body)
    with pytest.raises(errors.ExpiredError, match="too old"):
        rest_for(server).watch(resources.NODES, resource_version="1", timeout_seconds=5)


class _TornDownResponse:
    """An answer whose file went away under the reader, as close() from another thread leaves
    it mid-read (CPython's chunked read1 then meets ``fp = None``), after ``sent``."""

    status, reason = 200, "OK"

    def __init__(self, *sent: bytes) -> None:
        self.sent = list(sent)

    def getheaders(self) -> list[tuple[str, str]]:
        return []

    def read1(self, size: int) -> bytes:
        if self.sent:
            return self.sent.pop(0)
        raise AttributeError("'NoneType' object has no attribute 'readline'")


class _NoConnection:
    sock = None

    def close(self) -> None:
        pass


def test_a_stream_closed_from_another_thread_ends_quietly_but_a_live_one_raises() -> None:
    stream = transport.Stream(_NoConnection(), _TornDownResponse())  # type: ignore[arg-type]
    with pytest.raises(AttributeError):  # not closed: a real fault, told
        list(stream.chunks())
    stream.close()
    assert list(stream.chunks()) == []  # closed: the end the closer asked for
    assert list(stream.lines()) == []


def test_a_stream_closed_mid_line_yields_its_whole_lines_and_not_the_cut_off_rest() -> None:
    response = _TornDownResponse(b'{"type": "ADDED"}\n{"type": "MOD')
    stream = transport.Stream(_NoConnection(), response)  # type: ignore[arg-type]
    lines = []
    for line in stream.lines():
        lines.append(line)
        stream.close()  # from "another thread", while the next read is under way
    assert lines == [b'{"type": "ADDED"}']
