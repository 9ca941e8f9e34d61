"""The node agent runs real roles with real ansible-runner, chrooted into an isolated node root.

Every test gets its own copy-on-write root over the cached Debian base and runs ``nwb-agent``
exactly as a node pod would (through ``roletesting``, i.e. under per-node isolation: the real
machine's kernel settings and mounts are never touched).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from lifecycle.results import StageStatus
from nodewright_bridge.sandbox import roletesting

pytestmark = [
    pytest.mark.rootfs,
    pytest.mark.skipif(os.geteuid() != 0, reason="namespaces, chroot and mounts need root"),
]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "roles"
ALL_STAGES = "apply,apply-check,uninstall,uninstall-check"


def event_logs(root: Path, package: str) -> list[Path]:
    return sorted((root / "var/log/nodewright/package-test" / package).rglob("*.jsonl"))


def statuses(run: roletesting.RoleTestRun) -> dict[str, StageStatus]:
    return {stage.name: stage.status for stage in run.result.stages}


def test_sysctl_tuning_is_applied_checked_and_uninstalled_on_the_node_only(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    machine_swappiness = Path("/proc/sys/vm/swappiness").read_text()
    values = {"sysctl_tuning_settings": {"vm.swappiness": 7, "net.core.somaxconn": 2048}}
    run = roletesting.run_stages(
        EXAMPLES / "sysctl-tuning", root, "apply,apply-check", values=values, state=state,
        capture=True,
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    assert statuses(run) == {"apply": StageStatus.OK, "apply-check": StageStatus.OK}
    assert run.result.stages[0].changed >= 1
    dropin = (root / "etc/sysctl.d/90-node-tuning.conf").read_text()
    assert "vm.swappiness=7" in dropin
    assert (state / "proc-sys/vm/swappiness").read_text().strip() == "7"
    assert Path("/proc/sys/vm/swappiness").read_text() == machine_swappiness
    assert "changed   apply  Set kernel parameters" in run.output
    assert {p.name.rsplit("-", 1)[0] for p in event_logs(root, "sysctl-tuning")} == {
        "apply",
        "apply-check",
    }

    run = roletesting.run_stages(
        EXAMPLES / "sysctl-tuning", root, "uninstall,uninstall-check", values=values,
        state=state, capture=True,
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    assert not (root / "etc/sysctl.d/90-node-tuning.conf").exists()


def test_grub_params_edits_the_cmdline_and_requests_a_reboot_without_rebooting(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    run = roletesting.run_stages(
        EXAMPLES / "grub-params", root, ALL_STAGES, state=state, capture=True
    )
    assert run.exit_code == 0, run.output
    assert set(statuses(run).values()) == {StageStatus.OK}
    assert run.result.reboot_requested
    grub = (root / "etc/default/grub").read_text()
    assert 'GRUB_CMDLINE_LINUX=""' in grub, "uninstall removed our parameters again"

    run = roletesting.run_stages(
        EXAMPLES / "grub-params", root, "apply,apply-check", state=state, capture=True,
        values={"grub_params_cmdline": ["mitigations=off"]},
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    assert 'GRUB_CMDLINE_LINUX="mitigations=off"' in (root / "etc/default/grub").read_text()


def test_kmod_blacklist_is_written_checked_with_modprobe_and_removed(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    run = roletesting.run_stages(
        EXAMPLES / "kmod-blacklist", root, "apply,apply-check", state=state, capture=True,
        values={"kmod_blacklist_modules": ["nouveau", "pcspkr"]},
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    conf = (root / "etc/modprobe.d/90-node-blacklist.conf").read_text()
    assert "blacklist pcspkr" in conf
    assert "install pcspkr /bin/false" in conf
    run = roletesting.run_stages(
        EXAMPLES / "kmod-blacklist", root, "uninstall,uninstall-check", state=state, capture=True
    )
    assert run.exit_code == 0, run.output
    assert not (root / "etc/modprobe.d/90-node-blacklist.conf").exists()


def test_security_agent_installs_files_keeps_the_token_secret_and_uninstalls(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    token = "enroll-7f3a9c2e1b"
    run = roletesting.run_stages(
        EXAMPLES / "security-agent", root, "apply,apply-check", state=state, capture=True,
        values={"security_agent_server": "https://siem.test", "security_agent_log_level": "debug"},
        secrets={"security_agent_token": token},
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    config = root / "etc/security-agent/agent.yaml"
    assert f'token: "{token}"' in config.read_text()
    assert oct(config.stat().st_mode & 0o777) == "0o600"
    assert (root / "etc/systemd/system/multi-user.target.wants/security-agent.service").is_symlink()
    logs = event_logs(root, "security-agent")
    assert logs
    assert token not in run.output
    assert all(token not in log.read_text() for log in logs)

    run = roletesting.run_stages(
        EXAMPLES / "security-agent", root, "uninstall,uninstall-check", state=state, capture=True
    )
    assert run.exit_code == 0, run.output
    assert not (root / "opt/security-agent").exists()
    assert not (root / "etc/systemd/system/security-agent.service").exists()


def test_a_failing_check_names_its_task_and_message_and_stops_later_stages(
    node_root: tuple[Path, Path], tmp_path: Path
) -> None:
    root, state = node_root
    role = tmp_path / "marker_role"
    (role / "tasks").mkdir(parents=True)
    (role / "meta").mkdir()
    (role / "meta/main.yml").write_text("galaxy_info: {version: 0.1.0}\n")
    (role / "tasks/main.yml").write_text(
        '- name: Write the marker\n  ansible.builtin.copy: {dest: /etc/marker, content: "one\\n"}\n'
    )
    (role / "tasks/verify.yml").write_text(
        "- name: Read the marker\n  ansible.builtin.slurp: {src: /etc/marker}\n  register: m\n"
        "- name: Marker says two\n  ansible.builtin.assert:\n"
        "    that: (m.content | b64decode | trim) == 'two'\n"
        "    fail_msg: marker is {{ m.content | b64decode | trim }}, expected two\n"
    )
    (role / "tasks/config.yml").write_text("- ansible.builtin.debug: {msg: never}\n")
    run = roletesting.run_stages(
        role, root, "apply,apply-check,config,config-check", state=state, capture=True
    )
    assert run.exit_code == 1, run.output
    assert statuses(run) == {
        "apply": StageStatus.OK,
        "apply-check": StageStatus.FAILED,
        "config": StageStatus.SKIPPED,
        "config-check": StageStatus.SKIPPED,
    }
    failure = run.result.failure
    assert failure is not None
    assert (failure.stage, failure.task, failure.action) == (
        "apply-check",
        "Marker says two",
        "ansible.builtin.assert",
    )
    assert failure.message == "marker is one, expected two"
    assert "failed    apply-check  Marker says two: marker is one, expected two" in run.output


def test_invalid_vars_are_rejected_before_anything_runs(node_root: tuple[Path, Path]) -> None:
    root, state = node_root
    run = roletesting.run_stages(
        EXAMPLES / "security-agent", root, "apply,apply-check", state=state, capture=True,
        values={"security_agent_log_level": "loud", "security_agent_scan_interval_minutes": "5"},
    )  # fmt: skip
    assert run.exit_code == 2, run.output
    assert "vars.security_agent_log_level: must be one of" in run.output
    assert "(rule: choices)" in run.output
    assert "vars.security_agent_scan_interval_minutes: must be of type integer (rule: type)" in (
        run.output
    )
    assert run.result.failure is not None and run.result.failure.stage == "input"
    assert not (root / "opt/security-agent").exists()
    assert not event_logs(root, "security-agent")


def test_a_manifest_naming_a_missing_task_file_is_bad_input(
    node_root: tuple[Path, Path], tmp_path: Path
) -> None:
    root, state = node_root
    package = tmp_path / "pkg"
    (package / "tasks").mkdir(parents=True)
    (package / "tasks/main.yml").write_text("[]\n")
    (package / "nodewright-package.yaml").write_text(
        "name: broken\nversion: 1.0.0\n"
        "stages: {apply: tasks/main.yml, apply-check: tasks/gone.yml}\n"
    )
    run = roletesting.run_stages(package, root, "apply", state=state, capture=True)
    assert run.exit_code == 2
    assert "stages.apply-check: tasks/gone.yml not found" in run.output


def recorder(tmp_path: Path, name: str) -> tuple[str, Path]:
    """A command that appends its arguments to a file (on the real file system)."""
    calls = tmp_path / f"{name}.calls"
    script = tmp_path / f"{name}.sh"
    script.write_text(f'#!/bin/sh\necho "$*" >> {shlex.quote(str(calls))}\nexit "${{FAIL:-0}}"\n')
    script.chmod(0o755)
    return str(script), calls


def test_a_reboot_interrupt_acts_once_per_resource_id(
    node_root: tuple[Path, Path], tmp_path: Path
) -> None:
    root, state = node_root
    command, calls = recorder(tmp_path, "reboot")
    env = {"NW_REBOOT_COMMAND": f"{command} now", "NW_REBOOT_WAIT_SECONDS": "0"}
    first = roletesting.run_interrupt(
        EXAMPLES / "grub-params", root, ["--type", "reboot"], extra_env=env, state=state
    )
    assert first.exit_code == 0, first.output
    assert (root / "var/lib/nodewright/interrupts/package-test/reboot.done").is_file()
    second = roletesting.run_interrupt(
        EXAMPLES / "grub-params", root, ["--type", "reboot"], extra_env=env, state=state
    )
    assert second.exit_code == 0, second.output
    assert "already done" in second.output
    assert calls.read_text().splitlines() == ["now"]
    assert second.result.stages[0].status is StageStatus.OK


def test_a_failed_interrupt_clears_its_flag_so_the_retry_acts_again(
    node_root: tuple[Path, Path], tmp_path: Path
) -> None:
    root, state = node_root
    command, calls = recorder(tmp_path, "reboot")
    env = {"NW_REBOOT_COMMAND": command, "NW_REBOOT_WAIT_SECONDS": "0", "FAIL": "3"}
    run = roletesting.run_interrupt(
        EXAMPLES / "grub-params", root, ["--type", "reboot"], extra_env=env, state=state
    )
    assert run.exit_code == 1
    assert run.result.failure is not None and "exited 3" in run.result.failure.message
    assert not (root / "var/lib/nodewright/interrupts/package-test/reboot.done").exists()
    assert calls.read_text().splitlines() == [""], "the command ran once"


def test_a_service_interrupt_reloads_systemd_then_restarts_each_unit(
    node_root: tuple[Path, Path], tmp_path: Path
) -> None:
    root, state = node_root
    command, calls = recorder(tmp_path, "systemctl")
    run = roletesting.run_interrupt(
        EXAMPLES / "security-agent", root, ["--type", "service", "--services", "a.service,b"],
        extra_env={"NW_SYSTEMCTL_COMMAND": command}, state=state,
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    assert calls.read_text().splitlines() == ["daemon-reload", "restart a.service", "restart b"]


def test_an_unknown_interrupt_type_is_bad_input(node_root: tuple[Path, Path]) -> None:
    root, state = node_root
    run = roletesting.run_interrupt(
        EXAMPLES / "grub-params", root, ["--type", "kexec"], state=state
    )
    assert run.exit_code == 2
    assert "unknown interrupt 'kexec'" in run.output


def test_the_agent_runs_from_this_interpreter() -> None:
    assert (Path(sys.executable).parent / "nwb-agent").is_file(), json.dumps(sys.path)
