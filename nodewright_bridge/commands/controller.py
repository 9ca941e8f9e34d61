"""``nwb controller``: run the controller against a cluster.

The runtime (informers, queue, leader election, metrics) is generic; the NodeWright reconciler
is plugged in by ``controller.wiring.build_reconciler``. ``make_command(factory)`` builds the same
command around another reconciler factory (the runtime's own tests run one that only logs);
``configure`` adds the NodeWright reconciler's settings (``--outside-retry``,
``--outside-retry-max``: the back-off of re-attempts after a failure outside the package, see
``lifecycle.recovery``; ``--image-pull-deadline``: how long a validation or package pod may fail
to pull its image; ``--failed-pod-ttl``: how long a failed package pod is kept for its log;
``--check-concurrency``: check-mode pods at once per CR, ``lifecycle.preflight``) and builds the
factory from them.

The controller namespace must exist (its Lease and node pods live there): a missing one is one
error line and exit code 2, or with ``--create-namespace`` it is created.

SIGTERM and SIGINT stop gracefully: the queue stops handing out keys, the current reconciles
finish, the Lease is released so a standby takes over at once.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from datetime import timedelta
from types import FrameType
from typing import Any

import click

from lifecycle import durations, preflight, recovery
from nodewright_bridge.clock import SystemClock
from nodewright_bridge.commands.common import kube_options
from nodewright_bridge.controller.validating import ValidationSettings
from nodewright_bridge.controller.wiring import (
    ReconcilerSettings,
    build_reconciler,
    reconciler_factory,
)
from nodewright_bridge.errors import (
    AlreadyExistsError,
    ApiError,
    ConfigurationError,
    ForbiddenError,
    NotFoundError,
    TemporaryApiError,
    UnauthorizedError,
)
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.client import ClientSettings
from nodewright_bridge.k8s.rest import Rest
from nodewright_bridge.metrics import Metrics
from nodewright_bridge.runtime import allocator, collector, logformat, memdump
from nodewright_bridge.runtime.leadership import default_identity
from nodewright_bridge.runtime.manager import (
    DEFAULT_METRICS_ADDR,
    DEFAULT_NAMESPACE,
    Manager,
    ManagerSettings,
    ReconcilerFactory,
)

logger = logging.getLogger(__name__)


def _options(command: Callable[..., None]) -> Callable[..., None]:
    """The command's options, in the order ``--help`` lists them."""
    for option in (
        click.option(
            "--workers",
            type=click.IntRange(1, 32),
            default=2,
            show_default=True,
            help="Keys reconciled in parallel (never the same key twice at once).",
        ),
        click.option(
            "--log-level",
            type=click.Choice(["debug", "info", "warning", "error"]),
            default="info",
            show_default=True,
            help="debug adds one line per reconcile (nodes, allowed, seconds) and per skipped "
            "write.",
        ),
        click.option(
            "--log-format",
            type=click.Choice([f.value for f in logformat.LogFormat]),
            default=logformat.LogFormat.TEXT.value,
            show_default=True,
        ),
        click.option(
            "--leader-elect/--no-leader-elect",
            default=True,
            show_default=True,
            help="Campaign for the Lease; disable only when exactly one replica runs.",
        ),
        click.option(
            "--metrics-addr",
            default=DEFAULT_METRICS_ADDR,
            show_default=True,
            help="host:port for /metrics, /healthz and /readyz (port 0: any free port).",
        ),
        click.option(
            "--namespace",
            default=DEFAULT_NAMESPACE,
            show_default=True,
            help="Controller namespace: node pods and the leader Lease live here.",
        ),
        click.option(
            "--create-namespace",
            is_flag=True,
            help="Create the controller namespace if it does not exist (else the controller "
            "exits with one line saying so).",
        ),
        kube_options(),
    ):
        command = option(command)
    return command


def _duration(ctx: click.Context, param: click.Parameter, value: str) -> timedelta:
    """A Go duration (``30s``, ``5m``, ``1h``), more than zero."""
    try:
        parsed = durations.parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    if parsed <= timedelta(0):
        raise click.BadParameter(f'"{value}" must be more than zero', ctx=ctx, param=param)
    return parsed


def _ttl(ctx: click.Context, param: click.Parameter, value: str) -> timedelta:
    """A Go duration, zero allowed."""
    if value.strip() == "0":
        return timedelta(0)
    try:
        return durations.parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def _recovery_options(command: Callable[..., None]) -> Callable[..., None]:
    """The NodeWright reconciler's settings (defaults: ``recovery.OutsideRetry``)."""
    for option in (
        click.option(
            "--outside-retry",
            callback=_duration,
            default="5m",
            show_default=True,
            help="First re-attempt of a node that failed for a cause outside the package (drain "
            "blocked or expired, protected pods, image pull, NotReady), unless the cause clears "
            "sooner; doubles on every further failure.",
        ),
        click.option(
            "--outside-retry-max",
            callback=_duration,
            default="1h",
            show_default=True,
            help="Longest back-off between such re-attempts.",
        ),
        click.option(
            "--image-pull-deadline",
            callback=_duration,
            default="2m",
            show_default=True,
            help="How long a validation or package pod may fail to pull its image (ErrImagePull, "
            "ImagePullBackOff, InvalidImageName, CreateContainerConfigError) before the spec is "
            "reported ImageNotFound, or the node is erroring with cause image-pull (at most the "
            "package's timeouts.stage).",
        ),
        click.option(
            "--check-concurrency",
            type=click.IntRange(min=1),
            default=preflight.DEFAULT_CONCURRENCY,
            show_default=True,
            help="Check-mode pods (packages with preflight: true, driftDetection) running at "
            "once per NodeWright. They are read-only work: no cordon, outside the "
            "compartments' budgets.",
        ),
        click.option(
            "--failed-pod-ttl",
            callback=_ttl,
            default="24h",
            show_default=True,
            help="Keep a failed package pod this long after it ended, for `kubectl logs` / "
            "`nwb logs` (0: delete it at once; its last lines are kept in the node's "
            "nwb-logs ConfigMap either way). Succeeded pods are deleted at once.",
        ),
    ):
        command = option(command)
    return command


