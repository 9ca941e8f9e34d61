"""Profiles for the rollout benchmark: py-spy on the controller, pprof on the API server.

Why: issue work on the hot path starts from where the time goes, not from guesses. The
controller is sampled for the whole rollout (``py-spy record --format raw``: collapsed stacks),
the API server for a window around the largest batch start (``/debug/pprof/profile``; the
sandbox starts it with ``--profiling=true`` for this). Both are summarised as the top functions
by own and by inclusive samples, and the raw files are kept for ``speedscope`` or
``go tool pprof``.

py-spy is a dev dependency (``pip install -e '.[dev]'``); ``go`` comes with the control plane's
build (``make setup``).
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import threading
import urllib.request
from collections import Counter
from pathlib import Path


class ControllerProfile:
    """``py-spy record`` attached to the controller process until :meth:`stop`."""

    def __init__(self, pid: int, directory: Path, rate: int = 50) -> None:
        spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which(
            "py-spy"
        )
        if spy is None:
            raise SystemExit("--profile needs py-spy: .venv/bin/pip install -e '.[dev]'")
        self.raw = directory / "controller.collapsed"
        self._proc = subprocess.Popen(
            [spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
             "--nonblocking", "--output", str(self.raw)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def stop(self) -> None:
        """py-spy writes its file when it is interrupted (or when the process ends)."""
        if self._proc.poll() is None:
            self._proc.send_signal(2)
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()

    def summary(self, top: int = 20) -> list[str]:
        if not self.raw.exists():
            return ["    (py-spy wrote no profile)"]
        own: Counter[str] = Counter()
        inclusive: Counter[str] = Counter()
        total = 0
        for line in self.raw.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            total += count
            frames = [_short(frame) for frame in stack.split(";")]
            own[frames[-1]] += count
            for frame in set(frames):
                inclusive[frame] += count
        if not total:
            return ["    (no samples)"]
        lines = [f"    {total} samples of busy threads; top by own time:"]
        lines += [f"      {100 * n / total:5.1f}%  {f}" for f, n in own.most_common(top)]
        lines.append("    top by inclusive time (the function and what it calls):")
        lines += [f"      {100 * n / total:5.1f}%  {f}" for f, n in inclusive.most_common(top)]
        return lines


def _short(frame: str) -> str:
    """``func (path/to/module.py:12)`` -> ``func (module.py)``: one row per function."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({'/'.join(Path(path).parts[-2:])})"


class ApiServerProfile:
    """A CPU profile of the API server over ``seconds``, taken on a thread once started."""

    def __init__(self, server: str, token: str, binary: Path, directory: Path) -> None:
        self._server = server
        self._token = token
        self._binary = binary
        self.path = directory / "apiserver.pprof"
        self._thread: threading.Thread | None = None
        self.error = ""

    def start(self, seconds: int) -> None:
        self._thread = threading.Thread(target=self._fetch, args=(seconds,), daemon=True)
        self._thread.start()

    def _fetch(self, seconds: int) -> None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # loopback, our own sandbox's certificate
        request = urllib.request.Request(
            f"{self._server}/debug/pprof/profile?seconds={seconds}",
            headers={"Authorization": f"Bearer {self._token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=seconds + 30, context=context) as resp:
                self.path.write_bytes(resp.read())
        except OSError as exc:
            self.error = str(exc)

    def summary(self, top: int = 25) -> list[str]:
        if self._thread is not None:
            self._thread.join(120)
        if not self.path.exists():
            return [f"    (no API server profile: {self.error or 'never started'})"]
        go = shutil.which("go")
        if go is None:
            return [f"    kept {self.path} (no go tool here to summarise it)"]
        out = subprocess.run(
            [go, "tool", "pprof", "-top", f"-nodecount={top}", str(self._binary), str(self.path)],
            capture_output=True,
            text=True,
            check=False,
        )
        return ["    " + line for line in out.stdout.splitlines()[: top + 8]]


class ProcessCpu:
    """CPU seconds per sandbox process, read from ``/proc/<pid>/stat`` when asked.

    Why: on a 2-core machine the API server, etcd, the simulated kubelet (this process) and the
    controller share the CPU; which one saturates decides what to cut.
    """

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._ticks = os.sysconf("SC_CLK_TCK")

    def read(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, pid in self.pids.items():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # utime, stime, cutime, cstime are fields 14-17 (1-based); after ")" they start at 11
            out[name] = sum(int(v) for v in fields[11:15]) / self._ticks
        return out

    @staticmethod
    def lines(before: dict[str, float], after: dict[str, float], seconds: float) -> list[str]:
        rows = sorted(((after[k] - before.get(k, 0.0), k) for k in after), reverse=True)
        return [f"    {k:24s} {v:7.1f}s CPU ({v / seconds:4.2f} cores)" for v, k in rows]
