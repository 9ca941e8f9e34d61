"""``nwb package init | inspect | test``: the role author's side of packaging.

Why separate from ``package_build``: these three need no container engine - they read a role,
write its manifest, and run it against a root filesystem with the node agent's own code, isolated
(``nodewright_bridge.sandbox.roletesting``). ``inspect`` hands image references to the image
code (``playbook_adapter.imaging``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import yaml

from lifecycle import preflight
from lifecycle.results import AgentResult
from lifecycle.spec import Interrupt, InterruptType
from playbook_adapter import argspec, introspection
from playbook_adapter.errors import PackageError
from playbook_adapter.manifest import MANIFEST_FILE, PackageManifest

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
DEFAULT_STAGES = "apply,apply-check,config,config-check"
# What a preflight checks: the stages that change the node (checks would only read it).
CHECK_STAGES = "apply,config"
# As on a node whose CR sets no interrupt: restart handlers become requests, so the check shows
# which units would restart.
CHECK_ENV = {"NW_DEFER_RESTARTS": "true"}


def _fail(error: PackageError, code: int = EXIT_BAD_INPUT) -> None:
    for problem in error.problems:
        click.echo(f"error: {problem}", err=True)
    sys.exit(code)


def _parse_interrupt(text: str | None) -> Interrupt | None:
    """``reboot`` | ``noop`` | ``restartAllServices`` | ``service:unit-a,unit-b``."""
    if not text:
        return None
    kind, _, services = text.partition(":")
    try:
        interrupt_type = InterruptType(kind)
    except ValueError:
        raise click.BadParameter(
            "expected reboot, noop, restartAllServices or service:UNIT[,UNIT]"
        ) from None
    units = [s for s in services.split(",") if s]
    return Interrupt(type=interrupt_type, services=units)


@click.command(name="init")
@click.argument("role_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--version", "version", help="Package version (strict semver).")
@click.option("--name", help="Package name (default: from the role).")
@click.option(
    "--interrupt", help="Default interrupt: reboot, noop, restartAllServices, service:UNITS."
)
@click.option("--force", is_flag=True, help=f"Overwrite an existing {MANIFEST_FILE}.")
@click.option("--stdout", "to_stdout", is_flag=True, help="Print the manifest instead of writing.")
def init(
    *,
    role_dir: Path,
    version: str | None,
    name: str | None,
    interrupt: str | None,
    force: bool,
    to_stdout: bool,
) -> None:
    """Write nodewright-package.yaml for an existing role, by convention."""
    target = role_dir / MANIFEST_FILE
    if target.exists() and not (force or to_stdout):
        click.echo(f"error: {target} exists (use --force to overwrite)", err=True)
        sys.exit(EXIT_BAD_INPUT)
    try:
        manifest = introspection.introspect_role(
            role_dir, version=version, name=name, interrupt=_parse_interrupt(interrupt)
        )
    except PackageError as exc:
        _fail(exc)
    if to_stdout:
        click.echo(manifest.to_yaml(), nl=False)
        return
    path = introspection.write_manifest(role_dir, manifest)
    click.echo(f"wrote {path}")
    _print_summary(manifest)


@click.command(name="inspect")
@click.argument("target")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def inspect(target: str, as_json: bool) -> None:
    """Show a package's manifest, stage map, argument schema and size (PATH or IMAGE)."""
    path = Path(target)
    try:
        if path.exists():
            info = introspection.inspect_path(path)
            manifest, size, source = info.manifest, info.size_bytes, str(info.path)
            if not info.from_file:
                source += f" (no {MANIFEST_FILE}: shown by convention)"
        else:
            manifest, size, source = _inspect_image(target)
    except PackageError as exc:
        _fail(exc)
    if as_json:
        click.echo(
            json.dumps(
                {"source": source, "sizeBytes": size, "manifest": manifest.to_wire()}, indent=2
            )
        )
        return
    click.echo(f"source:  {source}")
    click.echo(f"size:    {size / 1024:.1f} KiB")
    _print_summary(manifest)
    click.echo("argument schema:")
    click.echo(_indent(yaml.safe_dump(manifest.argument_schema, sort_keys=False), 2), nl=False)


