"""Restart safety and leader election with real ``nwb controller`` processes: a controller
killed (SIGKILL) at several points of an interrupt rollout is replaced and the rollout finishes
with exactly one reboot per node and no cordon left behind; two replicas never both act."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from e2e_harness import EXEC_REGISTRY, SIM_REGISTRY, SLOW_TEST_SECONDS, World, wait_for
from test_interrupts import BootWatcher

pytestmark = pytest.mark.e2e

LEASE = "nodewright-bridge-controller"


def grub_cr(world: World, name: str) -> None:
    world.apply_cr(
        name,
        {
            "interruptionBudget": {"count": 1},
            "packages": {
                "grub": {
                    "version": "2.0.1",
                    "image": f"{EXEC_REGISTRY}/grub-params",
                    "interrupt": {"type": "reboot"},
                }
            },
        },
    )


def entry(world: World, cr: str, node: str) -> dict[str, Any]:
    return dict(world.state(cr, node).get("grub|2.0.1") or {})


KILL_POINTS = {
    "after-cordon": lambda w, cr, n: "bridge.nodewright.io/cordon" in w.annotations(n),
    "apply-running": lambda w, cr, n: (
        entry(w, cr, n).get("stage") == "apply" and entry(w, cr, n).get("attempts") == 1
    ),
    "interrupt-recorded": lambda w, cr, n: entry(w, cr, n).get("stage") == "interrupt",
    "between-interrupt-and-post-interrupt": lambda w, cr, n: (
        entry(w, cr, n).get("stage") == "interrupt" and len(set(w.boot_ids_seen)) > 1
    ),
}


@pytest.mark.timeout(SLOW_TEST_SECONDS)
@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_a_controller_killed_mid_rollout_is_replaced_without_a_second_reboot(
    world: World, point: str
) -> None:
    (node,) = world.add_nodes(1)
    cr = world.cr_name("kill")
    grub_cr(world, cr)
    boots = BootWatcher(world, node)
    world.boot_ids_seen = boots.seen  # type: ignore[attr-defined]
    first = world.spawn_controller("first")
    wait_for(lambda: KILL_POINTS[point](world, cr, node), what=f"kill point {point}", timeout=240)
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    world.spawn_controller("second")
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="complete", timeout=300)
    seen = boots.stop()
    assert len(seen) == 2, f"expected exactly one reboot, saw boot IDs {list(seen)}"
    done = entry(world, cr, node)
    assert (done["stage"], done["state"]) == ("post-interrupt", "complete")
    node_obj = world.node(node)
    assert not node_obj.spec.unschedulable
    assert "bridge.nodewright.io/cordon" not in (node_obj.metadata.annotations or {})


def created_pods(log: Path) -> int:
    count = 0
    for line in log.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if (
            record.get("message") == "package pod created"
            or record.get("msg") == "package pod created"
        ):
            count += 1
    return count


@pytest.mark.timeout(SLOW_TEST_SECONDS)
def test_two_replicas_never_both_act_and_the_standby_takes_over(world: World) -> None:
    nodes = world.add_nodes(2)
    a = world.spawn_controller("replica-a")
    time.sleep(1.0)
    b = world.spawn_controller("replica-b")
    log_a, log_b = world.logs

    def holder() -> str:
        try:
            lease = world.env.coordination.read_namespaced_lease(LEASE, "nodewright-system")
        except Exception:
            return ""
        return str(lease.spec.holder_identity or "")

    leader_name = wait_for(
        lambda: (h := holder()) and (h.startswith("replica-a") or h.startswith("replica-b")) and h,
        what="a leader",
        timeout=90,
    )
    leader, standby = (a, b) if leader_name.startswith("replica-a") else (b, a)
    leader_log, standby_log = (log_a, log_b) if leader is a else (log_b, log_a)
    cr = world.cr_name("ha")
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 2},
            "packages": {"tune": {"version": "1.0.0", "image": f"{SIM_REGISTRY}/tune"}},
        },
    )
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="complete", timeout=120)
    assert created_pods(leader_log) >= len(nodes)
    assert created_pods(standby_log) == 0
    leader.send_signal(signal.SIGKILL)
    leader.wait(30)
    world.patch_cr(cr, {"spec": {"packages": {"tune": {"version": "1.1.0"}}}})
    wait_for(
        lambda: all(
            world.state(cr, n).get("tune|1.1.0", {}).get("state") == "complete" for n in nodes
        ),
        what="standby finishes the upgrade",
        timeout=180,
    )
    assert created_pods(standby_log) >= len(nodes)
    assert standby.poll() is None
