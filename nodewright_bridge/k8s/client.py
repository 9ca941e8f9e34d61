"""Connecting to the cluster: settings, configuration loading, and request classification.

Config loading order: an explicit ``--kubeconfig`` wins; else in-cluster (service account) when
``KUBERNETES_SERVICE_HOST`` is set; else ``$KUBECONFIG`` / ``~/.kube/config``
(:mod:`nodewright_bridge.k8s.kubeconfig` reads them). Every request is classified by verb,
resource and code (:func:`classify_request`), which the benchmark reports as requests per node.
"""

from __future__ import annotations

import http.client
import logging
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from nodewright_bridge.errors import ConfigurationError
from nodewright_bridge.k8s import kubeconfig
from nodewright_bridge.k8s.kubeconfig import Connection
from nodewright_bridge.metrics import Metrics

logger = logging.getLogger(__name__)

# Connect fast-fails an unreachable API server; 30 s read covers a slow list of a large page.
# Watches pass their own read timeout (server-side timeoutSeconds plus a margin).
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 30.0
# Idle keep-alive connections kept: workers, event posting and the elector (watches have their
# own connection each and never come back to the pool).
CONNECTION_POOL_SIZE = 48


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """Where the cluster is and how patient to be with it."""

    kubeconfig: str | None = None
    context: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT


def load_connection(settings: ClientSettings) -> Connection:
    """Resolve the cluster connection (kubeconfig or in-cluster) and its first credentials, so a
    broken token file or exec plugin fails here, before any work starts.

    Raises:
        ConfigurationError: Nothing usable was found; the message names the file and field.
    """
    try:
        connection = kubeconfig.load(settings.kubeconfig, settings.context)
        connection.credentials.authorization()
    except ConfigurationError as exc:
        raise ConfigurationError(f"cannot load the cluster configuration: {exc}") from exc
    logger.debug("cluster configuration loaded", extra={"source": connection.source})
    return connection


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


TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (http.client.HTTPException, OSError)
"""Exceptions meaning "no HTTP answer" (refused, reset, timed out, TLS)."""
