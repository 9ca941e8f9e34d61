"""No control-plane process outlives the Python process that started it, however that ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodewright_bridge.sandbox import binaries, supervisor

pytestmark = pytest.mark.integration

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


def _alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if supervisor.pid_alive(pid)]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_the_control_plane_dies_with_the_process_that_started_it(
    tmp_path: Path, sig: signal.Signals
) -> None:
    if binaries.find("kube-apiserver") is None:
        pytest.skip("control-plane binaries missing; run `make setup`")
    proc = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(tmp_path / "plane")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        pids = json.loads(proc.stdout.readline())
        assert len(pids) == 4 and _alive(pids) == pids
        os.kill(proc.pid, sig)
        proc.wait(30)
        deadline = time.monotonic() + 30
        while _alive(pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _alive(pids) == []
    finally:
        proc.kill()
        proc.wait()
