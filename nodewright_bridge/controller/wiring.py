"""The reconciler ``nwb controller`` runs: ``build_reconciler(context)`` wires the NodeWright
reconciler to the runtime's informers, writer, Events, metrics and clock, with the controller's
settings of the validation step (``ValidationSettings``).
"""

from __future__ import annotations

from nodewright_bridge.controller.productmetrics import ProductMetrics
from nodewright_bridge.controller.reconciler import NodeWrightReconciler
from nodewright_bridge.controller.snapshot import Stores
from nodewright_bridge.controller.validating import ValidationSettings
from nodewright_bridge.k8s import caches
from nodewright_bridge.runtime.manager import ReconcilerContext


def build_reconciler(
    context: ReconcilerContext, validation: ValidationSettings | None = None
) -> NodeWrightReconciler:
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
        validation=validation,
    )
