"""Check mode (``nwb-agent run --check``): what would change, and nothing on the node changes.

Real ``nwb-agent`` runs with real ansible-runner (``--check --diff``), chrooted into an isolated
copy-on-write node root (``roletesting``), as a preflight pod runs it: a role applied once checks
compliant and the check leaves every file alone; a vars change names the tasks that would change
and asks for what its handlers would ask for (nothing, a reboot, a restart); a shell task check
mode cannot answer for makes the outcome unknown; handlers a failed run owes count as changes and
their ledger stays as it was; the result fits the termination message however much would change.
The last test drives ``nwb package test --check`` as an author does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle import preflight
from lifecycle.results import MAX_CHECK_TASKS, MAX_TERMINATION_BYTES, parse_termination_message
from lifecycle.spec import InterruptType
from nodewright_bridge.sandbox import roletesting

pytestmark = [
    pytest.mark.rootfs,
    pytest.mark.skipif(os.geteuid() != 0, reason="namespaces, chroot and mounts need root"),
]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "roles"
SYSCTL = EXAMPLES / "sysctl-tuning"
GRUB = EXAMPLES / "grub-params"
APP_CONFIG = ROOT / "tests" / "e2e" / "roles" / "app-config"
OWED = Path(__file__).resolve().parent / "roles" / "owed_publish"
OWED_LEDGER = "var/lib/nodewright/handlers/package-test/owed-publish.json"
LOGS = "var/log/nodewright/package-test"
STAGES = "apply,config"
DEFER = {"NW_DEFER_RESTARTS": "true"}
# Kernel interfaces, not files: the isolation's stand-ins change as the kernel would.
NOT_FILES = {"proc", "sys", "dev"}
# Ansible's remote scratch directory comes and goes inside it during any run (nothing is left
# behind, which the snapshot checks), so only this directory's own timestamp may move.
SCRATCH_PARENT = "tmp"
NWB = [sys.executable, "-m", "nodewright_bridge"]


def snapshot(root: Path, *, leave_out: str = LOGS) -> dict[str, tuple[int, int, int, str]]:
    """Every path under ``root`` with its mode, size, mtime and content digest (files)."""
    found: dict[str, tuple[int, int, int, str]] = {}
    for directory, subdirs, files in os.walk(root):
        here = Path(directory)
        relative = here.relative_to(root)
        if relative == Path("."):
            subdirs[:] = [d for d in subdirs if d not in NOT_FILES]
        if str(relative).startswith(leave_out):
            subdirs[:] = []
            continue
        for name in [*subdirs, *files]:
            path = here / name
            info = path.lstat()
            digest = ""
            if path.is_file() and not path.is_symlink():
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            key = str(path.relative_to(root))
            mtime = 0 if key == SCRATCH_PARENT else info.st_mtime_ns
            found[key] = (info.st_mode, info.st_size, mtime, digest)
    return found


def check_run(
    role: Path,
    root: Path,
    state: Path,
    *,
    values: dict[str, object] | None = None,
    extra_env: dict[str, str] | None = None,
) -> roletesting.RoleTestRun:
    return roletesting.run_stages(
        role, root, STAGES, values=values, extra_env=extra_env, state=state, capture=True,
        check=True,
    )  # fmt: skip


@pytest.fixture
def cli_node(node_root: tuple[Path, Path]) -> Iterator[Path]:
    """A node root for ``nwb package test --root``, which keeps its isolation state in the
    user's cache: dropped afterwards (its file systems unmounted first)."""
    root = node_root[0]
    yield root
    roletesting.release_root(root)
    shutil.rmtree(roletesting.state_dir_for(root), ignore_errors=True)


