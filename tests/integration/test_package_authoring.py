"""A role author's loop: `nwb package init` on a molecule-verified role, then `nwb package test`.

The role (``roles/login_banner``) has no task file for checks, only molecule's verifier playbook,
written the way teams write it. Runs are real: ansible-runner through ``nwb-agent``, isolated on a
copy-on-write node root over the cached Debian base (``roletesting``, the path ``nwb package test``
takes). The watch test drives ``nwb package test --watch`` as a separate process, edits the role,
and stops it with SIGINT as a user's Ctrl-C would.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from waiting import wait_for

from lifecycle.results import StageStatus
from nodewright_bridge.cli import main
from nodewright_bridge.sandbox import roletesting
from playbook_adapter.manifest import AgentStage, EntryKind, load_manifest

pytestmark = [
    pytest.mark.rootfs,
    pytest.mark.skipif(os.geteuid() != 0, reason="namespaces, chroot and mounts need root"),
]

ROLE = Path(__file__).resolve().parent / "roles" / "login_banner"
VERIFY = "molecule/default/verify.yml"
NOTICE = "Authorized use only. Activity may be monitored."
# A bound for a hung run, not a timing assertion: one run takes seconds, more on a busy machine.
RUN_DEADLINE = 90.0


@pytest.fixture
def node(node_root: tuple[Path, Path]) -> Iterator[tuple[Path, Path]]:
    """``node_root``; afterwards the isolation state ``nwb package test --root`` keeps for the
    root in the user's cache is dropped (its file systems unmounted first)."""
    yield node_root
    roletesting.release_root(node_root[0])
    shutil.rmtree(roletesting.state_dir_for(node_root[0]), ignore_errors=True)


@pytest.fixture
def role(tmp_path: Path) -> Path:
    """A copy of the role with the manifest ``nwb package init`` writes for it."""
    copy = tmp_path / "login_banner"
    shutil.copytree(ROLE, copy)
    result = CliRunner().invoke(main, ["package", "init", str(copy)])
    assert result.exit_code == 0, result.output
    return copy


def statuses(run: roletesting.RoleTestRun) -> dict[str, StageStatus]:
    return {stage.name: stage.status for stage in run.result.stages}


def test_init_makes_molecule_verify_the_check_of_apply_and_config(role: Path) -> None:
    manifest = load_manifest(role)
    assert (manifest.name, manifest.version) == ("login-banner", "1.2.0")
    checks = {
        stage: (entry.file, entry.kind)
        for stage, entry in manifest.stages.items()
        if stage.is_check
    }
    assert checks == {
        AgentStage.APPLY_CHECK: (VERIFY, EntryKind.PLAYBOOK),
        AgentStage.UPGRADE_CHECK: (VERIFY, EntryKind.PLAYBOOK),
        AgentStage.CONFIG_CHECK: (VERIFY, EntryKind.PLAYBOOK),
    }
    assert manifest.stages[AgentStage.APPLY].file == "tasks/main.yml"


def test_a_passing_molecule_verify_is_a_passing_apply_check(
    role: Path, node: tuple[Path, Path]
) -> None:
    root, state = node
    run = roletesting.run_stages(role, root, "apply,apply-check", state=state, capture=True)
    assert run.exit_code == 0, run.output
    assert statuses(run) == {"apply": StageStatus.OK, "apply-check": StageStatus.OK}
    check = run.result.stages[1]
    assert (check.ok, check.failed) == (2, 0), "both verify tasks ran in apply-check"
    assert run.result.failure is None
    assert (root / "etc/issue.net").read_text() == NOTICE + "\n"
    assert "ok        apply-check  The banner carries the legal notice" in run.output


def test_a_failing_molecule_verify_names_its_task_and_message(
    role: Path, node: tuple[Path, Path]
) -> None:
    root, state = node
    run = roletesting.run_stages(
        role, root, "apply,apply-check,config,config-check", state=state, capture=True,
        values={"login_banner_text": "Welcome, have fun"},
    )  # fmt: skip
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
        "The banner carries the legal notice",
        "ansible.builtin.assert",
    )
    assert failure.message == "/etc/issue.net lacks the legal notice: Welcome, have fun"
    assert (
        "failed    apply-check  The banner carries the legal notice: "
        "/etc/issue.net lacks the legal notice: Welcome, have fun"
    ) in run.output


