"""Letting go cleanly: a CR deleted while paused or disabled with uninstall work pending, or while
a node's state annotation does not parse, reports ``DeletionBlocked`` (and a Warning event) until
it is unblocked; a node that stops being targeted while we hold its cordon is released -
uncordoned unless a human cordoned it, and every annotation and label of that CR removed (no
cordon leak) - and loses the runtime-required taint unless another CR still needs it."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from e2e_harness import SIM_DURATION_ENV, SIM_REGISTRY, World, wait_for

pytestmark = pytest.mark.e2e

PICK = "e2e.nodewright.io/pick"
CORDON = "bridge.nodewright.io/cordon"
TAINT = "bridge.nodewright.io/runtime-required"


def taint_keys(world: World, node: str) -> set[str]:
    return {t.key for t in world.node(node).spec.taints or []}


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


def delete_until_blocked(world: World, cr: str) -> dict[str, Any] | None:
    """Delete the CR and wait for DeletionBlocked=True; the condition."""
    world.custom.delete_cluster_custom_object("bridge.nodewright.io", "v1alpha1", "nodewrights", cr)

    def blocked() -> bool:
        cond = world.condition(cr, "DeletionBlocked")
        return bool(cond and cond["status"] == "True")

    wait_for(blocked, what="DeletionBlocked")
    return world.condition(cr, "DeletionBlocked")


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
    cond = delete_until_blocked(world, cr)
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


def test_deleting_a_cr_while_a_node_state_does_not_parse_is_blocked_until_it_is_fixed(
    world: World,
) -> None:
    bad, good = world.add_nodes(2)
    cr = world.cr_name("garbled")
    key = f"bridge.nodewright.io/state-{cr}"
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 2},
            "packages": {"tune": {"version": "1.0.0", "image": f"{SIM_REGISTRY}/tune"}},
        },
    )
    world.start_controller()
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="installed")
    world.core.patch_node(bad, {"metadata": {"annotations": {key: "{not json"}}})
    cond = delete_until_blocked(world, cr)
    assert cond is not None and cond["reason"] == "MalformedNodeState", cond
    assert f"fix or remove annotation {key} on node {bad} " in cond["message"], cond
    assert good not in cond["message"], cond
    # Another malformed text is another reconcile, but not another event.
    world.core.patch_node(bad, {"metadata": {"annotations": {key: "[still not an object]"}}})
    with pytest.raises(AssertionError):
        wait_for(lambda: world.cr_gone(cr), timeout=4, what="CR kept while a state is malformed")
    # Blocked means nothing was cleaned up: the healthy node keeps its state and status.
    assert "tune|1.0.0" in world.state(cr, good)
    assert world.node_status(cr, good) == "complete"
    assert world.annotations(bad)[key] == "[still not an object]"
    events = world.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={cr}"
    ).items
    warned = [e for e in events if e.reason == "DeletionBlocked"]
    assert [(e.type, e.count or 1) for e in warned] == [("Warning", 1)], warned

    world.core.patch_node(bad, {"metadata": {"annotations": {key: None}}})
    wait_for(lambda: world.cr_gone(cr), what="CR deleted once the annotation is removed")
    assert ours(world, cr, bad) == {} and ours(world, cr, good) == {}


def test_a_node_leaving_a_runtime_required_cr_loses_the_taint_unless_another_still_needs_it(
    world: World,
) -> None:
    keep = "e2e.nodewright.io/keep"
    taint = {"key": TAINT, "value": "true", "effect": "NoSchedule"}
    (alone,) = world.add_nodes(1, labels={PICK: "yes"}, prefix="a")
    (shared,) = world.add_nodes(1, labels={PICK: "yes", keep: "yes"}, prefix="s")
    (bystander,) = world.add_nodes(1, prefix="b")
    for node in (alone, shared, bystander):
        world.core.patch_node(node, {"spec": {"taints": [taint]}})
    leaver, holder = world.cr_name("rtleave"), world.cr_name("rthold")
    world.apply_cr(
        leaver,
        {
            "nodeSelectors": {"matchLabels": {**world.labels, PICK: "yes"}},
            "runtimeRequired": True,
            "interruptionBudget": {"count": 2},
            "packages": {
                "tune": {
                    "version": "1.0.0",
                    "image": f"{SIM_REGISTRY}/tune",
                    "env": [{"name": SIM_DURATION_ENV, "value": "8s"}],
                }
            },
        },
    )
    # Disabled and incomplete: it keeps the taint on its node (as in NodeWright).
    world.apply_cr(
        holder,
        {
            "nodeSelectors": {"matchLabels": {**world.labels, keep: "yes"}},
            "runtimeRequired": True,
            "packages": {"tune": {"version": "1.0.0", "image": f"{SIM_REGISTRY}/tune"}},
        },
        annotations={"bridge.nodewright.io/disable": "true"},
    )
    world.start_controller()
    wait_for(
        lambda: {p.spec.node_name for p in world.package_pods(leaver)} == {alone, shared},
        what="the runtimeRequired CR working on both nodes",
    )
    for node in (alone, shared):
        world.core.patch_node(node, {"metadata": {"labels": {PICK: None}}})
    assert all(TAINT in taint_keys(world, n) for n in (alone, shared)), "completed too early"

    wait_for(lambda: ours(world, leaver, alone) == {}, what="alone released")
    wait_for(lambda: ours(world, leaver, shared) == {}, what="shared released")
    wait_for(lambda: TAINT not in taint_keys(world, alone), what="taint removed on release")
    assert TAINT in taint_keys(world, shared), "removed although another CR still needs it"
    assert TAINT in taint_keys(world, bystander), "removed from a node the CR never tracked"

    # Deleting the CR that kept it frees its node too, but never a node it did not work on.
    world.custom.delete_cluster_custom_object(
        "bridge.nodewright.io", "v1alpha1", "nodewrights", holder
    )
    wait_for(lambda: world.cr_gone(holder), what="holder deleted")
    assert TAINT not in taint_keys(world, shared), "taint left behind by the deleted CR"
    assert TAINT in taint_keys(world, bystander), "deletion removed a taint it never owned"
