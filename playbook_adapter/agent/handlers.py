"""Handlers that must not be lost: which were notified, which ran, which are still owed.

Why: Ansible runs a notified handler only at the end of the play, and only if the host has not
failed by then. When an attempt changes a file, notifies ``restart x`` and then fails (or the
handler itself fails), the next attempt finds the file already right, reports ``ok`` and never
notifies the handler again: the change is half applied while the node reads complete. So the
agent keeps, on the host, the handlers a run left owed, and the next run of the same package
notifies them again after the role's tasks (``playbooks.renotify_task``).

How notifications are seen: runner events do not carry a task's ``notify`` list, but they carry
its ``task_path`` (``file:line``). ``TaskIndex`` reads that file once and finds the task that
starts at that line, so a changed result maps to the handler names it notified, exactly as
written. A handler's own result (a task from a ``handlers/`` file) settles every name it answers
to (its ``name`` and its ``listen`` topics).

The ledger lives at ``<host>/var/lib/nodewright/handlers/<cr>/<package>.json`` - per package, not
per change: a vars fix that opens a new change must still run the handler the failed one owed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

HANDLER_LEDGER_DIR = "var/lib/nodewright/handlers"
TASK_LISTS = ("block", "rescue", "always")


def ledger_path(host_root: Path, cr: str, package: str) -> Path:
    return host_root / HANDLER_LEDGER_DIR / (cr or "_") / f"{package}.json"


def load_pending(path: Path) -> list[str]:
    """Handler names a previous run left owed; a missing or unreadable ledger owes nothing."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    pending = data.get("pending") if isinstance(data, dict) else None
    if not isinstance(pending, list):
        return []
    return [str(name) for name in pending if isinstance(name, str) and name]


def save_pending(path: Path, pending: Sequence[str], *, resource_id: str) -> None:
    """Write the ledger (atomically), or remove it when nothing is owed."""
    if not pending:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "pending": list(pending),
        "resourceId": resource_id,
        "updated": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def handler_names(handlers: Iterable[Mapping[str, Any]]) -> set[str]:
    """Every name a notify can use to reach these handlers (names and listen topics)."""
    names: set[str] = set()
    for handler in handlers:
        names.update(_answers_to(handler))
    return names


def reachable(notify: str, names: set[str]) -> bool:
    """Would ``notify: <notify>`` find a handler among ``names`` (``role : name`` allowed)?"""
    return notify in names or notify.rsplit(" : ", 1)[-1] in names


def _answers_to(task: Mapping[str, Any]) -> set[str]:
    names = {str(task["name"])} if task.get("name") else set()
    listen = task.get("listen")
    if isinstance(listen, str):
        names.add(listen)
    elif isinstance(listen, list):
        names.update(str(topic) for topic in listen)
    return names


def _notify_list(task: Mapping[str, Any]) -> list[str]:
    notify = task.get("notify")
    if isinstance(notify, str):
        return [notify]
    if isinstance(notify, list):
        return [str(name) for name in notify if name]
    return []


@dataclass(slots=True)
class TaskIndex:
    """``file:line`` (Ansible's task_path) -> the task mapping written there; files read once."""

    _files: dict[str, dict[int, Mapping[str, Any]]] = field(default_factory=dict)

    def task(self, task_path: str) -> Mapping[str, Any] | None:
        file, _, line = task_path.rpartition(":")
        if not file or not line.isdigit():
            return None
        if file not in self._files:
            self._files[file] = _tasks_by_line(Path(file))
        return self._files[file].get(int(line))


def _tasks_by_line(path: Path) -> dict[int, Mapping[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
        root, data = yaml.compose(text, Loader=yaml.SafeLoader), yaml.safe_load(text)
    except (OSError, yaml.YAMLError):
        return {}
    found: dict[int, Mapping[str, Any]] = {}

    def walk(node: yaml.Node | None, value: object) -> None:
        # The node tree gives the line; the loaded data (same shape) gives the task.
        if not isinstance(node, yaml.SequenceNode) or not isinstance(value, list):
            return
        for item, task in zip(node.value, value, strict=False):
            if not isinstance(item, yaml.MappingNode) or not isinstance(task, dict):
                continue
            found[item.start_mark.line + 1] = task
            for key, child in item.value:
                if isinstance(key, yaml.ScalarNode) and key.value in TASK_LISTS:
                    walk(child, task.get(key.value))

    walk(root, data)
    return found


@dataclass(slots=True)
class HandlerTracker:
    """Follows one run's events: handler names notified and not yet settled, in order."""

    index: TaskIndex = field(default_factory=TaskIndex)
    pending: list[str] = field(default_factory=list)

    @classmethod
    def starting_with(cls, owed: Sequence[str]) -> HandlerTracker:
        return cls(pending=list(dict.fromkeys(owed)))

    def observe(self, kind: str, data: Mapping[str, Any]) -> None:
        """Feed one runner result event (runner_on_ok / _failed / _skipped)."""
        task_path = str(data.get("task_path") or "")
        task = self.index.task(task_path) if task_path else None
        if task is None:
            return
        res = data.get("res")
        failed = kind == "runner_on_failed" and not data.get("ignore_errors")
        if in_handlers_file(task_path) and not failed:
            answers = _answers_to(task)
            self.pending = [n for n in self.pending if not reachable(n, answers)]
        changed = isinstance(res, Mapping) and bool(res.get("changed"))
        if changed and kind == "runner_on_ok":
            for name in _notify_list(task):
                if name not in self.pending:
                    self.pending.append(name)


def in_handlers_file(task_path: str) -> bool:
    """Is this task (Ansible's ``file:line``) a handler, i.e. from a ``handlers/`` file?"""
    return "/handlers/" in task_path.rpartition(":")[0]
