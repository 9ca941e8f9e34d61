"""Two rollouts on the same nodes disrupt each node once (docs/architecture.md, "Several rollouts
on one node"): the later CR joins the earlier one's cordon, applies after it, and one reboot
serves both. A sampler (every 0.25 s) proves no schedulable gap and exactly one new bootID."""

from __future__ import annotations

import pytest
from e2e_harness import EXEC_REGISTRY, World, wait_for
from node_sampling import NodeSampler
from test_interrupts import deployment, ready_pods

pytestmark = pytest.mark.e2e


def test_two_reboot_rollouts_on_the_same_nodes_cordon_drain_and_reboot_each_node_once(
    world: World,
) -> None:
    nodes = world.add_nodes(2)
    ns = world.namespace()
    deployment(world, ns, "web", 2)
    wait_for(lambda: len(ready_pods(world, ns, "web")) == 2, what="web pods ready")
    driver, tuning = world.cr_name("driver"), world.cr_name("tuning")
    world.apply_cr(
        driver,
        {
            "priority": 100,
            "interruptionBudget": {"count": 1},
            "drain": {"force": True},
            "packages": {
                "grub": {
                    "version": "2.0.1",
                    "image": f"{EXEC_REGISTRY}/grub-params",
                    "interrupt": {"type": "reboot"},
                }
            },
        },
    )
    world.apply_cr(
        tuning,
        {
            "priority": 200,
            "interruptionBudget": {"count": 2},
            "drain": {"force": True},
            "packages": {
                "sysctl": {
                    "version": "1.0.0",
                    "image": f"{EXEC_REGISTRY}/sysctl-tuning",
                    "interrupt": {"type": "reboot"},
                }
            },
        },
    )
    sampler = NodeSampler(world, nodes)
    world.start_controller()
    try:
        wait_for(
            lambda: all(world.cr_status(cr).get("status") == "complete" for cr in (driver, tuning)),
            what="both rollouts complete",
            timeout=400,
        )
        # The sampler keeps going until the last uncordon is seen (it follows the status write).
        wait_for(
            lambda: not any(world.node(n).spec.unschedulable for n in nodes), what="uncordoned"
        )
    finally:
        traces = sampler.stop()
    for node in nodes:
        trace = traces[node]
        assert trace.cordoned_once(), f"{node} schedulable between the rollouts: {trace.runs()}"
        assert len(trace.boots) == 2, f"{node} booted {trace.boots}"
        grub = world.state(driver, node)["grub|2.0.1"]
        sysctl = world.state(tuning, node)["sysctl|1.0.0"]
        assert grub["mergedWith"] == [tuning]
        assert (sysctl["stage"], sysctl["state"]) == ("post-interrupt", "complete")
    kubelet = world.env.box.kubelet
    assert kubelet is not None
    for node in nodes:
        root = kubelet.nodes[node].root_dir
        assert root is not None
        assert "intel_iommu=on" in (root / "etc/default/grub").read_text()
