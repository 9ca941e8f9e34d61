"""Two rollouts on the same nodes disrupt each node once (docs/architecture.md, "Several rollouts
on one node"): the later CR joins the earlier one's cordon, applies after it, and one reboot
serves both. A sampler (every 0.25 s) proves no schedulable gap and exactly one new bootID."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest
from e2e_harness import EXEC_REGISTRY, World, wait_for
from test_interrupts import deployment, ready_pods

pytestmark = pytest.mark.e2e

SAMPLE_SECONDS = 0.25


@dataclass
class NodeTrace:
    unschedulable: list[bool] = field(default_factory=list)
    boots: list[str] = field(default_factory=list)

    def cordoned_once(self) -> bool:
        """One unbroken cordoned stretch (the final uncordon is checked on the node itself)."""
        trace = self.unschedulable
        if True not in trace:
            return False
        first = trace.index(True)
        last = len(trace) - 1 - trace[::-1].index(True)
        return all(trace[first : last + 1])

    def runs(self) -> list[tuple[bool, int]]:
        """The trace as (value, samples) runs, for a readable failure."""
        out: list[tuple[bool, int]] = []
        for value in self.unschedulable:
            if out and out[-1][0] == value:
                out[-1] = (value, out[-1][1] + 1)
            else:
                out.append((value, 1))
        return out


class NodeSampler:
    """Reads every node's unschedulable flag and bootID every SAMPLE_SECONDS on a thread."""

    def __init__(self, world: World, nodes: list[str]) -> None:
        self.world = world
        self.traces = {n: NodeTrace() for n in nodes}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        selector = f"e2e.nodewright.io/test={self.world.id}"
        while not self._stop.wait(SAMPLE_SECONDS):
            try:
                items = self.world.core.list_node(label_selector=selector).items
            except Exception:  # the API may be slow under load; keep sampling
                continue
            for node in items:
                trace = self.traces.get(node.metadata.name)
                if trace is None:
                    continue
                trace.unschedulable.append(bool(node.spec.unschedulable))
                boot = node.status.node_info.boot_id
                if not trace.boots or trace.boots[-1] != boot:
                    trace.boots.append(boot)

    def stop(self) -> dict[str, NodeTrace]:
        self._stop.set()
        self._thread.join(10)
        return self.traces


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
