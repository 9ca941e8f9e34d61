"""Child processes of the sandbox that never outlive it.

Every child is started
- in its own process group (``start_new_session``), so a terminal's Ctrl-C reaches only us and we
  stop the children in the right order;
- with ``PR_SET_PDEATHSIG`` = SIGKILL (Linux ``prctl``), so the kernel kills it if the thread that
  started it dies, even on ``kill -9`` of the parent. Because the signal is tied to the starting
  *thread*, start children from a long-lived thread (normally the main thread). The prctl is done by
  util-linux ``setpriv --pdeathsig KILL`` exec'ing the real program (no Python code runs between
  fork and exec, which is unsafe in a threaded process); without setpriv, a preloaded libc
  ``prctl`` runs in ``preexec_fn``.
A registry of live children is killed from ``atexit`` and from SIGTERM/SIGHUP handlers, covering
interpreter exits that skip ``finally`` blocks.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_live: dict[int, ManagedProcess] = {}
_live_lock = threading.Lock()
_handlers_installed = False


_SETPRIV = shutil.which("setpriv")
_libc = None if _SETPRIV else ctypes.CDLL("libc.so.6", use_errno=True)


def _set_pdeathsig() -> None:  # runs in the child between fork and exec (no setpriv only)
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _with_pdeathsig(argv: list[str]) -> list[str]:
    return [_SETPRIV, "--pdeathsig", "KILL", "--", *argv] if _SETPRIV else argv


def dying_with_parent(argv: list[str]) -> tuple[list[str], Callable[[], None] | None]:
    """``argv`` and a ``preexec_fn`` for ``Popen`` so that the child is SIGKILLed when the
    thread that starts it ends (however the process ends): for children outside ManagedProcess."""
    return _with_pdeathsig(argv), None if _SETPRIV else _set_pdeathsig


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ManagedProcess:
    """One child process with its log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        install_handlers()
        with open(log_path, "ab") as out:
            self.popen = subprocess.Popen(
                _with_pdeathsig(self.argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=None if _SETPRIV else _set_pdeathsig,  # noqa: PLW1509 - see above
            )
        self.pid = self.popen.pid
        with _live_lock:
            _live[self.pid] = self
        log.info("started %s (pid %d), log %s", name, self.pid, log_path)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0, *, graceful: bool = True) -> int | None:
        """SIGTERM the process group, wait up to ``timeout``, then SIGKILL it.

        ``graceful=False`` sends SIGKILL at once: a crash, as a test of what survives it wants.
        """
        try:
            if self.popen.poll() is None:
                _signal_group(self.pid, signal.SIGTERM if graceful else signal.SIGKILL)
                try:
                    self.popen.wait(timeout)
                except subprocess.TimeoutExpired:
                    log.warning("%s did not stop in %.0fs; killing", self.name, timeout)
            _signal_group(self.pid, signal.SIGKILL)  # leftovers in its group, if any
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(5)
        finally:
            with _live_lock:
                _live.pop(self.pid, None)
        return self.popen.returncode


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def kill_all() -> None:
    """SIGKILL every live child's process group (last-resort cleanup)."""
    with _live_lock:
        children = list(_live.values())
        _live.clear()
    for child in children:
        _signal_group(child.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            child.popen.wait(2)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    kill_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def install_handlers() -> None:
    """atexit + SIGTERM/SIGHUP cleanup (only from the main thread; idempotent)."""
    global _handlers_installed  # noqa: PLW0603 - one process-wide registration
    if _handlers_installed:
        return
    atexit.register(kill_all)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _on_signal)
    _handlers_installed = True


def wait_until(
    check: Callable[[], object], *, timeout: float, interval: float = 0.2, what: str = "condition"
) -> None:
    """Call ``check()`` until it returns truthy; raise TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as exc:  # the check probes something still starting up
            last_error = exc
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}: {last_error}")
