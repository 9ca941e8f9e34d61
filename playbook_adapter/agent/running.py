"""One ``nwb-agent run``: check the inputs, run the stages with ansible-runner, report.

Why this order: everything that can be wrong with the inputs (manifest, missing task files, vars
against the argument schema, unknown stages) is checked before Ansible starts, so a bad CR fails
fast with exit 2 and a message naming the field, instead of half-applying a role.

Check mode (``check``, ``nwb-agent run --check``): the same stages run with ``ansible-playbook
--check --diff -v`` (``-v`` so that a skipped task's event says why, see ``checking``) and change
nothing the agent owns on the host: the handlers a failed run left owed are read and notified
again (so they count as changes) but the ledger is never written, no reboot-required file is
watched, and the event logs go to a ``check/`` directory of their own, pruned apart, so check runs
never push a real run's log out. The result carries ``check`` (``CheckReport``); a task that fails
in check mode fails the run as it would a real one.

Exit codes: 0 all stages ok; 1 a task or check failed (the result names stage, task, action and
message); 2 bad input. The AgentResult is written to the termination log in every case.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import ansible_runner
import yaml

from lifecycle.results import AgentResult, Failure
from playbook_adapter import argspec
from playbook_adapter.agent import handlers
from playbook_adapter.agent.events import EventCollector
from playbook_adapter.agent.handlers import HandlerTracker
from playbook_adapter.agent.playbooks import prepare
from playbook_adapter.agent.settings import AgentSettings
from playbook_adapter.errors import AgentError, BadInputError, ManifestError, VarsError
from playbook_adapter.manifest import (
    AgentStage,
    PackageManifest,
    load_manifest,
    missing_stage_files,
    role_dir,
)

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
SECRET_VAR_FILE_SUFFIXES = (".json", ".yml", ".yaml")
# Left by package managers (Debian/Ubuntu) when an update needs a reboot; /var/run is /run.
REBOOT_REQUIRED_FILE = "run/reboot-required"
# ansible-playbook options of a check run; -v puts a skipped task's result into its event.
CHECK_CMDLINE = "--check --diff -v"
# The skipped result is read back as JSON from that line (the default callback's format, pinned).
CHECK_ENV = {"ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}
# Check runs' event logs, under the package version's log directory (pruned on their own).
CHECK_LOG_SUBDIR = "check"


@dataclass(frozen=True, slots=True)
class RunOutcome:
    exit_code: int
    result: AgentResult


def parse_stages(text: str) -> list[AgentStage]:
    stages = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        try:
            stages.append(AgentStage(word))
        except ValueError:
            known = ", ".join(s.value for s in AgentStage)
            raise BadInputError(f"--stages: unknown stage {word!r} (known: {known})") from None
    if not stages:
        raise BadInputError("--stages: no stage given")
    return stages


def load_vars(path: Path) -> dict[str, Any]:
    """The CR's vars (``vars.json``); a missing file means no vars."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except ValueError as exc:
        raise VarsError(f"{path}: not valid JSON ({exc.__class__.__name__})") from None
    if not isinstance(data, dict):
        raise VarsError(f"{path}: must be a JSON object of var name -> value")
    return data


def load_secret_vars(secrets_dir: Path) -> dict[str, Any]:
    """Vars from each mounted Secret: ``<secret>/<key>``.

    A key ending in .json/.yml/.yaml is a var file (an object, merged); any other key is one var
    named like the key whose value is the file's text (one trailing newline dropped).
    """
    values: dict[str, Any] = {}
    if not secrets_dir.is_dir():
        return values
    for secret in sorted(p for p in secrets_dir.iterdir() if p.is_dir()):
        for key in sorted(
            p for p in secret.iterdir() if p.is_file() and not p.name.startswith(".")
        ):
            text = key.read_text(encoding="utf-8")
            if key.name.endswith(SECRET_VAR_FILE_SUFFIXES):
                try:
                    data = yaml.safe_load(text)
                except yaml.YAMLError:
                    raise VarsError(
                        f"secret {secret.name}/{key.name}: not valid YAML/JSON"
                    ) from None
                if not isinstance(data, dict):
                    raise VarsError(f"secret {secret.name}/{key.name}: must be an object")
                values.update(data)
            else:
                values[key.name] = text.removesuffix("\n")
    return values


