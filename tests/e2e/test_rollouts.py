"""Rollouts paced by a DeploymentPolicy, failures that stall a compartment, upgrades and vars
changes paced by batches, and uninstall on deletion."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from e2e_harness import EXEC_REGISTRY, SIM_REGISTRY, World, wait_for

from lifecycle.rollout import NodeView
from lifecycle.simulation import simulate
from lifecycle.validation import load_nodewright, load_policy

pytestmark = pytest.mark.e2e

POOL = "e2e.nodewright.io/pool"


class BatchWatcher:
    """Polls the nodes' batch records and remembers (compartment, batch) per node."""

    def __init__(self, world: World, cr: str, nodes: list[str]) -> None:
        self.world = world
        self.key = f"bridge.nodewright.io/batch-{cr}"
        self.nodes = nodes
        self.seen: dict[str, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self._poll()

    def _poll(self) -> None:
        for item in self.world.core.list_node(
            label_selector=f"e2e.nodewright.io/test={self.world.id}"
        ).items:
            text = (item.metadata.annotations or {}).get(self.key)
            if text and item.metadata.name not in self.seen:
                record = json.loads(text)
                self.seen[item.metadata.name] = (record["compartment"], record["batch"])

    def stop(self) -> dict[str, list[list[str]]]:
        """The batches seen, with one last look: a batch whose pods carried its start writes
        its records with the result, so the last batch's may land just before ``complete``."""
        self._stop.set()
        self._thread.join(5)
        self._poll()
        batches: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
        for node, (compartment, batch) in self.seen.items():
            batches[compartment][batch].append(node)
        return {c: [sorted(b[n]) for n in sorted(b)] for c, b in batches.items()}


def test_a_canary_rollout_over_two_compartments_grows_exponentially_like_nwb_plan(
    world: World,
) -> None:
    a = world.add_nodes(5, labels={POOL: "a"}, prefix="a")
    b = world.add_nodes(3, labels={POOL: "b"}, prefix="b")
    policy_name = world.cr_name("canary")
    policy_spec = {
        "default": {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 1}}},
        "compartments": [
            {
                "name": "pool-a",
                "selector": {"matchLabels": {POOL: "a"}},
                "budget": {"count": 4},
                "strategy": {"exponential": {"initialBatch": 1, "growthFactor": 2}},
            },
            {
                "name": "pool-b",
                "selector": {"matchLabels": {POOL: "b"}},
                "budget": {"percent": 100},
                "strategy": {"exponential": {"initialBatch": 1, "growthFactor": 2}},
            },
        ],
    }
    world.apply_policy(policy_name, policy_spec)
    cr = world.cr_name("canary")
    spec = {
        "deploymentPolicy": policy_name,
        "packages": {"tune": {"version": "1.0.0", "image": f"{SIM_REGISTRY}/tune"}},
    }
    created = world.apply_cr(cr, spec)

    # What `nwb plan --offline` predicts for the same objects and nodes.
    model = load_nodewright({"metadata": {"name": cr}, "spec": created["spec"]})
    policy = load_policy(
        {
            "apiVersion": "bridge.nodewright.io/v1alpha1",
            "kind": "DeploymentPolicy",
            "metadata": {"name": policy_name},
            "spec": policy_spec,
        }
    )
    views = [
        NodeView(
            name=n.metadata.name, labels=n.metadata.labels, created=n.metadata.creation_timestamp
        )
        for n in world.core.list_node(label_selector=f"e2e.nodewright.io/test={world.id}").items
    ]
    predicted = simulate(model, policy, views, start=datetime.now(UTC))
    expected: dict[str, list[list[str]]] = defaultdict(list)
    for batch in predicted.batches:
        expected[batch.compartment].append(sorted(batch.nodes))

    watcher = BatchWatcher(world, cr, a + b)
    world.start_controller()
    wait_for(
        lambda: world.cr_status(cr).get("status") == "complete",
        what="rollout complete",
        timeout=180,
    )
    observed = watcher.stop()
    assert dict(observed) == dict(expected)
    assert [len(x) for x in observed["pool-a"]] == [1, 2, 2]  # 1, 2, then min(4, ceiling 4, rest 2)
    assert [len(x) for x in observed["pool-b"]] == [1, 2]
    status = world.cr_status(cr)
    assert status["completeNodes"] == "8/8"
    assert status["compartments"]["pool-a"]["matched"] == 5
    assert status["compartments"]["pool-a"]["ceiling"] == 4


