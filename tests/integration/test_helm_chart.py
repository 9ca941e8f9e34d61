"""The Helm chart on the sandbox: install (CRDs from crds/), upgrade, uninstall (CRDs kept), and the
chart's ServiceAccount is allowed exactly what the controller needs - proven both by access reviews
made with its own token and by running ``nwb controller`` under that token.

The chart's controller pods are simulated workload pods here (``tests/e2e/test_controller_pod.py``
runs them from the image), so the controller runs as a local process with the ServiceAccount's
credentials from the TokenRequest API - the same identity a controller pod would have.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import (
    CHART,
    CHART_CRDS,
    Controller,
    Helm,
    can_i,
    service_account_kubeconfig,
)
from conftest import Kube, delete_nodewrights
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from waiting import wait_for

from nodewright_bridge.sandbox import Sandbox

pytestmark = pytest.mark.integration

GROUP, VERSION = "bridge.nodewright.io", "v1alpha1"
CRD_NAMES = sorted(
    yaml.safe_load(p.read_text())["metadata"]["name"] for p in CHART_CRDS.glob("*.yaml")
)
LEASE = "nodewright-bridge-controller"
CONTROLLER_WAIT = 90.0


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    fullname: str
    crds_existed_before: list[str]


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _crd_present(ext: client.ApiextensionsV1Api, name: str) -> bool:
    try:
        ext.read_custom_resource_definition(name)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _remove_crds(ext: client.ApiextensionsV1Api) -> list[str]:
    """Delete our CRDs (left by earlier test modules) so the install must create them."""
    existed = [name for name in CRD_NAMES if _crd_present(ext, name)]
    if existed:
        # Objects an earlier module left behind with our finalizer (no controller runs here to
        # remove it) would hold the CRD deletion forever.
        with contextlib.suppress(ApiException):
            delete_nodewrights(client.CustomObjectsApi(ext.api_client))
    for name in existed:
        with contextlib.suppress(ApiException):
            ext.delete_custom_resource_definition(name)
    wait_for(
        lambda: not any(_crd_present(ext, name) for name in CRD_NAMES),
        timeout=60,
        what="CRDs deleted",
    )
    return existed


@pytest.fixture(scope="module")
def helm(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(sandbox.kubeconfig, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="module")
def release(helm: Helm, kube_client: client.ApiClient) -> Iterator[Release]:
    name = _unique("nwb")
    namespace = _unique("nwb-chart")
    existed = _remove_crds(client.ApiextensionsV1Api(kube_client))
    helm.install(name, f"namespace={namespace}")
    try:
        yield Release(name, namespace, f"{name}-nodewright-bridge", existed)
    finally:
        helm.run("uninstall", name, "--wait", check=False)


@pytest.fixture(scope="module")
def sa_kubeconfig(
    release: Release,
    kube_client: client.ApiClient,
    sandbox: Sandbox,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    return service_account_kubeconfig(
        kube_client,
        sandbox.kubeconfig,
        release.namespace,
        release.fullname,
        tmp_path_factory.mktemp("sa") / "controller.kubeconfig",
    )


@pytest.fixture(scope="module")
def sa_api(sa_kubeconfig: Path) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=str(sa_kubeconfig))
    try:
        yield api
    finally:
        api.close()


def test_helm_install_creates_the_crds_from_the_chart_and_every_controller_object(
    release: Release, kube: Kube, helm: Helm
) -> None:
    for path in CHART_CRDS.glob("*.yaml"):
        want = yaml.safe_load(path.read_text())
        live = kube.ext.read_custom_resource_definition(want["metadata"]["name"])
        conditions = {c.type: c.status for c in live.status.conditions or []}
        assert conditions.get("Established") == "True"
        live_versions = kube.api.sanitize_for_serialization(live.spec.versions)
        assert [v["name"] for v in live_versions] == [v["name"] for v in want["spec"]["versions"]]
        assert live_versions[0]["schema"] == want["spec"]["versions"][0]["schema"]
    ns = kube.core.read_namespace(release.namespace)
    assert ns.metadata.labels["pod-security.kubernetes.io/enforce"] == "privileged"

    deploy = kube.apps.read_namespaced_deployment(release.fullname, release.namespace)
    assert deploy.spec.replicas == 2
    assert deploy.status.ready_replicas == 2  # helm --wait waited for it
    pod = deploy.spec.template.spec
    assert pod.service_account_name == release.fullname
    assert f"--namespace={release.namespace}" in pod.containers[0].args
    kube.core.read_namespaced_service_account(release.fullname, release.namespace)
    service = kube.core.read_namespaced_service(f"{release.fullname}-metrics", release.namespace)
    assert [p.port for p in service.spec.ports] == [8080]
    pdb = kube.policy.read_namespaced_pod_disruption_budget(release.fullname, release.namespace)
    assert pdb.spec.min_available == 1
    wait_for(
        lambda: (
            kube.policy.read_namespaced_pod_disruption_budget(
                release.fullname, release.namespace
            ).status.current_healthy
            == 2
        ),
        timeout=60,
        what="PDB sees both controller pods",
    )
    rbac = client.RbacAuthorizationV1Api(kube.api)
    rbac.read_cluster_role(release.fullname)
    rbac.read_cluster_role_binding(release.fullname)
    rbac.read_namespaced_role(release.fullname, release.namespace)
    rbac.read_namespaced_role_binding(release.fullname, release.namespace)
    status = helm.run("status", release.name, "-o", "json").stdout
    assert '"status":"deployed"' in status.replace(" ", "")


def _grants(manifest: list[dict[str, Any]], namespace: str) -> list[tuple[str, str, str, str]]:
    """(verb, group, resource, namespace) for every rule of the chart's ClusterRole and Role."""
    out = []
    for doc in manifest:
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        scope = namespace if doc["kind"] == "Role" else ""
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.append((verb, group, resource, scope))
    return out


