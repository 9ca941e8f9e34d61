"""``nwb demo`` end to end, non-interactively, as ``make demo`` runs it (in its own state dir).

Runs in its own sandbox (not the e2e session's): the demo starts and reuses a detached sandbox and
a background controller, and ``--down`` must stop both. A second run must reuse both and finish at
once with the rollout already complete.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_harness import SLOW_TEST_SECONDS

from nodewright_bridge.sandbox import binaries, supervisor

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
NODES = [f"gpu-00{i}" for i in range(6)]
DEMO_SECONDS = 600


def nwb(*args: str, timeout: float = DEMO_SECONDS) -> subprocess.CompletedProcess[str]:
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
    state = tmp_path / "demo"
    try:
        yield state
    finally:
        nwb("demo", "--down", "--state-dir", str(state), timeout=120)


@pytest.mark.timeout(SLOW_TEST_SECONDS)
def test_the_demo_rolls_out_both_packages_to_every_node_and_a_rerun_reuses_everything(
    state_dir: Path,
) -> None:
    first = nwb("demo", "--no-live", "--state-dir", str(state_dir))
    assert first.returncode == 0, first.stdout + first.stderr
    out = first.stdout
    assert "sandbox started" in out
    assert "NodeWright demo-tuning created" in out
    assert "controller started" in out
    assert "NodeWright demo-tuning: rollout complete  (6 complete)" in out
    # Canary order: each compartment's first batch is a single node.
    assert "node gpu-000 [a100 batch 1]: in_progress" in out
    assert "node gpu-003 [h100 batch 1]: in_progress" in out
    # Long steps print headlines, not a tool's chatter (debootstrap's "I: Configuring ...").
    assert not [line for line in out.splitlines() if line.lstrip().startswith(("I: ", "W: "))]
    # Batch numbers only grow, also when the batch state is reset on completion.
    for compartment in ("a100", "h100"):
        batches = [int(n) for n in re.findall(rf"compartment {compartment}: batch (\d+)", out)]
        assert batches and batches == sorted(batches), (compartment, batches)
    assert "__default__" not in out  # the policy's empty default compartment is not listed
    # The summary lists every package of every node.
    summary = out[out.index("per-node summary") :]
    assert summary.count("sysctl-tuning 1.0.0") == len(NODES), summary
    assert summary.count("kmod-blacklist 1.0.0") == len(NODES), summary

    sandbox = supervisor.read_state(state_dir / "sandbox")
    assert sandbox is not None and sandbox["phase"] == "ready"
    status = nwb("status", "demo-tuning", "-o", "json", "--kubeconfig", sandbox["kubeconfig"])
    assert status.returncode == 0, status.stderr
    view = json.loads(status.stdout)
    assert view["outcome"] == "ready"
    assert sorted(view["nodes"]) == NODES
    assert {n["status"] for n in view["nodes"].values()} == {"complete"}
    assert {n["compartment"] for n in view["nodes"].values()} == {"a100", "h100"}
    # The roles ran against each node's own root filesystem.
    for node in NODES:
        root = state_dir / "sandbox" / "kubelet" / "nodes" / node / "rootfs" / "root"
        assert "vm.swappiness=10" in (root / "etc/sysctl.d/90-node-tuning.conf").read_text()
        assert "blacklist nouveau" in (root / "etc/modprobe.d/90-node-blacklist.conf").read_text()

    again = nwb("demo", "--no-live", "--state-dir", str(state_dir), timeout=180)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "sandbox reused" in again.stdout
    assert "NodeWright demo-tuning unchanged" in again.stdout
    assert "controller reused" in again.stdout
    assert "rollout complete" in again.stdout

    down = nwb("demo", "--down", "--state-dir", str(state_dir), timeout=120)
    assert down.returncode == 0
    assert "controller stopped" in down.stdout
    assert "demo sandbox stopped" in down.stdout
    assert supervisor.running_state(state_dir / "sandbox") is None
