"""Check-mode preflight on simulated nodes: compliant nodes are recorded complete without a cordon
or a batch slot, the others follow the paced path (``lifecycle.preflight``).

The simulated kubelet's check pods report nothing to change unless the node carries the label
``sandbox.nodewright.io/would-change`` (the real agent's check mode is covered on exec-mode nodes
in ``test_preflight_roles.py``).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from e2e_harness import SIM_REGISTRY, World, wait_for

from nodewright_bridge.cli import main

pytestmark = pytest.mark.e2e

WOULD_CHANGE = "sandbox.nodewright.io/would-change"


def test_only_the_nodes_that_would_change_are_cordoned_and_interrupted(world: World) -> None:
    spared = world.add_nodes(3, prefix="ok")
    changing = world.add_nodes(2, labels={WOULD_CHANGE: "true"}, prefix="chg")
    cr = world.cr_name("pre")
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 1},
            "packages": {
                "tune": {
                    "version": "1.0.0",
                    "image": f"{SIM_REGISTRY}/tune",
                    "preflight": True,
                    "interrupt": {"type": "service", "services": ["tuned"]},
                }
            },
        },
    )
    world.start_controller()
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="complete", timeout=180)

    for node in spared:
        entry = world.state(cr, node)["tune|1.0.0"]
        assert (entry["state"], entry["preflight"]) == ("complete", "compliant"), entry
        assert f"bridge.nodewright.io/batch-{cr}" not in world.annotations(node)  # no slot
    for node in changing:
        entry = world.state(cr, node)["tune|1.0.0"]
        assert (entry["stage"], entry["state"]) == ("post-interrupt", "complete"), entry
        assert entry["preflight"] == "changes" and entry["preflightTasks"] == ["simulated change"]
    events = world.core.list_namespaced_event(
        "default", field_selector="reason=PreflightCompliant"
    ).items
    assert sorted(e.involved_object.name for e in events if cr in e.message) == sorted(spared)
    status = world.cr_status(cr)
    assert status["completeNodes"] == "5/5"
    assert status["checks"] == "3 compliant, 2 changing"
    assert status["compartments"]["__default__"]["checks"] == {
        "compliant": 3,
        "changing": 2,
        "unknown": 0,
    }

    # what nwb plan --live and nwb status show of it
    kube = ["--kubeconfig", str(world.env.kubeconfig)]
    live = CliRunner().invoke(main, ["plan", "--live", "--name", cr, "-o", "json", *kube])
    assert live.exit_code == 0, live.output
    nodes = json.loads(live.stdout)["nodes"]
    assert {n: nodes[n]["check"] for n in spared + changing} == {
        **dict.fromkeys(spared, "compliant"),
        **dict.fromkeys(changing, "changing"),
    }
    shown = CliRunner().invoke(main, ["status", cr, "-o", "json", *kube])
    view = json.loads(shown.stdout)
    assert view["checks"] == "3 compliant, 2 changing"
    assert view["compartments"]["__default__"]["checks"] == "3 compliant, 2 changing"
    assert {view["nodes"][n]["check"] for n in spared} == {"compliant"}
