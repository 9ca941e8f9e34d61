"""The committed CRDs on a real kube-apiserver: accepted (CEL within the cost budget), good objects
are stored with their defaults, and bad objects are rejected with the message a user needs.

Each bad object is also checked against the pydantic models, so ``nwb plan`` (offline) and the API
server (online) reject the same documents.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from waiting import wait_for

from lifecycle.errors import SpecError
from lifecycle.validation import load_nodewright, load_policy
from nodewright_bridge.sandbox import binaries
from nodewright_bridge.sandbox.controlplane import ControlPlane

pytestmark = pytest.mark.integration

CHART_CRDS = Path(__file__).resolve().parents[2] / "charts" / "nodewright-bridge" / "crds"
GROUP, VERSION = "bridge.nodewright.io", "v1alpha1"
ESTABLISH_TIMEOUT_SECONDS = 60.0  # CRDs are Established within a second or two on 2 cores


@pytest.fixture(scope="module")
def kubeconfig(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The shared sandbox control plane when the suite provides one, else a private one."""
    try:
        shared = request.getfixturevalue("control_plane")
    except pytest.FixtureLookupError:
        shared = None
    if shared is not None:
        yield Path(shared.kubeconfig)
        return
    found = binaries.find_all(binaries.REQUIRED)
    missing = [name for name, binary in found.items() if binary is None]
    if missing:
        pytest.skip(f"control-plane binaries missing ({', '.join(missing)}); run `make setup`")
    plane = ControlPlane(
        directory=tmp_path_factory.mktemp("crd-plane"),
        binaries={name: binary for name, binary in found.items() if binary is not None},
    )
    with plane:
        yield plane.kubeconfig