def secret_strings(values: Mapping[str, Any]) -> list[str]:
    """Every string (and number) inside the values, for redaction."""
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, Mapping):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            found.append(str(value))

    walk(values)
    return found


def run(
    settings: AgentSettings,
    stages_text: str,
    *,
    out: IO[str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    keep_data_dir: bool = False,
    check: bool = False,
) -> RunOutcome:
    """Run the stages (in check mode with ``check``) and write the termination message; never
    raises for bad input."""
    out = out or sys.stdout
    manifest: PackageManifest | None = None
    try:
        stages = parse_stages(stages_text)
        manifest = load_manifest(settings.package_dir)
        missing = missing_stage_files(settings.package_dir, manifest)
        if missing:
            raise ManifestError("task files named in the manifest are missing", missing)
        values = load_vars(settings.vars_file)
        secrets = load_secret_vars(settings.secrets_dir)
        argspec.validate_vars(manifest.argument_schema, {**values, **secrets})
        outcome = _run_checked(
            settings, manifest, stages, values, secrets, out, clock, keep_data_dir, check
        )
    except BadInputError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        outcome = RunOutcome(
            EXIT_BAD_INPUT,
            AgentResult(
                package=manifest.name if manifest else settings.package,
                version=manifest.version if manifest else settings.version,
                failure=Failure(stage="input", action="validate", message="; ".join(exc.problems)),
            ),
        )
    except AgentError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        outcome = RunOutcome(
            EXIT_FAILED,
            AgentResult(
                package=manifest.name if manifest else settings.package,
                version=manifest.version if manifest else settings.version,
                failure=Failure(stage="agent", action="ansible-runner", message=exc.message),
            ),
        )
    write_termination_log(settings.termination_log, outcome.result)
    return outcome


def write_termination_log(path: Path, result: AgentResult) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(result.to_termination_message(), encoding="utf-8")
    except OSError as exc:
        print(f"warning: cannot write termination log {path}: {exc}", file=sys.stderr)


def _run_checked(  # noqa: PLR0917 - private, called once with everything validated
    settings: AgentSettings,
    manifest: PackageManifest,
    stages: list[AgentStage],
    values: dict[str, Any],
    secrets: dict[str, Any],
    out: IO[str],
    clock: Callable[[], float],
    keep_data_dir: bool,
    check: bool,
) -> RunOutcome:
    no_log = argspec.no_log_vars(manifest.argument_schema)
    redact = secret_strings(secrets) + secret_strings(
        {k: v for k, v in values.items() if k in no_log}
    )
    timestamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    log_dir = _event_log_dir(settings, manifest, check=check)
    data_dir = Path(tempfile.mkdtemp(prefix="nwb-agent-"))
    ledger = handlers.ledger_path(settings.host_root, settings.cr, manifest.name)
    owed = handlers.load_pending(ledger)
    collector = EventCollector(
        stages=[str(s) for s in stages],
        log_dir=log_dir,
        timestamp=timestamp,
        clock=clock,
        secrets=redact,
        out=out,
        check=check,
    )
    reboot_marker = None if check else _stat(settings.host_path(REBOOT_REQUIRED_FILE))
    try:
        prepared = prepare(
            data_dir,
            settings=settings,
            manifest=manifest,
            role=role_dir(settings.package_dir, manifest),
            stages=stages,
            values=values,
            secrets=secrets,
            owed_handlers=owed,
        )
        collector.handlers = HandlerTracker.starting_with(
            [n for n in owed if n not in prepared.dropped]
        )
        for name in prepared.dropped:
            print(
                f"warning   handler {name!r} was owed but this role has no such handler", file=out
            )
        if prepared.renotified:
            print(f"notify    again: {', '.join(prepared.renotified)}", file=out)
        status, rc, tail = "successful", 0, ""
        if prepared.stages:
            runner = ansible_runner.run(
                private_data_dir=str(data_dir),
                playbook=prepared.playbook,
                inventory=prepared.inventory,
                envvars={**prepared.envvars, **(CHECK_ENV if check else {})},
                event_handler=collector.handle,
                tags=",".join(settings.tags) or None,
                skip_tags=",".join(settings.skip_tags) or None,
                quiet=True,
                settings={"suppress_ansible_output": True},
                cmdline=CHECK_CMDLINE if check else None,
            )
            status, rc = str(runner.status), int(runner.rc if runner.rc is not None else -1)
            if rc != 0:
                tail = _stdout_tail(runner)
        collector.close()
        if not check:  # a check run changes nothing: what is owed stays owed
            handlers.save_pending(
                ledger, collector.pending_handlers, resource_id=settings.resource_id
            )
    except OSError as exc:
        raise AgentError(f"cannot prepare the run: {exc}") from exc
    finally:
        if not keep_data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
        if log_dir is not None:
            _prune_logs(log_dir, settings.keep_logs)

    failure = collector.failure
    fatal = rc != 0
    if fatal and failure is None:
        # No failed task event: the playbook could not even start (syntax error in a task file,
        # unknown module, connection plugin missing). Blame the first stage that should have run.
        stage = collector.current or str(prepared.stages[0] if prepared.stages else stages[0])
        message = collector.redact(tail) or f"ansible-playbook ended {status} (rc={rc})"
        failure = Failure(stage=stage, action="ansible-playbook", message=message)
        collector.say(
            f"failed    {stage}  ansible-playbook: {message.splitlines()[-1] if message else ''}"
        )
    reasons = list(collector.reasons)
    reboot = collector.reboot_requested
    if not check and _stat(settings.host_path(REBOOT_REQUIRED_FILE)) not in (None, reboot_marker):
        reboot = True
        reasons.append(f"/{REBOOT_REQUIRED_FILE} appeared or changed during the run")
    result = AgentResult(
        package=manifest.name,
        version=manifest.version,
        stages=collector.stage_results(fatal=fatal),
        failure=failure if fatal else None,
        reboot_requested=reboot,
        restart_services=collector.restart_services,
        pending_handlers=collector.pending_handlers,
        declared_interrupt=manifest.interrupt,
        request_reasons=reasons,
        check=collector.check_report() if check else None,
        output=list(collector.recent) if fatal else [],
    )
    return RunOutcome(EXIT_FAILED if fatal else EXIT_OK, result)


def _stat(path: Path) -> tuple[int, int] | None:
    """(mtime_ns, inode) of a file, or None: enough to see it appear or be rewritten."""
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_mtime_ns, info.st_ino


def _event_log_dir(
    settings: AgentSettings, manifest: PackageManifest, *, check: bool
) -> Path | None:
    path = (
        settings.host_path(settings.log_dir)
        / (settings.cr or "_")
        / manifest.name
        / manifest.version
    )
    if check:
        path /= CHECK_LOG_SUBDIR
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"warning: no event log, cannot create {path}: {exc}", file=sys.stderr)
        return None
    return path


def _prune_logs(log_dir: Path, keep: int) -> None:
    """Keep the newest ``keep`` logs per stage (names sort by time: <stage>-<UTC stamp>.jsonl)."""
    by_stage: dict[str, list[Path]] = {}
    for path in log_dir.glob("*.jsonl"):
        by_stage.setdefault(path.name.rsplit("-", 1)[0], []).append(path)
    for paths in by_stage.values():
        for old in sorted(paths)[: max(len(paths) - keep, 0)]:
            old.unlink(missing_ok=True)


def _stdout_tail(runner: Any) -> str:
    try:
        text = str(runner.stdout.read())
    except (OSError, AttributeError, ValueError):
        return ""
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-6:])[-1500:]
