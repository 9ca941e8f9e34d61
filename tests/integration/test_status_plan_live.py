"""``nwb status -o json`` and ``nwb plan --live`` against the sandbox API.

No controller runs: the test writes what the controller would (CR status, the Nodes' status /
state / batch annotations) and a PodDisruptionBudget protecting a ReplicaSet pod, then reads them
back through the commands.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from conftest import Kube
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from waiting import wait_for

from lifecycle import stages
from lifecycle.validation import load_nodewright
from nodewright_bridge.cli import main
from nodewright_bridge.commands import status
from nodewright_bridge.k8s.client import ClientSettings, total_requests
from nodewright_bridge.k8s.rest import Rest
from nodewright_bridge.metrics import Metrics

pytestmark = pytest.mark.integration

CRDS = Path(__file__).resolve().parents[2] / "charts" / "nodewright-bridge" / "crds"
GROUP, VERSION = "bridge.nodewright.io", "v1alpha1"
P = "bridge.nodewright.io/"


@pytest.fixture(scope="module")
def crds(kube_client: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(kube_client)
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        try:
            ext.create_custom_resource_definition(crd)
        except ApiException as exc:
            if exc.status != 409:
                raise
        name = crd["metadata"]["name"]
        wait_for(
            lambda n=name: any(
                c.type == "Established" and c.status == "True"
                for c in (ext.read_custom_resource_definition(n).status.conditions or [])
            ),
            what=f"CRD {name} established",
        )


class Rollout:
    """A CR, its policy and six nodes in two compartments, all unique to one test."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.id = uuid.uuid4().hex[:6]
        self.name = f"st-{self.id}"
        self.policy = f"pol-{self.id}"
        self.fleet_label = {"status-test.nodewright.io/fleet": self.id}
        a100 = kube.add_nodes(3, labels={**self.fleet_label, "gpu": "a100"})
        h100 = kube.add_nodes(3, labels={**self.fleet_label, "gpu": "h100"})
        self.a100 = sorted(n.name for n in a100)
        self.h100 = sorted(n.name for n in h100)
        for name in self.a100 + self.h100:
            wait_for(lambda n=name: self._exists(n), what=f"node {name}")
        exponential = {"exponential": {"initialBatch": 1, "growthFactor": 2}}
        self.policy_body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "DeploymentPolicy",
            "metadata": {"name": self.policy},
            "spec": {
                "default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}},
                "compartments": [
                    {
                        "name": gpu,
                        "selector": {"matchLabels": {"gpu": gpu}},
                        "budget": {"percent": 100},
                        "strategy": exponential,
                    }
                    for gpu in ("a100", "h100")
                ],
            },
        }
        self.cr_body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeWright",
            "metadata": {"name": self.name},
            "spec": {
                "nodeSelectors": {"matchLabels": self.fleet_label},
                "deploymentPolicy": self.policy,
                "packages": {
                    "sysctl-tuning": {
                        "version": "1.0.0",
                        "image": "localhost:5000/nodewright/sysctl-tuning",
                        "vars": {"sysctl_tuning_settings": {"vm.swappiness": 10}},
                    }
                },
            },
        }
        custom = kube.custom
        custom.create_cluster_custom_object(GROUP, VERSION, "deploymentpolicies", self.policy_body)
        kube.defer(
            lambda: custom.delete_cluster_custom_object(
                GROUP, VERSION, "deploymentpolicies", self.policy
            )
        )

    def _exists(self, name: str) -> bool:
        try:
            self.kube.core.read_node(name)
        except ApiException:
            return False
        return True

    def create_cr(self) -> None:
        custom = self.kube.custom
        custom.create_cluster_custom_object(GROUP, VERSION, "nodewrights", self.cr_body)
        self.kube.defer(
            lambda: custom.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", self.name)
        )

    def write_status(self, body: dict[str, Any]) -> None:
        self.kube.custom.patch_cluster_custom_object_status(
            GROUP, VERSION, "nodewrights", self.name, {"status": body}
        )

    def annotate(
        self, node: str, *, status: str, stage: str, state: str, batch: tuple[str, int]
    ) -> None:
        cr = load_nodewright(self.cr_body)
        pkg = cr.spec.packages["sysctl-tuning"]
        entry = {
            "stage": stage,
            "state": state,
            "attempts": 1,
            "updated": "2025-01-01T00:00:00Z",
            "configHash": stages.config_hash(pkg),
        }
        self.kube.core.patch_node(
            node,
            {
                "metadata": {
                    "labels": {f"{P}status-{self.name}": status},
                    "annotations": {
                        f"{P}status-{self.name}": status,
                        f"{P}state-{self.name}": json.dumps({"sysctl-tuning|1.0.0": entry}),
                        f"{P}batch-{self.name}": json.dumps(
                            {"compartment": batch[0], "batch": batch[1], "order": 0}
                        ),
                    },
                }
            },
        )

    def protect_pod_on(self, node: str) -> str:
        """A ReplicaSet pod bound to ``node`` and a PDB (minAvailable 1) that allows nothing."""
        namespace = self.kube.namespace("pdb")
        app = {"app": f"train-{self.id}"}
        replica_set = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "train"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": app},
                "template": {
                    "metadata": {"labels": app},
                    "spec": {
                        "nodeName": node,
                        "containers": [{"name": "train", "image": "example.invalid/train:1"}],
                    },
                },
            },
        }
        self.kube.apps.create_namespaced_replica_set(namespace, replica_set)
        pdb = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "train"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": app}},
        }
        self.kube.policy.create_namespaced_pod_disruption_budget(namespace, pdb)

        def settled() -> bool:
            got = self.kube.policy.read_namespaced_pod_disruption_budget("train", namespace)
            s = got.status
            return bool(s and s.current_healthy == 1 and s.disruptions_allowed == 0)

        wait_for(settled, what="PDB train counts its healthy pod")
        return f"{namespace}/train"


