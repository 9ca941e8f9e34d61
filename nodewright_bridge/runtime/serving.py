"""The HTTP endpoint of the controller: ``/metrics``, ``/healthz``, ``/readyz``.

- ``/metrics``: the manager's Prometheus registry (text exposition format).
- ``/healthz``: 200 while the process's loops are alive (informer, worker and elector threads);
  the kubelet restarts the pod otherwise.
- ``/readyz``: 200 once the informer caches are synced and the replica is either leading or a
  healthy standby; 503 with the reason otherwise.

A ``ThreadingHTTPServer`` on its own thread; a slow scrape never blocks the controller.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from nodewright_bridge.metrics import Metrics

logger = logging.getLogger(__name__)

# A probe returns (ok, reason).
Probe = Callable[[], tuple[bool, str]]


class HealthServer:
    """Serves metrics and probes on ``address`` (``host:port``; port 0 picks a free one)."""

    def __init__(self, address: str, *, metrics: Metrics, healthz: Probe, readyz: Probe) -> None:
        host, _, port = address.rpartition(":")
        self._metrics = metrics
        self._probes = {"/healthz": healthz, "/readyz": readyz}
        handler = self._handler_class()
        self._server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="health-server", daemon=True
        )
        self._thread.start()
        logger.info("serving metrics and probes", extra={"port": self.port})

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(
                        HTTPStatus.OK, generate_latest(outer._metrics.registry), CONTENT_TYPE_LATEST
                    )
                    return
                probe = outer._probes.get(path)
                if probe is None:
                    self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")
                    return
                try:
                    ok, reason = probe()
                except Exception as exc:  # a probe must answer, not crash the server thread
                    ok, reason = False, f"probe failed: {exc}"
                status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
                self._send(status, f"{reason or 'ok'}\n".encode(), "text/plain")

            def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # probes every few seconds would drown the log

        return Handler
