"""``nwb try ROLE_DIR`` from a clean state: one command packages an example role, starts a
sandbox, applies the CRDs and the namespace, starts the controller, rolls the role out to every
node and ends with the per-node summary and where the logs are. The role directory is left as it
was; a second run reuses everything and applies a changed ``--vars`` file as a config change."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_harness import SLOW_TEST_SECONDS

from nodewright_bridge.sandbox import binaries, supervisor

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "examples" / "roles" / "sysctl-tuning"
NODES = ["try-000", "try-001"]
TRY_SECONDS = 400


def nwb(*args: str, timeout: float = TRY_SECONDS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from nodewright_bridge.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("exec-mode nodes need root (namespaces, chroot, mounts)")
    missing = [n for n, b in binaries.find_all(binaries.REQUIRED).items() if b is None]
    if missing:
        pytest.skip(f"control-plane binaries missing ({', '.join(missing)}); run `make setup`")
    state = tmp_path / "try"
    try:
        yield state
    finally:
        nwb("try", "--down", "--state-dir", str(state), timeout=120)


@pytest.mark.timeout(SLOW_TEST_SECONDS)
def test_try_rolls_an_example_role_onto_fresh_sandbox_nodes_in_one_command(
    state_dir: Path, tmp_path: Path
) -> None:
    role = tmp_path / "sysctl-tuning"
    shutil.copytree(ROLE, role)
    before = sorted(p.relative_to(role) for p in role.rglob("*"))
    variables = tmp_path / "vars.yml"
    variables.write_text("sysctl_tuning_settings:\n  vm.swappiness: 7\n")
    args = ["try", str(role), "--nodes", "2", "--no-live", "--state-dir", str(state_dir)]
    first = nwb(*args, "--vars", str(variables))
    out = first.stdout
    assert first.returncode == 0, out + first.stderr
    found = re.search(r"package sysctl-tuning (\S+) \(nwb package init; interrupt: ", out)
    assert found, out
    version = found.group(1)  # from the role's meta/main.yml
    assert "sandbox started" in out
    assert "namespace nodewright-system applied; NodeWright try-sysctl-tuning created" in out
    assert "controller started" in out
    assert "NodeWright try-sysctl-tuning: rollout complete  (2 complete)" in out
    summary = out[out.index("per-node summary") :]
    for node in NODES:
        assert node in summary
        logs = state_dir / "sandbox" / "kubelet" / "nodes" / node / "rootfs" / "root"
        where = logs / f"var/log/nodewright/try-sysctl-tuning/sysctl-tuning/{version}"
        assert f"{node} Ansible runs (JSONL): {where}" in out
        assert where.is_dir() and any(where.iterdir()), where
        conf = (logs / "etc/sysctl.d/90-node-tuning.conf").read_text()
        assert "vm.swappiness=7" in conf, conf
    assert f"controller: {state_dir / 'controller.log'}" in out
    # The user's role directory is not written to.
    assert sorted(p.relative_to(role) for p in role.rglob("*")) == before

    variables.write_text("sysctl_tuning_settings:\n  vm.swappiness: 9\n")
    again = nwb(*args, "--vars", str(variables))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "sandbox reused" in again.stdout and "controller reused" in again.stdout
    assert "NodeWright try-sysctl-tuning updated" in again.stdout
    assert "rollout complete" in again.stdout
    for node in NODES:
        root = state_dir / "sandbox" / "kubelet" / "nodes" / node / "rootfs" / "root"
        assert "vm.swappiness=9" in (root / "etc/sysctl.d/90-node-tuning.conf").read_text()

    down = nwb("try", "--down", "--state-dir", str(state_dir), timeout=120)
    assert "try sandbox stopped" in down.stdout
    assert supervisor.running_state(state_dir / "sandbox") is None