@pytest.fixture
def rollout(kube: Kube, crds: None) -> Iterator[Rollout]:
    yield Rollout(kube)


def nwb(kube: Kube, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--kubeconfig", str(kube.kubeconfig)])


def test_status_json_reports_conditions_compartments_and_each_nodes_state(
    rollout: Rollout, kube: Kube
) -> None:
    rollout.create_cr()
    done, busy = rollout.a100[0], rollout.a100[1]
    rollout.annotate(done, status="complete", stage="config", state="complete", batch=("a100", 1))
    rollout.annotate(
        busy, status="in_progress", stage="apply", state="in_progress", batch=("a100", 2)
    )
    rollout.write_status(
        {
            "observedGeneration": 1,
            "status": "in_progress",
            "completeNodes": "1/6",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "Progressing",
                    "message": "1/6 nodes complete",
                    "observedGeneration": 1,
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                }
            ],
            "compartments": {
                "a100": {
                    "matched": 3,
                    "ceiling": 3,
                    "inProgress": 1,
                    "completed": 1,
                    "strategy": "exponential",
                    "batchState": {"currentBatch": 2},
                }
            },
        }
    )
    result = nwb(kube, "status", rollout.name, "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["status"] == "in_progress"
    assert data["completeNodes"] == "1/6"
    assert data["compartments"]["a100"]["batch"] == 2
    assert data["compartments"]["a100"]["inProgress"] == 1
    assert set(data["nodes"]) == set(rollout.a100 + rollout.h100)
    assert data["nodes"][busy]["stage"] == "apply"
    assert data["nodes"][busy]["state"] == "in_progress"
    assert (data["nodes"][busy]["compartment"], data["nodes"][busy]["batch"]) == ("a100", 2)
    assert data["nodes"][done]["status"] == "complete"
    waiting = data["nodes"][rollout.h100[0]]
    assert (waiting["status"], waiting["compartment"]) == ("waiting", "h100")
    assert data["nodeCounts"] == {"complete": 1, "in_progress": 1, "waiting": 4}
    assert data["outcome"] is None


def test_a_one_shot_status_costs_four_requests(rollout: Rollout, kube: Kube) -> None:
    rollout.create_cr()
    metrics = Metrics()
    rest = Rest.connect(ClientSettings(str(kube.kubeconfig)), metrics=metrics)
    view = status.read_view(rest, rollout.name)
    assert len(view.nodes) == 6
    assert total_requests(metrics) == 4  # the CR, its policy, the targeted nodes, its pods


def test_status_of_a_missing_cr_fails_with_one_line(kube: Kube, crds: None) -> None:
    result = nwb(kube, "status", "no-such-rollout")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: NodeWright 'no-such-rollout' not found"


def test_status_watch_ends_on_ready_with_a_summary(rollout: Rollout, kube: Kube) -> None:
    rollout.create_cr()
    rollout.write_status(
        {
            "observedGeneration": 1,
            "status": "complete",
            "completeNodes": "6/6",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "NodesConverged",
                    "message": "6/6 nodes complete",
                    "observedGeneration": 1,
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                }
            ],
        }
    )
    started = time.monotonic()
    result = nwb(kube, "status", rollout.name, "--watch", "--no-live", "--timeout", "60")
    assert result.exit_code == 0, result.output
    assert time.monotonic() - started < 60
    assert "rollout complete" in result.stdout
    assert f"rollout {rollout.name}: complete, 6/6 nodes complete" in result.stdout


