"""Every validation rule of the NodeWright and DeploymentPolicy models, one case per rule.

Each case starts from a valid document, changes one thing, and expects exactly the line a user
would see (``path: message``), paths in camelCase wire names.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lifecycle.errors import SpecError
from lifecycle.spec import NodeWright
from lifecycle.validation import load_nodewright, load_policy

DIGEST = "sha256:" + "ab" * 32


def nodewright(**spec: Any) -> dict[str, Any]:
    packages = {
        "base": {"version": "1.0.0", "image": "registry.local:5000/pkgs/base"},
        "gpu-tuning": {
            "version": "1.2.0",
            "image": "pkgs/gpu-tuning",
            "dependsOn": {"base": "1.0.0"},
            "vars": {"hugepages": 512, "governor": "performance"},
            "configMap": {"limits.conf": "x", "sysctl.conf": "y"},
        },
    }
    return {
        "apiVersion": "bridge.nodewright.io/v1alpha1",
        "kind": "NodeWright",
        "metadata": {"name": "gpu-nodes"},
        "spec": {"packages": packages, **spec},
    }


def policy(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "bridge.nodewright.io/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": {"name": "canary"},
        "spec": {
            "default": {"budget": {"percent": 25}, "strategy": {"fixed": {}}},
            "compartments": [
                {
                    "name": "a100",
                    "selector": {"matchLabels": {"gpu": "a100"}},
                    "budget": {"count": 2},
                },
            ],
            **spec,
        },
    }


def changed(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``doc`` with the value at dotted ``path`` replaced (``-`` deletes the key).

    Path parts index lists where the node is a list.
    """
    out = copy.deepcopy(doc)
    parts = path.split(".")
    node: Any = out
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    last = parts[-1]
    if value == "-":
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


