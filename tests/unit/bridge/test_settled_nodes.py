"""Kept plans of settled nodes are reused only while nothing they were made from has moved."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from cache_world import empty_stores

from lifecycle.actions import DeletePod, SetNodeStatus
from lifecycle.spec import NodeWright
from lifecycle.stages import NodePlan
from lifecycle.status import Status
from nodewright_bridge.controller import snapshot
from nodewright_bridge.controller.settled import PlanKey, SettledNodes
from nodewright_bridge.k8s.foreground import Foreground

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
KEY: PlanKey = (False, False, 0, "", False)


def make_cr(**annotations: str) -> NodeWright:
    return NodeWright.model_validate(
        {
            "metadata": {"name": "tuning", "uid": "u-1", "annotations": annotations},
            "spec": {"packages": {"sysctl": {"version": "1.0.0", "image": "r/p"}}},
        }
    )


def node(rv: str = "10") -> dict[str, Any]:
    return {"metadata": {"name": "n1", "resourceVersion": rv, "labels": {}}, "status": {}}


def pod(name: str, rv: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase},
    }


def plan(
    status: Status = Status.IN_PROGRESS, requeue_at: datetime | None = None, **kw: Any
) -> NodePlan:
    return NodePlan(
        node="n1", status=status, reason="", actions=(), state={}, requeue_at=requeue_at, **kw
    )


def settle(
    memo: SettledNodes, cr: NodeWright, stores: snapshot.Stores, obj: dict[str, Any]
) -> tuple[snapshot.NodeSnapshot, NodePlan]:
    snap = snapshot.snapshot_node(cr, obj, stores, snapshot.PdbIndex())
    made = plan()
    memo.offer(cr, snap, KEY, made, stores, paused=False, disabled=False)
    return snap, made


def kept(
    memo: SettledNodes,
    cr: NodeWright,
    stores: snapshot.Stores,
    obj: dict[str, Any],
    now: datetime = NOW,
    **flags: bool,
) -> NodePlan | None:
    flags = {"paused": False, "disabled": False, **flags}
    snap = memo.get(cr, obj, stores, paused=flags["paused"], disabled=flags["disabled"])
    return None if snap is None else memo.plan(cr, "n1", KEY, now)


def test_a_node_whose_inputs_did_not_move_keeps_its_snapshot_and_plan() -> None:
    memo, cr, stores = SettledNodes(), make_cr(), empty_stores()
    stores.package_pods.put("ns/p1", pod("p1", "5"))
    snap, made = settle(memo, cr, stores, node())
    assert memo.get(cr, node(), stores, paused=False, disabled=False) is snap
    assert memo.plan(cr, "n1", KEY, NOW) is made
    assert memo.plan(cr, "n1", (True, False, 3, ""), NOW) is None  # another key: plan afresh


def test_a_new_node_version_a_moved_pod_or_a_new_cr_object_drops_the_kept_plan() -> None:
    memo, cr, stores = SettledNodes(), make_cr(), empty_stores()
    stores.package_pods.put("ns/p1", pod("p1", "5"))
    settle(memo, cr, stores, node())
    assert kept(memo, cr, stores, node("11")) is None

    settle(memo, cr, stores, node())
    stores.package_pods.put("ns/p1", pod("p1", "6", phase="Succeeded"))
    assert kept(memo, cr, stores, node()) is None

    settle(memo, cr, stores, node())
    assert kept(memo, make_cr(), stores, node()) is None  # equal, but not the object kept


def test_a_pod_that_moved_between_snapshot_and_offer_is_not_hidden_by_the_kept_snapshot() -> None:
    memo, cr, stores = SettledNodes(), make_cr(), empty_stores()
    stores.package_pods.put("ns/p1", pod("p1", "5"))
    snap = snapshot.snapshot_node(cr, node(), stores, snapshot.PdbIndex())
    stores.package_pods.put("ns/p1", pod("p1", "6", phase="Succeeded"))  # the watch, meanwhile
    memo.offer(cr, snap, KEY, plan(), stores, paused=False, disabled=False)
    assert kept(memo, cr, stores, node()) is None


def test_pause_disable_or_a_workload_pod_arriving_drops_the_kept_plan() -> None:
    memo, cr, stores = SettledNodes(), make_cr(), empty_stores()
    settle(memo, cr, stores, node())
    assert kept(memo, cr, stores, node(), paused=True) is None
    settle(memo, cr, stores, node())
    assert kept(memo, cr, stores, node(), disabled=True) is None
    settle(memo, cr, stores, node())
    stores.pods.put("ns/train", pod("train", "9"))
    assert kept(memo, cr, stores, node()) is None


def test_a_plan_is_not_kept_past_its_deadline() -> None:
    memo, cr, stores = SettledNodes(), make_cr(), empty_stores()
    snap = snapshot.snapshot_node(cr, node(), stores, snapshot.PdbIndex())
    deadline = NOW + timedelta(minutes=5)
    memo.offer(cr, snap, KEY, plan(requeue_at=deadline), stores, paused=False, disabled=False)
    assert kept(memo, cr, stores, node(), now=deadline - timedelta(seconds=1)) is not None
    assert kept(memo, cr, stores, node(), now=deadline) is None


def test_plans_with_work_to_do_are_never_kept() -> None:
    memo, cr, stores = SettledNodes(), make_cr(), empty_stores()
    snap = snapshot.snapshot_node(cr, node(), stores, snapshot.PdbIndex())
    busy = NodePlan(
        node="n1",
        status=Status.IN_PROGRESS,
        reason="",
        actions=(SetNodeStatus(node="n1", cr="tuning", status=Status.IN_PROGRESS),),
        state={},
    )
    memo.offer(cr, snap, KEY, busy, stores, paused=False, disabled=False)
    assert kept(memo, cr, stores, node()) is None


def pdb(rv: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "keep", "namespace": "ns", "resourceVersion": rv},
        "spec": {"selector": {"matchLabels": {"app": "x"}}},
        "status": {"disruptionsAllowed": 0},
    }


def test_a_node_with_workload_pods_is_kept_until_a_pod_or_a_pdb_moves() -> None:
    memo, cr, stores = SettledNodes(), make_cr(), empty_stores()
    stores.pods.put("ns/train", pod("train", "9"))
    memo.use_pass_inputs("tuning", [cr], [pdb("1")])
    _, made = settle(memo, cr, stores, node())
    memo.use_pass_inputs("tuning", [cr], [pdb("1")])  # the next pass: nothing moved
    assert kept(memo, cr, stores, node()) is made

    memo.use_pass_inputs("tuning", [cr], [pdb("2")])  # the budget changed
    assert kept(memo, cr, stores, node()) is None

    settle(memo, cr, stores, node())
    stores.pods.put("ns/train", pod("train", "10"))  # the workload pod changed
    assert kept(memo, cr, stores, node()) is None

    settle(memo, cr, stores, node())
    stores.pods.put("ns/infer", pod("infer", "11"))  # one more arrived
    assert kept(memo, cr, stores, node()) is None


def test_another_cr_object_changing_drops_the_kept_plans_its_peers_came_from() -> None:
    memo, cr, stores = SettledNodes(), make_cr(), empty_stores()
    other = NodeWright.model_validate(
        {
            "metadata": {"name": "other"},
            "spec": {"packages": {"sysctl": {"version": "1.0.0", "image": "r/p"}}},
        }
    )
    memo.use_pass_inputs("tuning", [cr, other], [])
    settle(memo, cr, stores, node())
    memo.use_pass_inputs("tuning", [cr, other], [])
    assert kept(memo, cr, stores, node()) is not None
    paused = other.model_copy(update={"metadata": other.metadata.model_copy()})
    memo.use_pass_inputs("tuning", [cr, paused], [])
    assert kept(memo, cr, stores, node()) is None


def test_a_plan_that_only_deletes_recorded_pods_is_kept_as_asking_again_is_harmless() -> None:
    memo, cr, stores = SettledNodes(), make_cr(), empty_stores()
    stores.package_pods.put("ns/p1", pod("p1", "7", phase="Succeeded"))
    snap = snapshot.snapshot_node(cr, node(), stores, snapshot.PdbIndex())
    deleting = NodePlan(
        node="n1",
        status=Status.COMPLETE,
        reason="",
        actions=(DeletePod(name="p1", node="n1", reason="succeeded"),),
        state={},
    )
    memo.offer(cr, snap, KEY, deleting, stores, paused=False, disabled=False)
    assert kept(memo, cr, stores, node()) is deleting
    stores.package_pods.delete("ns/p1")  # gone: the node is planned afresh
    assert kept(memo, cr, stores, node()) is None


def test_forgetting_a_cr_drops_its_nodes_only() -> None:
    memo, stores = SettledNodes(), empty_stores()
    cr = make_cr()
    other = NodeWright.model_validate(
        {
            "metadata": {"name": "other"},
            "spec": {"packages": {"sysctl": {"version": "1.0.0", "image": "r/p"}}},
        }
    )
    settle(memo, cr, stores, node())
    settle(memo, other, stores, node())
    memo.forget("tuning")
    assert kept(memo, cr, stores, node()) is None
    assert kept(memo, other, stores, node()) is not None


def test_background_work_waits_for_foreground_work_but_is_never_starved() -> None:
    foreground = Foreground()
    assert foreground.yield_to(max_wait=1.0) < 0.5  # nothing in the foreground: at once
    waited: list[float] = []
    with foreground.running():
        waiter = threading.Thread(target=lambda: waited.append(foreground.yield_to(5.0)))
        waiter.start()
        time.sleep(0.3)
        assert not waited  # still held back
    waiter.join(2.0)
    assert waited and 0.25 <= waited[0] < 2.0  # released when the foreground work ended

    with foreground.running(), foreground.running():  # nests
        assert foreground.busy()
        assert foreground.yield_to(max_wait=0.1) >= 0.1  # the cap: delayed, not starved
    assert not foreground.busy()