def _allowed(api: client.ApiClient, verb: str, group: str, resource: str, namespace: str) -> bool:
    plural, _, sub = resource.partition("/")
    return can_i(api, verb, plural, group=group, namespace=namespace, subresource=sub)


def test_the_service_account_may_make_every_request_the_chart_grants(
    release: Release, helm: Helm, sa_api: client.ApiClient
) -> None:
    grants = _grants(helm.manifest(release.name), release.namespace)
    assert len(grants) > 20
    refused = [g for g in grants if not _allowed(sa_api, *g)]
    assert refused == []


# What the controller does (runtime informers, leader election, events, reconciler executor).
CONTROLLER_REQUESTS = [
    ("list", "", "nodes", ""),
    ("watch", "", "nodes", ""),
    ("patch", "", "nodes", ""),
    ("list", "", "pods", ""),
    ("watch", "", "pods", ""),
    ("create", "", "pods/eviction", "some-workload-namespace"),
    ("list", "policy", "poddisruptionbudgets", ""),
    ("watch", "policy", "poddisruptionbudgets", ""),
    ("list", GROUP, "nodewrights", ""),
    ("watch", GROUP, "nodewrights", ""),
    ("patch", GROUP, "nodewrights", ""),
    ("update", GROUP, "nodewrights/finalizers", ""),
    ("patch", GROUP, "nodewrights/status", ""),
    ("list", GROUP, "deploymentpolicies", ""),
    ("watch", GROUP, "deploymentpolicies", ""),
    ("create", "events.k8s.io", "events", "default"),
    ("patch", "events.k8s.io", "events", "default"),
    ("create", "", "pods", "{ns}"),
    ("delete", "", "pods", "{ns}"),
    ("create", "", "configmaps", "{ns}"),
    ("update", "", "configmaps", "{ns}"),
    ("delete", "", "configmaps", "{ns}"),
    ("get", "coordination.k8s.io", "leases", "{ns}"),
    ("create", "coordination.k8s.io", "leases", "{ns}"),
    ("update", "coordination.k8s.io", "leases", "{ns}"),
    # secretVars changes are config changes: the Secrets of its own namespace, where it already
    # creates the pods that mount them (it keeps a digest per key, never a value).
    ("list", "", "secrets", "{ns}"),
    ("watch", "", "secrets", "{ns}"),
]

# What it must never be able to do.
OUTSIDE_REQUESTS = [
    ("delete", "", "nodes", ""),
    ("update", "", "nodes", ""),
    ("create", "", "nodes", ""),
    ("get", "", "secrets", ""),
    ("list", "", "secrets", ""),
    ("get", "", "secrets", "default"),
    ("update", "", "secrets", "{ns}"),
    ("create", "", "pods", "default"),
    ("create", "", "pods", "kube-system"),
    ("delete", "", "pods", ""),
    ("delete", "", "pods", "default"),
    ("create", "", "pods/exec", "{ns}"),
    ("create", "", "configmaps", "default"),
    ("update", "coordination.k8s.io", "leases", "kube-system"),
    ("create", GROUP, "nodewrights", ""),
    ("delete", GROUP, "nodewrights", ""),
    ("delete", GROUP, "deploymentpolicies", ""),
    ("delete", "policy", "poddisruptionbudgets", "default"),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", ""),
    ("escalate", "rbac.authorization.k8s.io", "clusterroles", ""),
    ("impersonate", "", "serviceaccounts", ""),
    ("delete", "apiextensions.k8s.io", "customresourcedefinitions", ""),
]


def test_every_request_the_controller_makes_is_allowed_for_the_service_account(
    release: Release, sa_api: client.ApiClient
) -> None:
    refused = [
        (verb, group, resource, ns)
        for verb, group, resource, ns in CONTROLLER_REQUESTS
        if not _allowed(sa_api, verb, group, resource, ns.format(ns=release.namespace))
    ]
    assert refused == []


