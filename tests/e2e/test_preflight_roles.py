"""Check mode with real roles on exec-mode nodes: the role's own check mode decides which nodes
are disrupted at all, and drift on a complete node is found and put right
(docs/role-semantics.md, "Would the node change at all? Check mode first").

Each node runs the real agent and real Ansible (``--check --diff``) against its own root
filesystem; a sampler proves which nodes were ever cordoned or rebooted, and the invariant
checker's ``compliant`` rule that no node recorded compliant was disrupted for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_harness import EXEC_REGISTRY, SLOW_TEST_SECONDS, TEST_LABEL, World, wait_for
from node_sampling import NodeSampler

pytestmark = pytest.mark.e2e

GROUP = "e2e.nodewright.io/group"


def root_of(world: World, node: str) -> Path:
    kubelet = world.env.box.kubelet
    assert kubelet is not None
    root = kubelet.nodes[node].root_dir
    assert root is not None
    return root


def wait_complete(world: World, cr: str, generation: int, timeout: float = 300) -> None:
    def done() -> bool:
        status = world.cr_status(cr)
        return status.get("status") == "complete" and status.get("observedGeneration") == generation

    wait_for(done, what=f"{cr} complete at generation {generation}", timeout=timeout)


@pytest.mark.timeout(SLOW_TEST_SECONDS)
def test_check_mode_disrupts_only_the_nodes_that_would_change_and_reboots_only_for_the_handler(
    world: World,
) -> None:
    first = world.add_nodes(2, labels={GROUP: "a"}, prefix="a")
    later = world.add_nodes(2, labels={GROUP: "b"}, prefix="b")
    cr = world.cr_name("pre")
    tune = {"version": "1.0.0", "image": f"{EXEC_REGISTRY}/host-tuning", "preflight": True}
    world.apply_cr(
        cr,
        {
            "nodeSelectors": {"matchLabels": {TEST_LABEL: world.id, GROUP: "a"}},
            "interruptionBudget": {"count": 1},
            "packages": {"tune": tune},
        },
    )
    world.start_controller()
    wait_complete(world, cr, 1)
    for node in first:  # fresh nodes: the kernel command line changes, the handler reboots
        entry = world.state(cr, node)["tune|1.0.0"]
        assert entry["preflight"] == "changes", entry
        assert "Set the kernel command line" in entry["preflightTasks"], entry

    # Widen the selector over the other half with a version bump of the same role: the first
    # half already has it (a no-op bump there), so only the new half is cordoned and rebooted.
    sampler = NodeSampler(world, first + later)
    world.patch_cr(
        cr,
        {
            "spec": {
                "nodeSelectors": {"matchLabels": {GROUP: None}},  # merge patch: drop the key
                "packages": {"tune": {**tune, "version": "1.0.1"}},
            }
        },
    )
    wait_complete(world, cr, 2)
    states = {n: world.state(cr, n) for n in first + later}
    assert sampler.cordoned == set(later), states
    assert sampler.rebooted == set(later), sampler.traces
    for node in first:
        state = world.state(cr, node)
        assert set(state) == {"tune|1.0.1"}, state  # the upgrade replaced the old entry
        assert state["tune|1.0.1"]["preflight"] == "compliant"
    for node in later:
        assert world.state(cr, node)["tune|1.0.1"]["preflight"] == "changes"
    assert world.cr_status(cr)["checks"] == "2 compliant, 2 changing"

    # A vars change that only rewrites the sysctl drop-in: its handler loads it in place, no
    # reboot handler fires, so no node is cordoned.
    sampler.stop()
    sampler = NodeSampler(world, first + later)
    world.patch_cr(
        cr,
        {"spec": {"packages": {"tune": {**tune, "version": "1.0.1", "vars": {
            "host_tuning_sysctls": {"vm.swappiness": 33}}}}}},
    )  # fmt: skip
    wait_complete(world, cr, 3)
    traces = sampler.stop()
    assert sampler.cordoned == set() and sampler.rebooted == set(), traces
    for node in first + later:
        dropin = (root_of(world, node) / "etc/sysctl.d/60-host-tuning.conf").read_text()
        assert "vm.swappiness=33" in dropin
        entry = world.state(cr, node)["tune|1.0.1"]
        assert entry["preflight"] == "changes" and "requested" not in entry, entry


def test_a_shell_task_check_mode_cannot_judge_takes_the_declared_path_with_its_reason(
    world: World,
) -> None:
    (node,) = world.add_nodes(1)
    cr = world.cr_name("shell")
    sampler = NodeSampler(world, [node])
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 1},
            "packages": {
                "initramfs": {
                    "version": "1.0.0",
                    "image": f"{EXEC_REGISTRY}/initramfs",
                    "preflight": True,
                    "interrupt": {"type": "reboot"},
                }
            },
        },
    )
    world.start_controller()
    wait_complete(world, cr, 1)
    entry = world.state(cr, node)["initramfs|1.0.0"]
    assert entry["preflight"] == "unknown", entry
    assert "Rebuild the initramfs" in entry["preflightTasks"][0], entry
    sampler.stop()
    assert sampler.cordoned == {node} and sampler.rebooted == {node}  # the declared reboot
    assert (root_of(world, node) / "var/lib/initramfs-tools/nodewright-stamp").exists()


@pytest.mark.timeout(SLOW_TEST_SECONDS)
def test_drift_on_one_node_is_labelled_reported_and_remediated(world: World) -> None:
    nodes = world.add_nodes(2)
    cr = world.cr_name("drift")
    package = {"version": "1.0.0", "image": f"{EXEC_REGISTRY}/sysctl-tuning"}
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 2},
            "driftDetection": {"interval": "10s"},
            "packages": {"sysctl": package},
        },
    )
    world.start_controller()
    wait_complete(world, cr, 1)
    drifted, steady = nodes
    dropin = root_of(world, drifted) / "etc/sysctl.d/90-node-tuning.conf"
    applied = dropin.read_text()
    dropin.write_text("vm.swappiness=99\n")  # someone edits a file the role manages
    label = f"bridge.nodewright.io/drift-{cr}"

    def labelled(node: str) -> bool:
        return (world.node(node).metadata.labels or {}).get(label) == "true"

    wait_for(lambda: labelled(drifted), what="drift label", timeout=90)  # two intervals + pods
    # the label and the condition come from the same pass: the status write follows the node's
    wait_for(
        lambda: (world.condition(cr, "Drifted") or {}).get("status") == "True",
        what="Drifted True",
        timeout=30,
    )
    condition = world.condition(cr, "Drifted")
    assert condition is not None
    assert f"first: {drifted}, package sysctl" in condition["message"], condition
    assert not labelled(steady)

    sampler = NodeSampler(world, nodes)
    world.patch_cr(cr, {"spec": {"driftDetection": {"interval": "10s", "remediate": True}}})
    wait_for(lambda: dropin.read_text() == applied, what="the file restored", timeout=120)
    wait_for(lambda: not labelled(drifted), what="drift label removed", timeout=120)
    wait_for(
        lambda: (world.condition(cr, "Drifted") or {}).get("status") == "False",
        what="Drifted False",
    )
    sampler.stop()
    assert sampler.cordoned == set() and sampler.rebooted == set(), sampler.traces
    assert world.state(cr, drifted)["sysctl|1.0.0"]["preflight"] == "drifted"
