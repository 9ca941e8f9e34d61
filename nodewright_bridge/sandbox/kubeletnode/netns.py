"""Traffic between this machine's loopback and a kubelet node's own network namespace.

Why: a kubelet-tier node has a network namespace of its own (only loopback and its node address),
so nothing it does can change this machine's network. It still needs the API server and the
registry, which listen on this machine's 127.0.0.1, and the API server needs the node's kubelet
port (pod logs). No interface, route or address is added on this machine for that: a socket
belongs to the network namespace of the thread that created it, so a helper thread enters the
node's namespace (``setns``) only to create a socket there and leaves with it.

- ``LoopbackForward``: listens on ``127.0.0.1:<port>`` inside the node, connects each client to the
  same port on this machine's loopback (the node's kubelet and containerd use the same URLs as
  every other client).
- ``ConnectProxy``: an HTTP CONNECT proxy on a Unix socket, the API server's egress for the
  "cluster" (``--egress-selector-config-file``): each ``CONNECT <node-ip>:<port>`` is dialled from
  inside the namespace of the node that owns ``node-ip``. So the API server never dials a node
  address on this machine's network.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

log = logging.getLogger(__name__)

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_CHUNK = 65536
# A CONNECT request line and headers are small; more than this is not a client we serve.
_MAX_HEADER = 8192
CONNECT_TIMEOUT_SECONDS = 10.0
T = TypeVar("T")


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(net): {os.strerror(err)}")


def in_netns(netns: Path, make: Callable[[], T]) -> T:
    """Run ``make`` in a helper thread that has entered the network namespace ``netns``
    (e.g. ``/proc/<pid>/ns/net``); sockets it creates stay in that namespace."""
    result: list[T] = []
    failure: list[BaseException] = []

    def body() -> None:
        try:
            fd = os.open(netns, os.O_RDONLY)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            result.append(make())
        except BaseException as exc:  # re-raised in the caller
            failure.append(exc)

    # The thread ends after make(); a thread in another namespace never runs anything else.
    worker = threading.Thread(target=body, name="nwb-netns", daemon=True)
    worker.start()
    worker.join()
    if failure:
        raise failure[0]
    return result[0]


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(_CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def splice(left: socket.socket, right: socket.socket) -> None:
    """Copy both ways until both sides are done, then close both."""
    other = threading.Thread(target=_pipe, args=(right, left), daemon=True)
    other.start()
    _pipe(left, right)
    other.join()
    left.close()
    right.close()


class _Server:
    """An accept loop in a daemon thread; ``close()`` stops it."""

    def __init__(self, listener: socket.socket, name: str) -> None:
        self._listener = listener
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()


class LoopbackForward(_Server):
    """``127.0.0.1:port`` inside the node -> ``127.0.0.1:port`` on this machine."""

    def __init__(self, netns: Path, port: int) -> None:
        def listen() -> socket.socket:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(64)
            return sock

        super().__init__(in_netns(netns, listen), f"nwb-forward-{port}")
        self.port = port

    def _handle(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.port), CONNECT_TIMEOUT_SECONDS)
        except OSError as exc:
            log.warning("forward to 127.0.0.1:%d failed: %s", self.port, exc)
            client.close()
            return
        upstream.settimeout(None)
        splice(client, upstream)


class ConnectProxy(_Server):
    """HTTP CONNECT on a Unix socket; ``routes`` maps a host the API server names (a node's
    name or address) to (the node's namespace file, the address to dial there)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        sock.listen(64)
        super().__init__(sock, "nwb-egress")
        self.path = path
        self.routes: dict[str, tuple[Path, str]] = {}

    def _handle(self, client: socket.socket) -> None:
        header = b""
        while b"\r\n\r\n" not in header and len(header) < _MAX_HEADER:
            chunk = client.recv(1024)
            if not chunk:
                client.close()
                return
            header += chunk
        head, _, rest = header.partition(b"\r\n\r\n")
        words = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        target = words[1] if len(words) == 3 and words[0] == "CONNECT" else ""
        host, _, port = target.rpartition(":")
        route = self.routes.get(host.strip("[]"))
        if route is None or not port.isdigit():
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\n\r\nno such node address\r\n")
            client.close()
            return

        netns, address = route

        def dial() -> socket.socket:
            return socket.create_connection((address, int(port)), CONNECT_TIMEOUT_SECONDS)

        try:
            upstream = in_netns(netns, dial)
        except OSError as exc:
            client.sendall(f"HTTP/1.1 502 Bad Gateway\r\n\r\n{exc}\r\n".encode())
            client.close()
            return
        upstream.settimeout(None)
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        if rest:
            upstream.sendall(rest)
        splice(client, upstream)


def egress_selector_config(proxy_socket: Path) -> str:
    """The API server's EgressSelectorConfiguration: cluster traffic through ``proxy_socket``."""
    return (
        "apiVersion: apiserver.k8s.io/v1beta1\n"
        "kind: EgressSelectorConfiguration\n"
        "egressSelections:\n"
        "- name: cluster\n"
        "  connection:\n"
        "    proxyProtocol: HTTPConnect\n"
        "    transport:\n"
        "      uds:\n"
        f"        udsName: {proxy_socket}\n"
    )