def test_requests_outside_the_grant_are_denied_for_the_service_account(
    release: Release, sa_api: client.ApiClient
) -> None:
    allowed = [
        (verb, group, resource, ns)
        for verb, group, resource, ns in OUTSIDE_REQUESTS
        if _allowed(sa_api, verb, group, resource, ns.format(ns=release.namespace))
    ]
    assert allowed == []
    # Not just the review: the API server refuses the real request too.
    with pytest.raises(ApiException) as denied:
        client.CoreV1Api(sa_api).list_namespaced_secret("default")
    assert denied.value.status == 403
    with pytest.raises(ApiException) as denied:
        client.CoreV1Api(sa_api).delete_node("does-not-matter")
    assert denied.value.status == 403


def _lease_holder(kube: Kube, namespace: str) -> str:
    try:
        lease = client.CoordinationV1Api(kube.api).read_namespaced_lease(LEASE, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return ""
        raise
    return lease.spec.holder_identity or ""


def test_the_controller_runtime_syncs_leads_and_releases_under_the_service_account(
    release: Release, sa_kubeconfig: Path, kube: Kube, tmp_path: Path
) -> None:
    """Informers on every watched kind, the Lease and Events - with a reconciler that only logs."""
    controller = Controller(
        sa_kubeconfig,
        release.namespace,
        tmp_path / "controller.log",
        reconciler_script=Path(__file__).parent / "logging_reconciler.py",
        identity="chart-sa",
    )
    with controller:
        wait_for(
            lambda: _lease_holder(kube, release.namespace).startswith("chart-sa"),
            timeout=CONTROLLER_WAIT,
            what="lease taken by the controller running as the chart ServiceAccount",
        )
        wait_for(
            lambda: any(r.get("msg") == "reconciled" for r in controller.records()),
            timeout=CONTROLLER_WAIT,
            what="informers synced and keys reconciled",
        )
        assert controller.running(), controller.log_text()
    assert controller.proc is not None and controller.proc.returncode == 0, controller.log_text()
    assert controller.forbidden() == []
    assert _lease_holder(kube, release.namespace) == ""


def test_helm_upgrade_changes_the_release_and_uninstall_keeps_the_crds_and_their_objects(
    helm: Helm, kube: Kube, release: Release
) -> None:
    """A second release next to ``release`` (whose install created the CRDs: helm skips them)."""
    name, namespace = _unique("nwb"), _unique("nwb-upgrade")
    fullname = f"{name}-nodewright-bridge"
    helm.install(name, f"namespace={namespace}")
    kube.defer(lambda: helm.run("uninstall", name, check=False) and None)

    helm.upgrade(name, f"namespace={namespace}", "replicaCount=3", "logFormat=text")
    deploy = kube.apps.read_namespaced_deployment(fullname, namespace)
    assert deploy.spec.replicas == 3
    assert deploy.status.ready_replicas == 3
    assert "--log-format=text" in deploy.spec.template.spec.containers[0].args
    history = helm.run("history", name, "-o", "yaml").stdout
    assert [entry["revision"] for entry in yaml.safe_load(history)] == [1, 2]

    policy = _unique("kept")
    kube.custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "deploymentpolicies",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "DeploymentPolicy",
            "metadata": {"name": policy},
            "spec": {
                "default": {
                    "budget": {"count": 1},
                    "strategy": {"fixed": {"initialBatch": 1}},
                }
            },
        },
    )
    kube.defer(
        lambda: kube.custom.delete_cluster_custom_object(
            GROUP, VERSION, "deploymentpolicies", policy
        )
    )

    helm.uninstall(name)
    with pytest.raises(ApiException) as gone:
        client.RbacAuthorizationV1Api(kube.api).read_cluster_role(fullname)
    assert gone.value.status == 404

    def namespace_gone_or_terminating() -> bool:
        try:
            ns = kube.core.read_namespace(namespace)
        except ApiException as exc:
            return exc.status == 404
        return ns.status.phase == "Terminating"

    wait_for(namespace_gone_or_terminating, timeout=60, what=f"namespace {namespace} removed")
    for crd in CRD_NAMES:
        assert _crd_present(kube.ext, crd), f"helm uninstall removed CRD {crd}"
    kept = kube.custom.get_cluster_custom_object(GROUP, VERSION, "deploymentpolicies", policy)
    assert kept["metadata"]["name"] == policy


def _cluster_pod_verbs(helm: Helm, *sets: str) -> list[str]:
    args = ["template", "nwb", str(CHART)]
    for value in sets:
        args += ["--set", value]
    docs = [d for d in yaml.safe_load_all(helm.run(*args).stdout) if d]
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    (rule,) = [r for r in role["rules"] if r["resources"] == ["pods"]]
    return list(rule["verbs"])


def test_pods_may_be_deleted_cluster_wide_only_when_disable_eviction_is_granted(
    helm: Helm,
) -> None:
    assert "delete" not in _cluster_pod_verbs(helm)
    assert "delete" in _cluster_pod_verbs(helm, "drain.allowPodDelete=true")