@pytest.fixture(scope="module")
def api(kubeconfig: Path) -> client.ApiClient:
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    ext = client.ApiextensionsV1Api(api_client)
    for path in sorted(CHART_CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        try:
            ext.create_custom_resource_definition(crd)
        except ApiException as exc:
            if exc.status != 409:
                raise AssertionError(f"{path.name} was rejected: {exc.body}") from exc
            current = ext.read_custom_resource_definition(crd["metadata"]["name"])
            crd["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(crd["metadata"]["name"], crd)
        _wait_established(ext, crd["metadata"]["name"])
    return api_client


def _wait_established(ext: client.ApiextensionsV1Api, name: str) -> None:
    def established() -> bool:
        crd = ext.read_custom_resource_definition(name)
        conditions = {c.type: c.status for c in (crd.status.conditions or [])}
        return conditions.get("Established") == "True"

    wait_for(
        established, timeout=ESTABLISH_TIMEOUT_SECONDS, interval=0.2, what=f"CRD {name} Established"
    )


STORED: list[tuple[str, str]] = []  # (plural, name) of every object this module stored


@pytest.fixture(scope="module", autouse=True)
def _delete_stored(api: client.ApiClient) -> Iterator[None]:
    """Delete what the module stored: a NodeWright left behind (no nodeSelectors, so it targets
    every node) would sequence another module's rollout on the same shared control plane."""
    yield
    custom = client.CustomObjectsApi(api)
    while STORED:
        plural, name = STORED.pop()
        try:
            custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def create(api: client.ApiClient, plural: str, body: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = client.CustomObjectsApi(api).create_cluster_custom_object(
        GROUP, VERSION, plural, body
    )
    STORED.append((plural, result["metadata"]["name"]))
    return result


def rejection(api: client.ApiClient, plural: str, body: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as info:
        create(api, plural, body)
    assert info.value.status == 422, info.value.body
    return str(info.value.body)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def nodewright(**spec: Any) -> dict[str, Any]:
    packages = {
        "base": {"version": "1.0.0", "image": "registry.local:5000/pkgs/base"},
        "gpu-tuning": {
            "version": "1.2.0",
            "image": "pkgs/gpu-tuning",
            "dependsOn": {"base": "1.0.0"},
            "vars": {"hugepages": 512, "nested": {"list": [1, "two"]}},
        },
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeWright",
        "metadata": {"name": unique("nw")},
        "spec": {"packages": packages, **spec},
    }


def policy(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DeploymentPolicy",
        "metadata": {"name": unique("dp")},
        "spec": {
            "default": {"budget": {"percent": 25}, "strategy": {"fixed": {}}},
            "compartments": [
                {
                    "name": "a100",
                    "selector": {"matchLabels": {"gpu": "a100"}},
                    "budget": {"count": 2},
                    "strategy": {"exponential": {}},
                },
            ],
            **spec,
        },
    }


def test_a_good_nodewright_is_stored_with_its_defaults(api: client.ApiClient) -> None:
    doc = nodewright(deploymentPolicy="canary")
    doc["spec"]["packages"]["base"] |= {"tags": ["sysctl", "never"], "skipTags": ["slow"]}
    load_nodewright(doc)
    stored = create(api, "nodewrights", doc)
    spec = stored["spec"]
    assert spec["packages"]["base"]["tags"] == ["sysctl", "never"]
    assert spec["packages"]["base"]["skipTags"] == ["slow"]
    assert spec["priority"] == 200 and spec["sequencing"] == "node"
    assert spec["drain"] == {
        "timeout": "30m",
        "deleteEmptyDirData": True,
        "force": False,
        "disableEviction": False,
        "ignoreDaemonSets": True,
    }
    base = spec["packages"]["base"]
    assert base["timeouts"] == {"stage": "30m", "drain": "30m", "interrupt": "20m"}
    assert base["maxAttempts"] == 3
    assert spec["packages"]["gpu-tuning"]["vars"] == {
        "hugepages": 512,
        "nested": {"list": [1, "two"]},
    }


def test_a_good_policy_is_stored_with_strategy_defaults(api: client.ApiClient) -> None:
    doc = policy()
    load_policy(doc)
    stored = create(api, "deploymentpolicies", doc)
    exponential = stored["spec"]["compartments"][0]["strategy"]["exponential"]
    assert exponential == {
        "initialBatch": 1,
        "batchThreshold": 100,
        "safetyLimit": 50,
        "growthFactor": 2,
    }
    assert stored["spec"]["resetBatchStateOnCompletion"] is True


def with_package(change: dict[str, Any]) -> dict[str, Any]:
    doc = nodewright()
    doc["spec"]["packages"]["base"].update(change)
    return doc


def renamed(name: str) -> dict[str, Any]:
    doc = nodewright()
    doc["metadata"]["name"] = name
    return doc


BAD_NODEWRIGHTS = [
    pytest.param(with_package({"version": "1.2"}), "version must be strict semver", id="semver"),
    pytest.param(
        with_package({"image": "registry.local:5000/pkgs/base:1.0.0"}),
        "image must be a repository without tag",
        id="image-tag",
    ),
    pytest.param(
        with_package({"digest": "sha256:abc"}), 'digest must be \\"sha256:\\"', id="digest"
    ),
    pytest.param(
        nodewright(deploymentPolicy="canary", interruptionBudget={"count": 1}),
        "deploymentPolicy and interruptionBudget are mutually exclusive",
        id="exclusive",
    ),
    pytest.param(
        nodewright(interruptionBudget={"count": 1, "percent": 5}),
        "set exactly one of percent or count",
        id="budget-one-of",
    ),
    pytest.param(
        with_package({"dependsOn": {"kernel": "1.0.0"}}),
        "every dependsOn entry must name a package",
        id="depends-on-missing",
    ),
    pytest.param(
        nodewright(packages={"a": {"version": "1.0.0", "image": "x"}}),
        "package names must be 2-43 characters",
        id="package-name",
    ),
    pytest.param(
        with_package({"resources": {"cpuRequest": "1"}}),
        "set all of cpuRequest, cpuLimit, memoryRequest, memoryLimit or none",
        id="resources-all-or-none",
    ),
    pytest.param(
        with_package(
            {
                "resources": {
                    "cpuRequest": 2,
                    "cpuLimit": "1",
                    "memoryRequest": "1Gi",
                    "memoryLimit": "1Gi",
                }
            }
        ),
        "cpuLimit must be at least cpuRequest",
        id="limit-below-request",
    ),
    pytest.param(
        with_package(
            {
                "resources": {
                    "cpuRequest": "lots",
                    "cpuLimit": "1",
                    "memoryRequest": "1Gi",
                    "memoryLimit": "1Gi",
                }
            }
        ),
        "cpuRequest must be a Kubernetes quantity",
        id="quantity",
    ),
    pytest.param(
        with_package({"uninstall": {"apply": True}}),
        "uninstall.apply requires uninstall.enabled",
        id="uninstall",
    ),
    pytest.param(
        with_package({"interrupt": {"type": "reboot", "services": ["kubelet"]}}),
        "services are required for type service and allowed only there",
        id="interrupt-services",
    ),
    pytest.param(
        with_package({"timeouts": {"stage": "30"}}), "stage must be a Go duration", id="duration"
    ),
    pytest.param(
        with_package({"tags": ["sysctl,grub"]}),
        "each tag must be non-empty, without commas",
        id="tags-comma",
    ),
    pytest.param(
        with_package({"skipTags": [""]}),
        "each tag must be non-empty, without commas",
        id="skip-tags-empty",
    ),
    pytest.param(
        nodewright(autoTaintNewNodes=True),
        "autoTaintNewNodes requires runtimeRequired",
        id="auto-taint",
    ),
    pytest.param(renamed("n" * 51), "metadata.name must be at most 50 characters", id="name"),
    pytest.param(
        nodewright(nodeSelectors={"matchExpressions": [{"key": "gpu", "operator": "In"}]}),
        "In and NotIn need at least one value",
        id="selector-values",
    ),
]


@pytest.mark.parametrize(("doc", "message"), BAD_NODEWRIGHTS)
def test_a_bad_nodewright_is_rejected_by_the_api_server_and_offline(
    api: client.ApiClient, doc: dict[str, Any], message: str
) -> None:
    body = rejection(api, "nodewrights", copy.deepcopy(doc))
    assert message in body, body
    with pytest.raises(SpecError):
        load_nodewright(doc)


def with_compartment(**change: Any) -> dict[str, Any]:
    doc = policy()
    doc["spec"]["compartments"][0].update(change)
    return doc


BAD_POLICIES = [
    pytest.param(
        policy(default={"budget": {}, "strategy": {"fixed": {}}}),
        "set exactly one of percent or count",
        id="budget",
    ),
    pytest.param(
        policy(default={"budget": {"count": 1}, "strategy": {"fixed": {}, "linear": {}}}),
        "set exactly one of fixed, linear, exponential",
        id="strategy",
    ),
    pytest.param(with_compartment(name="__default__"), "__default__ is reserved", id="reserved"),
    pytest.param(
        with_compartment(strategy={"exponential": {"growthFactor": 1}}),
        "should be greater than or equal to 2",
        id="growth-factor",
    ),
    pytest.param(
        policy(
            compartments=[
                {"name": "a", "selector": {"matchLabels": {"gpu": "a100"}}, "budget": {"count": 1}},
                {"name": "a", "selector": {"matchLabels": {"gpu": "h100"}}, "budget": {"count": 1}},
            ]
        ),
        "compartment names must be unique",
        id="unique-names",
    ),
    pytest.param(
        policy(
            compartments=[
                {"name": "a", "selector": {"matchLabels": {"gpu": "a100"}}, "budget": {"count": 1}},
                {"name": "b", "selector": {"matchLabels": {"gpu": "a100"}}, "budget": {"count": 1}},
            ]
        ),
        "no two compartments may have identical selectors",
        id="same-selector",
    ),
]


@pytest.mark.parametrize(("doc", "message"), BAD_POLICIES)
def test_a_bad_policy_is_rejected_by_the_api_server_and_offline(
    api: client.ApiClient, doc: dict[str, Any], message: str
) -> None:
    body = rejection(api, "deploymentpolicies", copy.deepcopy(doc))
    assert message in body, body
    with pytest.raises(SpecError):
        load_policy(doc)


def test_unknown_fields_are_pruned_not_stored(api: client.ApiClient) -> None:
    doc = with_package({"verison": "1.0.0"})
    stored = create(api, "nodewrights", doc)
    assert "verison" not in stored["spec"]["packages"]["base"]
    with pytest.raises(SpecError, match="verison: unknown field"):
        load_nodewright(doc)


def packages_depending(edges: dict[str, list[str]]) -> dict[str, Any]:
    """A NodeWright whose packages (all version 1.0.0) depend on each other as ``edges`` says."""
    doc = nodewright()
    doc["spec"]["packages"] = {
        name: {
            "version": "1.0.0",
            "image": f"pkgs/{name}",
            "dependsOn": {dep: "1.0.0" for dep in deps},
        }
        for name, deps in edges.items()
    }
    return doc


@pytest.mark.parametrize(
    ("edges", "cycle"),
    [
        pytest.param({"kernel": ["driver"], "driver": ["kernel"]}, "driver -> kernel", id="two"),
        pytest.param(
            {
                "base": [],
                "kernel": ["driver", "base"],
                "driver": ["toolkit"],
                "toolkit": ["kernel"],
            },
            "driver -> toolkit -> kernel",
            id="three",
        ),
    ],
)
def test_a_dependency_cycle_is_rejected_at_admission_naming_the_field(
    api: client.ApiClient, edges: dict[str, list[str]], cycle: str
) -> None:
    doc = packages_depending(edges)
    body = rejection(api, "nodewrights", copy.deepcopy(doc))
    assert "spec.packages: Invalid value" in body and "dependsOn cycle" in body, body
    with pytest.raises(SpecError, match=f"packages: dependency cycle: .*{cycle}"):
        load_nodewright(doc)


def test_a_diamond_of_dependencies_is_accepted(api: client.ApiClient) -> None:
    doc = packages_depending(
        {"base": [], "kernel": ["base"], "driver": ["base"], "toolkit": ["kernel", "driver"]}
    )
    load_nodewright(doc)
    stored = create(api, "nodewrights", doc)
    assert stored["spec"]["packages"]["toolkit"]["dependsOn"] == {
        "kernel": "1.0.0",
        "driver": "1.0.0",
    }