def make_command(
    factory: ReconcilerFactory,
    *,
    configure: Callable[[ReconcilerSettings], ReconcilerFactory] | None = None,
) -> click.Command:
    """``nwb controller`` around ``factory`` (``build_reconciler(context) -> Reconciler``); with
    ``configure``, the recovery options too, and the factory
    ``configure(settings, failed_pod_ttl=...)`` returns."""

    def start(**options: Any) -> None:
        chosen = factory
        if configure is not None:
            base = options.pop("outside_retry")
            cap = options.pop("outside_retry_max")
            if cap < base:
                raise click.BadParameter(
                    "must be at least --outside-retry", param_hint="--outside-retry-max"
                )
            pull = options.pop("image_pull_deadline")
            ttl = options.pop("failed_pod_ttl")
            chosen = configure(
                ReconcilerSettings(
                    outside_retry=recovery.OutsideRetry(base=base, cap=cap, pull_deadline=pull),
                    validation=ValidationSettings(pull_deadline=pull),
                    failed_pod_ttl=ttl,
                    check_concurrency=options.pop("check_concurrency"),
                )
            )
        run(chosen, **options)

    start.__doc__ = """Run the controller (informers, work queue, leader election, /metrics,
    /healthz, /readyz)."""
    decorated = _recovery_options(start) if configure is not None else start
    return click.command(name="controller")(_options(decorated))


def run(
    factory: ReconcilerFactory,
    *,
    kubeconfig: str | None,
    kube_context: str | None,
    namespace: str,
    create_namespace: bool = False,
    metrics_addr: str,
    leader_elect: bool,
    log_format: str,
    log_level: str,
    workers: int,
) -> None:
    """Run the controller until SIGTERM/SIGINT; exits the process with the manager's code."""
    allocator.limit_arenas()  # before any thread starts
    collector.tune()  # after the imports, before the caches fill
    level = logging.getLevelNamesMapping()[log_level.upper()]
    logformat.configure(logformat.LogFormat(log_format), level=level)
    memdump.install(os.environ.get(memdump.ENV), sites=bool(os.environ.get(memdump.SITES_ENV)))
    if ":" not in metrics_addr:
        click.echo(f"error: --metrics-addr: expected host:port, got {metrics_addr!r}", err=True)
        sys.exit(2)
    metrics = Metrics()
    try:
        rest = Rest.connect(
            ClientSettings(kubeconfig=kubeconfig, context=kube_context), metrics=metrics
        )
    except ConfigurationError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    problem = ensure_namespace(rest, namespace, create=create_namespace)
    if problem:
        click.echo(f"error: {problem}", err=True)
        sys.exit(2)
    identity = default_identity(os.environ.get("POD_NAME"))
    settings = ManagerSettings(
        identity=identity,
        namespace=namespace,
        metrics_addr=metrics_addr,
        leader_elect=leader_elect,
        workers=workers,
    )
    manager = Manager(rest, factory, settings, clock=SystemClock(), metrics=metrics)

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


def ensure_namespace(rest: Rest, namespace: str, *, create: bool) -> str:
    """Check (or with ``create``, make) the controller namespace; the problem, or "".

    Without it the controller cannot take its Lease nor start a pod, and would retry forever;
    one clear line is better. A controller not allowed to read namespaces (least-privilege RBAC)
    goes on: its chart created the namespace; so does one that cannot reach the API server yet.
    """
    try:
        rest.get(resources.NAMESPACES, namespace)
        return ""
    except NotFoundError:
        pass
    except (ForbiddenError, UnauthorizedError, TemporaryApiError):
        return ""  # cannot tell (yet): the manager goes on and retries as it always did
    except ApiError as exc:
        return f"cannot read namespace {namespace}: {exc}"
    if not create:
        return (
            f"namespace {namespace} does not exist: create it (kubectl create namespace "
            f"{namespace}), pass --create-namespace, or choose another with --namespace"
        )
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    try:
        rest.create(resources.NAMESPACES, body)
    except AlreadyExistsError:
        pass
    except ApiError as exc:
        return f"cannot create namespace {namespace}: {exc}"
    logger.info("namespace created", extra={"namespace": namespace})
    return ""


command = make_command(build_reconciler, configure=reconciler_factory)