def test_plan_live_reads_nodes_state_and_names_the_pdb_that_would_block(
    rollout: Rollout, kube: Kube, tmp_path: Path
) -> None:
    # One node is already converged, one h100 node runs a pod only an exhausted PDB protects.
    rollout.annotate(
        rollout.a100[0], status="complete", stage="config", state="complete", batch=("a100", 1)
    )
    protected = rollout.h100[0]
    pdb = rollout.protect_pod_on(protected)
    cr_file = tmp_path / "cr.yaml"
    cr_file.write_text(yaml.safe_dump(rollout.cr_body))

    result = nwb(kube, "plan", "--live", "-f", str(cr_file), "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["compartments"] == {
        "a100": {"matched": 3, "ceiling": 3},
        "h100": {"matched": 3, "ceiling": 3},
        "__default__": {"matched": 0, "ceiling": 1},
    }
    planned = [n for b in data["batches"] for n in b["nodes"]]
    assert rollout.a100[0] not in planned  # nothing left to do there
    h100_batches = [b["nodes"] for b in data["batches"] if b["compartment"] == "h100"]
    assert h100_batches[0] != [protected]  # behind an exhausted PDB: picked last
    assert h100_batches[-1][-1] == protected
    assert data["nodes"][rollout.a100[0]]["pendingWork"] is False
    assert data["nodes"][protected]["blockingPdbs"] == [pdb]
    assert data["pdbBlocks"] == {pdb: [protected]}

    table = nwb(kube, "plan", "--live", "-f", str(cr_file))
    assert table.exit_code == 0, table.output
    assert f"PodDisruptionBudget {pdb}" in table.stdout
    assert "already converged (no work):" in table.stdout


def test_plan_live_by_name_uses_the_cluster_cr_and_policy(rollout: Rollout, kube: Kube) -> None:
    rollout.create_cr()
    result = nwb(kube, "plan", "--live", "--name", rollout.name, "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [len(b["nodes"]) for b in data["batches"] if b["compartment"] == "a100"] == [1, 2]
    assert data["source"] == {"cr": "cluster", "nodes": "cluster"}

    missing = nwb(kube, "plan", "--live", "--name", "no-such-rollout")
    assert missing.exit_code == 2
    assert missing.stderr.strip() == (
        "--name: NodeWright 'no-such-rollout' not found in the cluster"
    )
