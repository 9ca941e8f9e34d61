"""What a check-mode run (``nwb-agent run --check``) reads from Ansible's results.

Why a module of its own: in check mode (``ansible-playbook --check --diff``) a result answers one
of three questions, and they are told apart by the shape of real ansible-core results:

- **would change**: ``changed`` is true (a ``command`` with ``creates``/``removes`` whose file
  decides it reports ``changed`` and "Command would have run if not in check mode" too), or the
  result carries a deferred reboot or restart request (``deferring``: the rewritten handler
  stands for a reboot or restart that would happen);
- **cannot tell** (unsupported): the task was skipped because of check mode, not because of a
  condition: a ``command``/``shell`` without ``creates``/``removes`` ("Command would have run if
  not in check mode"), ``raw`` (skipped without a message), ``script`` ("Check mode is not
  supported for this task."), a module or action without check-mode support ("remote module (X)
  does not support check mode", "This action (X) does not support check mode."). A skip by a
  condition carries ``skip_reason``/``false_condition`` (an empty loop ``skipped_reason``); any
  other skip is check mode's. A ``no_log`` result hides which it was, so it counts as cannot
  tell, as does a failure the task ignores (check mode may be why it failed);
- anything else is ok (nothing would change).

ansible-runner's ``runner_on_skipped`` event carries no result; the agent runs check mode with
``-v``, so the event's stdout line ends with the result as JSON (``skipping: [node] => {...}``),
which is read here. A loop's items carry their own results (``runner_item_on_skipped``).

Diffs (``--diff``) give the human log a short summary per task (``/etc/x +2 -1``) and the full
unified diff, capped, for the people who read it.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

# The result of a skip by a condition (or of an empty loop) carries one of these.
CONDITION_KEYS = ("skip_reason", "skipped_reason", "false_condition")
# The default callback writes a verbose result after this, on one line (JSON, no indent at -v).
RESULT_MARK = " => {"
ALL_ITEMS_SKIPPED = "All items skipped"
CENSORED_REASON = "skipped in check mode or by a condition (no_log hides which)"
# A diff is for people reading the log; beyond this many lines per task it is cut.
MAX_DIFF_LINES = 40
MAX_SUMMARY_CHARS = 120


def skipped_result(stdout: object) -> Mapping[str, Any] | None:
    """The result a verbose ``skipping: [host] => {...}`` line ends with, or None."""
    text = str(stdout or "")
    at = text.rfind(RESULT_MARK)
    if at < 0:
        return None
    try:
        data = json.loads(text[at + len(RESULT_MARK) - 1 :])
    except ValueError:
        return None
    return data if isinstance(data, Mapping) else None


def check_mode_skip(res: Mapping[str, Any] | None, action: str) -> str | None:
    """Why check mode skipped this (item) result, or None for a skip by a condition."""
    if res is None:
        return f"{action or 'task'} skipped in check mode (no reason reported)"
    if any(key in res for key in CONDITION_KEYS):
        return None
    if "censored" in res:
        return CENSORED_REASON
    message = str(res.get("msg") or "").strip()
    return message or f"{action or 'task'} skipped in check mode"


def skipped_items(res: Mapping[str, Any]) -> str | None:
    """The first check-mode reason among a loop result's skipped items (``results``)."""
    items = res.get("results")
    for item in items if isinstance(items, list) else ():
        if isinstance(item, Mapping) and item.get("skipped"):
            why = check_mode_skip(item, "")
            if why is not None:
                return why
    return None


def diff_entries(res: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The diff entries of a result and of its loop items, in order."""
    found: list[Mapping[str, Any]] = []
    items = res.get("results")
    for part in [res, *(items if isinstance(items, list) else ())]:
        if not isinstance(part, Mapping):
            continue
        diff = part.get("diff")
        for entry in diff if isinstance(diff, list) else [diff]:
            if isinstance(entry, Mapping):
                found.append(entry)
    return found


def diff_summary(entries: list[Mapping[str, Any]]) -> str:
    """``/etc/x +2 -1; /etc/d: state absent -> directory`` (empty when there is no diff)."""
    parts = []
    for entry in entries:
        before, after = entry.get("before"), entry.get("after")
        header = str(entry.get("after_header") or entry.get("before_header") or "").strip()
        if isinstance(before, str) and isinstance(after, str):
            added, removed = _counts(before, after)
            if added or removed:
                parts.append(f"{header or 'content'} +{added} -{removed}".strip())
        elif isinstance(before, Mapping) and isinstance(after, Mapping):
            path = str(after.get("path") or before.get("path") or header)
            keys = [k for k in after if k != "path" and before.get(k) != after.get(k)]
            changes = ", ".join(f"{k} {before.get(k, '-')} -> {after[k]}" for k in keys)
            if changes:
                parts.append(f"{path}: {changes}" if path else changes)
        elif isinstance(entry.get("prepared"), str):
            lines = str(entry["prepared"]).splitlines()
            added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
            removed = sum(
                1 for line in lines if line.startswith("-") and not line.startswith("---")
            )
            parts.append(f"{header or 'prepared'} +{added} -{removed}".strip())
    text = "; ".join(parts)
    return text if len(text) <= MAX_SUMMARY_CHARS else text[: MAX_SUMMARY_CHARS - 1] + "…"


def diff_lines(entries: list[Mapping[str, Any]]) -> list[str]:
    """The unified diff of the text entries (and a module's prepared diff), capped."""
    lines: list[str] = []
    for entry in entries:
        before, after = entry.get("before"), entry.get("after")
        if isinstance(before, str) and isinstance(after, str):
            header = str(entry.get("after_header") or entry.get("before_header") or "")
            lines += [
                line.rstrip("\n")
                for line in difflib.unified_diff(
                    before.splitlines(keepends=True),
                    after.splitlines(keepends=True),
                    fromfile=f"before: {header}".strip(),
                    tofile=f"after: {header}".strip(),
                    n=1,
                )
            ]
        elif isinstance(entry.get("prepared"), str):
            lines += str(entry["prepared"]).splitlines()
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"... {len(lines) - MAX_DIFF_LINES} more diff lines"]
    return lines


def _counts(before: str, after: str) -> tuple[int, int]:
    added = removed = 0
    for line in difflib.ndiff(before.splitlines(), after.splitlines()):
        if line.startswith("+ "):
            added += 1
        elif line.startswith("- "):
            removed += 1
    return added, removed