def _inspect_image(reference: str) -> tuple[PackageManifest, int, str]:
    """Image inspection (the image code lives with ``nwb package build``)."""
    from playbook_adapter import imaging  # noqa: PLC0415 - needs a container engine; load lazily

    if not imaging.looks_like_image(reference):
        raise click.BadParameter(f"{reference}: neither a directory nor an image reference")
    info = imaging.inspect_image(imaging.detect_engine(), reference)
    if info.manifest is None:
        raise click.ClickException(f"{reference}: no {MANIFEST_FILE} in the image")
    return info.manifest, info.size_bytes, f"{reference} ({info.image_id[:19]})"


@click.command(name="test")
@click.argument("role_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Root filesystem to run against: a mount point no other mount shares (an overlay, a "
    "tmpfs); default: a throw-away copy-on-write root over the cached base.",
)
@click.option(
    "--stages",
    help=f"Comma-separated stages [default: {DEFAULT_STAGES}; with --check {CHECK_STAGES}].",
)
@click.option(
    "--vars", "vars_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Vars file (YAML or JSON object).",
)  # fmt: skip
@click.option(
    "--check",
    is_flag=True,
    help="Check mode (--check --diff): show what would change, which handlers would fire and "
    "the preflight outcome; change nothing on the root.",
)
@click.option("--watch", is_flag=True, help="Re-run whenever the role or the vars file changes.")
def test(
    *,
    role_dir: Path,
    root: Path | None,
    stages: str | None,
    vars_file: Path | None,
    check: bool,
    watch: bool,
) -> None:
    """Run the stages against a root filesystem, isolated, with the node agent's code.

    With --check: exit 0 when the outcome is compliant or changes, 1 when it is unknown (or the
    run failed), 2 for bad input.
    """
    from nodewright_bridge.sandbox import roletesting  # noqa: PLC0415 - Linux namespaces only
    from nodewright_bridge.sandbox.isolation import IsolationError  # noqa: PLC0415 - likewise

    def once(target: Path) -> int:
        try:
            values = _read_vars(vars_file)
            info = introspection.inspect_path(role_dir)
            argspec.validate_vars(info.manifest.argument_schema, values)
        except PackageError as exc:
            for problem in exc.problems:
                click.echo(f"error: {problem}", err=True)
            return EXIT_BAD_INPUT
        mode = " (check mode)" if check else ""
        chosen = stages or (CHECK_STAGES if check else DEFAULT_STAGES)
        click.echo(f"--- {info.manifest.name} {info.manifest.version}: {chosen} on {target}{mode}")
        run = roletesting.run_stages(
            role_dir, target, chosen, values=values, check=check,
            extra_env=CHECK_ENV if check else None,
        )  # fmt: skip
        _print_result(run.result)
        if not check:
            return run.exit_code
        return _print_check(run.result, run.exit_code)

    def loop(target: Path) -> int:
        # Ctrl-C is how a watch ends: the exit code is the last complete run's, or 130 when it
        # stopped a run (roletesting has ended that run's agent by then).
        code = EXIT_INTERRUPTED
        try:
            code = once(target)
            if not watch:
                return code
            from watchfiles import watch as watch_changes  # noqa: PLC0415 - only for --watch

            paths = [role_dir, *([vars_file] if vars_file else [])]
            click.echo("watching for changes (Ctrl-C to stop)")
            for _ in watch_changes(*paths):
                code = EXIT_INTERRUPTED
                code = once(target)
        except KeyboardInterrupt:
            stopped = "run interrupted" if code == EXIT_INTERRUPTED else "stopped watching"
            click.echo(stopped, err=True)
        return code

    if root is not None:
        if not root.is_dir():
            click.echo(f"error: --root: {root} is not a directory", err=True)
            sys.exit(EXIT_BAD_INPUT)
        try:
            code = loop(root)
        except IsolationError as exc:
            click.echo(f"error: --root: {exc}", err=True)
            code = EXIT_BAD_INPUT
        finally:
            roletesting.release_root(root)
        sys.exit(code)
    with roletesting.scratch_root() as scratch:
        sys.exit(loop(scratch))