def problems_of(load: Any, doc: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as info:
        load(doc)
    return list(info.value.problems)


def test_the_base_documents_are_valid() -> None:
    nw = load_nodewright(nodewright())
    assert nw.spec.packages["gpu-tuning"].depends_on == {"base": "1.0.0"}
    load_policy(policy())


def test_defaults_are_kept() -> None:
    spec = load_nodewright(nodewright()).spec
    pkg = spec.packages["base"]
    assert (spec.priority, spec.sequencing, spec.host_connection) == (200, "node", "nsenter")
    assert (pkg.max_attempts, pkg.timeouts.stage, pkg.timeouts.drain) == (3, "30m", "30m")
    assert pkg.timeouts.interrupt == "20m"
    assert spec.drain.timeout == "30m" and spec.drain.delete_empty_dir_data is True
    strategy = load_policy(policy()).spec.default.strategy.fixed
    assert strategy is not None
    assert (strategy.initial_batch, strategy.batch_threshold, strategy.safety_limit) == (1, 100, 50)
    assert strategy.failure_threshold is None


def test_python_field_names_are_reported_with_wire_names() -> None:
    doc = nodewright()
    doc["spec"]["packages"]["base"] = {"version": "1.0", "image": "x", "max_attempts": 0}
    assert problems_of(load_nodewright, doc) == [
        'spec.packages.base.version: "1.0" is not strict semver (MAJOR.MINOR.PATCH)',
        "spec.packages.base.maxAttempts: Input should be greater than or equal to 1",
    ]


NODEWRIGHT_CASES: list[tuple[str, Any, str]] = [
    # package names
    (
        "spec.packages.a",
        {"version": "1.0.0", "image": "x"},
        "spec.packages.a: package name must be 2-43 characters",
    ),
    (
        "spec.packages.gpu-",
        {"version": "1.0.0", "image": "x"},
        "spec.packages.gpu-: package name must be 2-43 characters",
    ),
    (
        "spec.packages.1gpu",
        {"version": "1.0.0", "image": "x"},
        "spec.packages.1gpu: package name must be 2-43 characters",
    ),
    (
        "spec.packages." + "a" * 44,
        {"version": "1.0.0", "image": "x"},
        f"spec.packages.{'a' * 44}: package name must be 2-43 characters",
    ),
    (
        "spec.packages.Gpu",
        {"version": "1.0.0", "image": "x"},
        "spec.packages.Gpu: package name must be 2-43 characters",
    ),
    # version
    (
        "spec.packages.gpu-tuning.version",
        "1.2",
        'spec.packages.gpu-tuning.version: "1.2" is not strict semver (MAJOR.MINOR.PATCH)',
    ),
    (
        "spec.packages.gpu-tuning.version",
        "v1.2.0",
        'spec.packages.gpu-tuning.version: "v1.2.0" is not strict semver',
    ),
    (
        "spec.packages.gpu-tuning.version",
        "1.2.0+build.5",
        'spec.packages.gpu-tuning.version: "1.2.0+build.5" has build metadata, which cannot be',
    ),
    # image
    (
        "spec.packages.base.image",
        "registry.local:5000/pkgs/base:1.0.0",
        'spec.packages.base.image: "registry.local:5000/pkgs/base:1.0.0" includes a tag; give the '
        "repository only and put the tag in version (or pin the image with digest)",
    ),
    (
        "spec.packages.base.image",
        "base:latest",
        'spec.packages.base.image: "base:latest" includes a tag',
    ),
    (
        "spec.packages.base.image",
        "pkgs/base@" + DIGEST,
        'contains a digest; put "sha256:..." in digest',
    ),
    ("spec.packages.base.image", "Pkgs/Base", 'has an invalid path component "Pkgs"'),
    ("spec.packages.base.image", "", "spec.packages.base.image: must not be empty"),
    ("spec.packages.base.image", "bad_host:port/x", "has an invalid registry host"),
    # digest
    (
        "spec.packages.base.digest",
        "sha256:abc",
        'spec.packages.base.digest: "sha256:abc" is not "sha256:" followed by 64 lowercase hex',
    ),
    ("spec.packages.base.digest", DIGEST.upper(), 'is not "sha256:" followed by 64'),
    # dependsOn
    (
        "spec.packages.gpu-tuning.dependsOn",
        {"kernel": "1.0.0"},
        'spec.packages.gpu-tuning.dependsOn.kernel: no package "kernel" in this NodeWright',
    ),
    (
        "spec.packages.gpu-tuning.dependsOn",
        {"base": "1.0.1"},
        'spec.packages.gpu-tuning.dependsOn.base: wants version "1.0.1" but package "base" has '
        'version "1.0.0"',
    ),
    (
        "spec.packages.base.dependsOn",
        {"gpu-tuning": "1.2.0"},
        "spec.packages: dependency cycle: base -> gpu-tuning -> base",
    ),
    (
        "spec.packages.base.dependsOn",
        {"base": "1.0.0"},
        "spec.packages: dependency cycle: base -> base",
    ),
    # interruptionBudget and the policy reference
    ("spec.interruptionBudget", {}, "spec.interruptionBudget: set exactly one of percent or count"),
    (
        "spec.interruptionBudget",
        {"percent": 10, "count": 2},
        "spec.interruptionBudget: set exactly one of percent or count, not percent and count",
    ),
    (
        "spec.interruptionBudget",
        {"percent": 101},
        "spec.interruptionBudget.percent: Input should be less than or equal to 100",
    ),
    (
        "spec.interruptionBudget",
        {"count": -1},
        "spec.interruptionBudget.count: Input should be greater than or equal to 0",
    ),
    (
        "spec.deploymentPolicy",
        "Canary_Policy",
        'spec.deploymentPolicy: "Canary_Policy" is not a DNS-1123 subdomain',
    ),
    # autoTaintNewNodes
    ("spec.autoTaintNewNodes", True, "spec.autoTaintNewNodes: requires runtimeRequired: true"),
    # interrupt
    (
        "spec.packages.base.interrupt",
        {"type": "service"},
        "spec.packages.base.interrupt.services: type service needs at least one service",
    ),
    (
        "spec.packages.base.interrupt",
        {"type": "reboot", "services": ["kubelet"]},
        "spec.packages.base.interrupt.services: only allowed with type service, not reboot",
    ),
    (
        "spec.packages.base.interrupt",
        {"type": "shutdown"},
        "spec.packages.base.interrupt.type: Input should be 'reboot', 'service', ",
    ),
    # configInterrupts
    (
        "spec.packages.gpu-tuning.configInterrupts",
        {"hugepage": {"type": "reboot"}},
        "spec.packages.gpu-tuning.configInterrupts.hugepage: matches no key of vars or configMap",
    ),
    (
        "spec.packages.gpu-tuning.configInterrupts",
        {"*.ini": {"type": "reboot"}},
        "spec.packages.gpu-tuning.configInterrupts.*.ini: matches no key of vars or configMap",
    ),
    # resources
    (
        "spec.packages.base.resources",
        {"cpuRequest": "100m"},
        "spec.packages.base.resources: set all of cpuRequest, cpuLimit, memoryRequest, memoryLimit "
        "or none (missing cpuLimit, memoryRequest, memoryLimit)",
    ),
    (
        "spec.packages.base.resources",
        {"cpuRequest": "1", "cpuLimit": "500m", "memoryRequest": "1Gi", "memoryLimit": "2Gi"},
        'spec.packages.base.resources.cpuLimit: "500m" is less than cpuRequest "1"',
    ),
    (
        "spec.packages.base.resources",
        {"cpuRequest": "1", "cpuLimit": "1", "memoryRequest": "1Gi", "memoryLimit": "1G"},
        'spec.packages.base.resources.memoryLimit: "1G" is less than memoryRequest "1Gi"',
    ),
    (
        "spec.packages.base.resources",
        {"cpuRequest": "one", "cpuLimit": "1", "memoryRequest": "1Gi", "memoryLimit": "1Gi"},
        'spec.packages.base.resources.cpuRequest: "one" is not a Kubernetes quantity',
    ),
    (
        "spec.packages.base.resources",
        {"cpuRequest": "0", "cpuLimit": "1", "memoryRequest": "1Gi", "memoryLimit": "1Gi"},
        'spec.packages.base.resources.cpuRequest: "0" must be greater than zero',
    ),
    # uninstall
    (
        "spec.packages.base.uninstall",
        {"apply": True},
        "spec.packages.base.uninstall.apply: uninstall.apply requires uninstall.enabled",
    ),
    # durations
    (
        "spec.packages.base.timeouts",
        {"stage": "30"},
        'spec.packages.base.timeouts.stage: "30" is not a Go duration (e.g. 30s, 5m, 1h30m)',
    ),
    ("spec.packages.base.timeouts", {"drain": "5 m"}, 'timeouts.drain: "5 m" is not a Go duration'),
    (
        "spec.packages.base.timeouts",
        {"interrupt": "0s"},
        'spec.packages.base.timeouts.interrupt: "0s" must be longer than zero',
    ),
    ("spec.drain", {"timeout": "-5m"}, 'spec.drain.timeout: "-5m" is not a Go duration'),
    (
        "spec.packages.base.gracefulShutdown",
        "soon",
        'spec.packages.base.gracefulShutdown: "soon" is not a Go duration',
    ),
    # CR name
    ("metadata.name", "n" * 51, 'metadata.name: "' + "n" * 51 + '" is 51 characters; at most 50'),
    ("metadata.name", "GPU_nodes", 'metadata.name: "GPU_nodes" is not a DNS-1123 subdomain'),
    # unknown fields, missing fields, other range checks
    ("spec.packages.base.verison", "1.0.0", "spec.packages.base.verison: unknown field"),
    ("spec.packages.base.version", "-", "spec.packages.base.version: required field is missing"),
    (
        "spec.packages.base.maxAttempts",
        0,
        "spec.packages.base.maxAttempts: Input should be greater",
    ),
    ("spec.priority", 0, "spec.priority: Input should be greater than or equal to 1"),
    ("spec.sequencing", "batch", "spec.sequencing: Input should be 'node' or 'all'"),
    # selectors, tolerations, env
    (
        "spec.nodeSelectors",
        {"matchExpressions": [{"key": "gpu", "operator": "In"}]},
        "spec.nodeSelectors.matchExpressions[0].values: operator In needs at least one value",
    ),
    (
        "spec.nodeSelectors",
        {"matchExpressions": [{"key": "gpu", "operator": "Exists", "values": ["x"]}]},
        "spec.nodeSelectors.matchExpressions[0].values: operator Exists takes no values",
    ),
    (
        "spec.nodeSelectors",
        {"matchLabels": {"bad key": "x"}},
        'spec.nodeSelectors.matchLabels.bad key: label key "bad key" is invalid',
    ),
    (
        "spec.nodeSelectors",
        {"matchLabels": {"gpu": "-a100"}},
        'spec.nodeSelectors.matchLabels.gpu: label value "-a100" is invalid',
    ),
    (
        "spec.nodeSelectors",
        {"matchLabels": {"Example.com/gpu": "x"}},
        'label key "Example.com/gpu" has an invalid prefix',
    ),
    (
        "spec.nodeSelectors",
        {"matchExpressions": [{"key": "g" * 64, "operator": "Exists"}]},
        "spec.nodeSelectors.matchExpressions[0].key: label key",
    ),
    (
        "spec.nodeSelectors",
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a", "b c"]}]},
        'spec.nodeSelectors.matchExpressions[0].values[1]: label value "b c" is invalid',
    ),
    (
        "spec.additionalTolerations",
        [{"operator": "Exists", "value": "x"}],
        "spec.additionalTolerations[0].value: must be empty when operator is Exists",
    ),
    (
        "spec.additionalTolerations",
        [{"operator": "Equal", "value": "x"}],
        "spec.additionalTolerations[0].operator: must be Exists when key is empty",
    ),
    (
        "spec.additionalTolerations",
        [{"key": "k", "operator": "Matches"}],
        'spec.additionalTolerations[0].operator: "Matches" is not Equal or Exists',
    ),
    (
        "spec.additionalTolerations",
        [{"key": "k", "effect": "NoRun"}],
        'spec.additionalTolerations[0].effect: "NoRun" is not NoSchedule, PreferNoSchedule',
    ),
    (
        "spec.additionalTolerations",
        [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}],
        "spec.additionalTolerations[0].tolerationSeconds: only allowed with effect NoExecute",
    ),
    (
        "spec.packages.base.env",
        [{"name": "A", "value": "1", "valueFrom": {"x": {}}}],
        "spec.packages.base.env[0].valueFrom: value and valueFrom are mutually exclusive",
    ),
    # tags / skipTags: what ansible-playbook --tags would split or strip is rejected, not changed
    (
        "spec.packages.base.tags",
        ["sysctl", "grub,kmod"],
        'spec.packages.base.tags[1]: "grub,kmod" is not a tag name: it must be non-empty, '
        "without commas",
    ),
    ("spec.packages.base.skipTags", [""], 'spec.packages.base.skipTags[0]: "" is not a tag name'),
    ("spec.packages.base.skipTags", [" slow"], 'skipTags[0]: " slow" is not a tag name'),
    ("spec.packages.base.tags", ["t" * 129], "tags[0]: is longer than 128 characters"),
    ("spec.packages.base.tags", "sysctl", "spec.packages.base.tags: Input should be a valid list"),
]


