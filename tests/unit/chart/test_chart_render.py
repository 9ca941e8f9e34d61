"""The Helm chart renders, rejects bad values with clear messages, and grants least privilege.

Runs the real ``helm`` binary that ``make setup`` builds into ~/.cache/nodewright-bridge/bin.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

CHART = Path(__file__).resolve().parents[3] / "charts" / "nodewright-bridge"


def _helm() -> str:
    candidates = [os.environ.get("TEST_ASSET_HELM", "")]
    if os.environ.get("KUBEBUILDER_ASSETS"):
        candidates.append(os.path.join(os.environ["KUBEBUILDER_ASSETS"], "helm"))
    cache = os.environ.get("NWB_CACHE_DIR", os.path.expanduser("~/.cache/nodewright-bridge"))
    candidates += sorted(glob.glob(os.path.join(cache, "bin", "*", "helm")), reverse=True)
    candidates.append(shutil.which("helm") or "")
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    pytest.fail("helm not found: run `make setup` (builds it into ~/.cache/nodewright-bridge/bin)")


def render(*sets: str) -> tuple[int, list[dict[str, Any]], str]:
    args = [_helm(), "template", "nwb", str(CHART)]
    for s in sets:
        args += ["--set", s]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d] if proc.returncode == 0 else []
    return proc.returncode, docs, proc.stderr


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_the_chart_lints_clean() -> None:
    proc = subprocess.run(
        [_helm(), "lint", str(CHART)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_defaults_render_a_two_replica_leader_elected_controller_with_restricted_security() -> None:
    rc, docs, err = render()
    assert rc == 0, err
    (deploy,) = by_kind(docs, "Deployment")
    assert deploy["spec"]["replicas"] == 2
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "--leader-elect" in container["args"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "podAntiAffinity" in pod["affinity"]
    (pdb,) = by_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1


def test_only_the_controller_namespace_is_labelled_privileged() -> None:
    _, docs, _ = render()
    (ns,) = by_kind(docs, "Namespace")
    assert ns["metadata"]["name"] == "nodewright-system"
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("unknownKey=1", "additional properties 'unknownKey' not allowed"),
        ("replicaCount=two", "/replicaCount"),
        ("logFormat=xml", "/logFormat"),
        ("namespace=default", 'namespace must not be "default"'),
        ("podDisruptionBudget.minAvailable=2", "minAvailable must be lower than replicaCount"),
        ("leaderElection.enabled=false", "needs leaderElection.enabled=true"),
    ],
)
def test_bad_values_are_rejected_with_a_message_naming_the_problem(
    value: str, message: str
) -> None:
    rc, _, err = render(value)
    assert rc != 0
    assert message in err


def test_rbac_grants_exactly_the_verbs_the_controller_uses() -> None:
    _, docs, _ = render()
    (cluster_role,) = by_kind(docs, "ClusterRole")
    rules = {
        (tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"])
        for r in cluster_role["rules"]
    }
    assert rules[(("",), ("nodes",))] == {"get", "list", "watch", "patch"}
    assert rules[(("",), ("pods",))] == {"get", "list", "watch"}
    assert rules[(("",), ("pods/eviction",))] == {"create"}
    for verbs in rules.values():
        assert "*" not in verbs
        assert "delete" not in verbs  # cluster-wide we never delete: drains go through eviction
    assert not any("secrets" in r["resources"] for r in cluster_role["rules"])
    (role,) = by_kind(docs, "Role")
    assert role["metadata"]["namespace"] == "nodewright-system"
    pods_rule = next(r for r in role["rules"] if r["resources"] == ["pods"])
    assert set(pods_rule["verbs"]) == {"create", "delete"}
