"""What several ``nwb`` commands share: connecting to a cluster, listing everything, exit codes.

Why one module: ``status``, ``plan --live``, ``demo`` and the benchmarks read the same cluster the
same way; the ``--kubeconfig``/``--context`` options read the same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from nodewright_bridge.errors import ConfigurationError

if TYPE_CHECKING:  # the API edge loads only when a command connects (plan is offline)
    from nodewright_bridge.k8s import resources
    from nodewright_bridge.k8s.rest import Rest
    from nodewright_bridge.metrics import Metrics

JsonObject = dict[str, Any]
# Objects per list page: large lists (thousands of Nodes) come in a few requests, each small
# enough for the API server to answer quickly.
PAGE_SIZE = 500
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130

F = TypeVar("F", bound=Callable[..., Any])


class CommandError(Exception):
    """A problem to print as one line, with the exit code to use."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def kube_options(help_prefix: str = "") -> Callable[[F], F]:
    """``--kubeconfig`` (also ``$KUBECONFIG``) and ``--context``, as every command reads them."""

    def decorate(command: F) -> F:
        command = click.option(
            "--context",
            "kube_context",
            default=None,
            help=f"{help_prefix}kubeconfig context to use.",
        )(command)
        return click.option(
            "--kubeconfig",
            type=click.Path(dir_okay=False),
            envvar="KUBECONFIG",
            help=f"{help_prefix}kubeconfig file (default: in-cluster config, else ~/.kube/config).",
        )(command)

    return decorate


def connect(kubeconfig: str | None, context: str | None, metrics: Metrics | None = None) -> Rest:
    """A REST client for the cluster; a bad kubeconfig is bad input (exit 2)."""
    from nodewright_bridge.k8s.client import ClientSettings  # noqa: PLC0415
    from nodewright_bridge.k8s.rest import Rest  # noqa: PLC0415 - see the TYPE_CHECKING note

    try:
        return Rest.connect(ClientSettings(kubeconfig, context), metrics=metrics)
    except ConfigurationError as exc:
        raise CommandError(str(exc), EXIT_BAD_INPUT) from None


def list_all(rest: Rest, resource: resources.Resource, **query: Any) -> list[JsonObject]:
    """Every object of ``resource`` (paged)."""
    items: list[JsonObject] = []
    token: str | None = None
    while True:
        page = rest.list(resource, limit=PAGE_SIZE, continue_token=token, **query)
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or None
        if not token:
            return items
