"""Prometheus metrics of the controller runtime, in a registry owned by one :class:`Metrics` object.

Why not prometheus-client's global default registry: it is a mutable module-level singleton, and
two managers in one process (the leader-election test runs two) would collide on metric names. Each
manager builds its own :class:`Metrics`; the HTTP server exposes that registry. The reconciler adds
its product metrics (rollout progress, node status counts, stage durations) to ``registry`` too.

Names follow Prometheus conventions: ``nwb_`` prefix, base units (seconds), ``_total`` counters.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Reconciles take milliseconds when nothing is due and a few seconds when a batch of nodes is
# patched; API calls are milliseconds. Buckets cover 1 ms .. 60 s.
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """Every runtime metric, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.reconcile_duration = Histogram(
            "nwb_reconcile_duration_seconds",
            "Time spent in one reconcile of one key.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.reconciles = Counter(
            "nwb_reconciles_total",
            "Reconciles by outcome (success, requeue, error).",
            ["result"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "nwb_reconcile_errors_total",
            "Reconciles that raised, by error class.",
            ["error"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "nwb_workqueue_depth", "Keys waiting to be processed (not delayed).", registry=r
        )
        self.queue_adds = Counter(
            "nwb_workqueue_adds_total", "Keys added to the queue.", registry=r
        )
        self.queue_retries = Counter(
            "nwb_workqueue_retries_total", "Rate-limited re-adds after a failure.", registry=r
        )
        self.queue_wait = Histogram(
            "nwb_workqueue_queue_duration_seconds",
            "Time a key waited in the queue before a worker took it.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.api_requests = Counter(
            "nwb_api_requests_total",
            "Requests to the Kubernetes API by verb, resource and HTTP code ('error' = no answer).",
            ["verb", "resource", "code"],
            registry=r,
        )
        self.api_latency = Histogram(
            "nwb_api_request_duration_seconds",
            "Kubernetes API request latency until the response headers arrived.",
            ["verb"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.leader = Gauge(
            "nwb_leader", "1 while this replica holds the leader Lease, else 0.", registry=r
        )
        self.informer_synced = Gauge(
            "nwb_informer_synced",
            "1 once the informer's initial list completed.",
            ["informer"],
            registry=r,
        )
        self.informer_objects = Gauge(
            "nwb_informer_objects", "Objects in the informer's store.", ["informer"], registry=r
        )
        self.informer_relists = Counter(
            "nwb_informer_relists_total",
            "Full relists by reason (initial, expired, error).",
            ["informer", "reason"],
            registry=r,
        )
        self.events = Counter(
            "nwb_events_total",
            "Kubernetes Events posted, by type and whether they were new or a repeat (count++).",
            ["type", "outcome"],
            registry=r,
        )
