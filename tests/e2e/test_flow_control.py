"""Flow control between and around rollouts, on the sandbox with simulated package pods:
priority/sequencing between CRs, pause and disable, the ignore label, untolerated taints."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from e2e_harness import SIM_DURATION_ENV, SIM_REGISTRY, World, wait_for

pytestmark = pytest.mark.e2e

PAUSE = "bridge.nodewright.io/pause"
DISABLE = "bridge.nodewright.io/disable"
IGNORE = "bridge.nodewright.io/ignore"


def sim_package(name: str, seconds: float = 1.0, **extra: Any) -> dict[str, Any]:
    """A simulated package whose pods succeed after ``seconds``."""
    return {
        "version": "1.0.0",
        "image": f"{SIM_REGISTRY}/{name}",
        "env": [{"name": SIM_DURATION_ENV, "value": f"{seconds}s"}],
        **extra,
    }


class Sampler:
    """Calls ``probe`` every 0.1 s on a thread until stopped; ``probe`` records what it sees."""

    def __init__(self, probe: Callable[[], None]) -> None:
        self.errors: list[BaseException] = []
        self._probe = probe
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self._probe()
            except Exception as exc:  # the API may be slow under load; keep sampling
                self.errors.append(exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def status_labels(world: World, cr: str) -> dict[str, str | None]:
    key = f"bridge.nodewright.io/status-{cr}"
    items = world.core.list_node(label_selector=f"e2e.nodewright.io/test={world.id}").items
    return {n.metadata.name: (n.metadata.labels or {}).get(key) for n in items}


def pods_by_node(world: World, cr: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for pod in world.package_pods(cr):
        out.setdefault(pod.spec.node_name, set()).add(pod.metadata.name)
    return out


def complete(world: World, cr: str) -> bool:
    return world.cr_status(cr).get("status") == "complete"


# ---- priority and sequencing ------------------------------------------------------------------


def test_a_later_cr_starts_on_a_node_only_once_the_earlier_node_sequenced_cr_is_complete_there(
    world: World,
) -> None:
    nodes = world.add_nodes(2)
    first, second = world.cr_name("first"), world.cr_name("second")
    # "second" sorts before "first" by name; priority must win.
    world.apply_cr(
        first,
        {
            "priority": 100,
            "sequencing": "node",
            "interruptionBudget": {"count": 1},
            "packages": {"driver": sim_package("driver", 4)},
        },
    )
    world.apply_cr(
        second,
        {
            "priority": 200,
            "interruptionBudget": {"count": 2},
            "packages": {"tune": sim_package("tune")},
        },
    )
    violations: list[str] = []
    overlap: list[str] = []  # second working on a node while first still works on another
    second_waiting: list[bool] = []

    def probe() -> None:
        pods = pods_by_node(world, second)
        firsts = status_labels(world, first)
        for node in pods:
            if firsts.get(node) != "complete":
                violations.append(f"{second} pod on {node} while {first} is {firsts.get(node)}")
            elif any(s != "complete" for s in firsts.values()):
                overlap.append(node)
        # Nodes the later CR has not reached carry no label for it (``nwb status`` shows them
        # waiting); the CR's status says it waits.
        second_waiting.append(world.cr_status(second).get("status") == "waiting")

    sampler = Sampler(probe)
    world.start_controller()
    try:
        wait_for(lambda: complete(world, first) and complete(world, second), what="both complete")
    finally:
        sampler.stop()
    assert not violations, violations[:5]
    assert overlap, "sequencing=node should let the later CR start where the earlier one is done"
    assert any(second_waiting), "the later CR never reported waiting"
    assert all(world.node_status(second, n) == "complete" for n in nodes)


def test_an_earlier_cr_with_sequencing_all_keeps_the_later_cr_waiting_until_done_everywhere(
    world: World,
) -> None:
    world.add_nodes(2)
    first, second = world.cr_name("all"), world.cr_name("after")
    world.apply_cr(
        first,
        {
            "priority": 100,
            "sequencing": "all",
            "interruptionBudget": {"count": 1},
            "packages": {"driver": sim_package("driver", 3)},
        },
    )
    world.apply_cr(second, {"priority": 200, "packages": {"tune": sim_package("tune")}})
    violations: list[str] = []
    seen_status: list[str] = []

    def probe() -> None:
        pods = pods_by_node(world, second)
        firsts = status_labels(world, first)
        if pods and any(s != "complete" for s in firsts.values()):
            violations.append(f"{second} pods on {sorted(pods)} while {first} is {firsts}")
        seen_status.append(str(world.cr_status(second).get("status")))

    sampler = Sampler(probe)
    world.start_controller()
    try:
        wait_for(lambda: complete(world, first) and complete(world, second), what="both complete")
    finally:
        sampler.stop()
    assert not violations, violations[:5]
    assert "waiting" in seen_status, seen_status
    ready = world.condition(second, "Ready")
    assert ready is not None and ready["status"] == "True"


# ---- pause and disable ----------------------------------------------------------------------


def annotate_while_a_pod_runs(world: World, name: str, annotation: str) -> tuple[str, str, str]:
    """Two nodes, one at a time, 4 s pods: set ``annotation`` while the first pod runs.
    Returns (cr, the node with the running pod, the other node)."""
    nodes = world.add_nodes(2)
    cr = world.cr_name(name)
    world.apply_cr(
        cr, {"interruptionBudget": {"count": 1}, "packages": {"tune": sim_package("tune", 4)}}
    )
    world.start_controller()
    (busy,) = wait_for(lambda: list(pods_by_node(world, cr)), what="first pod created")
    (idle,) = [n for n in nodes if n != busy]
    world.patch_cr(cr, {"metadata": {"annotations": {annotation: "true"}}})
    return cr, busy, idle


def test_a_paused_cr_lets_running_pods_finish_starts_nothing_new_and_resumes_when_unpaused(
    world: World,
) -> None:
    cr, busy, idle = annotate_while_a_pod_runs(world, "pausable", PAUSE)

    wait_for(lambda: world.cr_status(cr).get("status") == "paused", what="CR paused")
    # The pod that was running finishes and its result is recorded ...
    wait_for(lambda: world.node_status(cr, busy) == "complete", what="running pod recorded")
    wait_for(lambda: world.node_status(cr, idle) == "paused", what="other node paused")
    # ... and nothing new starts while paused.
    with pytest.raises(AssertionError):
        wait_for(lambda: idle in pods_by_node(world, cr), timeout=4, what="no pod while paused")
    assert world.cr_status(cr)["status"] == "paused"
    ready = world.condition(cr, "Ready")
    assert ready is not None and ready["reason"] == "Paused"

    world.patch_cr(cr, {"metadata": {"annotations": {PAUSE: None}}})
    wait_for(lambda: complete(world, cr), what="complete after resume")
    assert world.node_status(cr, idle) == "complete"


def test_a_disabled_cr_starts_nothing_and_later_crs_proceed_as_if_it_did_not_exist(
    world: World,
) -> None:
    nodes = world.add_nodes(2)
    off, later = world.cr_name("off"), world.cr_name("later")
    world.apply_cr(
        off,
        {"priority": 100, "sequencing": "all", "packages": {"driver": sim_package("driver")}},
        annotations={DISABLE: "true"},
    )
    world.apply_cr(later, {"priority": 200, "packages": {"tune": sim_package("tune")}})
    world.start_controller()
    wait_for(lambda: complete(world, later), what="later CR complete")
    wait_for(lambda: world.cr_status(off).get("status") == "disabled", what="disabled status")
    assert world.package_pods(off) == []
    assert all(world.state(off, n) == {} for n in nodes)
    assert {world.node_status(off, n) for n in nodes} == {"disabled"}
    ready = world.condition(off, "Ready")
    assert ready is not None and ready["reason"] == "Disabled"

    world.patch_cr(off, {"metadata": {"annotations": {DISABLE: None}}})
    wait_for(lambda: complete(world, off), what="complete once enabled")


def test_a_cr_disabled_while_a_pod_runs_records_its_result_and_starts_nothing_new(
    world: World,
) -> None:
    cr, busy, idle = annotate_while_a_pod_runs(world, "switched", DISABLE)
    wait_for(lambda: world.cr_status(cr).get("status") == "disabled", what="CR disabled")

    def recorded() -> bool:
        entry = world.state(cr, busy).get("tune|1.0.0") or {}
        return entry.get("state") == "complete" and busy not in pods_by_node(world, cr)

    # The running pod's result is recorded and the pod removed while the CR stays disabled ...
    wait_for(recorded, what="the running pod's result recorded while disabled")
    assert world.node_status(cr, busy) == "disabled"
    # ... and nothing new starts.
    with pytest.raises(AssertionError):
        wait_for(lambda: idle in pods_by_node(world, cr), timeout=4, what="no pod while disabled")
    assert world.state(cr, idle) == {}

    world.patch_cr(cr, {"metadata": {"annotations": {DISABLE: None}}})
    wait_for(lambda: complete(world, cr), what="complete once enabled")
    assert world.node_status(cr, busy) == "complete"


# ---- ignore label and taints ----------------------------------------------------------------


def test_ignored_nodes_are_skipped_and_untolerated_taints_block_until_tolerated(
    world: World,
) -> None:
    (plain,) = world.add_nodes(1, prefix="p")
    (ignored,) = world.add_nodes(1, labels={IGNORE: "true"}, prefix="i")
    (tainted,) = world.add_nodes(1, prefix="t")
    taint = {"key": "e2e.nodewright.io/dedicated", "value": "gpu", "effect": "NoSchedule"}
    world.core.patch_node(tainted, {"spec": {"taints": [taint]}})
    cr = world.cr_name("picky")
    world.apply_cr(
        cr, {"interruptionBudget": {"count": 3}, "packages": {"tune": sim_package("tune")}}
    )
    world.start_controller()

    wait_for(lambda: world.node_status(cr, plain) == "complete", what="plain node complete")

    def conditions_set() -> bool:
        ignored_c = world.condition(cr, "NodesIgnored")
        taint_c = world.condition(cr, "TaintNotTolerable")
        return bool(
            ignored_c and ignored_c["status"] == "True" and taint_c and taint_c["status"] == "True"
        )

    wait_for(conditions_set, what="NodesIgnored and TaintNotTolerable")
    ignored_c = world.condition(cr, "NodesIgnored")
    taint_c = world.condition(cr, "TaintNotTolerable")
    assert ignored_c is not None and ignored in ignored_c["message"]
    assert taint_c is not None and tainted in taint_c["message"]
    assert plain not in taint_c["message"] and tainted not in ignored_c["message"]
    assert set(pods_by_node(world, cr)) <= {plain}
    assert world.state(cr, ignored) == {} and world.state(cr, tainted) == {}
    # Never picked, so blocked (not waiting), and the CR with them.
    wait_for(lambda: world.node_status(cr, ignored) == "blocked", what="ignored node blocked")
    wait_for(lambda: world.node_status(cr, tainted) == "blocked", what="tainted node blocked")
    wait_for(lambda: world.cr_status(cr).get("status") == "blocked", what="CR blocked")

    world.patch_cr(
        cr,
        {
            "spec": {
                "additionalTolerations": [
                    {
                        "key": "e2e.nodewright.io/dedicated",
                        "operator": "Exists",
                        "effect": "NoSchedule",
                    }
                ]
            }
        },
    )
    wait_for(lambda: world.node_status(cr, tainted) == "complete", what="tainted node complete")

    def tolerated() -> bool:
        cond = world.condition(cr, "TaintNotTolerable")
        return bool(cond and cond["status"] == "False")

    wait_for(tolerated, what="TaintNotTolerable cleared")
    assert world.state(cr, ignored) == {}
    assert world.node_status(cr, ignored) == "blocked"
    ignored_c = world.condition(cr, "NodesIgnored")
    assert ignored_c is not None and ignored_c["status"] == "True"