@pytest.mark.parametrize(("path", "value", "expected"), NODEWRIGHT_CASES)
def test_an_invalid_nodewright_is_rejected_with_its_field_path(
    path: str, value: Any, expected: str
) -> None:
    problems = problems_of(load_nodewright, changed(nodewright(), path, value))
    assert any(expected in line for line in problems), problems
    assert all(line.startswith(("spec.", "metadata.")) for line in problems), problems


def test_deployment_policy_and_interruption_budget_are_mutually_exclusive() -> None:
    doc = nodewright(deploymentPolicy="canary", interruptionBudget={"percent": 10})
    assert problems_of(load_nodewright, doc) == [
        "spec.interruptionBudget: deploymentPolicy and interruptionBudget are mutually "
        "exclusive; use one"
    ]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.packages.base.image", "registry.local:5000/pkgs/base"),
        ("spec.packages.base.image", "localhost:5000/base"),
        ("spec.packages.base.image", "[::1]:5000/pkgs/base"),
        ("spec.packages.base.image", "ghcr.io/org/sub/base"),
        ("spec.packages.base.image", "base"),
        ("spec.packages.base.image", "my-org/my__pkg.v2"),
        ("spec.packages.gpu-tuning.version", "1.3.0-rc.1"),
        ("spec.packages.base.digest", DIGEST),
        ("spec.packages.base.timeouts", {"stage": "1h30m", "drain": "1.5h", "interrupt": "90s"}),
        ("spec.packages.base.gracefulShutdown", "0"),
        (
            "spec.packages.gpu-tuning.configInterrupts",
            {
                "hugepages": {"type": "reboot"},
                "*.conf": {"type": "service", "services": ["a"]},
                "sysctl.con?": {"type": "noop"},
            },
        ),
        (
            "spec.packages.base.resources",
            {"cpuRequest": 1, "cpuLimit": "1500m", "memoryRequest": "1G", "memoryLimit": "1Gi"},
        ),
        ("spec.packages.base.uninstall", {"enabled": True, "apply": True}),
        ("spec.packages.base.tags", ["sysctl", "never", "with space"]),
        ("spec.packages.base.skipTags", ["slow"]),
        ("spec.interruptionBudget", {"percent": 0}),
        ("spec.interruptionBudget", {"count": 0}),
        ("spec.autoTaintNewNodes", True),
        ("metadata.name", "n" * 50),
        ("metadata.name", "gpu.nodes-1"),
        ("spec.additionalTolerations", [{"operator": "Exists"}]),
        (
            "spec.nodeSelectors",
            {"matchLabels": {"nvidia.com/gpu.product": "A100-SXM4_80GB", "empty": ""}},
        ),
    ],
)
def test_a_valid_variation_is_accepted(path: str, value: Any) -> None:
    doc = changed(nodewright(), path, value)
    if path == "spec.autoTaintNewNodes":
        doc["spec"]["runtimeRequired"] = True
    if path == "spec.packages.base.digest":
        doc["spec"]["packages"]["base"]["version"] = "1.0.0+build.7"
        doc["spec"]["packages"]["gpu-tuning"]["dependsOn"] = {"base": "1.0.0+build.7"}
    assert isinstance(load_nodewright(doc), NodeWright)


