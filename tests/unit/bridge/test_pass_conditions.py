"""The reconciler recomputes PDBBlocked, WaitingForProtectedPods and NodesIgnored from the
nodes, pods and PDBs every pass: a node that went erroring behind a PDB, or that is complete with
the ignore label (its plan kept), still counts (in-memory API; the sandbox e2e proves the same on
a real cluster)."""

from __future__ import annotations

from typing import Any

from controller_world import ControllerWorld, node, nodewright

from lifecycle.nodestate import IGNORE_LABEL, status_key
from nodewright_bridge.k8s import resources

POOL = {"pool": "gpu"}
NS = "ml"
SPEC = {
    "nodeSelectors": {"matchLabels": POOL},
    "interruptionBudget": {"count": 1},
    "packages": {
        "tune": {
            "version": "1.0.0",
            "image": "registry.local:5000/tune",
            "interrupt": {"type": "reboot"},
            "timeouts": {"drain": "1m"},
        }
    },
}
STEPS_MAX = 10


def workload(name: str, on: str) -> dict[str, Any]:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train", "uid": "rs"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"app": "train"},
            "ownerReferences": [{**owner, "controller": True}],
        },
        "spec": {"nodeName": on},
        "status": {"phase": "Running"},
    }


def exhausted_pdb() -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "train", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "train"}}},
        "status": {"disruptionsAllowed": 0},
    }


def condition(world: ControllerWorld, type_: str) -> dict[str, Any]:
    status = world.obj(resources.NODEWRIGHTS, "tune").get("status") or {}
    return next((c for c in status.get("conditions") or () if c["type"] == type_), {})


def node_status(world: ControllerWorld, name: str) -> str:
    return str(world.obj(resources.NODES, name)["metadata"]["labels"].get(status_key("tune")))


def step_until(world: ControllerWorld, done: Any) -> None:
    for _ in range(STEPS_MAX):
        world.step("tune")
        if done():
            return
    raise AssertionError(f"not reached in {STEPS_MAX} passes")


def test_pdb_blocked_names_the_budget_after_the_drain_expires_and_clears_when_it_goes() -> None:
    world = ControllerWorld()
    world.add(resources.NODES, node("n0", POOL))
    world.add(resources.PODS, workload("train-0", "n0"))
    world.add(resources.PDBS, exhausted_pdb())
    world.api.refuse_evictions[resources.PODS.path(namespace=NS, name="train-0")] = "train"
    world.add(resources.NODEWRIGHTS, nodewright("tune", SPEC))
    world.validate("tune")
    step_until(world, lambda: condition(world, "PDBBlocked").get("status") == "True")

    world.clock.advance(120)  # past the drain deadline
    step_until(world, lambda: node_status(world, "n0") == "erroring")
    world.step("tune")
    blocked = condition(world, "PDBBlocked")
    assert blocked["status"] == "True", blocked
    assert blocked["message"] == (
        "PodDisruptionBudget ml/train blocks eviction of pod(s) ml/train-0 on node(s) n0"
    )

    world.api.request("DELETE", resources.PDBS.path(namespace=NS, name="train"))
    world.api.refuse_evictions.clear()  # no budget left to refuse them
    world.step("tune")
    assert condition(world, "PDBBlocked")["status"] == "False"


def test_nodes_ignored_names_a_complete_node_that_got_the_ignore_label() -> None:
    world = ControllerWorld()
    world.add(resources.NODES, node("n0", POOL))
    spec = {**SPEC, "packages": {"tune": {"version": "1.0.0", "image": "registry.local:5000/t"}}}
    world.add(resources.NODEWRIGHTS, nodewright("tune", spec))
    world.validate("tune")

    def finished() -> bool:
        world.finish_pods("tune")
        return node_status(world, "n0") == "complete"

    step_until(world, finished)
    labelled = world.obj(resources.NODES, "n0")
    labelled["metadata"]["labels"][IGNORE_LABEL] = "true"
    world.add(resources.NODES, labelled)
    world.step("tune")
    world.step("tune")  # the node is settled: its plan is kept
    ignored = condition(world, "NodesIgnored")
    assert (ignored["status"], ignored["message"]) == ("True", "Node [n0] ignored by label.")
    assert node_status(world, "n0") == "complete"


def test_waiting_for_protected_pods_names_node_pods_and_since_when_until_they_are_gone() -> None:
    world = ControllerWorld()
    world.add(resources.NODES, node("n0", POOL))
    protected = workload("train-0", "n0")
    protected["metadata"]["labels"]["job"] = "training"
    world.add(resources.PODS, protected)
    spec = {**SPEC, "podNonInterruptLabels": {"matchLabels": {"job": "training"}}}
    world.add(resources.NODEWRIGHTS, nodewright("tune", spec))
    world.validate("tune")
    step_until(world, lambda: condition(world, "WaitingForProtectedPods").get("status") == "True")
    waiting = condition(world, "WaitingForProtectedPods")
    assert waiting["reason"] == "ProtectedPodsRunning"
    assert waiting["message"].startswith("node n0 waits since 20"), waiting
    assert "1 podNonInterruptLabels pod(s) ml/train-0" in waiting["message"], waiting

    world.api.request("DELETE", resources.PODS.path(namespace=NS, name="train-0"))
    world.step("tune")
    assert condition(world, "WaitingForProtectedPods")["status"] == "False"
