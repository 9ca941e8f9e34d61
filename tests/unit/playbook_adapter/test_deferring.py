"""A role's reboots and (when asked) service restarts are rewritten into requests; handlers owed by
a failed run are tracked from the events' task paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from playbook_adapter.agent import deferring, handlers


def make_role(root: Path, tasks: list[Any], handler_list: list[Any] | None = None) -> Path:
    role = root / "src" / "demo"
    (role / "tasks").mkdir(parents=True)
    (role / "tasks" / "main.yml").write_text(yaml.safe_dump(tasks))
    if handler_list is not None:
        (role / "handlers").mkdir()
        (role / "handlers" / "main.yml").write_text(yaml.safe_dump(handler_list))
    return role


def rewritten(run: deferring.RunRoles, relative: str) -> Any:
    return yaml.safe_load((run.role / relative).read_text())


def test_a_role_with_nothing_disruptive_runs_unchanged(tmp_path: Path) -> None:
    role = make_role(tmp_path, [{"name": "x", "ansible.builtin.copy": {"dest": "/x"}}])
    run = deferring.roles_for_run(role, tmp_path / "none", tmp_path / "w", defer_restarts=True)
    assert run.role == role
    assert run.deferred == ()


def test_reboot_tasks_and_commands_inside_blocks_only_set_the_reboot_fact(tmp_path: Path) -> None:
    tasks = [
        {
            "name": "maybe reboot",
            "when": "changed",
            "block": [
                {"name": "reboot now", "ansible.builtin.reboot": {"reboot_timeout": 600}},
                {
                    "name": "shell reboot",
                    "ansible.builtin.shell": "sleep 2 && /sbin/shutdown -r now",
                },
                {"name": "not a reboot", "ansible.builtin.command": "echo reboot"},
            ],
        }
    ]
    role = make_role(tmp_path, tasks)
    run = deferring.roles_for_run(role, tmp_path / "none", tmp_path / "w", defer_restarts=False)
    assert run.role != role, "the original role must never be modified"
    block = rewritten(run, "tasks/main.yml")[0]["block"]
    assert block[0] == {
        "name": "reboot now",
        "ansible.builtin.set_fact": {deferring.REBOOT_FACT: True},
    }
    assert block[1]["ansible.builtin.set_fact"] == {deferring.REBOOT_FACT: True}
    assert block[2] == tasks[0]["block"][2]
    assert run.deferred == ("reboot: reboot now", "reboot: shell reboot")
    assert yaml.safe_load((role / "tasks" / "main.yml").read_text()) == tasks


def test_restart_handlers_are_deferred_only_when_asked_and_reloads_never(tmp_path: Path) -> None:
    handler_list = [
        {
            "name": "restart agent",
            "listen": "agent changed",
            "ansible.builtin.systemd": {"name": "{{ agent_unit }}", "state": "restarted"},
            "when": "manage | bool",
        },
        {"name": "reload agent", "service": "name=agent state=reloaded"},
        {"name": "restart free-form", "service": "name=other state=restarted"},
    ]
    role = make_role(tmp_path, [], handler_list)
    kept = deferring.roles_for_run(role, tmp_path / "none", tmp_path / "a", defer_restarts=False)
    assert kept.role == role
    run = deferring.roles_for_run(role, tmp_path / "none", tmp_path / "b", defer_restarts=True)
    new = rewritten(run, "handlers/main.yml")
    assert new[0]["listen"] == "agent changed" and new[0]["when"] == "manage | bool"
    assert new[0]["vars"] == {deferring.UNIT_VAR: "{{ agent_unit }}"}
    assert deferring.RESTART_FACT in new[0]["ansible.builtin.set_fact"]
    assert new[1] == handler_list[1]
    assert new[2]["vars"] == {deferring.UNIT_VAR: "other"}
    assert run.deferred == ("restart: restart agent", "restart: restart free-form")


def test_bundled_dependencies_with_reboot_handlers_are_shadowed(tmp_path: Path) -> None:
    role = make_role(tmp_path, [])
    bundled = tmp_path / "package" / "roles"
    dep = make_role(tmp_path / "dep", [], [{"name": "Reboot host", "ansible.builtin.reboot": {}}])
    (bundled).mkdir(parents=True)
    dep.rename(bundled / "base")
    run = deferring.roles_for_run(role, bundled, tmp_path / "w", defer_restarts=False)
    assert run.role == role
    assert run.roles_dir is not None
    shadow = yaml.safe_load((run.roles_dir / "base" / "handlers" / "main.yml").read_text())
    assert shadow[0]["ansible.builtin.set_fact"] == {deferring.REBOOT_FACT: True}


def event(kind: str, path: str, changed: bool = False) -> tuple[str, dict[str, Any]]:
    return kind, {"task_path": path, "res": {"changed": changed}}


def test_the_tracker_owes_notified_handlers_until_they_run_ok(tmp_path: Path) -> None:
    tasks = tmp_path / "role" / "tasks" / "main.yml"
    tasks.parent.mkdir(parents=True)
    tasks.write_text(
        "---\n"
        "- name: write\n"
        "  copy: {dest: /a}\n"
        "  notify: [apply it, changed topic]\n"
        "- name: untouched\n"
        "  block:\n"
        "    - name: inner\n"
        "      copy: {dest: /b}\n"
        "      notify: apply it\n"
    )
    handler_file = tmp_path / "role" / "handlers" / "main.yml"
    handler_file.parent.mkdir(parents=True)
    handler_file.write_text(
        "- name: apply it\n  command: 'true'\n- name: other\n  listen: changed topic\n  debug: {}\n"
    )
    tracker = handlers.HandlerTracker.starting_with(["owed earlier"])
    tracker.observe(*event("runner_on_ok", f"{tasks}:2", changed=True))
    tracker.observe(*event("runner_on_ok", f"{tasks}:7", changed=False))
    assert tracker.pending == ["owed earlier", "apply it", "changed topic"]
    tracker.observe(*event("runner_on_failed", f"{handler_file}:1", changed=True))
    assert "apply it" in tracker.pending, "a failed handler is still owed"
    tracker.observe(*event("runner_on_ok", f"{handler_file}:1", changed=True))
    tracker.observe(*event("runner_on_skipped", f"{handler_file}:3"))
    assert tracker.pending == ["owed earlier"]
    tracker.observe(*event("runner_on_ok", f"{tasks}:7", changed=True))
    assert tracker.pending == ["owed earlier", "apply it"]


def test_the_ledger_round_trips_and_disappears_when_nothing_is_owed(tmp_path: Path) -> None:
    path = handlers.ledger_path(tmp_path, "cr", "pkg")
    assert handlers.load_pending(path) == []
    handlers.save_pending(path, ["a", "b"], resource_id="r1")
    assert handlers.load_pending(path) == ["a", "b"]
    handlers.save_pending(path, [], resource_id="r2")
    assert not path.exists()
    path.write_text("not json")
    assert handlers.load_pending(path) == []