def test_numbers_are_accepted_as_quantities_and_kept_as_strings() -> None:
    doc = changed(
        nodewright(),
        "spec.packages.base.resources",
        {"cpuRequest": 1, "cpuLimit": 2, "memoryRequest": "1Gi", "memoryLimit": "1Gi"},
    )
    resources = load_nodewright(doc).spec.packages["base"].resources
    assert resources is not None
    assert (resources.cpu_request, resources.cpu_limit) == ("1", "2")


def test_several_problems_are_all_reported_one_per_line() -> None:
    doc = nodewright()
    doc["metadata"]["name"] = "x" * 60
    doc["spec"]["packages"]["base"]["version"] = "1"
    doc["spec"]["packages"]["base"]["image"] = "base:1"
    problems = problems_of(load_nodewright, doc)
    assert len(problems) == 3
    assert all("\n" not in p for p in problems)


def test_a_non_mapping_document_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="expected a NodeWright object"):
        load_nodewright(["not", "a", "mapping"])  # type: ignore[arg-type]


def test_spec_error_text_lists_every_problem() -> None:
    doc = changed(nodewright(), "spec.priority", 0)
    with pytest.raises(SpecError) as info:
        load_nodewright(doc)
    assert str(info.value).splitlines() == [
        "invalid NodeWright: 1 problem",
        "spec.priority: Input should be greater than or equal to 1",
    ]


