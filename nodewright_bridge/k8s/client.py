"""Building the API client: configuration, timeouts, and per-request metering.

Why our own ``ApiClient`` subclass: every request of the process, through our raw REST helper or
through a generated ``CoreV1Api`` method, passes ``ApiClient.call_api``. Overriding it once gives
(a) a default timeout, so no call can hang forever on a half-dead connection, and (b) a count of
requests by verb, resource and HTTP code, which the benchmark reports as API requests per node.

Config loading order: an explicit ``--kubeconfig`` wins; else in-cluster (service account) when
``KUBERNETES_SERVICE_HOST`` is set; else ``$KUBECONFIG`` / ``~/.kube/config``.
"""

from __future__ import annotations

import http.client
import logging
import os
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from nodewright_bridge.errors import ConfigurationError
from nodewright_bridge.metrics import Metrics

logger = logging.getLogger(__name__)

# Connect fast-fails an unreachable API server; 30 s read covers a slow list of a large page.
# Watches pass their own read timeout (server-side timeoutSeconds plus a margin).
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 30.0
# One connection per informer watch (5) plus workers, event posting and the elector; urllib3
# blocks instead of failing when the pool is exhausted, so leave headroom.
CONNECTION_POOL_SIZE = 48


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """Where the cluster is and how patient to be with it."""

    kubeconfig: str | None = None
    context: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT


def load_configuration(settings: ClientSettings) -> k8s_client.Configuration:
    """Resolve the cluster configuration (kubeconfig or in-cluster).

    Raises:
        ConfigurationError: Nothing usable was found, or the context does not exist.
    """
    configuration = k8s_client.Configuration()
    try:
        if settings.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            source = "in-cluster service account"
        else:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=settings.kubeconfig,
                context=settings.context,
                client_configuration=configuration,
            )
            source = settings.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    except (ConfigException, OSError, TypeError) as exc:
        raise ConfigurationError(f"cannot load the cluster configuration: {exc}") from exc
    configuration.connection_pool_maxsize = CONNECTION_POOL_SIZE
    logger.debug("cluster configuration loaded", extra={"source": source})
    return configuration


def build_api_client(settings: ClientSettings, *, metrics: Metrics | None) -> MeteredApiClient:
    """An API client for ``settings`` that counts its requests into ``metrics``."""
    return MeteredApiClient(
        load_configuration(settings),
        metrics=metrics,
        default_timeout=(settings.connect_timeout, settings.read_timeout),
    )


class MeteredApiClient(k8s_client.ApiClient):
    """``ApiClient`` with a default timeout and request metrics.

    Args:
        configuration: From :func:`load_configuration`.
        metrics: Where to count requests; None counts nothing.
        default_timeout: ``(connect, read)`` seconds used when a call passes no timeout.
    """

    def __init__(
        self,
        configuration: k8s_client.Configuration,
        *,
        metrics: Metrics | None,
        default_timeout: tuple[float, float],
    ) -> None:
        super().__init__(configuration)
        self.user_agent = "nodewright-bridge"
        self._metrics = metrics
        self._default_timeout = default_timeout

    def call_api(
        self,
        method: str,
        url: str,
        header_params: dict[str, str] | None = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        """Perform one HTTP request (the override point every client call passes through)."""
        timeout = _request_timeout if _request_timeout is not None else self._default_timeout
        started = time.monotonic()
        code = "error"
        try:
            response = super().call_api(
                method, url, header_params, body, post_params, _request_timeout=timeout
            )
            code = str(response.status)
            return response
        except ApiException as exc:
            code = str(exc.status or "error")
            raise
        finally:
            self.observe(method, url, code, time.monotonic() - started)

    @property
    def default_timeout(self) -> tuple[float, float]:
        return self._default_timeout

    def observe(self, method: str, url: str, code: str, seconds: float) -> None:
        """Count one request (also those sent past ``call_api``, on the fast transport)."""
        if self._metrics is not None:
            verb, resource = classify_request(method, url)
            self._metrics.api_requests.labels(verb, resource, code).inc()
            self._metrics.api_latency.labels(verb).observe(seconds)


def classify_request(method: str, url: str) -> tuple[str, str]:
    """Map an HTTP request to a Kubernetes ``(verb, resource)`` pair for metrics.

    ``GET /api/v1/nodes?watch=true`` is ``("watch", "nodes")``; ``POST
    /api/v1/namespaces/x/pods/y/eviction`` is ``("create", "pods/eviction")``; paths that are not
    resources (``/version``, ``/readyz``) are reported as themselves.
    """
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    if segments[:1] == ["api"]:
        rest = segments[2:]
    elif segments[:1] == ["apis"]:
        rest = segments[3:]
    else:
        return method.lower(), parts.path or "/"
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        rest = rest[2:]
    if not rest:
        return method.lower(), parts.path
    resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    named = len(rest) >= 2
    method = method.upper()
    if method == "GET":
        watching = parse_qs(parts.query).get("watch", [""])[0] in ("true", "1")
        verb = "watch" if watching else ("get" if named else "list")
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
    return verb, resource


def total_requests(metrics: Metrics) -> float:
    """All API requests counted so far (the benchmark's numerator)."""
    total = 0.0
    for family in metrics.api_requests.collect():
        for sample in family.samples:
            if sample.name == "nwb_api_requests_total":
                total += sample.value
    return total


TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    OSError,
)
"""Exceptions meaning "no HTTP answer" (refused, reset, timed out, TLS)."""
