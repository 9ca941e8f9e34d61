"""No control-plane process and no node mount outlives the Python process that made it, however
that ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from nodewright_bridge.sandbox import binaries, supervisor

pytestmark = pytest.mark.integration
T = TypeVar("T")

STARTER = """
import json, sys, time
from pathlib import Path
from nodewright_bridge.sandbox import binaries
from nodewright_bridge.sandbox.controlplane import ControlPlane
plane = ControlPlane(Path(sys.argv[1]), binaries.ensure_binaries(with_helm=False))
plane.start()
print(json.dumps([p.pid for p in plane.processes]), flush=True)
time.sleep(600)
"""

# A node prepared as the exec/podman runners do it: its root and per-boot file systems mounted.
MOUNTER = """
import sys, time
from pathlib import Path
from nodewright_bridge.sandbox.kubelet.noderoots import NodeRoots
from nodewright_bridge.sandbox.kubelet.nodes import SimNode
node = SimNode(name="orphan", labels={}, state_dir=Path(sys.argv[1]))
node.state_dir.mkdir(parents=True)
NodeRoots().boot(node)
print("booted", flush=True)
time.sleep(600)
"""


def _alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if supervisor.pid_alive(pid)]


def _start(script: str, arg: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, str(arg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _end(proc: subprocess.Popen[str], sig: signal.Signals, left: Callable[[], list[T]]) -> list[T]:
    """Send ``sig`` to ``proc``; what ``left`` still finds once empty or after 30 s."""
    os.kill(proc.pid, sig)
    proc.wait(30)
    deadline = time.monotonic() + 30
    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    return left()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_the_control_plane_dies_with_the_process_that_started_it(
    tmp_path: Path, sig: signal.Signals
) -> None:
    if binaries.find("kube-apiserver") is None:
        pytest.skip("control-plane binaries missing; run `make setup`")
    proc = _start(STARTER, tmp_path / "plane")
    try:
        assert proc.stdout is not None
        pids = json.loads(proc.stdout.readline())
        assert len(pids) == 4 and _alive(pids) == pids
        assert _end(proc, sig, lambda: _alive(pids)) == []
    finally:
        proc.kill()
        proc.wait()


def _mounts_under(path: Path) -> list[str]:
    prefix = f"{path.resolve()}/"
    with open("/proc/self/mountinfo") as handle:
        return [p for line in handle if (p := line.split()[4]).startswith(prefix)]


@pytest.mark.rootfs
@pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_node_s_mounts_go_with_the_process_that_made_them(
    tmp_path: Path, sig: signal.Signals
) -> None:
    proc = _start(MOUNTER, tmp_path / "node")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "booted\n"
        # The root, its /run and /tmp, and the /proc/sys and /sys stand-ins.
        assert len(_mounts_under(tmp_path)) == 5, _mounts_under(tmp_path)
        assert _end(proc, sig, lambda: _mounts_under(tmp_path)) == []
    finally:
        proc.kill()
        proc.wait()
