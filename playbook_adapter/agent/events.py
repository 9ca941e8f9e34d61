"""Turn ansible-runner events into the three outputs of a run.

Why here and not in a callback plugin: ansible-runner already hands every event to Python as a
dict, in order, in this process; counting, printing and logging them here costs nothing extra and
keeps the playbook process free of our code.

Outputs:
- stdout: one short line per task result, ``ok|changed|failed|skipping  <stage>  <task>``
  (a failure adds ``: <message>``);
- JSONL: every event, one per line, in ``<stage>-<timestamp>.jsonl`` on the host;
- the per-stage counts, the fatal failure, what the role asked for (``rebootRequested``, the
  deferred ``restartServices``, see ``deferring``) and the handlers still owed when the run ends
  (``handlers.HandlerTracker``) for the AgentResult.

Check mode (``check``, ``nwb-agent run --check``): the lines say ``would change`` (with a short
diff summary, then the diff itself, indented) and ``cannot tell`` for a task check mode could not
answer for; a notified handler check mode skips (a ``command`` handler) ``would run``: it counts
as a change, not as unknown, since it fires only because a task changed. ``check_report`` sums
them up (``checking`` reads the results).

Secrets: every string value of a secret or no_log var is replaced by ``********`` in everything
written (stdout and JSONL) - a role may echo a var in a module's ``msg`` or args.
Stages are recognised by the marker play ``nodewright:<stage>`` that starts each stage.
"""

from __future__ import annotations

import collections
import json
import logging
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from lifecycle.results import MAX_CHECK_TASKS, CheckReport, Failure, StageResult, StageStatus
from playbook_adapter.agent import checking
from playbook_adapter.agent.deferring import REBOOT_FACT, RESTART_FACT
from playbook_adapter.agent.handlers import HandlerTracker, in_handlers_file

logger = logging.getLogger(__name__)

STAGE_PLAY_PREFIX = "nodewright:"
REDACTED = "********"
# Shorter strings ("yes", "80") would redact innocent text everywhere; no secret is that short.
MIN_REDACT_CHARS = 4
MAX_LINE_MESSAGE = 300
# The stdout lines the result carries back (``AgentResult.output``) for ``nwb logs`` after the pod
# is gone: the failing task's line is the last, the ones before show how the run got there.
OUTPUT_TAIL_LINES = 20
# Our own include of the role's task file is plumbing, not a task of the role.
PLUMBING_ACTIONS = {"ansible.builtin.include_role", "include_role"}
RESULT_EVENTS = {
    "runner_on_ok",
    "runner_on_failed",
    "runner_on_skipped",
    "runner_on_unreachable",
}
ITEM_SKIPPED = "runner_item_on_skipped"
HANDLER_PREFIX = "handler: "
DIFF_INDENT = "    "


@dataclass(slots=True)
class _StageTally:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    skipped: int = 0
    unreachable: int = 0
    started: float | None = None
    ended: float | None = None


