"""``nwb-agent validate``: check a package spec inside its image, before any node is touched.

The controller runs this in one unprivileged validation pod per package spec (no host mount, no
host PID), with the vars ConfigMap and secretVars Secrets mounted exactly as a node pod gets
them. It checks what would otherwise fail only on a cordoned node:

- the manifest loads, the role directory and every task file the manifest names exist, and the
  role dependencies it bundles are there (``BrokenPackage``);
- the vars and the secret vars together satisfy the manifest's argument schema
  (``ArgumentSpecViolation``; one line per var with the rule it breaks).

Image pull failures never reach the agent: the controller sees them on the pod.
The result is a ``lifecycle.validating.ValidationResult`` written to the termination log; every
line names a field, never a value (vars may come from Secrets). Exit codes: 0 passed, 2 failed.
"""

from __future__ import annotations

import sys
from typing import IO

import jsonschema
from jsonschema.exceptions import SchemaError

from lifecycle.validating import Reason, ValidationResult
from playbook_adapter import argspec
from playbook_adapter.agent.running import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    load_secret_vars,
    load_vars,
)
from playbook_adapter.agent.settings import AgentSettings
from playbook_adapter.errors import BadInputError
from playbook_adapter.manifest import (
    PackageManifest,
    load_manifest,
    missing_stage_files,
    role_dir,
)


def validate(settings: AgentSettings) -> ValidationResult:
    """Every check in the order a run would hit them; the first kind of failure is reported."""
    try:
        manifest = load_manifest(settings.package_dir)
    except BadInputError as exc:
        return _failed(settings, None, Reason.BROKEN_PACKAGE, exc.problems)
    broken = broken_package(settings, manifest)
    if broken:
        return _failed(settings, manifest, Reason.BROKEN_PACKAGE, broken)
    try:
        jsonschema.Draft202012Validator.check_schema(manifest.argument_schema)
    except SchemaError as exc:
        problem = f"argument_schema: not a valid JSON Schema ({exc.validator} at {exc.json_path})"
        return _failed(settings, manifest, Reason.BROKEN_PACKAGE, [problem])
    try:
        values = {**load_vars(settings.vars_file), **load_secret_vars(settings.secrets_dir)}
    except BadInputError as exc:
        return _failed(settings, manifest, Reason.ARGUMENT_SPEC_VIOLATION, exc.problems)
    problems = argspec.vars_problems(manifest.argument_schema, values)
    if problems:
        return _failed(settings, manifest, Reason.ARGUMENT_SPEC_VIOLATION, problems)
    return ValidationResult(package=manifest.name, version=manifest.version, passed=True)


def broken_package(settings: AgentSettings, manifest: PackageManifest) -> list[str]:
    """What the image lacks that the manifest promises: the role, its task files, its roles."""
    base = role_dir(settings.package_dir, manifest)
    if not base.is_dir():
        return [f"role: {manifest.role} not found in {settings.package_dir}"]
    problems = missing_stage_files(settings.package_dir, manifest)
    search = [settings.package_dir / "roles", base.parent]
    for dep in manifest.role_dependencies:
        if dep.count(".") >= 2:
            continue  # a collection's role: it travels in its collection
        if not any((root / dep).is_dir() for root in search):
            problems.append(f"role_dependencies: role {dep} not found in the image")
    return problems


def run(settings: AgentSettings, *, out: IO[str] | None = None) -> int:
    """Validate, print one line per problem, write the result; the exit code."""
    out = out or sys.stdout
    result = validate(settings)
    if result.passed:
        print(f"ok        {result.package} {result.version}: spec validated", file=out)
    for problem in result.problems:
        print(f"error     {result.reason}: {problem}", file=out)
    _write(settings, result)
    return EXIT_OK if result.passed else EXIT_BAD_INPUT


def _failed(
    settings: AgentSettings,
    manifest: PackageManifest | None,
    reason: Reason,
    problems: list[str],
) -> ValidationResult:
    return ValidationResult(
        package=manifest.name if manifest else settings.package,
        version=manifest.version if manifest else settings.version,
        reason=reason.value,
        problems=problems,
    )


def _write(settings: AgentSettings, result: ValidationResult) -> None:
    path = settings.termination_log
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(result.to_termination_message(), encoding="utf-8")
    except OSError as exc:
        print(f"warning: cannot write termination log {path}: {exc}", file=sys.stderr)
