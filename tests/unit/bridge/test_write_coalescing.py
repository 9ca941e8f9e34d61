"""Pure helpers behind the controller's fewer writes and fewer reconciles: merging a node's merge
patches into one, and telling an update that changed nothing we cache."""

from __future__ import annotations

from datetime import UTC, datetime

from cache_world import empty_stores

from lifecycle import actions
from lifecycle.spec import NodeWright
from lifecycle.status import Status
from nodewright_bridge.controller import snapshot
from nodewright_bridge.controller.node_writes import NodeWork, is_bookkeeping, merge_patch_into
from nodewright_bridge.k8s.slimming import slim_node
from nodewright_bridge.runtime.manager import same_but_version


def test_merged_patches_have_the_effect_of_sending_them_in_order() -> None:
    merged: dict[str, object] = {}
    merge_patch_into(merged, {"metadata": {"annotations": {"batch": "r1"}}})
    merge_patch_into(merged, {"metadata": {"annotations": {"state": "s1", "gone": None}}})
    merge_patch_into(merged, {"metadata": {"labels": {"status": "in_progress"}}})
    merge_patch_into(merged, {"metadata": {"annotations": {"state": "s2"}}})
    merge_patch_into(merged, {"spec": {"taints": [{"key": "a"}]}})
    merge_patch_into(merged, {"spec": {"taints": [{"key": "b"}], "unschedulable": True}})
    assert merged == {
        "metadata": {
            "annotations": {"batch": "r1", "state": "s2", "gone": None},
            "labels": {"status": "in_progress"},
        },
        "spec": {"taints": [{"key": "b"}], "unschedulable": True},
    }


def test_a_merged_patch_does_not_share_structure_with_its_parts() -> None:
    part = {"metadata": {"annotations": {"x": "1"}}}
    merged: dict[str, object] = {}
    merge_patch_into(merged, part)
    merge_patch_into(merged, {"metadata": {"annotations": {"y": "2"}}})
    assert part == {"metadata": {"annotations": {"x": "1"}}}


def _node(rv: str, heartbeat: str, label: str = "a") -> dict[str, object]:
    return slim_node(
        {
            "metadata": {"name": "n1", "resourceVersion": rv, "labels": {"l": label}},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}],
                "nodeInfo": {"bootID": "b1"},
            },
        }
    )


def test_a_heartbeat_changes_nothing_the_controller_caches() -> None:
    assert same_but_version(_node("1", "t1"), _node("2", "t2"))


def test_a_label_change_is_a_change() -> None:
    assert not same_but_version(_node("1", "t1"), _node("2", "t1", label="b"))
    assert not same_but_version({"metadata": {"name": "n"}}, {"metadata": {"name": "m"}})
    assert not same_but_version({"metadata": {}}, {"metadata": {}, "spec": {}})


def _work(*acts: actions.Action, annotations: dict[str, str | None] | None = None) -> NodeWork:
    cr = NodeWright.model_validate(
        {
            "metadata": {"name": "t"},
            "spec": {"packages": {"sysctl": {"version": "1.0.0", "image": "r/p"}}},
        }
    )
    stores = empty_stores()
    node = {"metadata": {"name": "n1", "resourceVersion": "1"}}
    snap = snapshot.snapshot_node(cr, node, stores, snapshot.PdbIndex())
    return NodeWork(node=snap, actions=acts, annotations=annotations or {})


def test_only_node_writes_wait_for_the_next_pass_starts_records_and_queued_deletes_never_do() -> (
    None
):
    status = actions.SetNodeStatus(node="n1", cr="t", status=Status.COMPLETE)
    delete = actions.DeletePod(name="p", node="n1", reason="succeeded")
    start = actions.CreatePackagePod(
        node="n1",
        cr="t",
        package="sysctl",
        version="1.0.0",
        stages=("apply",),
        resource_id="r",
        node_order=0,
        attempt=1,
        config_hash="h",
        deadline=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert is_bookkeeping(_work(status, delete))  # a Node write: may wait
    assert is_bookkeeping(_work(annotations={"batch": None}))  # releasing a record may wait
    assert not is_bookkeeping(_work(delete))  # only queues a background delete: costs nothing
    assert not is_bookkeeping(_work(status, start))  # starts a pod: the rollout's critical path
    assert not is_bookkeeping(_work(status, annotations={"batch": "{}"}))  # takes a batch record
