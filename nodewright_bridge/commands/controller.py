"""``nwb controller``: run the controller against a cluster.

The runtime (informers, queue, leader election, metrics) is generic; the reconciler is found at
start-up in :data:`~nodewright_bridge.runtime.reconciling.RECONCILER_MODULE` (a module exposing
``build_reconciler(context)``). If there is none, the command refuses to start with exit code 1:
a controller that watches everything and does nothing would look healthy and mislead operators.

SIGTERM and SIGINT stop gracefully: the queue stops handing out keys, the current reconciles
finish, the Lease is released so a standby takes over at once.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from types import FrameType

import click

from nodewright_bridge.errors import ConfigurationError, NoReconcilerError
from nodewright_bridge.k8s.client import ClientSettings, build_api_client
from nodewright_bridge.k8s.rest import Rest
from nodewright_bridge.runtime import logformat
from nodewright_bridge.runtime.clock import SystemClock
from nodewright_bridge.runtime.leadership import default_identity
from nodewright_bridge.runtime.manager import (
    DEFAULT_METRICS_ADDR,
    DEFAULT_NAMESPACE,
    Manager,
    ManagerSettings,
    ReconcilerFactory,
)
from nodewright_bridge.runtime.metrics import Metrics
from nodewright_bridge.runtime.reconciling import RECONCILER_MODULE

logger = logging.getLogger(__name__)


def load_reconciler_factory(module_name: str) -> ReconcilerFactory:
    """The ``build_reconciler`` of ``module_name``.

    Raises:
        NoReconcilerError: The module does not exist or has no ``build_reconciler``.
    """
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise NoReconcilerError(
                f"no reconciler is registered: module {module_name} does not exist in this build"
            ) from exc
        raise
    factory = getattr(module, "build_reconciler", None)
    if not callable(factory):
        raise NoReconcilerError(
            f"no reconciler is registered: {module_name} has no build_reconciler(context)"
        )
    built: ReconcilerFactory = factory
    return built


@click.command(name="controller")
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False),
    envvar="KUBECONFIG",
    help="Kubeconfig file (default: in-cluster config, else ~/.kube/config).",
)
@click.option("--context", "kube_context", default=None, help="Kubeconfig context to use.")
@click.option(
    "--namespace",
    default=DEFAULT_NAMESPACE,
    show_default=True,
    help="Controller namespace: node pods and the leader Lease live here.",
)
@click.option(
    "--metrics-addr",
    default=DEFAULT_METRICS_ADDR,
    show_default=True,
    help="host:port for /metrics, /healthz and /readyz (port 0: any free port).",
)
@click.option(
    "--leader-elect/--no-leader-elect",
    default=True,
    show_default=True,
    help="Campaign for the Lease; disable only when exactly one replica runs.",
)
@click.option(
    "--log-format",
    type=click.Choice([f.value for f in logformat.LogFormat]),
    default=logformat.LogFormat.TEXT.value,
    show_default=True,
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="debug adds one line per reconcile (nodes, allowed, seconds) and per skipped write.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 32),
    default=2,
    show_default=True,
    help="Keys reconciled in parallel (never the same key twice at once).",
)
@click.option(
    "--reconciler-module",
    default=RECONCILER_MODULE,
    hidden=True,
    help="Module providing build_reconciler(context) (tests plug in their own).",
)
def command(  # noqa: PLR0917 - click passes options positionally
    kubeconfig: str | None,
    kube_context: str | None,
    namespace: str,
    metrics_addr: str,
    leader_elect: bool,
    log_format: str,
    log_level: str,
    workers: int,
    reconciler_module: str,
) -> None:
    """Run the controller (informers, work queue, leader election, /metrics, /healthz, /readyz)."""
    level = logging.getLevelNamesMapping()[log_level.upper()]
    logformat.configure(logformat.LogFormat(log_format), level=level)
    try:
        factory = load_reconciler_factory(reconciler_module)
    except NoReconcilerError as exc:
        click.echo(f"error: {exc}; refusing to start a controller that would do nothing", err=True)
        sys.exit(1)
    if ":" not in metrics_addr:
        click.echo(f"error: --metrics-addr: expected host:port, got {metrics_addr!r}", err=True)
        sys.exit(2)
    metrics = Metrics()
    try:
        api_client = build_api_client(
            ClientSettings(kubeconfig=kubeconfig, context=kube_context), metrics=metrics
        )
    except ConfigurationError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    identity = default_identity(os.environ.get("POD_NAME"))
    settings = ManagerSettings(
        identity=identity,
        namespace=namespace,
        metrics_addr=metrics_addr,
        leader_elect=leader_elect,
        workers=workers,
    )
    manager = Manager(Rest(api_client), factory, settings, clock=SystemClock(), metrics=metrics)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logger.info("signal received, stopping", extra={"signal": signal.Signals(signum).name})
        manager.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    logger.info(
        "controller starting",
        extra={"identity": identity, "namespace": namespace, "leader_elect": leader_elect},
    )
    sys.exit(manager.run())
