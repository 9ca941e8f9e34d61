"""Runner events become per-stage counts, the fatal failure, rebootRequested and redacted logs."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from lifecycle.results import StageStatus
from playbook_adapter.agent.events import EventCollector, failure_message


def play(stage: str) -> dict[str, Any]:
    return {"event": "playbook_on_play_start", "event_data": {"play": f"nodewright:{stage}"}}


def result(kind: str, task: str, **data: Any) -> dict[str, Any]:
    res = data.pop("res", {})
    return {"event": f"runner_on_{kind}", "event_data": {"task": task, "res": res, **data}}


def collector(tmp_path: Path, stages: list[str], secrets: list[str] = ()) -> EventCollector:  # type: ignore[assignment]
    ticks = iter(range(100))
    return EventCollector(
        stages=stages, log_dir=tmp_path, timestamp="T", clock=lambda: float(next(ticks)),
        secrets=secrets, out=io.StringIO(),
    )  # fmt: skip


def test_counts_per_stage_and_stages_never_started_are_skipped(tmp_path: Path) -> None:
    c = collector(tmp_path, ["apply", "apply-check", "config"])
    for event in (
        play("apply"),
        result("ok", "a", res={"changed": True}),
        result("ok", "b"),
        result("skipped", "c"),
        play("apply-check"),
        result("ok", "d"),
    ):
        c.handle(event)
    c.close()
    stages = c.stage_results(fatal=False)
    assert [(s.name, s.status, s.ok, s.changed, s.skipped) for s in stages] == [
        ("apply", StageStatus.OK, 2, 1, 1),
        ("apply-check", StageStatus.OK, 1, 0, 0),
        ("config", StageStatus.SKIPPED, 0, 0, 0),
    ]
    assert stages[0].duration_seconds == 1.0


def test_the_last_unignored_failure_is_the_fatal_one(tmp_path: Path) -> None:
    c = collector(tmp_path, ["apply"])
    c.handle(play("apply"))
    c.handle(result("failed", "probe", ignore_errors=True, res={"msg": "ignored"}))
    c.handle(result("failed", "install", task_action="ansible.builtin.apt", res={"msg": "no pkg"}))
    c.close()
    assert c.failure is not None
    assert (c.failure.task, c.failure.action, c.failure.message) == (
        "install",
        "ansible.builtin.apt",
        "no pkg",
    )
    assert c.stage_results(fatal=True)[0].status is StageStatus.FAILED
    assert c.stage_results(fatal=True)[0].failed == 1


def test_a_reboot_fact_sets_reboot_requested(tmp_path: Path) -> None:
    c = collector(tmp_path, ["apply"])
    c.handle(play("apply"))
    c.handle(result("ok", "Reboot", res={"ansible_facts": {"nodewright_reboot_required": True}}))
    assert c.reboot_requested


def test_secrets_never_reach_stdout_or_the_event_log(tmp_path: Path) -> None:
    secret = 'pa"ss-w0rd'
    c = collector(tmp_path, ["apply"], secrets=[secret, "no"])
    c.handle(play("apply"))
    c.handle(result("failed", f"login {secret}", res={"msg": f"bad password {secret}"}))
    c.close()
    written = (tmp_path / "apply-T.jsonl").read_text()
    printed = c.out.getvalue()  # type: ignore[attr-defined]
    assert "w0rd" not in written
    assert "w0rd" not in printed
    assert "********" in printed
    assert "no" in written, "too-short values are not redacted"
    assert c.failure is not None and "w0rd" not in c.failure.message
    assert all(json.loads(line) for line in written.splitlines())
    assert c.recent and all("w0rd" not in line for line in c.recent)  # the output tail too


def test_the_output_tail_keeps_the_last_lines_ending_with_the_failure(tmp_path: Path) -> None:
    c = collector(tmp_path, ["apply"])
    c.handle(play("apply"))
    for i in range(30):
        c.handle(result("ok", f"step {i}"))
    c.handle(result("failed", "install", res={"msg": "no pkg"}))
    c.close()
    assert len(c.recent) == 20
    assert c.recent[-1].startswith("failed") and "install: no pkg" in c.recent[-1]
    assert "step 29" in c.recent[-2] and not any("step 10" in line for line in c.recent)


def test_a_failure_message_is_a_failed_loop_items_own_else_msg_then_stderr_then_rc() -> None:
    assert failure_message({"msg": "m", "stderr": "e", "rc": 2}) == "m; stderr: e; rc=2"
    assert failure_message({"stderr": "boom", "rc": 1}) == "stderr: boom; rc=1"
    assert failure_message({"results": [{"failed": False}, {"failed": True, "msg": "x"}]}) == "x"
    loop = {"msg": "One or more items failed", "results": [{"failed": True, "msg": "y"}]}
    assert failure_message(loop) == "y"
    assert failure_message({}) == "failed"
