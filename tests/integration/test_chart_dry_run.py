"""``helm template`` output is accepted by the sandbox API server: a server-side dry run
(``kubectl apply --dry-run=server --validate=strict``) checks every rendered object against the
server's schemas, so an unknown or misspelt field fails here instead of on a user's cluster."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from chart_support import CHART, helm_binary
from conftest import Kube

from nodewright_bridge.sandbox import binaries

pytestmark = pytest.mark.integration


def _kubectl() -> str:
    found = binaries.find("kubectl")
    if found is None:
        pytest.fail("kubectl not found: `make setup` builds it into ~/.cache/nodewright-bridge/bin")
    return str(found.path)


def _template(*sets: str) -> str:
    args = [helm_binary(), "template", "nwb", str(CHART), "--include-crds"]
    for value in sets:
        args += ["--set", value]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _dry_run(kube: Kube, manifest: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            _kubectl(),
            "--kubeconfig",
            str(kube.kubeconfig),
            "apply",
            "--dry-run=server",
            "--validate=strict",
            "-f",
            "-",
        ],
        input=manifest,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    "sets",
    [
        (),
        (
            "drain.allowPodDelete=true",
            "leaderElection.enabled=false",
            "replicaCount=1",
            "podDisruptionBudget.enabled=false",
            "metrics.service.enabled=false",
        ),
    ],
    ids=["defaults", "variant"],
)
def test_every_object_helm_template_renders_passes_a_server_side_dry_run(
    kube: Kube, sets: tuple[str, ...]
) -> None:
    namespace = kube.namespace("dry")
    manifest = _template(f"namespace={namespace}", "createNamespace=false", *sets)
    kinds = sorted({doc["kind"] for doc in yaml.safe_load_all(manifest) if doc})
    assert "Deployment" in kinds and "CustomResourceDefinition" in kinds, kinds
    proc = _dry_run(kube, manifest)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("(server dry run)") == len(
        [doc for doc in yaml.safe_load_all(manifest) if doc]
    ), proc.stdout


def test_the_namespace_the_chart_creates_passes_a_server_side_dry_run(kube: Kube) -> None:
    manifest = _template("namespace=nwb-dry-run-new")
    (namespace,) = [d for d in yaml.safe_load_all(manifest) if d and d["kind"] == "Namespace"]
    proc = _dry_run(kube, yaml.safe_dump(namespace))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_misspelt_field_is_rejected_by_the_dry_run(kube: Kube) -> None:
    """The check can fail: the same manifest with one unknown field does."""
    namespace = kube.namespace("dry")
    docs = [
        d
        for d in yaml.safe_load_all(_template(f"namespace={namespace}", "createNamespace=false"))
        if d
    ]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    proc = _dry_run(kube, yaml.safe_dump(deployment))
    assert proc.returncode != 0
    assert "imagePullPolcy" in proc.stderr
