"""The CRDs generated from the API models: drift guard, structural-schema checks, contents."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from nodewright_bridge import crds
from nodewright_bridge.commands.crds import command

CHART_CRDS = Path(__file__).resolve().parents[3] / "charts" / "nodewright-bridge" / "crds"
REGENERATE = "run `nwb crds --output-dir charts/nodewright-bridge/crds` and commit the result"


def schema_of(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}.*")
    if "items" in node:
        yield from walk(node["items"], f"{path}[]")


ALL = [pytest.param(crd, id=crd["spec"]["names"]["kind"]) for crd in crds.all_crds()]


@pytest.mark.parametrize("crd", ALL)
def test_the_committed_chart_crds_match_the_models(crd: dict[str, Any]) -> None:
    path = CHART_CRDS / crds.file_name(crd)
    assert path.exists(), f"{path} is missing; {REGENERATE}"
    assert path.read_text(encoding="utf-8") == crds.render(crd), (
        f"{path} differs from the models; {REGENERATE}"
    )


def test_the_chart_has_no_stray_crd_files() -> None:
    expected = {crds.file_name(crd) for crd in crds.all_crds()}
    assert {p.name for p in CHART_CRDS.glob("*.yaml")} == expected


@pytest.mark.parametrize("crd", ALL)
def test_every_schema_node_is_structural(crd: dict[str, Any]) -> None:
    for path, node in walk(schema_of(crd)):
        for banned in ("$ref", "$defs", "anyOf", "allOf", "oneOf", "not", "title"):
            assert banned not in node, f"{path} has {banned}"
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        assert not isinstance(node.get("additionalProperties"), bool), path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("type") == "array":
            assert "items" in node, path
        if "default" in node:
            assert node["default"] is not None, f"{path} defaults to null"


PRESERVED = {".spec.packages.*.vars", ".spec.packages.*.env[].valueFrom"}


@pytest.mark.parametrize("crd", ALL)
def test_only_vars_and_value_from_keep_unknown_fields(crd: dict[str, Any]) -> None:
    found = {p for p, n in walk(schema_of(crd)) if n.get("x-kubernetes-preserve-unknown-fields")}
    expected = PRESERVED if crd["spec"]["names"]["kind"] == "NodeWright" else set()
    assert found == expected
    for path in found:
        node = dict(walk(schema_of(crd)))[path]
        assert node["type"] == "object" and "properties" not in node


@pytest.mark.parametrize("crd", ALL)
def test_every_spec_field_has_a_description(crd: dict[str, Any]) -> None:
    for path, node in walk(schema_of(crd)["properties"]["spec"], ".spec"):
        if path != ".spec" and not path.endswith(("*", "[]")):
            assert node.get("description"), f"{path} has no description"


def test_names_scope_and_versions() -> None:
    nw, dp = crds.nodewright_crd(), crds.deploymentpolicy_crd()
    assert nw["metadata"]["name"] == "nodewrights.bridge.nodewright.io"
    assert dp["metadata"]["name"] == "deploymentpolicies.bridge.nodewright.io"
    for crd, plural, short in ((nw, "nodewrights", "nw"), (dp, "deploymentpolicies", "nwdp")):
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        assert crd["spec"]["group"] == "bridge.nodewright.io"
        assert crd["spec"]["scope"] == "Cluster"
        assert crd["spec"]["names"]["plural"] == plural
        assert crd["spec"]["names"]["shortNames"] == [short]
        assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1"]


def test_nodewright_has_status_and_printer_columns_and_policy_has_neither() -> None:
    nw = crds.nodewright_crd()["spec"]["versions"][0]
    dp = crds.deploymentpolicy_crd()["spec"]["versions"][0]
    assert nw["subresources"] == {"status": {}}
    assert "subresources" not in dp
    assert "status" not in dp["schema"]["openAPIV3Schema"]["properties"]
    columns = {c["name"]: c["jsonPath"] for c in nw["additionalPrinterColumns"]}
    assert columns == {
        "Status": ".status.status",
        "Complete": ".status.completeNodes",
        "InProgress": ".status.nodesInProgress",
        "Packages": ".status.packageList",
        "Policy": ".spec.deploymentPolicy",
        "Checks": ".status.checks",
        "Age": ".metadata.creationTimestamp",
    }
    status = nw["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {"observedGeneration", "conditions", "compartments", "recentFailures"} <= set(status)


def test_constant_defaults_are_carried_over() -> None:
    spec = schema_of(crds.nodewright_crd())["properties"]["spec"]["properties"]
    package = spec["packages"]["additionalProperties"]["properties"]
    assert spec["priority"]["default"] == 200
    assert spec["sequencing"]["default"] == "node"
    assert spec["drain"]["default"] == {}
    assert spec["drain"]["properties"]["timeout"]["default"] == "30m"
    assert package["timeouts"]["default"] == {}
    assert package["timeouts"]["properties"]["interrupt"]["default"] == "20m"
    assert package["maxAttempts"]["default"] == 3
    assert "default" not in package["digest"]
    policy = schema_of(crds.deploymentpolicy_crd())["properties"]["spec"]["properties"]
    fixed = policy["default"]["properties"]["strategy"]["properties"]["fixed"]["properties"]
    assert fixed["safetyLimit"]["default"] == 50
    assert "default" not in fixed["failureThreshold"]


def rules_at(crd: dict[str, Any], path: str) -> list[str]:
    node = dict(walk(schema_of(crd)))[path]
    return [r["rule"] for r in node.get("x-kubernetes-validations", [])]


@pytest.mark.parametrize(
    ("kind", "path", "fragment"),
    [
        ("NodeWright", "", "self.metadata.name.size() <= 50"),
        ("NodeWright", ".spec", "has(self.deploymentPolicy) && has(self.interruptionBudget)"),
        ("NodeWright", ".spec", "self.runtimeRequired"),
        ("NodeWright", ".spec", "self.packages[d].version == self.packages[n].dependsOn[d]"),
        ("NodeWright", ".spec.packages", "k.matches("),
        ("NodeWright", ".spec.packages.*.version", "self.matches("),
        ("NodeWright", ".spec.packages.*.image", "lastIndexOf('/')"),
        ("NodeWright", ".spec.packages.*.interrupt", "self.type == 'service'"),
        ("NodeWright", ".spec.packages.*.resources", "has(self.cpuRequest) == has(self.cpuLimit)"),
        ("NodeWright", ".spec.packages.*.resources", "compareTo"),
        ("NodeWright", ".spec.packages.*.resources.cpuRequest", "isQuantity"),
        ("NodeWright", ".spec.packages.*.uninstall", "self.enabled"),
        ("NodeWright", ".spec.packages.*.timeouts.stage", "self.matches("),
        ("NodeWright", ".spec.interruptionBudget", "has(self.percent) != has(self.count)"),
        ("DeploymentPolicy", ".spec.default.budget", "has(self.percent) != has(self.count)"),
        ("DeploymentPolicy", ".spec.default.strategy", "has(self.exponential)"),
        ("DeploymentPolicy", ".spec", "d.name == c.name"),
        ("DeploymentPolicy", ".spec", "d.selector == c.selector"),
        ("DeploymentPolicy", ".spec.compartments[].name", "__default__"),
    ],
)
def test_cross_field_rules_are_cel_validations(kind: str, path: str, fragment: str) -> None:
    crd = next(c for c in crds.all_crds() if c["spec"]["names"]["kind"] == kind)
    assert any(fragment in rule for rule in rules_at(crd, path)), rules_at(crd, path)


def test_cel_regexes_are_raw_strings() -> None:
    # CEL rejects "\." in a normal string literal; every regex must be written r'...'.
    for crd in crds.all_crds():
        for path, node in walk(schema_of(crd)):
            for rule in node.get("x-kubernetes-validations", []):
                literals = re.findall(r"r?'[^']*'", rule["rule"])
                escaped = [lit for lit in literals if not lit.startswith("r") and "\\" in lit]
                assert not escaped, (path, rule["rule"])


def test_cel_cost_bounds_are_present() -> None:
    spec = schema_of(crds.nodewright_crd())["properties"]["spec"]["properties"]
    assert spec["packages"]["maxProperties"] == 64
    package = spec["packages"]["additionalProperties"]["properties"]
    assert package["version"]["maxLength"] == 128
    assert package["dependsOn"]["maxProperties"] == 64
    assert spec["additionalTolerations"]["maxItems"] > 0
    policy = schema_of(crds.deploymentpolicy_crd())["properties"]["spec"]["properties"]
    assert policy["compartments"]["maxItems"] > 0


GOOD_NODEWRIGHT = {
    "apiVersion": "bridge.nodewright.io/v1alpha1",
    "kind": "NodeWright",
    "metadata": {"name": "gpu"},
    "spec": {
        "nodeSelectors": {"matchLabels": {"gpu": "true"}},
        "deploymentPolicy": "canary",
        "packages": {
            "tuning": {
                "version": "1.2.0",
                "image": "registry.local:5000/pkgs/tuning",
                "vars": {"nested": {"any": [1, "json"]}},
                "interrupt": {"type": "service", "services": ["kubelet"]},
                "resources": {
                    "cpuRequest": 1,
                    "cpuLimit": "2",
                    "memoryRequest": "1Gi",
                    "memoryLimit": "1Gi",
                },
                "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
            }
        },
        "additionalTolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
}


def openapi_validator(crd: dict[str, Any]) -> jsonschema.Draft7Validator:
    """The OpenAPI part of the schema (CEL and x- keys are ignored) as a JSON Schema validator."""
    return jsonschema.Draft7Validator(schema_of(crd))


def test_a_good_object_passes_the_openapi_schema() -> None:
    errors = list(openapi_validator(crds.nodewright_crd()).iter_errors(GOOD_NODEWRIGHT))
    assert errors == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "priority"), 0),
        (("spec", "sequencing"), "batch"),
        (("spec", "packages", "tuning", "maxAttempts"), 0),
        (("spec", "packages", "tuning", "interrupt", "type"), "shutdown"),
        (("spec", "additionalTolerations", 0, "operator"), "Matches"),
        (("spec", "packages", "tuning", "version"), "1" * 129),
    ],
)
def test_a_bad_value_fails_the_openapi_schema(path: tuple[Any, ...], value: Any) -> None:
    doc: Any = yaml.safe_load(yaml.safe_dump(GOOD_NODEWRIGHT))
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    assert list(openapi_validator(crds.nodewright_crd()).iter_errors(doc))


def test_nwb_crds_prints_both_crds_as_a_yaml_stream() -> None:
    result = CliRunner().invoke(command, [])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.output))
    assert [d["metadata"]["name"] for d in docs] == [
        "nodewrights.bridge.nodewright.io",
        "deploymentpolicies.bridge.nodewright.io",
    ]
    assert docs == crds.all_crds()


def test_nwb_crds_writes_one_file_per_crd(tmp_path: Path) -> None:
    result = CliRunner().invoke(command, ["--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == [
        "deploymentpolicies.bridge.nodewright.io.yaml",
        "nodewrights.bridge.nodewright.io.yaml",
    ]
    for crd in crds.all_crds():
        assert (tmp_path / "out" / crds.file_name(crd)).read_text() == crds.render(crd)
