"""Rollout metrics (what an operator graphs), registered next to the runtime's in one registry.

Labels are bounded: CR, compartment, status, stage, kind. Never node names: a 5,000-node fleet
would explode the series count.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Stage runs take seconds (a sysctl) to tens of minutes (a kernel or driver build).
STAGE_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0)


class ProductMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.rollout_progress = Gauge(
            "nwb_rollout_progress_percent",
            "Nodes complete as a percentage of matched nodes, per CR and compartment.",
            ["cr", "compartment"],
            registry=r,
        )
        self.rollout_batch = Gauge(
            "nwb_rollout_current_batch",
            "Current batch number per CR and compartment.",
            ["cr", "compartment"],
            registry=r,
        )
        self.node_status = Gauge(
            "nwb_node_status_count",
            "Targeted nodes by their status for the CR.",
            ["cr", "status"],
            registry=r,
        )
        self.stage_duration = Histogram(
            "nwb_stage_duration_seconds",
            "Duration of one stage run on one node, from the agent's result.",
            ["cr", "package", "stage"],
            buckets=STAGE_BUCKETS,
            registry=r,
        )
        self.evictions = Counter(
            "nwb_drain_evictions_total", "Pods evicted by drains.", ["cr"], registry=r
        )
        self.pdb_refusals = Counter(
            "nwb_drain_pdb_refusals_total",
            "Evictions refused by a PodDisruptionBudget (429).",
            ["cr"],
            registry=r,
        )
        self.pod_failures = Counter(
            "nwb_package_failures_total",
            "Package attempts that failed for good (attempts exhausted or not retryable).",
            ["cr"],
            registry=r,
        )
        self.pods_created = Counter(
            "nwb_pods_created_total", "Node pods created, by kind.", ["cr", "kind"], registry=r
        )

    def forget_cr(self, cr: str, compartments: list[str], statuses: list[str]) -> None:
        """Drop the gauges of a deleted CR (counters stay: they are monotonic history)."""
        for name in compartments:
            for gauge in (self.rollout_progress, self.rollout_batch):
                with contextlib.suppress(KeyError):
                    gauge.remove(cr, name)
        for status in statuses:
            with contextlib.suppress(KeyError):
                self.node_status.remove(cr, status)