def test_a_failing_verify_halts_the_compartment_and_names_node_package_stage_task(
    world: World,
) -> None:
    nodes = world.add_nodes(3)
    policy_name = world.cr_name("strict")
    world.apply_policy(
        policy_name,
        {
            "default": {
                "budget": {"percent": 100},
                "strategy": {
                    "exponential": {
                        "initialBatch": 1,
                        "growthFactor": 2,
                        "batchThreshold": 100,
                        "failureThreshold": 1,
                        "safetyLimit": 100,
                    }
                },
            },
            "compartments": [],
        },
    )
    cr = world.cr_name("failing")
    world.apply_cr(
        cr,
        {
            "deploymentPolicy": policy_name,
            "packages": {
                "probe": {
                    "version": "1.0.0",
                    "image": f"{EXEC_REGISTRY}/probe",
                    "maxAttempts": 1,
                    "vars": {"probe_verify_ok": False, "probe_value": "bad"},
                }
            },
        },
    )
    world.start_controller()
    stalled = wait_for(
        lambda: (c := world.condition(cr, "Stalled")) and c["status"] == "True" and c,
        what="Stalled",
        timeout=180,
    )
    assert "__default__" in stalled["message"]
    degraded = world.condition(cr, "Degraded")
    assert degraded is not None and degraded["status"] == "True"
    touched = [n for n in nodes if world.state(cr, n)]
    assert len(touched) == 1
    node = touched[0]
    for part in (node, "probe", "apply", "The probe verifies", "probe verify failed on purpose"):
        assert part in degraded["message"], (part, degraded["message"])
    assert world.cr_status(cr)["status"] == "erroring"
    failure = world.cr_status(cr)["recentFailures"][-1]
    assert failure["node"] == node and failure["task"] == "The probe verifies"
    time.sleep(5)  # the compartment stays stopped: nobody else is picked
    assert [n for n in nodes if world.state(cr, n)] == [node]


def test_an_upgrade_and_a_vars_change_are_paced_by_batches(world: World) -> None:
    nodes = world.add_nodes(3)
    cr = world.cr_name("paced")
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 1},
            "packages": {
                "tune": {"version": "1.0.0", "image": f"{SIM_REGISTRY}/tune", "vars": {"x": 1}}
            },
        },
    )
    world.start_controller()
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="install", timeout=120)

    def running_at_once(check_done: Callable[[], bool]) -> int:
        peak = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            live = [p for p in world.package_pods(cr) if p.status.phase in ("Pending", "Running")]
            peak = max(peak, len({p.spec.node_name for p in live}))
            if check_done():
                return peak
            time.sleep(0.1)
        raise AssertionError("change did not finish")

    world.patch_cr(cr, {"spec": {"packages": {"tune": {"version": "1.1.0"}}}})
    peak = running_at_once(
        lambda: all(
            "tune|1.1.0" in world.state(cr, n)
            and "tune|1.0.0" not in world.state(cr, n)
            and world.state(cr, n)["tune|1.1.0"]["state"] == "complete"
            for n in nodes
        )
    )
    assert peak == 1
    for n in nodes:
        assert world.state(cr, n)["tune|1.1.0"]["stage"] == "config"
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="upgrade complete")

    world.patch_cr(cr, {"spec": {"packages": {"tune": {"vars": {"x": 2}}}}})
    before = {n: world.state(cr, n)["tune|1.1.0"]["configHash"] for n in nodes}
    peak = running_at_once(
        lambda: all(
            world.state(cr, n)["tune|1.1.0"]["configHash"] != before[n]
            and world.state(cr, n)["tune|1.1.0"]["state"] == "complete"
            for n in nodes
        )
    )
    assert peak == 1
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="vars change complete")


def test_deleting_a_cr_uninstalls_where_enabled_and_removes_everything_we_own(world: World) -> None:
    nodes = world.add_nodes(2)
    cr = world.cr_name("gone")
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 2},
            "packages": {
                "sysctl": {
                    "version": "1.0.0",
                    "image": f"{EXEC_REGISTRY}/sysctl-tuning",
                    "uninstall": {"enabled": True},
                }
            },
        },
    )
    world.start_controller()
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="install", timeout=180)
    kubelet = world.env.box.kubelet
    assert kubelet is not None
    for n in nodes:
        root = kubelet.nodes[n].root_dir
        assert root is not None and (root / "etc/sysctl.d/90-node-tuning.conf").exists()
    world.custom.delete_cluster_custom_object("bridge.nodewright.io", "v1alpha1", "nodewrights", cr)
    wait_for(lambda: world.cr_gone(cr), what="CR deleted", timeout=180)
    for n in nodes:
        root = kubelet.nodes[n].root_dir
        assert root is not None and not (root / "etc/sysctl.d/90-node-tuning.conf").exists()
        notes = world.annotations(n)
        assert not [k for k in notes if k.startswith("bridge.nodewright.io/") and cr in k], notes
        labels = world.node(n).metadata.labels or {}
        assert not [k for k in labels if cr in k]
        assert not world.node(n).spec.unschedulable