def test_a_role_applied_once_checks_compliant_and_the_check_changes_nothing(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    applied = roletesting.run_stages(SYSCTL, root, STAGES, state=state, capture=True)
    assert applied.exit_code == 0, applied.output
    real_logs = sorted(p.name for p in (root / LOGS).rglob("*.jsonl"))
    before = snapshot(root, leave_out="var/log/nodewright")

    # Keeping one log per stage: were check logs pruned with the real ones, the real run's
    # apply log would go.
    keep_one = {"NW_KEEP_LOGS": "1"}
    check_run(SYSCTL, root, state, extra_env=keep_one)
    checked = check_run(SYSCTL, root, state, extra_env=keep_one)

    assert checked.exit_code == 0, checked.output
    assert checked.result.check is not None
    assert checked.result.check.changed == 0
    assert checked.result.check.unsupported == 0
    assert preflight.judge(checked.result).outcome is preflight.Outcome.COMPLIANT
    assert snapshot(root, leave_out="var/log/nodewright") == before
    # The check's event log is kept apart; the real run's logs are all still there.
    assert sorted(p.name for p in (root / LOGS).rglob("*.jsonl") if p.parent.name != "check") == (
        real_logs
    )
    assert len(list((root / LOGS).rglob("check/apply-*.jsonl"))) == 1
    assert not (root / "var/lib/nodewright/interrupts").exists()


def test_a_vars_change_that_rewrites_a_sysctl_file_is_a_change_without_a_reboot(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    applied = roletesting.run_stages(SYSCTL, root, STAGES, state=state, capture=True)
    assert applied.exit_code == 0, applied.output
    sysctl_file = root / "etc/sysctl.d/90-node-tuning.conf"
    written = sysctl_file.read_text()
    values = {"sysctl_tuning_settings": {"vm.swappiness": 30}, "sysctl_tuning_reload": False}

    checked = check_run(SYSCTL, root, state, values=values)

    assert checked.exit_code == 0, checked.output
    report = checked.result.check
    assert report is not None
    assert (report.changed, report.tasks, report.unsupported) == (
        1,
        ["Set kernel parameters"],
        0,
    )
    assert not checked.result.reboot_requested
    assert checked.result.restart_services == []
    record = preflight.judge(checked.result)
    assert record.outcome is preflight.Outcome.CHANGES
    assert record.interrupt is None
    assert sysctl_file.read_text() == written
    assert "would change apply  Set kernel parameters" in checked.output


def test_a_change_that_notifies_a_reboot_handler_asks_for_a_reboot(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    applied = roletesting.run_stages(GRUB, root, STAGES, state=state, capture=True)
    assert applied.exit_code == 0, applied.output
    grub = root / "etc/default/grub"
    written = grub.read_text()

    # Nothing to change: the reboot handler is not notified, so it asks for nothing.
    same = check_run(GRUB, root, state)
    assert same.exit_code == 0, same.output
    assert not same.result.reboot_requested
    assert preflight.judge(same.result).outcome is preflight.Outcome.COMPLIANT

    checked = check_run(GRUB, root, state, values={"grub_params_cmdline": ["mitigations=off"]})

    assert checked.exit_code == 0, checked.output
    assert checked.result.reboot_requested
    assert checked.result.request_reasons == [
        "reboot requested by 'Reboot to apply kernel parameters'"
    ]
    report = checked.result.check
    assert report is not None
    assert report.tasks == [
        "Set GRUB_CMDLINE_LINUX",
        "handler: Reboot to apply kernel parameters",
    ]
    assert report.unsupported == 0  # "Update grub config" is skipped by its condition
    record = preflight.judge(checked.result)
    assert record.outcome is preflight.Outcome.CHANGES
    assert record.interrupt is not None and record.interrupt.type is InterruptType.REBOOT
    assert grub.read_text() == written
    # The human log says what would change, with the diff.
    assert "would change apply  Set GRUB_CMDLINE_LINUX: /etc/default/grub (content) +1 -1" in (
        checked.output
    )
    assert (
        '+GRUB_CMDLINE_LINUX="transparent_hugepage=never intel_iommu=on iommu=pt mitigations'
        in (checked.output)
    )


def test_a_restart_handler_asks_in_check_mode_only_when_notified(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    values = {"app_config_restart_service": True, "app_config_service": "fabric-demo"}

    fresh = check_run(APP_CONFIG, root, state, values=values, extra_env=DEFER)

    assert fresh.exit_code == 0, fresh.output
    assert fresh.result.restart_services == ["fabric-demo"]
    assert not (root / "etc/app-config/app.conf").exists()
    report = fresh.result.check
    assert report is not None
    assert "Write the app configuration" in report.tasks
    # The applying handler is a shell command check mode skips; notified, it would fire: a
    # change, not "cannot tell" (it runs only because a task changed).
    assert "handler: Apply the app configuration" in report.tasks
    assert report.unsupported == 0
    assert preflight.judge(fresh.result).outcome is preflight.Outcome.CHANGES

    applied = roletesting.run_stages(
        APP_CONFIG, root, STAGES, values=values, state=state, capture=True, extra_env=DEFER
    )
    assert applied.exit_code == 0, applied.output
    again = check_run(APP_CONFIG, root, state, values=values, extra_env=DEFER)
    assert again.exit_code == 0, again.output
    assert again.result.restart_services == []
    assert preflight.judge(again.result).outcome is preflight.Outcome.COMPLIANT


def test_a_shell_task_without_check_support_makes_the_outcome_unknown(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    checked = check_run(APP_CONFIG, root, state, values={"app_config_handler_fails_once": True})

    assert checked.exit_code == 0, checked.output
    report = checked.result.check
    assert report is not None
    assert report.unsupported_tasks[0] == (
        "Arm a one-time failure of the apply handler: Command would have run if not in check mode"
    )
    record = preflight.judge(checked.result)
    assert record.outcome is preflight.Outcome.UNKNOWN
    assert "Arm a one-time failure of the apply handler" in record.tasks[0]
    assert "cannot tell apply  Arm a one-time failure of the apply handler" in checked.output
    assert not (root / "etc/app-config/armed").exists()


def test_handlers_a_failed_run_owes_are_changes_and_their_ledger_stays(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    failed = roletesting.run_stages(
        OWED, root, STAGES, values={"owed_publish_fail": True}, state=state, capture=True
    )
    assert failed.exit_code == 1, failed.output
    assert failed.result.pending_handlers == ["Publish the settings"]
    ledger = root / OWED_LEDGER
    owed = (ledger.read_bytes(), ledger.stat().st_mtime_ns)

    checked = check_run(OWED, root, state)

    assert checked.exit_code == 0, checked.output
    report = checked.result.check
    assert report is not None
    assert report.unsupported == 0
    assert "handler: Publish the settings" in report.tasks
    assert preflight.judge(checked.result).outcome is preflight.Outcome.CHANGES
    assert (ledger.read_bytes(), ledger.stat().st_mtime_ns) == owed
    assert not (root / "etc/owed-publish/published.conf").exists()

    # A real run still owes them, runs them and settles the ledger.
    fixed = roletesting.run_stages(OWED, root, STAGES, state=state, capture=True)
    assert fixed.exit_code == 0, fixed.output
    assert (root / "etc/owed-publish/published.conf").read_text() == "level=info\n"
    assert not ledger.exists()


def test_a_task_failing_in_check_mode_fails_the_run_and_the_outcome_is_unknown(
    node_root: tuple[Path, Path],
) -> None:
    root, state = node_root
    # On a fresh root the defaults file is only "would be created", so reading it fails.
    checked = check_run(GRUB, root, state)

    assert checked.exit_code == 1, checked.output
    assert checked.result.failure is not None
    assert checked.result.failure.task == "Read the GRUB defaults file"
    record = preflight.judge(checked.result)
    assert record.outcome is preflight.Outcome.UNKNOWN
    assert "Read the GRUB defaults file" in record.tasks[0]
    assert not (root / "etc/default/grub").exists()


def test_many_changes_still_fit_the_termination_message(
    node_root: tuple[Path, Path], tmp_path: Path
) -> None:
    root, state = node_root
    role = tmp_path / "many_changes"
    (role / "tasks").mkdir(parents=True)
    tasks = [
        {
            "name": f"Write drop-in number {i:02d} " + "with a long descriptive name " * 5,
            "ansible.builtin.copy": {"dest": f"/etc/many/{i:02d}.conf", "content": f"{i}\n"},
        }
        for i in range(40)
    ] + [
        {"name": f"Probe thing {i:02d} " + "x" * 150, "ansible.builtin.command": "true"}
        for i in range(12)
    ]
    (role / "tasks" / "main.yml").write_text(json.dumps(tasks), encoding="utf-8")
    termination = tmp_path / "termination-log"

    run = check_run(role, root, state, extra_env={"NW_TERMINATION_LOG": str(termination)})

    assert run.exit_code == 0, run.output
    text = termination.read_text(encoding="utf-8")
    assert len(text.encode()) <= MAX_TERMINATION_BYTES
    result = parse_termination_message(text)
    assert result.check is not None
    assert (result.check.changed, result.check.unsupported) == (40, 12)
    assert len(result.check.tasks) == MAX_CHECK_TASKS
    assert result.check.tasks[0].startswith("Write drop-in number 00")
    assert preflight.judge(result).outcome is preflight.Outcome.UNKNOWN


def test_package_test_check_shows_what_would_change_and_the_outcome(
    cli_node: Path, tmp_path: Path
) -> None:
    root = cli_node
    state = roletesting.state_dir_for(root)
    applied = roletesting.run_stages(GRUB, root, STAGES, state=state, capture=True)
    assert applied.exit_code == 0, applied.output
    grub = (root / "etc/default/grub").read_text()
    vars_file = tmp_path / "vars.yml"
    vars_file.write_text("grub_params_cmdline: [mitigations=off]\n", encoding="utf-8")

    def nwb(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*NWB, "package", "test", str(GRUB), "--root", str(root), "--check", *args],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip

    roletesting.release_root(root, state)
    try:
        changes = nwb("--vars", str(vars_file))
        assert changes.returncode == 0, changes.stdout + changes.stderr
        out = changes.stdout
        assert "apply,config on" in out and "(check mode)" in out
        assert "would change apply  Set GRUB_CMDLINE_LINUX" in out
        assert '+GRUB_CMDLINE_LINUX="transparent_hugepage=never' in out
        assert "handlers that would fire: Reboot to apply kernel parameters" in out
        assert out.rstrip().splitlines()[-1] == "outcome: changes (2 task(s)), interrupt reboot"

        compliant = nwb()
        assert compliant.returncode == 0, compliant.stdout + compliant.stderr
        last = compliant.stdout.rstrip().splitlines()[-1]
        assert last.startswith("outcome: compliant")

        bad = tmp_path / "bad.yml"
        bad.write_text("grub_params_cmdline: 7\n", encoding="utf-8")
        assert nwb("--vars", str(bad)).returncode == 2
    finally:
        roletesting.release_root(root)
    assert (root / "etc/default/grub").read_text() == grub


def test_package_test_check_exits_1_when_check_mode_cannot_tell(
    cli_node: Path, tmp_path: Path
) -> None:
    root = cli_node
    role = tmp_path / "motd_probe"
    (role / "tasks").mkdir(parents=True)
    (role / "meta").mkdir()
    (role / "meta" / "main.yml").write_text(
        "galaxy_info: {role_name: motd_probe, version: 0.1.0}\n", encoding="utf-8"
    )
    (role / "tasks" / "main.yml").write_text(
        "- name: Write the motd\n"
        '  ansible.builtin.copy: {dest: /etc/motd, content: "hello\\n"}\n'
        "- name: Refresh the motd cache\n"
        "  ansible.builtin.shell: cat /etc/motd > /var/cache/motd\n",
        encoding="utf-8",
    )
    motd = (root / "etc/motd").read_bytes() if (root / "etc/motd").exists() else None
    try:
        done = subprocess.run(
            [*NWB, "package", "test", str(role), "--root", str(root), "--check"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    finally:
        roletesting.release_root(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "would change apply  Write the motd" in done.stdout
    assert "cannot tell apply  Refresh the motd cache" in done.stdout
    assert "check mode cannot tell: 1 task(s)" in done.stdout
    last = done.stdout.rstrip().splitlines()[-1]
    assert last.startswith("outcome: unknown: check mode cannot tell: Refresh the motd cache")
    assert last.endswith("(the declared path: interrupt none)")
    after = (root / "etc/motd").read_bytes() if (root / "etc/motd").exists() else None
    assert after == motd
    assert not (root / "var/cache/motd").exists()
