"""Check-mode results (shapes recorded from ansible-core 2.19 via ansible-runner) become a report.

A skip by a condition is not a task check mode cannot answer for; a command without
creates/removes, raw, script and modules without check support are. The human lines say
"would change" with a diff summary, and the diff itself stays out of the result's output tail.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from playbook_adapter.agent import checking
from playbook_adapter.agent.events import EventCollector

COMMAND_SKIP = {
    "changed": False,
    "cmd": ["echo", "hi"],
    "msg": "Command would have run if not in check mode",
    "rc": 0,
}
CONDITION_SKIP = {
    "changed": False,
    "false_condition": "item > 5",
    "skip_reason": "Conditional result was False",
}


def play(stage: str) -> dict[str, Any]:
    return {"event": "playbook_on_play_start", "event_data": {"play": f"nodewright:{stage}"}}


def ok(task: str, res: dict[str, Any], **data: Any) -> dict[str, Any]:
    return {"event": "runner_on_ok", "event_data": {"task": task, "res": res, **data}}


def skipped(task: str, shown: dict[str, Any] | None, **data: Any) -> dict[str, Any]:
    """ansible-runner's skip event: no ``res``; under -v the stdout line ends with it."""
    stdout = "skipping: [node]" + (f" => {json.dumps(shown)}" if shown is not None else "")
    return {"event": "runner_on_skipped", "stdout": stdout, "event_data": {"task": task, **data}}


def item_skipped(task: str, uuid: str, res: dict[str, Any]) -> dict[str, Any]:
    return {
        "event": "runner_item_on_skipped",
        "event_data": {"task": task, "task_uuid": uuid, "res": res},
    }


def collector(tmp_path: Path) -> tuple[EventCollector, io.StringIO]:
    out = io.StringIO()
    ticks = iter(range(100))
    c = EventCollector(
        stages=["apply"], log_dir=tmp_path, timestamp="T", clock=lambda: float(next(ticks)),
        out=out, check=True, secrets=["s3cr3t-token"],
    )  # fmt: skip
    c.handle(play("apply"))
    return c, out


def test_skips_by_a_condition_are_not_unsupported_but_check_mode_skips_are(
    tmp_path: Path,
) -> None:
    c, _ = collector(tmp_path)
    for event in (
        skipped("conditional", {"changed": False, "false_condition": False, **CONDITION_SKIP}),
        skipped("empty loop", {"skipped_reason": "No items in the list"}),
        skipped("plain command", COMMAND_SKIP, task_action="ansible.builtin.command"),
        skipped("raw", {"changed": False}, task_action="ansible.builtin.raw"),
        skipped("uri", {"changed": False, "msg": "This action (uri) does not support check mode."}),
        skipped(
            "quiet",
            {
                "censored": "the output has been hidden due to the fact that 'no_log: true' was "
                "specified for this result",
                "changed": False,
            },
        ),
    ):
        c.handle(event)
    report = c.check_report()
    assert report.unsupported == 4
    assert report.unsupported_tasks == [
        "plain command: Command would have run if not in check mode",
        "raw: ansible.builtin.raw skipped in check mode",
        "uri: This action (uri) does not support check mode.",
        f"quiet: {checking.CENSORED_REASON}",
    ]
    assert report.changed == 0


def test_a_loop_is_unsupported_when_an_item_was_skipped_by_check_mode(tmp_path: Path) -> None:
    c, _ = collector(tmp_path)
    all_items = {"changed": False, "msg": "All items skipped"}
    for event in (
        item_skipped("by condition", "u1", {**CONDITION_SKIP, "item": 1}),
        skipped("by condition", all_items, task_uuid="u1"),
        item_skipped("commands", "u2", {**COMMAND_SKIP, "item": 1}),
        item_skipped("commands", "u2", {**CONDITION_SKIP, "item": 2}),
        skipped("commands", all_items, task_uuid="u2"),
    ):
        c.handle(event)
    assert c.check_report().unsupported_tasks == [
        "commands: Command would have run if not in check mode"
    ]


def test_changes_name_tasks_and_handlers_with_a_diff_summary(tmp_path: Path) -> None:
    c, out = collector(tmp_path)
    diff = [
        {
            "before": "a\nb\n",
            "after": "a\nc\nd\n",
            "before_header": "/etc/x",
            "after_header": "/etc/x",
        }
    ]
    c.handle(ok("Write x", {"changed": True, "diff": diff}))
    c.handle(ok("Unchanged", {"changed": False}))
    c.handle(
        ok(
            "Reboot now",
            {"changed": False, "ansible_facts": {"nodewright_reboot_required": True}},
            task_path="/data/rewritten/role/handlers/main.yml:4",
        )
    )
    c.handle(
        ok(
            "Creates decides",
            {"changed": True, "msg": "Command would have run if not in check mode"},
        )
    )
    report = c.check_report()
    assert report.tasks == ["Write x", "handler: Reboot now", "Creates decides"]
    assert (report.changed, report.unsupported) == (3, 0)
    assert c.reboot_requested
    lines = out.getvalue().splitlines()
    assert lines[0] == "would change apply  Write x: /etc/x +2 -1"
    assert "    +c" in lines and "    -b" in lines
    # The diff is for people reading along; the result's tail keeps only the status lines.
    assert all(not line.startswith("    ") for line in c.recent)


def test_names_and_diffs_are_redacted(tmp_path: Path) -> None:
    c, out = collector(tmp_path)
    diff = {"before": "", "after": "token=s3cr3t-token\n", "after_header": "/etc/t"}
    c.handle(ok("Write s3cr3t-token", {"changed": True, "diff": [diff]}))
    assert c.check_report().tasks == ["Write ********"]
    assert "s3cr3t-token" not in out.getvalue()


def test_an_ignored_failure_in_check_mode_cannot_be_trusted(tmp_path: Path) -> None:
    c, _ = collector(tmp_path)
    c.handle(
        {
            "event": "runner_on_failed",
            "event_data": {"task": "probe", "ignore_errors": True, "res": {"msg": "no file"}},
        }
    )
    assert c.failure is None
    assert c.check_report().unsupported_tasks == ["probe: failed in check mode (ignored)"]


def test_diff_summary_of_file_attributes_and_prepared_diffs() -> None:
    entries: list[dict[str, Any]] = [
        {
            "before": {"path": "/d", "state": "absent"},
            "after": {"path": "/d", "state": "directory"},
        },
        {"prepared": "--- a\n+++ b\n+new line\n-old line\n-older line\n"},
        {"before": {"path": "/same"}, "after": {"path": "/same"}},
    ]
    assert checking.diff_summary(entries) == "/d: state absent -> directory; prepared +1 -2"
    assert checking.diff_summary([]) == ""


def test_a_skip_line_without_a_result_is_check_modes_by_default() -> None:
    assert checking.skipped_result("skipping: [node]") is None
    assert checking.check_mode_skip(None, "ansible.builtin.shell") == (
        "ansible.builtin.shell skipped in check mode (no reason reported)"
    )
    shown = checking.skipped_result('skipping: [n] => (item=1)  => {"msg": "x"}')
    assert shown == {"msg": "x"}
