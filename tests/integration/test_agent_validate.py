"""``nwb-agent validate`` on a real assembled package (the layout of a package image), run as the
validation pod runs it: the vars as ``vars.json``, the secretVars as Secret directories, the
result in the termination log. Nothing of a node is needed (the pod has no host mount)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lifecycle.validating import ValidationResult, parse_result
from playbook_adapter.imaging import assemble_package
from playbook_adapter.introspection import introspect_role
from playbook_adapter.manifest import load_manifest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "roles"
AGENT = Path(sys.executable).parent / "nwb-agent"
SECRET = "s3cr3t-enrolment-value"


@dataclass
class Validation:
    exit_code: int
    output: str
    result: ValidationResult


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    role = EXAMPLES / "security-agent"
    target = tmp_path_factory.mktemp("pkg") / "security-agent"
    assemble_package(role, introspect_role(role, fallback_version="1.0.0"), target)
    return target


def validate(
    package: Path,
    tmp_path: Path,
    values: dict[str, Any],
    secrets: dict[str, dict[str, str]] | None = None,
) -> Validation:
    (tmp_path / "vars").mkdir()
    (tmp_path / "vars/vars.json").write_text(json.dumps(values))
    for secret, keys in (secrets or {}).items():
        (tmp_path / "secrets" / secret).mkdir(parents=True)
        for key, text in keys.items():
            (tmp_path / "secrets" / secret / key).write_text(text)
    log = tmp_path / "termination-log"
    env = {
        "PATH": os.environ["PATH"],
        "NW_PACKAGE_DIR": str(package),
        "NW_VARS_FILE": str(tmp_path / "vars/vars.json"),
        "NW_SECRETS_DIR": str(tmp_path / "secrets"),
        "NW_TERMINATION_LOG": str(log),
        "NW_PACKAGE": "security-agent",
        "NW_VERSION": "1.0.0",
    }
    done = subprocess.run(
        [str(AGENT), "validate"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    return Validation(done.returncode, done.stdout + done.stderr, parse_result(log.read_text()))


def test_good_vars_and_secrets_pass(package: Path, tmp_path: Path) -> None:
    run = validate(
        package,
        tmp_path,
        {"security_agent_server": "siem.example:514", "security_agent_log_level": "warn"},
        secrets={"enrol": {"security_agent_token": SECRET}},
    )
    assert run.exit_code == 0, run.output
    assert run.result.passed and not run.result.problems
    manifest = load_manifest(package)
    assert (run.result.package, run.result.version) == (manifest.name, manifest.version)
    assert SECRET not in run.output


def test_a_bad_var_is_named_with_its_rule(package: Path, tmp_path: Path) -> None:
    run = validate(
        package,
        tmp_path,
        {"security_agent_server": "siem.example:514", "security_agent_log_level": "loud"},
    )
    assert run.exit_code == 2
    assert not run.result.passed and run.result.reason == "ArgumentSpecViolation"
    (problem,) = run.result.problems
    assert problem.startswith("vars.security_agent_log_level: must be one of")
    assert problem.endswith("(rule: choices)")
    assert "loud" not in problem, "the value is never shown"
    assert "vars.security_agent_log_level" in run.output


def test_a_secret_var_that_breaks_the_spec_is_named_and_its_value_never_printed(
    package: Path, tmp_path: Path
) -> None:
    run = validate(
        package,
        tmp_path,
        {"security_agent_server": "siem.example:514"},
        secrets={
            "enrol": {"extra.json": json.dumps({"security_agent_scan_interval_minutes": SECRET})}
        },
    )
    assert run.exit_code == 2
    assert run.result.problems == [
        "vars.security_agent_scan_interval_minutes: must be of type integer (rule: type)"
    ]
    assert SECRET not in run.output
    assert SECRET not in run.result.to_termination_message()


def test_a_task_file_missing_from_the_image_is_a_broken_package(
    package: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    subprocess.run(["cp", "-a", str(package), str(broken)], check=True)
    (broken / "roles/security-agent/tasks/main.yml").unlink()
    work = tmp_path / "run"
    work.mkdir()
    run = validate(broken, work, {"security_agent_server": "siem.example:514"})
    assert run.exit_code == 2
    assert run.result.reason == "BrokenPackage"
    assert any(p.startswith("stages.apply: tasks/main.yml not found") for p in run.result.problems)


def test_a_package_without_a_manifest_is_a_broken_package(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    work = tmp_path / "run"
    work.mkdir()
    run = validate(empty, work, {})
    assert run.result.reason == "BrokenPackage"
    assert "no package manifest" in run.result.problems[0]
