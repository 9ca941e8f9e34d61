"""A hardening-style role through a whole rollout: it works on the simulated nodes and only there.

The test role ``harden-mounts`` remounts ``/run`` and ``/dev/shm`` with ``nosuid,nodev,noexec``
(``ansible.posix.mount`` state=remounted) and persists ``kernel.dmesg_restrict`` in
``/etc/sysctl.d``; its verify stage fails unless ``/proc``, ``/sys``, ``/dev``, ``/dev/shm``,
``/run`` and ``/tmp`` are mount points and the hardened options are live. It runs with the real
agent on exec-mode nodes; afterwards this machine's own mounts and kernel setting must be as
before.
"""

from __future__ import annotations

import pytest
from e2e_harness import EXEC_REGISTRY, World, wait_for
from machine_guard import host_sysctl, machine_mounts

from nodewright_bridge.sandbox import isolation
from nodewright_bridge.sandbox.kubelet.noderoots import NodeRoots

pytestmark = pytest.mark.e2e

DMESG_RESTRICT = "kernel/dmesg_restrict"
DROP_IN = "etc/sysctl.d/60-nwb-harden-mounts.conf"


def test_a_hardening_role_completes_on_its_nodes_and_leaves_the_machine_alone(
    world: World,
) -> None:
    machine_before = machine_mounts()
    dmesg_before = host_sysctl(DMESG_RESTRICT)
    wanted = "0" if dmesg_before == "1" else "1"  # a leak would show on the machine
    nodes = world.add_nodes(2)
    cr = world.cr_name("harden")
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 2},
            "packages": {
                "harden-mounts": {
                    "version": "1.0.0",
                    "image": f"{EXEC_REGISTRY}/harden-mounts",
                    "vars": {"harden_mounts_dmesg_restrict": wanted},
                }
            },
        },
    )
    world.start_controller()
    wait_for(
        lambda: world.cr_status(cr).get("status") in ("complete", "erroring"),
        what="CR complete",
        timeout=300,
    )
    status = world.cr_status(cr)
    assert status["status"] == "complete", status.get("recentFailures")
    assert status["completeNodes"] == "2/2"

    assert host_sysctl(DMESG_RESTRICT) == dmesg_before
    assert machine_mounts() == machine_before
    kubelet = world.env.box.kubelet
    assert kubelet is not None
    for name in nodes:
        assert world.node_status(cr, name) == "complete"
        node = kubelet.nodes[name]
        assert node.root_dir is not None
        lines = (node.root_dir / DROP_IN).read_text().splitlines()
        assert f"kernel.dmesg_restrict={wanted}" in lines
        stand_in = NodeRoots.isolation_state(node) / isolation.PROC_SYS_DIR / DMESG_RESTRICT
        assert stand_in.read_text().strip() == wanted  # the node's own kernel has it