def _read_vars(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise PackageError(f"--vars: {path}: not valid YAML/JSON: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PackageError(f"--vars: {path}: must be a mapping of var name -> value")
    return data


def _print_summary(manifest: PackageManifest) -> None:
    click.echo(f"package: {manifest.name} {manifest.version}")
    if manifest.role_fqcn:
        click.echo(f"role:    {manifest.role_fqcn}")
    interrupt = manifest.interrupt
    if interrupt is not None:
        units = f" ({', '.join(interrupt.services)})" if interrupt.services else ""
        click.echo(f"interrupt: {interrupt.type.value}{units}")
    else:
        click.echo("interrupt: none")
    click.echo("stages:")
    for stage, entry in manifest.stages.items():
        kind = "" if entry.kind.value == "tasks" else f" ({entry.kind.value})"
        click.echo(f"  {stage.value:<22} {entry.file}{kind}")
    if manifest.collections:
        bundled = ", ".join(f"{c.name} {c.version}".strip() for c in manifest.collections)
        click.echo(f"collections: {bundled}")
    if manifest.role_dependencies:
        click.echo(f"role dependencies: {', '.join(manifest.role_dependencies)}")
    if manifest.depends_on:
        deps = ", ".join(f"{k} {v}" for k, v in manifest.depends_on.items())
        click.echo(f"depends on: {deps}")


def _print_result(result: AgentResult) -> None:
    click.echo(f"{'stage':<22}{'status':<9}{'ok':>4}{'chg':>5}{'fail':>5}{'skip':>5}{'secs':>8}")
    for stage in result.stages:
        click.echo(
            f"{stage.name:<22}{stage.status.value:<9}{stage.ok:>4}{stage.changed:>5}"
            f"{stage.failed:>5}{stage.skipped:>5}{stage.duration_seconds:>8.1f}"
        )
    if result.failure is not None:
        f = result.failure
        click.echo(f"FAILED {f.stage}: {f.task} [{f.action}]: {f.message}")
    if result.reboot_requested:
        click.echo("the role requested a reboot (rebootRequested=true; not performed)")
    if result.restart_services:
        units = ", ".join(result.restart_services)
        click.echo(f"the role requested restarts of {units} (deferred to the interrupt)")
    for reason in result.request_reasons:
        click.echo(f"  {reason}")
    if result.pending_handlers:
        owed = ", ".join(result.pending_handlers)
        click.echo(f"handlers owed to the next run: {owed}")


def _print_check(result: AgentResult, exit_code: int) -> int:
    """What a check run found and its preflight outcome (one line, last); the exit code."""
    report = result.check
    if report is not None:
        fired = [t for t in report.tasks if t.startswith("handler: ")]
        if report.changed:
            more = len(report.tasks) < report.changed
            click.echo(f"would change: {report.changed} task(s){' (first shown)' if more else ''}")
            for task in report.tasks:
                click.echo(f"  {task}")
        if fired:
            names = ", ".join(t.removeprefix("handler: ") for t in fired)
            click.echo(f"handlers that would fire: {names}")
        if report.unsupported:
            click.echo(f"check mode cannot tell: {report.unsupported} task(s)")
            for task in report.unsupported_tasks:
                click.echo(f"  {task}")
    if exit_code == EXIT_BAD_INPUT:
        return EXIT_BAD_INPUT
    record = preflight.judge(result)
    if record.outcome is preflight.Outcome.COMPLIANT:
        click.echo("outcome: compliant (nothing would change; no pod, no drain)")
        return EXIT_OK
    if record.outcome is preflight.Outcome.CHANGES:
        implied = _interrupt_text(record.interrupt) if record.interrupt else "none"
        click.echo(f"outcome: changes ({report.changed if report else 0} task(s)), "
                   f"interrupt {implied}")  # fmt: skip
        return EXIT_OK
    declared = _interrupt_text(record.declared) if record.declared else "none"
    reason = record.tasks[0] if record.tasks else "check mode could not tell"
    click.echo(f"outcome: unknown: {reason} (the declared path: interrupt {declared})")
    return EXIT_FAILED


def _interrupt_text(interrupt: Interrupt) -> str:
    units = f" ({', '.join(interrupt.services)})" if interrupt.services else ""
    return f"{interrupt.type.value}{units}"


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "".join(pad + line for line in text.splitlines(keepends=True))
