"""A rollout end to end with the real agent: pods on every targeted node, state on the Nodes,
status on the CR, and the role's effect inside each node's root."""

from __future__ import annotations

import pytest
from e2e_harness import EXEC_REGISTRY, World, wait_for

pytestmark = pytest.mark.e2e


def test_a_package_reaches_every_targeted_node_and_the_cr_reports_complete(world: World) -> None:
    nodes = world.add_nodes(2)
    world.add_nodes(1, labels={"e2e.nodewright.io/other": "yes"}, prefix="x")  # targeted too
    other = world.add_nodes(0)
    cr = world.cr_name("probe")
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 2},
            "packages": {
                "probe": {
                    "version": "1.0.0",
                    "image": f"{EXEC_REGISTRY}/probe",
                    "vars": {"probe_value": "hello"},
                }
            },
        },
    )
    world.start_controller()
    wait_for(
        lambda: world.cr_status(cr).get("status") == "complete", what="CR complete", timeout=240
    )
    status = world.cr_status(cr)
    assert status["completeNodes"] == "3/3"
    assert status["observedGeneration"] == 1
    ready = world.condition(cr, "Ready")
    assert ready is not None and ready["status"] == "True" and ready["reason"] == "NodesConverged"
    kubelet = world.env.box.kubelet
    assert kubelet is not None
    for name in nodes:
        entry = world.state(cr, name)["probe|1.0.0"]
        assert (entry["stage"], entry["state"]) == ("config", "complete")
        assert world.node_status(cr, name) == "complete"
        root = kubelet.nodes[name].root_dir
        assert root is not None and (root / "etc/nwb-probe").read_text() == "hello\n"
        assert not world.node(name).spec.unschedulable
    assert other == []
    wait_for(
        lambda: not [p for p in world.package_pods(cr) if p.status.phase == "Succeeded"],
        what="finished pods deleted",
    )