@dataclass(slots=True)
class EventCollector:
    """Consumes runner events (``handle``) and sums them up (``stage_results``)."""

    stages: list[str]
    log_dir: Path | None
    timestamp: str
    clock: Callable[[], float]
    secrets: Iterable[str] = ()
    out: IO[str] = field(default_factory=lambda: sys.stdout)
    check: bool = False
    current: str | None = None
    failure: Failure | None = None
    reboot_requested: bool = False
    restart_services: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    handlers: HandlerTracker = field(default_factory=HandlerTracker)
    tallies: dict[str, _StageTally] = field(default_factory=dict)
    _secrets: list[str] = field(default_factory=list)
    _log: IO[str] | None = None
    log_files: list[Path] = field(default_factory=list)
    would_change: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    _item_skips: dict[str, str] = field(default_factory=dict)
    recent: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=OUTPUT_TAIL_LINES)
    )

    def __post_init__(self) -> None:
        # Longest first, so a secret containing another is replaced whole.
        self._secrets = sorted(
            {s for s in self.secrets if len(s) >= MIN_REDACT_CHARS}, key=len, reverse=True
        )

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
            escaped = json.dumps(secret)[1:-1]
            if escaped != secret:
                text = text.replace(escaped, REDACTED)
        return text

    def handle(self, event: Mapping[str, Any]) -> bool:
        """ansible-runner event_handler: returns False so runner keeps no copy on disk."""
        kind = str(event.get("event", ""))
        data: Mapping[str, Any] = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            play = str(data.get("play", ""))
            if play.startswith(STAGE_PLAY_PREFIX):
                self._start_stage(play.removeprefix(STAGE_PLAY_PREFIX))
        if self.current is not None:
            self._write(event)
        plumbing = data.get("task_action") in PLUMBING_ACTIONS and kind == "runner_on_ok"
        if kind == ITEM_SKIPPED and self.check and self.current is not None:
            self._item_skipped(data)
        if kind in RESULT_EVENTS and self.current is not None and not plumbing:
            self._count(kind, data, event.get("stdout"))
            self.handlers.observe(kind, data)
        return False

    def check_report(self) -> CheckReport:
        """What a check run found (names cut to ``MAX_CHECK_TASKS``; the counts are whole)."""
        return CheckReport(
            changed=len(self.would_change),
            tasks=self.would_change[:MAX_CHECK_TASKS],
            unsupported=len(self.unsupported),
            unsupported_tasks=self.unsupported[:MAX_CHECK_TASKS],
        )

    @property
    def pending_handlers(self) -> list[str]:
        return list(self.handlers.pending)

    def close(self) -> None:
        now = self.clock()
        for tally in self.tallies.values():
            if tally.ended is None:
                tally.ended = now
        if self._log is not None:
            self._log.close()
            self._log = None

    def stage_results(self, *, fatal: bool) -> list[StageResult]:
        """Per requested stage; ``fatal`` says the playbook ended with a host failed/unreachable."""
        results = []
        failed_stage = self.failure.stage if (fatal and self.failure) else None
        for stage in self.stages:
            tally = self.tallies.get(stage)
            if tally is None:
                results.append(StageResult(name=stage, status=StageStatus.SKIPPED))
                continue
            duration = max((tally.ended or 0.0) - (tally.started or 0.0), 0.0)
            results.append(
                StageResult(
                    name=stage,
                    status=StageStatus.FAILED if stage == failed_stage else StageStatus.OK,
                    ok=tally.ok,
                    changed=tally.changed,
                    failed=tally.failed,
                    skipped=tally.skipped,
                    unreachable=tally.unreachable,
                    duration_seconds=round(duration, 3),
                )
            )
        return results

    # ---------------------------------------------------------------------------------------

    def _start_stage(self, stage: str) -> None:
        now = self.clock()
        if self.current is not None:
            self.tallies[self.current].ended = now
        self.current = stage
        self.tallies[stage] = _StageTally(started=now)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.log_dir is not None:
            path = self.log_dir / f"{stage}-{self.timestamp}.jsonl"
            try:
                self._log = path.open("w", encoding="utf-8")
                self.log_files.append(path)
            except OSError as exc:
                logger.warning(
                    "cannot write event log", extra={"path": str(path), "error": str(exc)}
                )

    def _write(self, event: Mapping[str, Any]) -> None:
        if self._log is None:
            return
        line = json.dumps(event, default=str, separators=(",", ":"))
        self._log.write(self.redact(line) + "\n")

    def _count(self, kind: str, data: Mapping[str, Any], stdout: object = None) -> None:
        assert self.current is not None
        tally = self.tallies[self.current]
        res: Mapping[str, Any] = data.get("res") or {}
        task = str(data.get("task") or data.get("task_action") or "")
        action = str(data.get("task_action") or "")
        item_skip = self._item_skips.pop(str(data.get("task_uuid") or ""), None)
        if kind == "runner_on_ok":
            asked = self._requests(task, res)
            tally.ok += 1
            changed = bool(res.get("changed")) if isinstance(res, Mapping) else False
            tally.changed += int(changed)
            if self.check:
                self._checked_ok(data, task, res, changed=changed or asked, item_skip=item_skip)
            else:
                self._line("changed" if changed else "ok", task)
        elif kind == "runner_on_skipped":
            tally.skipped += 1
            why = self._check_skip(stdout, action, item_skip) if self.check else None
            label = _label(data, task)
            if why is not None and label.startswith(HANDLER_PREFIX):
                # A handler runs only when notified: it would fire, whatever check mode cannot
                # say about its own effect (a ``command`` reloading what a task changed).
                self.would_change.append(self.redact(label))
                self._line("would run", label, why)
            elif why is not None:
                self._cannot_tell(label, why)
            else:
                self._line("skipping", task)
        elif kind == "runner_on_failed":
            ignored = bool(data.get("ignore_errors"))
            tally.failed += int(not ignored)
            message = self.redact(failure_message(res))
            self._line("failed" if not ignored else "failed (ignored)", task, message)
            if ignored and self.check:
                why = "failed in check mode (ignored)"
                self.unsupported.append(self.redact(f"{_label(data, task)}: {why}"))
            if not ignored:
                self.failure = Failure(
                    stage=self.current, task=task, action=action, message=message
                )
        elif kind == "runner_on_unreachable":
            tally.unreachable += 1
            message = self.redact(failure_message(res))
            self._line("unreachable", task, message)
            self.failure = Failure(
                stage=self.current, task=task, action=action or "connection", message=message
            )

    def _requests(self, task: str, res: Mapping[str, Any]) -> bool:
        """A deferred reboot or restart (``deferring``) shows as a fact in the task's result;
        True when this result asked for one."""
        asked = False
        items = res.get("results") if isinstance(res, Mapping) else None
        for part in [res, *(items if isinstance(items, list) else ())]:
            facts = part.get("ansible_facts") if isinstance(part, Mapping) else None
            if not isinstance(facts, Mapping):
                continue
            if _truthy(facts.get(REBOOT_FACT)):
                asked = True
                if not self.reboot_requested:
                    self.reboot_requested = True
                    self.reasons.append(f"reboot requested by {task!r}")
            units = facts.get(RESTART_FACT)
            for unit in units if isinstance(units, list) else ():
                if isinstance(unit, str) and unit and unit not in self.restart_services:
                    asked = True
                    self.restart_services.append(unit)
                    self.reasons.append(f"restart of {unit} requested by {task!r}")
        return asked

    def _item_skipped(self, data: Mapping[str, Any]) -> None:
        """Remember the first item of a loop that check mode skipped (the task's event follows)."""
        uuid = str(data.get("task_uuid") or "")
        res = data.get("res")
        why = checking.check_mode_skip(res if isinstance(res, Mapping) else None, "")
        if why is not None and uuid and uuid not in self._item_skips:
            self._item_skips[uuid] = why

    def _check_skip(self, stdout: object, action: str, item_skip: str | None) -> str | None:
        res = checking.skipped_result(stdout)
        if res is not None and res.get("msg") == checking.ALL_ITEMS_SKIPPED:
            return item_skip
        return checking.check_mode_skip(res, action)

    def _checked_ok(
        self,
        data: Mapping[str, Any],
        task: str,
        res: Mapping[str, Any],
        *,
        changed: bool,
        item_skip: str | None,
    ) -> None:
        name = _label(data, task)
        skipped = item_skip or (checking.skipped_items(res) if isinstance(res, Mapping) else None)
        if not changed:
            self._line("ok", name)
        else:
            self.would_change.append(self.redact(name))
            entries = checking.diff_entries(res) if isinstance(res, Mapping) else []
            self._line("would change", name, checking.diff_summary(entries))
            for line in checking.diff_lines(entries):
                self.detail(DIFF_INDENT + line)
        if skipped is not None:
            self._cannot_tell(name, skipped)

    def _cannot_tell(self, task: str, why: str) -> None:
        self.unsupported.append(self.redact(f"{task}: {why}"))
        self._line("cannot tell", task, why)

    def _line(self, status: str, task: str, message: str = "") -> None:
        line = f"{status:<9} {self.current}  {self.redact(task)}"
        if message:
            flat = " ".join(message.split())
            if len(flat) > MAX_LINE_MESSAGE:
                flat = flat[: MAX_LINE_MESSAGE - 1] + "…"
            line += f": {flat}"
        self.say(line)

    def detail(self, line: str) -> None:
        """Print a line for people reading along (a diff), kept out of the result's tail."""
        print(self.redact(line), file=self.out, flush=True)

    def say(self, line: str) -> None:
        """Print one human log line (redacted) and remember it for the result's output tail."""
        line = self.redact(line)
        self.recent.append(line)
        print(line, file=self.out, flush=True)


def failure_message(res: object) -> str:
    """The useful part of a failed result: msg, then stderr/stdout tails, then rc.

    A loop task's result says only "One or more items failed"; the first failed item's own
    message (an assert's ``fail_msg``, a command's stderr) is what explains it, so it is used.
    """
    if not isinstance(res, Mapping):
        return str(res)
    if isinstance(res.get("results"), list):
        for item in res["results"]:
            if isinstance(item, Mapping) and item.get("failed"):
                return failure_message(item)
    parts = []
    msg = res.get("msg")
    if msg:
        parts.append(str(msg))
    for key in ("stderr", "module_stderr", "stdout"):
        value = res.get(key)
        if value and str(value) not in parts:
            parts.append(f"{key}: {str(value)[-500:]}")
            break
    if "rc" in res and res.get("rc") not in (None, 0):
        parts.append(f"rc={res['rc']}")
    return "; ".join(parts) or "failed"


def _label(data: Mapping[str, Any], task: str) -> str:
    """A check report's name for a task: handlers as ``handler: <name>``."""
    handler = in_handlers_file(str(data.get("task_path") or ""))
    return f"{HANDLER_PREFIX}{task}" if handler else task


def _truthy(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"true", "yes", "1", "on"}
    return bool(value)