POLICY_CASES: list[tuple[str, Any, str]] = [
    ("spec.default.budget", {}, "spec.default.budget: set exactly one of percent or count"),
    (
        "spec.default.budget",
        {"percent": 5, "count": 1},
        "spec.default.budget: set exactly one of percent or count, not percent and count",
    ),
    ("spec.default.budget", {"percent": 0}, "spec.default.budget.percent: Input should be greater"),
    ("spec.default.budget", {"percent": 101}, "spec.default.budget.percent: Input should be less"),
    ("spec.default.budget", {"count": 0}, "spec.default.budget.count: Input should be greater"),
    (
        "spec.default.strategy",
        {},
        "spec.default.strategy: set exactly one of fixed, linear, exponential",
    ),
    (
        "spec.default.strategy",
        {"fixed": {}, "linear": {}},
        "spec.default.strategy: set exactly one of fixed, linear, exponential, not fixed and "
        "linear",
    ),
    (
        "spec.default.strategy",
        {"fixed": {"initialBatch": 0}},
        "spec.default.strategy.fixed.initialBatch: Input should be greater than or equal to 1",
    ),
    (
        "spec.default.strategy",
        {"fixed": {"batchThreshold": 0}},
        "spec.default.strategy.fixed.batchThreshold: Input should be greater than or equal to 1",
    ),
    (
        "spec.default.strategy",
        {"fixed": {"batchThreshold": 101}},
        "spec.default.strategy.fixed.batchThreshold: Input should be less than or equal to 100",
    ),
    (
        "spec.default.strategy",
        {"fixed": {"failureThreshold": 0}},
        "spec.default.strategy.fixed.failureThreshold: Input should be greater than or equal to 1",
    ),
    (
        "spec.default.strategy",
        {"fixed": {"safetyLimit": 0}},
        "spec.default.strategy.fixed.safetyLimit: Input should be greater than or equal to 1",
    ),
    (
        "spec.default.strategy",
        {"fixed": {"safetyLimit": 101}},
        "spec.default.strategy.fixed.safetyLimit: Input should be less than or equal to 100",
    ),
    (
        "spec.default.strategy",
        {"linear": {"delta": 0}},
        "spec.default.strategy.linear.delta: Input should be greater than or equal to 1",
    ),
    (
        "spec.default.strategy",
        {"exponential": {"growthFactor": 1}},
        "spec.default.strategy.exponential.growthFactor: Input should be greater than or equal "
        "to 2",
    ),
    ("spec.compartments.0.name", "", "spec.compartments[0].name: String should have at least 1"),
    (
        "spec.compartments.0.name",
        "__default__",
        "spec.compartments[0].name: __default__ is reserved for nodes no compartment selects",
    ),
    (
        "spec.compartments.0.strategy",
        {"linear": {}, "exponential": {}},
        "spec.compartments[0].strategy: set exactly one of fixed, linear, exponential",
    ),
    (
        "spec.compartments.0.budget",
        {"count": 1, "percent": 10},
        "spec.compartments[0].budget: set exactly one of percent or count",
    ),
    ("metadata.name", "Canary", 'metadata.name: "Canary" is not a DNS-1123 subdomain'),
]


