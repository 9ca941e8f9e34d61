"""The reconciler ``nwb controller`` runs: ``build_reconciler(context)`` wires the NodeWright
reconciler to the runtime's informers, writer, Events, metrics and clock; ``reconciler_factory``
does the same with the controller's settings (``ReconcilerSettings``: the back-off of
re-attempts after an outside cause, ``--outside-retry``/``--outside-retry-max``, the
validation step's ``--image-pull-deadline``, ``--failed-pod-ttl`` and the check pods' limit
``--check-concurrency``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import timedelta

from lifecycle import preflight, recovery, stages
from nodewright_bridge.controller.productmetrics import ProductMetrics
from nodewright_bridge.controller.reconciler import NodeWrightReconciler
from nodewright_bridge.controller.snapshot import Stores
from nodewright_bridge.controller.validating import ValidationSettings
from nodewright_bridge.k8s import caches
from nodewright_bridge.runtime.manager import ReconcilerContext, ReconcilerFactory


@dataclass(frozen=True, slots=True)
class ReconcilerSettings:
    """The NodeWright reconciler's settings (``nwb controller`` options)."""

    outside_retry: recovery.OutsideRetry = recovery.DEFAULT_OUTSIDE_RETRY
    validation: ValidationSettings = field(default_factory=ValidationSettings)
    failed_pod_ttl: timedelta = stages.DEFAULT_FAILED_POD_TTL
    check_concurrency: int = preflight.DEFAULT_CONCURRENCY


def build_reconciler(
    context: ReconcilerContext,
    *,
    settings: ReconcilerSettings | None = None,
) -> NodeWrightReconciler:
    chosen = settings or ReconcilerSettings()
    informers = context.informers
    stores = Stores(
        nodes=informers.store(caches.NODES),
        pods=informers.store(caches.PODS),
        package_pods=informers.store(caches.PACKAGE_PODS),
        pdbs=informers.store(caches.PDBS),
        nodewrights=informers.store(caches.NODEWRIGHTS),
        policies=informers.store(caches.POLICIES),
        secrets=informers.store(caches.SECRETS),
    )
    return NodeWrightReconciler(
        rest=context.rest,
        writer=context.writer,
        events=context.events,
        stores=stores,
        namespace=context.namespace,
        metrics=ProductMetrics(context.metrics.registry),
        clock=context.clock,
        foreground=context.foreground,
        outside_retry=chosen.outside_retry,
        validation=chosen.validation,
        failed_pod_ttl=chosen.failed_pod_ttl,
        check_concurrency=chosen.check_concurrency,
    )


def reconciler_factory(settings: ReconcilerSettings) -> ReconcilerFactory:
    """``build_reconciler`` with the controller's settings."""
    return functools.partial(build_reconciler, settings=settings)
