"""runtimeRequired + autoTaintNewNodes: a new node is tainted, the package runs despite the taint,
and the taint is removed once the node is complete; events are posted on the CR and the Node."""

from __future__ import annotations

import pytest
from e2e_harness import SIM_REGISTRY, World, wait_for
from prometheus_client import generate_latest

pytestmark = pytest.mark.e2e

TAINT = "bridge.nodewright.io/runtime-required"


def taint_keys(world: World, node: str) -> set[str]:
    return {t.key for t in world.node(node).spec.taints or []}


def test_new_nodes_are_tainted_until_the_runtime_required_packages_complete(world: World) -> None:
    (node,) = world.add_nodes(1)
    cr = world.cr_name("rt")
    world.apply_cr(
        cr,
        {
            "runtimeRequired": True,
            "autoTaintNewNodes": True,
            "packages": {"tune": {"version": "1.0.0", "image": f"{SIM_REGISTRY}/tune"}},
        },
    )
    seen_tainted = []
    ctl = world.start_controller()

    def complete() -> bool:
        seen_tainted.append(TAINT in taint_keys(world, node))
        return world.cr_status(cr).get("status") == "complete"

    wait_for(complete, what="complete", timeout=120)
    assert any(seen_tainted), "the new node was never tainted"
    wait_for(lambda: TAINT not in taint_keys(world, node), what="taint removed")
    assert world.annotations(node).get("bridge.nodewright.io/auto-taint") == "true"
    events = world.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={node}"
    ).items
    reasons = {e.reason for e in events}
    assert "AutoTainted" in reasons, reasons
    # Completion is told per batch and per rollout on the CR, not once per node.
    told = world.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={cr}"
    ).items
    assert {"BatchComplete", "RolloutComplete"} <= {e.reason for e in told}, told
    text = generate_latest(ctl.metrics.registry).decode()
    assert f'nwb_rollout_progress_percent{{compartment="__default__",cr="{cr}"}} 100.0' in text or (
        f'nwb_rollout_progress_percent{{cr="{cr}",compartment="__default__"}} 100.0' in text
    )
    assert f'nwb_pods_created_total{{cr="{cr}",kind="package"}} 1.0' in text
