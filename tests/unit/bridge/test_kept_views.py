"""The views a pass makes of a node's snapshot are kept between passes only while every input
they read is unchanged: a change to any of them makes the view again."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from cache_world import empty_stores
from controller_world import ControllerWorld, node, nodewright

from lifecycle.nodestate import IGNORE_LABEL, CordonRecord, status_key
from lifecycle.spec import NodeWright
from lifecycle.status import NodeWrightStatus, Status
from nodewright_bridge.controller import observing, planning, snapshot
from nodewright_bridge.controller.settled import KeptValues, SettledNodes
from nodewright_bridge.k8s import resources

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
CR = NodeWright.model_validate(
    {
        "metadata": {"name": "tune", "uid": "u-1"},
        "spec": {"packages": {"tune": {"version": "1.0.0", "image": "r/p"}}},
    }
)


def raw_node(rv: str, *, ready: bool = True, cordoned: bool = False) -> dict[str, Any]:
    annotations = {}
    if cordoned:
        hold = CordonRecord(holders=["tune"], was_unschedulable=False)
        annotations["bridge.nodewright.io/cordon"] = hold.model_dump_json(by_alias=True)
    return {
        "metadata": {
            "name": "n1",
            "resourceVersion": rv,
            "labels": {"pool": "gpu"},
            "annotations": annotations,
        },
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def snap_of(obj: dict[str, Any]) -> snapshot.NodeSnapshot:
    return snapshot.snapshot_node(CR, obj, empty_stores(), snapshot.PdbIndex())


def seen_with(snap: snapshot.NodeSnapshot, *, ready: bool = True) -> observing.Observation:
    return observing.Observation(
        cr=CR,
        old=NodeWrightStatus(),
        now=NOW,
        policy=None,
        crs=[CR],
        paused=False,
        disabled=False,
        ready=frozenset({"n1"} if ready else ()),
        waiting_on=[],
        snaps={"n1": snap},
    )


def test_a_drain_view_is_kept_for_the_same_snapshot_and_status_and_made_again_otherwise() -> None:
    kept: KeptValues[Any] = KeptValues()
    snap = snap_of(raw_node("1"))
    first = planning.drain_views(seen_with(snap), {"n1": Status.WAITING}, kept)
    assert planning.drain_views(seen_with(snap), {"n1": Status.WAITING}, kept)[0] is first[0]

    erroring = planning.drain_views(seen_with(snap), {"n1": Status.ERRORING}, kept)
    assert erroring[0].status is Status.ERRORING

    cordoned = snap_of(raw_node("2", cordoned=True))
    held = planning.drain_views(seen_with(cordoned), {"n1": Status.ERRORING}, kept)
    assert held[0].held and not erroring[0].held


def test_a_validation_candidate_follows_its_node_becoming_not_ready() -> None:
    kept: KeptValues[Any] = KeptValues()
    ready = planning.validation_candidates([snap_of(raw_node("1"))], kept, "tune")
    assert ready[0].ready
    gone = planning.validation_candidates([snap_of(raw_node("2", ready=False))], kept, "tune")
    assert not gone[0].ready


def test_a_node_view_follows_the_probe_readiness_and_snapshot() -> None:
    stores = empty_stores()
    planner = planning.NodePlanner(stores, SettledNodes())
    snap = snap_of(raw_node("1"))
    _, (first,) = planning.probe_views(seen_with(snap), planner, {})
    _, (again,) = planning.probe_views(seen_with(snap), planner, {})
    assert again is first and first.ready

    _, (held,) = planning.probe_views(seen_with(snap, ready=False), planner, {})
    assert not held.ready

    ignored = snap_of(raw_node("2"))
    ignored = replace(ignored, labels={**ignored.labels, IGNORE_LABEL: "true"})
    _, (labelled,) = planning.probe_views(seen_with(ignored), planner, {})
    assert labelled.labels.get(IGNORE_LABEL) == "true"

    stale = seen_with(snap)
    stale.stale, stale.snaps = stale.snaps, {}
    _, (written,) = planning.probe_views(stale, planner, {"n1": Status.ERRORING})
    assert written.status is Status.ERRORING


def test_kept_values_drop_nodes_that_went_away_and_the_rows_of_a_forgotten_cr() -> None:
    kept: KeptValues[str] = KeptValues()
    for name in ("a", "b", "c"):
        kept.put("tune", name, (name,), name)
    kept.prune("tune", 2, lambda: {"a", "b"})
    assert kept.get("tune", "c", ("c",)) is None
    assert kept.get("tune", "a", ("a",)) == "a"
    assert kept.get("tune", "a", ("other",)) is None  # other inputs: made again
    kept.forget("tune")
    assert kept.get("tune", "b", ("b",)) is None


def test_a_declared_interrupt_learned_from_one_node_drops_the_plans_kept_of_the_others() -> None:
    stores = empty_stores()
    planner = planning.NodePlanner(stores, SettledNodes())
    obj = raw_node("1")
    obj["metadata"]["labels"][status_key("tune")] = "waiting"
    obj["metadata"]["annotations"][status_key("tune")] = "waiting"
    waiting = snap_of(obj)
    key = planning.plan_key(waiting, allowed=False, paused=False)
    made = planner.plan(CR, waiting, key, NOW, paused=False, disabled=False)
    assert made.actions == (), made.actions
    assert planner.plan(CR, waiting, key, NOW, paused=False, disabled=False) is made  # kept

    entry = {"stage": "apply", "state": "complete", "declared": {"type": "reboot"}}
    other = raw_node("1")
    other["metadata"]["name"] = "n2"
    other["metadata"]["annotations"]["bridge.nodewright.io/state-tune"] = json.dumps(
        {"tune|1.0.0": entry}
    )
    reported = snapshot.snapshot_node(CR, other, stores, snapshot.PdbIndex())
    planner.plan(CR, reported, key, NOW, paused=False, disabled=False)
    again = planner.plan(CR, waiting, key, NOW, paused=False, disabled=False)
    assert again is not made  # made again: the kept one did not know the interrupt


def waiting_node(rv: str, **labels: str) -> dict[str, Any]:
    obj = raw_node(rv)
    obj["metadata"]["labels"].update({status_key("tune"): "waiting", **labels})
    obj["metadata"]["annotations"][status_key("tune")] = "waiting"
    return obj


def test_a_node_that_moved_without_changing_what_its_plan_reads_keeps_its_plan() -> None:
    stores = empty_stores()
    planner = planning.NodePlanner(stores, SettledNodes())
    snap = snap_of(waiting_node("1"))
    key = planning.plan_key(snap, allowed=False, paused=False)
    made = planner.plan(CR, snap, key, NOW, paused=False, disabled=False)

    moved = waiting_node("2", unrelated="x")  # e.g. a kubelet's status update
    assert planner.settled.get(CR, moved, stores, paused=False, disabled=False) is None
    later = NOW + timedelta(seconds=5)
    assert planner.plan(CR, snap_of(moved), key, later, paused=False, disabled=False) is made

    cordoned = waiting_node("3")
    cordoned["metadata"]["annotations"].update(
        raw_node("3", cordoned=True)["metadata"]["annotations"]
    )
    replanned = planner.plan(CR, snap_of(cordoned), key, later, paused=False, disabled=False)
    assert replanned is not made
    assert planner.plan(CR, snap_of(moved), key, later, paused=True, disabled=True) is not made


POOL = {"pool": "gpu"}
SPEC = {
    "nodeSelectors": {"matchLabels": POOL},
    "interruptionBudget": {"count": 1},
    "packages": {"tune": {"version": "1.0.0", "image": "registry.local:5000/tune"}},
}


def status_condition(world: ControllerWorld, type_: str) -> dict[str, Any]:
    status = world.obj(resources.NODEWRIGHTS, "tune").get("status") or {}
    return next(c for c in status.get("conditions") or () if c["type"] == type_)


def test_passes_over_unchanged_nodes_still_see_a_label_that_arrives_and_goes() -> None:
    world = ControllerWorld()
    for i in range(3):
        world.add(resources.NODES, node(f"n{i}", POOL))
    world.add(resources.NODEWRIGHTS, nodewright("tune", SPEC))
    world.validate("tune")
    for _ in range(3):
        world.step("tune")
    assert status_condition(world, "NodesIgnored")["status"] == "False"
    waiting = next(
        n
        for n in ("n0", "n1", "n2")
        if world.obj(resources.NODES, n)["metadata"]["labels"].get(
            "bridge.nodewright.io/status-tune"
        )
        != "in_progress"
    )
    labelled = world.obj(resources.NODES, waiting)
    labelled["metadata"]["labels"][IGNORE_LABEL] = "true"
    world.add(resources.NODES, labelled)
    world.step("tune")
    assert waiting in status_condition(world, "NodesIgnored")["message"]
    del labelled["metadata"]["labels"][IGNORE_LABEL]
    world.add(resources.NODES, labelled)
    world.step("tune")
    assert status_condition(world, "NodesIgnored")["status"] == "False"


def test_targeting_is_judged_again_only_for_a_node_or_selector_that_changed() -> None:
    def cr_selecting(pool: str) -> NodeWright:
        return NodeWright.model_validate(
            {
                "metadata": {"name": "tune"},
                "spec": {
                    "nodeSelectors": {"matchLabels": {"pool": pool}},
                    "packages": {"tune": {"version": "1.0.0", "image": "r/p"}},
                },
            }
        )

    def labelled(name: str, pool: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "labels": {"pool": pool}}}

    targeting = observing.Targeting()
    gpu = cr_selecting("gpu")
    nodes = [labelled("a", "gpu"), labelled("b", "cpu")]
    assert targeting.targeted(gpu, nodes) == ["a"]
    nodes = [labelled("a", "cpu"), nodes[1], labelled("c", "gpu")]  # a relabelled, c added
    assert targeting.targeted(gpu, nodes) == ["c"]
    assert targeting.targeted(cr_selecting("cpu"), nodes) == ["a", "b"], "a new selector"
    assert targeting.targeted(cr_selecting("cpu"), nodes[1:]) == ["b"], "a went away"
    assert observing.targeted(gpu, nodes) == ["c"]