@pytest.mark.parametrize(("path", "value", "expected"), POLICY_CASES)
def test_an_invalid_policy_is_rejected_with_its_field_path(
    path: str, value: Any, expected: str
) -> None:
    problems = problems_of(load_policy, changed(policy(), path, value))
    assert any(line.startswith(expected) for line in problems), problems


def _second(name: str, selector: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "selector": selector, "budget": {"percent": 50}}


def test_compartment_names_must_be_unique() -> None:
    doc = policy()
    doc["spec"]["compartments"].append(_second("a100", {"matchLabels": {"gpu": "h100"}}))
    assert problems_of(load_policy, doc) == [
        'spec.compartments[1].name: "a100" is also the name of compartments[0]'
    ]


@pytest.mark.parametrize(
    "selector",
    [
        {"matchLabels": {"gpu": "a100"}},
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]},
    ],
)
def test_two_compartments_may_not_have_the_same_selector(selector: dict[str, Any]) -> None:
    doc = policy()
    doc["spec"]["compartments"].append(_second("other", selector))
    assert problems_of(load_policy, doc) == [
        'spec.compartments[1].selector: selects the same nodes as compartments[0] ("a100")'
    ]


def test_different_selectors_are_fine() -> None:
    doc = policy()
    doc["spec"]["compartments"].append(_second("h100", {"matchLabels": {"gpu": "h100"}}))
    assert len(load_policy(doc).spec.compartments) == 2
