"""Letting go cleanly: a CR deleted while paused or disabled with uninstall work pending reports
``DeletionBlocked`` (and a Warning event) until it is unblocked, and a node that stops being
targeted while we hold its cordon is released - uncordoned unless a human cordoned it, and every
annotation and label of that CR removed (no cordon leak)."""

from __future__ import annotations

import json
import threading

import pytest
from e2e_harness import SIM_DURATION_ENV, SIM_REGISTRY, World, wait_for

pytestmark = pytest.mark.e2e

PICK = "e2e.nodewright.io/pick"
CORDON = "bridge.nodewright.io/cordon"


def ours(world: World, cr: str, node: str) -> dict[str, str]:
    """Annotations and labels of ``cr`` (and its cordon hold) still on ``node``."""
    meta = world.node(node).metadata
    found = {
        k: v
        for k, v in {**(meta.annotations or {}), **(meta.labels or {})}.items()
        if k.startswith("bridge.nodewright.io/") and k.endswith(f"-{cr}")
    }
    cordon = (meta.annotations or {}).get(CORDON)
    if cordon and cr in json.loads(cordon).get("holders", []):
        found[CORDON] = cordon
    return found


@pytest.mark.parametrize(
    ("annotation", "reason"),
    [
        ("bridge.nodewright.io/pause", "PausedWithPendingUninstall"),
        ("bridge.nodewright.io/disable", "DisabledWithPendingUninstall"),
    ],
)
def test_deleting_a_paused_or_disabled_cr_with_uninstall_pending_is_blocked_until_unblocked(
    world: World, annotation: str, reason: str
) -> None:
    (node,) = world.add_nodes(1)
    cr = world.cr_name("held")
    world.apply_cr(
        cr,
        {
            "packages": {
                "tune": {
                    "version": "1.0.0",
                    "image": f"{SIM_REGISTRY}/tune",
                    "env": [{"name": SIM_DURATION_ENV, "value": "3s"}],
                    "uninstall": {"enabled": True},
                }
            }
        },
    )
    world.start_controller()
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="installed")
    world.patch_cr(cr, {"metadata": {"annotations": {annotation: "true"}}})
    world.custom.delete_cluster_custom_object("bridge.nodewright.io", "v1alpha1", "nodewrights", cr)

    def blocked() -> bool:
        cond = world.condition(cr, "DeletionBlocked")
        return bool(cond and cond["status"] == "True")

    wait_for(blocked, what="DeletionBlocked")
    cond = world.condition(cr, "DeletionBlocked")
    assert cond is not None and cond["reason"] == reason, cond
    assert node in cond["message"], cond
    events = world.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={cr}"
    ).items
    assert any(e.reason == "DeletionBlocked" and e.type == "Warning" for e in events), [
        (e.reason, e.type) for e in events
    ]
    # Blocked means blocked: nothing runs, the package stays recorded, the CR stays.
    with pytest.raises(AssertionError):
        wait_for(lambda: world.package_pods(cr), timeout=3, what="no uninstall pod while held")
    assert "tune|1.0.0" in world.state(cr, node)
    assert not world.cr_gone(cr)

    seen: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.1):
            try:
                cond = world.condition(cr, "DeletionBlocked")
            except Exception:  # gone (404) or a slow read
                continue
            if cond is not None:
                seen.append(cond["status"])

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    world.patch_cr(cr, {"metadata": {"annotations": {annotation: None}}})
    try:
        wait_for(lambda: world.cr_gone(cr), what="CR deleted after the uninstall")
    finally:
        stop.set()
        watcher.join(10)
    assert "False" in seen, f"DeletionBlocked was never cleared while the uninstall ran: {seen}"
    assert ours(world, cr, node) == {}


def test_a_node_that_stops_being_targeted_is_released_without_leaking_the_cordon(
    world: World,
) -> None:
    free, held = world.add_nodes(2, labels={PICK: "yes"})
    world.core.patch_node(held, {"spec": {"unschedulable": True}})  # a human's cordon
    cr = world.cr_name("leaver")
    world.apply_cr(
        cr,
        {
            "nodeSelectors": {"matchLabels": {**world.labels, PICK: "yes"}},
            "interruptionBudget": {"count": 2},
            "packages": {
                "svc": {
                    "version": "1.0.0",
                    "image": f"{SIM_REGISTRY}/svc",
                    "env": [{"name": SIM_DURATION_ENV, "value": "4s"}],
                    "interrupt": {"type": "service", "services": ["kubelet"]},
                }
            },
        },
    )
    world.start_controller()

    def working() -> bool:
        nodes = {p.spec.node_name for p in world.package_pods(cr)}
        return {free, held} <= nodes and all(CORDON in ours(world, cr, n) for n in (free, held))

    wait_for(working, what="both nodes cordoned by the CR and running its pods")
    assert world.node(free).spec.unschedulable
    for node in (free, held):
        world.core.patch_node(node, {"metadata": {"labels": {PICK: None}}})

    wait_for(lambda: ours(world, cr, free) == {}, what="free node released")
    wait_for(lambda: ours(world, cr, held) == {}, what="held node released")
    assert not world.node(free).spec.unschedulable, "our cordon leaked"
    assert world.node(held).spec.unschedulable, "a human's cordon was lifted"
    assert CORDON not in (world.node(free).metadata.annotations or {})
    wait_for(lambda: world.package_pods(cr) == [], what="its pods gone")