def test_the_crs_vars_reach_the_molecule_verify_playbook(
    role: Path, node: tuple[Path, Path]
) -> None:
    root, state = node
    run = roletesting.run_stages(
        role, root, "apply,apply-check", state=state, capture=True,
        values={"login_banner_path": "/etc/issue"},
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    assert (root / "etc/issue").read_text() == NOTICE + "\n"
    # The base's own /etc/issue.net lacks the notice: a verify reading its default would fail.
    assert "Authorized use only" not in (root / "etc/issue.net").read_text()


# `nwb` with SIGINT handled as in a terminal. A shell starts background jobs (CI runners often are
# one) with SIGINT ignored, and Python keeps an inherited "ignore", so a Ctrl-C test would send a
# signal the child never sees.
NWB_AS_IN_A_TERMINAL = [
    sys.executable,
    "-c",
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv = ['nwb', *sys.argv[1:]]; runpy.run_module('nodewright_bridge', run_name='__main__')",
]


class Output:
    """A process's merged stdout/stderr, collected line by line by a reader thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._lines: list[str] = []
        self._lock = threading.Lock()
        assert proc.stdout is not None
        self._thread = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            with self._lock:
                self._lines.append(line)

    @property
    def text(self) -> str:
        with self._lock:
            return "".join(self._lines)

    def count(self, pattern: str) -> int:
        return len(re.findall(pattern, self.text, flags=re.MULTILINE))

    @property
    def reading(self) -> bool:
        return self._thread.is_alive()

    def join(self) -> None:
        self._thread.join(timeout=10)


def test_package_test_watch_reruns_on_a_task_file_change_and_stops_on_ctrl_c(
    role: Path, node: tuple[Path, Path], tmp_path: Path
) -> None:
    root, _ = node
    proc = subprocess.Popen(
        [*NWB_AS_IN_A_TERMINAL, "package", "test", str(role),
         "--root", str(root), "--stages", "apply,apply-check", "--watch"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    output = Output(proc)
    passed_check = r"^apply-check\s+ok\b"
    try:
        wait_for(
            lambda: output.count(passed_check) == 1 and "watching for changes" in output.text,
            timeout=RUN_DEADLINE, what="the first run's result",
        )  # fmt: skip
        assert (root / "etc/issue.net").read_text() == NOTICE + "\n"

        # Replace the task file the way an editor saves it (write aside, rename over).
        tasks = role / "tasks/main.yml"
        edited = tmp_path / "main.yml"
        edited.write_text(
            tasks.read_text().replace(
                'content: "{{ login_banner_text }}\\n"',
                'content: "{{ login_banner_text }} Report misuse to the SOC.\\n"',
            )
        )
        assert edited.read_text() != tasks.read_text()
        os.replace(edited, tasks)

        wait_for(
            lambda: output.count(passed_check) == 2,
            timeout=RUN_DEADLINE, what="the re-run's result",
        )  # fmt: skip
        banner = (root / "etc/issue.net").read_text()
        assert banner == f"{NOTICE} Report misuse to the SOC.\n"
        assert output.count(r"^changed\s+apply\s+Write the login banner") == 2

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, output.text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output.join()
    assert "stopped watching" in output.text
    assert "Traceback" not in output.text and "Aborted" not in output.text
    assert output.count(r"^--- login-banner 1\.2\.0: apply,apply-check on ") == 2


def test_ctrl_c_during_a_run_stops_the_agent_and_exits_130(
    role: Path, node: tuple[Path, Path]
) -> None:
    root, _ = node
    tasks = role / "tasks/main.yml"
    slow = "- name: Wait for the change window\n  ansible.builtin.command: sleep 600\n"
    tasks.write_text(tasks.read_text().replace("---\n", "---\n" + slow, 1))
    proc = subprocess.Popen(
        [*NWB_AS_IN_A_TERMINAL, "package", "test", str(role),
         "--root", str(root), "--stages", "apply"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    output = Output(proc)
    try:
        wait_for(
            lambda: "ok        apply  Gathering Facts" in output.text,
            timeout=RUN_DEADLINE, what="the agent to start the role",
        )  # fmt: skip
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130, output.text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The agent shares our stdout pipe: it reaches EOF only once the agent (and its `sleep`) ended.
    wait_for(lambda: not output.reading, timeout=30, what="the agent to be stopped")
    assert "run interrupted" in output.text
    assert "Traceback" not in output.text
    assert "Authorized use only" not in (root / "etc/issue.net").read_text()
