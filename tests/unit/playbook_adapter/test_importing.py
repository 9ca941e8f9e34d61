"""``nwb import playbook``: a realistic playbook + inventory into valid CRs and policies."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from lifecycle.validation import load_nodewright, load_policy
from nodewright_bridge.cli import main
from playbook_adapter import importing
from playbook_adapter.importing import (
    ImportOptions,
    PlaybookImportError,
    fit_strategy,
    import_playbook,
    parse_label_selector,
)

SITE = Path(__file__).parent / "data" / "site"
MAPPING = {
    "gpu_a100": "nvidia.com/gpu.product=A100",
    "gpu": "nvidia.com/gpu.present=true",
    "gpu_canary": "rollout/canary=true",
}


def _options(**overrides: Any) -> ImportOptions:
    labels = importing.parse_group_labels([f"{g}={s}" for g, s in MAPPING.items()])
    values: dict[str, Any] = {"group_labels": labels, "default_version": "0.3.0"}
    values.update(overrides)
    return ImportOptions(**values)


@pytest.fixture(scope="module")
def imported() -> importing.ImportResult:
    return import_playbook(
        SITE / "site.yml", inventory=SITE / "inventory" / "hosts.ini", options=_options()
    )


def _doc(result: importing.ImportResult, kind: str, name: str) -> dict[str, Any]:
    return next(d for d in result.documents if d["kind"] == kind and d["metadata"]["name"] == name)


def test_every_play_becomes_a_policy_and_a_cr_that_the_lifecycle_models_accept(
    imported: importing.ImportResult,
) -> None:
    kinds = [(d["kind"], d["metadata"]["name"]) for d in imported.documents]
    assert kinds == [
        ("DeploymentPolicy", "tune-a100-training-nodes"),
        ("NodeWright", "tune-a100-training-nodes"),
        ("DeploymentPolicy", "baseline-for-every-gpu-node"),
        ("NodeWright", "baseline-for-every-gpu-node"),
    ]
    for document in imported.documents:
        if document["kind"] == "NodeWright":
            cr = load_nodewright(document)
            assert cr.spec.deployment_policy == document["metadata"]["name"]
        else:
            load_policy(document)


def test_roles_become_packages_in_play_order_chained_by_depends_on(
    imported: importing.ImportResult,
) -> None:
    cr = load_nodewright(_doc(imported, "NodeWright", "tune-a100-training-nodes"))
    pre = "tune-a100-training-nodes-pre-tasks"  # the play's pre_tasks, as a generated role
    assert list(cr.spec.packages) == [pre, "sysctl-tuning", "grub-params"]
    sysctl, grub = cr.spec.packages["sysctl-tuning"], cr.spec.packages["grub-params"]
    assert sysctl.version == "1.4.0"  # from the role's nodewright-package.yaml
    assert grub.version == "0.3.0"  # --default-version: the role has none
    assert grub.depends_on == {"sysctl-tuning": "1.4.0"}
    assert sysctl.depends_on == {pre: "0.3.0"}
    assert cr.spec.packages[pre].depends_on == {}
    assert sysctl.image == "localhost/nodewright/sysctl-tuning"


def test_group_vars_play_vars_vars_files_and_role_vars_merge_with_ansible_precedence(
    imported: importing.ImportResult,
) -> None:
    cr = load_nodewright(_doc(imported, "NodeWright", "tune-a100-training-nodes"))
    sysctl_vars = cr.spec.packages["sysctl-tuning"].vars
    assert sysctl_vars["gpu_model"] == "a100"  # group_vars/gpu_a100/ directory
    assert sysctl_vars["nvidia_driver_branch"] == 550  # [gpu:vars] of the parent group
    assert sysctl_vars["ntp_servers"] == ["10.0.0.1"]  # group_vars/all.yml
    assert sysctl_vars["sysctl_profile"] == "training-large"  # vars_files beats play vars
    assert sysctl_vars["hugepages"] == 1024
    assert sysctl_vars["sysctl_extra"] == {"vm.max_map_count": 262144}  # the role entry's vars
    assert "sysctl_extra" not in cr.spec.packages["grub-params"].vars
    assert not any(key.startswith("ansible_") for key in sysctl_vars)


def test_a_group_var_that_differs_between_the_targeted_hosts_is_reported_not_guessed(
    imported: importing.ImportResult,
) -> None:
    cr = load_nodewright(_doc(imported, "NodeWright", "baseline-for-every-gpu-node"))
    assert "gpu_model" not in cr.spec.packages["sysctl-tuning"].vars  # a100 vs h100
    assert any("group var gpu_model: differs" in str(n) for n in imported.notes)


def test_hosts_groups_become_node_selectors_including_an_exclusion(
    imported: importing.ImportResult,
) -> None:
    first = load_nodewright(_doc(imported, "NodeWright", "tune-a100-training-nodes"))
    assert first.spec.node_selectors.match_labels == {"nvidia.com/gpu.product": "A100"}
    second = _doc(imported, "NodeWright", "baseline-for-every-gpu-node")
    assert second["spec"]["nodeSelectors"] == {
        "matchLabels": {"nvidia.com/gpu.present": "true"},
        "matchExpressions": [{"key": "rollout/canary", "operator": "NotIn", "values": ["true"]}],
    }


def test_serial_list_and_max_fail_percentage_become_a_capped_growing_strategy(
    imported: importing.ImportResult,
) -> None:
    policy = load_policy(_doc(imported, "DeploymentPolicy", "tune-a100-training-nodes"))
    assert policy.spec.default.budget.percent == 20
    exponential = policy.spec.default.strategy.exponential
    assert exponential is not None
    assert (exponential.initial_batch, exponential.growth_factor) == (1, 5)
    assert exponential.batch_threshold == 90
    assert exponential.failure_threshold == 1
    fatal = load_policy(_doc(imported, "DeploymentPolicy", "baseline-for-every-gpu-node"))
    assert fatal.spec.default.budget.count == 2
    assert fatal.spec.default.strategy.fixed is not None
    assert fatal.spec.default.strategy.fixed.batch_threshold == 100


def test_delegate_to_run_once_and_when_are_reported_with_file_and_line(
    imported: importing.ImportResult,
) -> None:
    notes = [str(n) for n in imported.notes if n.untranslated]
    assert any(
        "site.yml:16" in n and "delegate_to localhost" in n and "Take the node out" in n
        for n in notes
    )
    assert any("tasks/main.yml:8" in n and "run_once" in n for n in notes)
    assert any("site.yml:26" in n and "'when' on a role entry" in n for n in notes)
    assert any("runs from the node's own pod" in n for n in notes), "kept, and said what it does"
    assert any("ansible_python_interpreter" in n for n in notes)


def test_an_unmapped_group_is_an_error_naming_the_group_and_the_play_line() -> None:
    options = _options(group_labels=importing.parse_group_labels(["gpu_a100=pool=a100"]))
    with pytest.raises(PlaybookImportError) as caught:
        import_playbook(SITE / "site.yml", inventory=SITE / "inventory/hosts.ini", options=options)
    problems = "\n".join(caught.value.problems)
    assert "site.yml:29: group 'gpu' has no --group-label mapping" in problems
    assert "group 'gpu_canary'" in problems


def test_a_role_without_any_version_is_an_error_unless_a_default_is_given() -> None:
    with pytest.raises(PlaybookImportError) as caught:
        import_playbook(
            SITE / "site.yml",
            inventory=SITE / "inventory/hosts.ini",
            options=_options(default_version=None),
        )
    assert any("role 'grub_params' found but has no version" in p for p in caught.value.problems)


@pytest.mark.parametrize(
    ("text", "wire"),
    [
        ("pool=a100", {"matchLabels": {"pool": "a100"}}),
        ("a=1,b==2", {"matchLabels": {"a": "1", "b": "2"}}),
        (
            "zone in (a, b),tier notin (x)",
            {
                "matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["a", "b"]},
                    {"key": "tier", "operator": "NotIn", "values": ["x"]},
                ]
            },
        ),
        (
            "gpu,!drained",
            {
                "matchExpressions": [
                    {"key": "gpu", "operator": "Exists", "values": []},
                    {"key": "drained", "operator": "DoesNotExist", "values": []},
                ]
            },
        ),
        (
            "env!=prod",
            {"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]},
        ),
    ],
)
def test_label_selectors_parse_like_kubectl(text: str, wire: dict[str, Any]) -> None:
    parsed = {k: v for k, v in parse_label_selector(text).to_wire().items() if v}
    assert parsed == wire


@pytest.mark.parametrize("text", ["", "a=1,a=2", "zone in ()", "bad key=1", "(x"])
def test_malformed_label_selectors_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        parse_label_selector(text)


@pytest.mark.parametrize(
    ("serial", "hosts", "budget", "kind", "params"),
    [
        (None, 10, {"percent": 100}, "fixed", {"initialBatch": 10}),
        (3, 10, {"count": 3}, "fixed", {"initialBatch": 3}),
        ("25%", 8, {"percent": 25}, "fixed", {"initialBatch": 2}),
        ([1, 2, 4, 8], 50, {"count": 8}, "exponential", {"initialBatch": 1, "growthFactor": 2}),
        ([1, 3, 5, 7], 50, {"count": 7}, "linear", {"initialBatch": 1, "delta": 2}),
        (
            [2, "10%", "50%"],
            100,
            {"percent": 50},
            "exponential",
            {"initialBatch": 2, "growthFactor": 5},
        ),
        ([2, "10%", "20%"], 100, {"percent": 20}, "linear", {"initialBatch": 2, "delta": 9}),
        ([5, 1], 10, {"count": 1}, "fixed", {"initialBatch": 5}),
        (0, 7, {"percent": 100}, "fixed", {"initialBatch": 7}),
    ],
)
def test_serial_maps_to_the_closest_strategy(
    serial: Any, hosts: int, budget: dict[str, int], kind: str, params: dict[str, int]
) -> None:
    fit = fit_strategy(serial, host_count=hosts)
    assert fit.budget == budget
    assert fit.kind == kind
    assert {k: fit.params[k] for k in params} == params


@pytest.mark.parametrize(
    ("max_fail", "fatal", "threshold"),
    [(None, False, 1), (10, False, 90), (0, False, 100), (100, False, 1), (25, True, 100)],
)
def test_failure_keywords_map_to_batch_threshold_and_stop_after_one_failed_batch(
    max_fail: int | None, fatal: bool, threshold: int
) -> None:
    fit = fit_strategy(2, host_count=4, max_fail_percentage=max_fail, any_errors_fatal=fatal)
    assert fit.params["batchThreshold"] == threshold
    assert fit.params["failureThreshold"] == 1
    assert fit.params["safetyLimit"] == 100


def test_a_serial_entry_that_is_not_a_number_is_rejected() -> None:
    with pytest.raises(ValueError, match="serial entry"):
        fit_strategy(["one"], host_count=3)


def test_a_union_of_groups_on_one_label_key_becomes_an_in_selector(tmp_path: Path) -> None:
    (tmp_path / "site.yml").write_text(
        "- name: all gpus\n  hosts: a100,h100\n  roles: [tuning]\n", encoding="utf-8"
    )
    (tmp_path / "hosts.ini").write_text("[a100]\nn1\n[h100]\nn2\n", encoding="utf-8")
    options = ImportOptions(
        group_labels=importing.parse_group_labels(["a100=gpu=a100", "h100=gpu in (h100,h200)"]),
        default_version="1.0.0",
    )
    result = import_playbook(
        tmp_path / "site.yml", inventory=tmp_path / "hosts.ini", options=options
    )
    cr = load_nodewright(result.documents[1])
    (requirement,) = cr.spec.node_selectors.match_expressions
    assert (requirement.key, requirement.values) == ("gpu", ["a100", "h100", "h200"])
    assert any("no serial" in str(n) for n in result.notes)


def test_a_vault_encrypted_var_is_left_out_and_reported(tmp_path: Path) -> None:
    (tmp_path / "site.yml").write_text(
        "- hosts: web\n"
        "  vars:\n"
        "    api_token: !vault |\n"
        "      $ANSIBLE_VAULT;1.1;AES256\n"
        "      6162\n"
        "    plain: 1\n"
        "  roles: [tuning]\n",
        encoding="utf-8",
    )
    (tmp_path / "hosts.ini").write_text("[web]\nw1\n", encoding="utf-8")
    options = ImportOptions(
        group_labels=importing.parse_group_labels(["web=role=web"]), default_version="1.0.0"
    )
    result = import_playbook(
        tmp_path / "site.yml", inventory=tmp_path / "hosts.ini", options=options
    )
    package = result.documents[1]["spec"]["packages"]["tuning"]
    assert package["vars"] == {"plain": 1}
    assert any("api_token" in str(n) and "secretVars" in str(n) for n in result.notes)
    assert result.documents[1]["metadata"]["name"] == "site-1"


def test_the_cli_writes_one_file_per_document_and_reports_on_stderr(tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(SITE, site)
    args = ["import", "playbook", str(site / "site.yml"), "-i", str(site / "inventory/hosts.ini")]
    args += [f"--group-label={g}={s}" for g, s in MAPPING.items()]
    args += ["--default-version", "0.3.0", "--output-dir", str(tmp_path / "out")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert "tune-a100-training-nodes.nodewright.yaml" in written
    assert "tune-a100-training-nodes.deploymentpolicy.yaml" in written
    doc = yaml.safe_load((tmp_path / "out/tune-a100-training-nodes.nodewright.yaml").read_text())
    load_nodewright(doc)
    assert "not translated:" in result.stderr and "delegate_to" in result.stderr


def test_the_cli_exits_2_with_one_line_per_problem_for_an_unmapped_group() -> None:
    args = ["import", "playbook", str(SITE / "site.yml"), "-i", str(SITE / "inventory/hosts.ini")]
    result = CliRunner().invoke(main, [*args, "--default-version", "1.0.0"])
    assert result.exit_code == 2
    assert "error: " in result.stderr and "'gpu_a100' has no --group-label mapping" in result.stderr
    assert "Traceback" not in result.output


def test_the_example_gpu_fleet_playbook_imports_with_versions_and_interrupts_from_the_roles() -> (
    None
):
    example = Path(__file__).resolve().parents[3] / "examples"
    playbook = example / "playbooks" / "gpu-fleet"
    options = ImportOptions(
        group_labels=importing.parse_group_labels(
            [
                "gpu_workers=node-role.kubernetes.io/gpu-worker=true",
                "canary=rollout.example.com/canary=true",
            ]
        ),
        roles_paths=(example / "roles",),
    )
    result = import_playbook(
        playbook / "site.yml", inventory=playbook / "inventory" / "hosts.yml", options=options
    )
    tuning = load_nodewright(_doc(result, "NodeWright", "node-tuning-for-gpu-workers"))
    assert list(tuning.spec.packages) == [
        "node-tuning-for-gpu-workers-pre-tasks",  # the announcement, before the roles
        "sysctl-tuning",
        "kmod-blacklist",
        "grub-params",
    ]
    grub = tuning.spec.packages["grub-params"]
    assert grub.interrupt is not None and grub.interrupt.type == "reboot"
    assert grub.vars["grub_params_cmdline"] == ["transparent_hugepage=never", "iommu=pt"]
    assert tuning.spec.packages["kmod-blacklist"].vars["kmod_blacklist_modules"][-1] == "pcspkr"
    policy = load_policy(_doc(result, "DeploymentPolicy", "node-tuning-for-gpu-workers"))
    strategy = policy.spec.default.strategy.exponential
    assert strategy is not None and (strategy.initial_batch, strategy.growth_factor) == (1, 2)
    assert policy.spec.default.budget.percent == 25
