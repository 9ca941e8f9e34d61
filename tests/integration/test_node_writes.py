"""A pass's node writes on the sandbox API: a node that starts a pod is written while the pass is
still planning; in a pass that picks a batch (``hold``, the default) bookkeeping waits for the
pass to end (so the first pods of a batch start before its last nodes are planned, and results
never get ahead of the starts)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from cache_world import empty_stores
from conftest import Kube, install_product_crds
from waiting import wait_for

from lifecycle import actions
from lifecycle.nodestate import status_key
from lifecycle.spec import NodeWright
from lifecycle.status import Status
from nodewright_bridge.clock import SystemClock
from nodewright_bridge.controller import snapshot
from nodewright_bridge.controller.executor import Executor
from nodewright_bridge.controller.node_writes import NodeWork, Outcome
from nodewright_bridge.controller.productmetrics import ProductMetrics
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.client import ClientSettings
from nodewright_bridge.k8s.events import EventRecorder
from nodewright_bridge.k8s.patching import Writer
from nodewright_bridge.k8s.rest import Rest
from nodewright_bridge.k8s.slimming import slim_node
from nodewright_bridge.metrics import Metrics


@pytest.fixture
def rest(kube: Kube) -> Iterator[Rest]:
    rest = Rest.connect(ClientSettings(kubeconfig=str(kube.kubeconfig)), metrics=None)
    try:
        yield rest
    finally:
        rest.close()


def _cr(kube: Kube, rest: Rest) -> NodeWright:
    """A real NodeWright (its pods' owner must exist, or the garbage collector takes them)."""
    install_product_crds(rest)
    name = f"writes-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": resources.NODEWRIGHTS.api_version,
        "kind": "NodeWright",
        "metadata": {"name": name},
        "spec": {
            "nodeSelectors": {"matchLabels": {"nobody": "here"}},
            "hostConnection": "chroot",
            "packages": {"sysctl": {"version": "1.0.0", "image": "sim.local/nwb/sysctl"}},
        },
    }
    created = rest.create(resources.NODEWRIGHTS, body)
    kube.defer(lambda: rest.delete(resources.NODEWRIGHTS, name))
    return NodeWright.model_validate(created)


def _work(rest: Rest, cr: NodeWright, node: str, *acts: actions.Action) -> NodeWork:
    raw = slim_node(rest.get(resources.NODES, node))
    snap = snapshot.snapshot_node(cr, raw, empty_stores(), snapshot.PdbIndex())
    return NodeWork(node=snap, actions=acts)


def _status(rest: Rest, cr: NodeWright, node: str) -> str | None:
    labels = rest.get(resources.NODES, node)["metadata"].get("labels") or {}
    return labels.get(status_key(cr.metadata.name))


def _pods_on(rest: Rest, namespace: str, node: str) -> list[str]:
    pods = rest.list(resources.PODS, namespace=namespace, field_selector=f"spec.nodeName={node}")
    return [p["metadata"]["name"] for p in pods.get("items") or []]


def test_a_start_goes_out_while_the_pass_plans_and_bookkeeping_waits_for_its_end(
    kube: Kube, rest: Rest
) -> None:
    namespace = kube.namespace("writes")
    starting, waiting = (node.name for node in kube.add_nodes(2))
    cr = _cr(kube, rest)
    executor = Executor(
        rest=rest,
        writer=Writer(rest),
        events=EventRecorder(rest, clock=SystemClock(), instance="test"),
        namespace=namespace,
        metrics=ProductMetrics(Metrics().registry),
        on_node_written=lambda node, rv: None,
        clock=SystemClock(),
    )
    name = cr.metadata.name
    start = _work(
        rest,
        cr,
        starting,
        actions.SetNodeStatus(node=starting, cr=name, status=Status.IN_PROGRESS),
        actions.CreatePackagePod(
            node=starting,
            cr=name,
            package="sysctl",
            version="1.0.0",
            stages=("apply",),
            resource_id="r1",
            node_order=0,
            attempt=1,
            config_hash="h",
            deadline=datetime.now(UTC) + timedelta(minutes=5),
        ),
    )
    bookkeeping = _work(
        rest, cr, waiting, actions.SetNodeStatus(node=waiting, cr=name, status=Status.WAITING)
    )
    outcome = Outcome()
    with executor.applying(cr, outcome) as writes:
        writes.add(start)
        # The pass has not ended, yet its node is recorded and its pod exists.
        wait_for(lambda: _pods_on(rest, namespace, starting), what="pod created mid-pass")
        assert _status(rest, cr, starting) == "in_progress"
        writes.add(bookkeeping)
        quiet_until = time.monotonic() + 0.5
        while time.monotonic() < quiet_until:
            assert _status(rest, cr, waiting) is None, "bookkeeping written before the pass ended"
            time.sleep(0.05)
    assert _status(rest, cr, waiting) == "waiting"
    assert outcome.conflicts == 0
