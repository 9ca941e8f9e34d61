"""``nwb plan --offline``: stable JSON shape, table output, exit 2 on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from nodewright_bridge.cli import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
CR = EXAMPLES / "rollouts" / "gpu-tuning.yaml"
POLICY = EXAMPLES / "policies" / "canary.yaml"
FLEET = EXAMPLES / "nodes" / "fleet-12.yaml"


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, ["plan", *(str(a) for a in args)])


def plan_json(*args: str | Path) -> dict[str, object]:
    result = run("--offline", *args, "-o", "json")
    assert result.exit_code == 0, result.output
    data: dict[str, object] = json.loads(result.stdout)
    return data


def test_json_output_has_the_stable_shape() -> None:
    data = plan_json("-f", CR, "-p", POLICY, "--nodes", FLEET)
    assert set(data) == {"compartments", "batches", "stopped"}
    assert data["compartments"] == {
        "gpu-a100": {"matched": 5, "ceiling": 2},
        "gpu-h100": {"matched": 5, "ceiling": 3},
        "__default__": {"matched": 2, "ceiling": 1},
    }
    batches = data["batches"]
    assert isinstance(batches, list)
    assert all(set(b) == {"compartment", "nodes"} for b in batches)
    a100 = [b["nodes"] for b in batches if b["compartment"] == "gpu-a100"]
    assert a100 == [["gpu-a100-0"], ["gpu-a100-1", "gpu-a100-2"], ["gpu-a100-3", "gpu-a100-4"]]
    assert data["stopped"] == {}


def test_a_failing_canary_stops_its_compartment_and_says_why() -> None:
    data = plan_json("-f", CR, "-p", POLICY, "--nodes", FLEET, "--fail", "gpu-a100-0")
    stopped = data["stopped"]
    assert isinstance(stopped, dict)
    assert list(stopped) == ["gpu-a100"]
    assert "0 succeeded, 1 failed of 5" in stopped["gpu-a100"]
    batches = data["batches"]
    assert isinstance(batches, list)
    assert [b["nodes"] for b in batches if b["compartment"] == "gpu-a100"] == [["gpu-a100-0"]]


@pytest.mark.parametrize(
    ("name", "nodes", "fail", "expected"),
    [
        ("legacy-count-3", "fleet-10", None, [3, 3, 3, 1]),
        ("legacy-percent-25", "fleet-10", None, [2, 2, 2, 2, 2]),
        ("legacy-no-budget", "fleet-10", None, [10]),
        ("legacy-count-0", "fleet-10", None, [1] * 10),
        ("linear", "fleet-8", None, [1, 2, 3, 2]),
        ("exponential", "fleet-15", None, [1, 2, 4, 8]),
        ("multi-compartment", "fleet-test-standard", None, [2, 1, 2, 1, 1, 1, 1, 1]),
        ("failure", "fleet-20", "node-06", [1, 2, 4, 2, 4, 7]),
        ("failure-stop", "fleet-20", "node-06", [1, 2, 4]),
        ("threshold-90", "fleet-20", "node-03", [10, 10]),
    ],
)
def test_every_worked_example_file_plans_as_documented(
    name: str, nodes: str, fail: str | None, expected: list[int]
) -> None:
    args: list[str | Path] = ["-f", EXAMPLES / "worked" / f"{name}.yaml"]
    policy = EXAMPLES / "worked" / f"{name}-policy.yaml"
    if policy.exists():
        args += ["-p", policy]
    args += ["--nodes", EXAMPLES / "nodes" / f"{nodes}.yaml"]
    if fail:
        args += ["--fail", fail]
    data = plan_json(*args)
    batches = data["batches"]
    assert isinstance(batches, list)
    assert [len(b["nodes"]) for b in batches] == expected


def test_table_output_names_compartments_batches_and_blocked_nodes(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        "- {metadata: {name: a}}\n"
        "- {metadata: {name: b}, spec: {taints: [{key: gpu, value: bad, effect: NoSchedule}]}}\n"
    )
    cr = tmp_path / "cr.yaml"
    cr.write_text(
        "apiVersion: bridge.nodewright.io/v1alpha1\nkind: NodeWright\n"
        "metadata: {name: t}\nspec: {}\n"
    )
    result = run("--offline", "-f", cr, "--nodes", nodes)
    assert result.exit_code == 0, result.output
    assert "__default__" in result.stdout
    assert "blocked b: taints not tolerated: gpu=bad:NoSchedule" in result.stdout


def test_plain_node_lists_and_kubectl_lists_give_the_same_plan(tmp_path: Path) -> None:
    doc = yaml.safe_load(FLEET.read_text())
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(doc["items"]))
    assert plan_json("-f", CR, "-p", POLICY, "--nodes", plain) == plan_json(
        "-f", CR, "-p", POLICY, "--nodes", FLEET
    )


def bad(result: Result) -> list[str]:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert lines
    return lines


def test_invalid_yaml_exits_2_with_the_file_and_line(tmp_path: Path) -> None:
    cr = tmp_path / "cr.yaml"
    cr.write_text("spec: [unclosed\n")
    (line,) = bad(run("--offline", "-f", cr, "--nodes", FLEET))
    assert line.startswith(f"{cr}: line ")
    assert "invalid YAML" in line


def test_spec_errors_exit_2_one_line_per_problem_with_field_paths(tmp_path: Path) -> None:
    cr = tmp_path / "cr.yaml"
    cr.write_text(
        "apiVersion: bridge.nodewright.io/v1alpha1\nkind: NodeWright\nmetadata: {name: t}\n"
        "spec:\n  packages:\n    tuning: {version: '1.2', image: r/x}\n  nodeSelectr: {}\n"
    )
    lines = bad(run("--offline", "-f", cr, "--nodes", FLEET))
    assert any(line.startswith(f"{cr}: spec.packages.tuning.version:") for line in lines)
    assert any(line.startswith(f"{cr}: spec.nodeSelectr:") for line in lines)


def test_policy_errors_are_reported_with_their_file(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "kind: DeploymentPolicy\nmetadata: {name: canary}\n"
        "spec: {default: {budget: {count: 0}, strategy: {fixed: {}}}}\n"
    )
    lines = bad(run("--offline", "-f", CR, "-p", policy, "--nodes", FLEET))
    assert any(line.startswith(f"{policy}: spec.default.budget.count:") for line in lines)


def test_an_unknown_fail_node_exits_2() -> None:
    lines = bad(run("--offline", "-f", CR, "-p", POLICY, "--nodes", FLEET, "--fail", "nope"))
    assert lines == ["--fail: node 'nope' is not in the --nodes file"]


def test_a_policy_other_than_the_one_the_cr_names_exits_2(tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text(POLICY.read_text().replace("name: canary", "name: other"))
    (line,) = bad(run("--offline", "-f", CR, "-p", other, "--nodes", FLEET))
    assert f"{other}: metadata.name:" in line
    assert '"canary"' in line


def test_a_cr_naming_a_policy_needs_p() -> None:
    (line,) = bad(run("--offline", "-f", CR, "--nodes", FLEET))
    assert line.startswith("spec.deploymentPolicy:")


def test_bad_node_objects_are_reported_with_their_index(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        "kind: List\nitems:\n- {metadata: {name: a}}\n- {metadata: {labels: {x: y}}}\n"
        "- {metadata: {name: c}, spec: {taints: [{key: k, effect: Sometimes}]}}\n"
        "- {metadata: {name: a}}\n"
    )
    lines = bad(run("--offline", "-f", CR, "-p", POLICY, "--nodes", nodes))
    assert lines == [
        f"{nodes}: items[1].metadata.name: required field is missing",
        f"{nodes}: items[2].spec.taints[0].effect: must be one of NoSchedule, PreferNoSchedule, "
        "NoExecute, got 'Sometimes'",
        f"{nodes}: items[3].metadata.name: 'a' is also items[0]",
    ]


def test_offline_needs_nodes_and_live_rejects_file_only_options(tmp_path: Path) -> None:
    assert bad(run("--offline", "-f", CR, "-p", POLICY)) == ["--nodes: required with --offline"]
    assert bad(run("-f", CR)) == ["--offline or --live: required (files or the cluster)"]
    assert bad(run("--live", "--offline", "-f", CR)) == ["--live, --offline: choose one"]
    assert bad(run("--live", "-f", CR, "--nodes", FLEET)) == [
        "--nodes: only with --offline (--live reads the cluster)"
    ]
    assert bad(run("--live", "-f", CR, "--name", "x")) == [
        "--live: give exactly one of -f CR.yaml or --name NAME"
    ]
    (line,) = bad(run("--live", "--name", "x", "--kubeconfig", tmp_path / "missing"))
    assert line.startswith("cannot load the cluster configuration")
