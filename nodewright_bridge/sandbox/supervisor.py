"""A detached process that keeps a ``Sandbox`` running (``nwb sandbox up`` / ``down``).

``spawn()`` starts ``python -m nodewright_bridge.sandbox.supervisor`` in a new session (setsid),
with its output in ``<state>/supervisor.log``. The supervisor writes ``<state>/state.json``
(phase ``starting`` -> ``ready`` | ``failed``, pid, kubeconfig, server, registry, progress
message), runs until SIGTERM/SIGINT, then stops the sandbox and removes the state file. The
control plane's processes die with the supervisor even on SIGKILL (see ``processes``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

STATE_FILE = "state.json"
LOG_FILE = "supervisor.log"
# A clean stop of kubelet + control plane takes a few seconds; after this we SIGKILL the group.
STOP_TIMEOUT_SECONDS = 60.0


@dataclass
class Request:
    nodes: int = 3
    labels: dict[str, str] = field(default_factory=dict)
    mode: str = "simulate"
    registry: bool = False
    node_prefix: str = "node-"
    # exec mode: image repository -> local package directory
    image_map: dict[str, str] = field(default_factory=dict)


def state_path(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def read_state(state_dir: Path) -> dict[str, Any] | None:
    """The supervisor's state, or None when there is none (or it is unreadable)."""
    try:
        data = json.loads(state_path(state_dir).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_state(state_dir: Path, state: dict[str, Any]) -> None:
    tmp = state_path(state_dir).with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(state_path(state_dir))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still "exists"; it is not alive for our purposes.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def running_state(state_dir: Path) -> dict[str, Any] | None:
    """The state of a live supervisor, or None (a stale state file is removed)."""
    state = read_state(state_dir)
    if state is None:
        return None
    if not pid_alive(int(state.get("pid", 0))):
        with contextlib.suppress(OSError):
            state_path(state_dir).unlink()
        return None
    return state


def spawn(state_dir: Path, request: Request) -> subprocess.Popen[bytes]:
    """Start a detached supervisor for ``request``; returns its Popen (do not wait on it)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        state_path(state_dir).unlink()
    argv = [
        sys.executable,
        "-m",
        "nodewright_bridge.sandbox.supervisor",
        str(state_dir),
        json.dumps(asdict(request)),
    ]
    with open(state_dir / LOG_FILE, "wb") as out:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


def stop(state_dir: Path, *, timeout: float = STOP_TIMEOUT_SECONDS) -> bool:
    """SIGTERM the supervisor and wait for it; SIGKILL its group after ``timeout``.

    Returns False when no sandbox was running.
    """
    state = running_state(state_dir)
    if state is None:
        return False
    pid = int(state["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        state_path(state_dir).unlink()
    return True


def run(state_dir: Path, request: Request) -> int:
    """The supervisor's body: start the sandbox, publish its state, wait for a stop signal."""
    from nodewright_bridge.sandbox import Sandbox  # noqa: PLC0415 - keep `import` of this module cheap

    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    state: dict[str, Any] = {
        "phase": "starting",
        "pid": os.getpid(),
        "message": "",
        "request": asdict(request),
        "stateDir": str(state_dir),
    }
    _write_state(state_dir, state)

    def progress(text: str) -> None:
        print(f"[sandbox] {text}", flush=True)
        state["message"] = text
        _write_state(state_dir, state)

    sandbox = Sandbox(
        state_dir,
        nodes=request.nodes,
        labels=request.labels,
        mode=request.mode,
        registry=request.registry,
        node_prefix=request.node_prefix,
        image_map={repo: Path(path) for repo, path in request.image_map.items()},
    )
    try:
        sandbox.start(progress=progress)
    except Exception as exc:
        logging.exception("sandbox failed to start")
        state.update(phase="failed", message=f"{type(exc).__name__}: {exc}"[:2000])
        _write_state(state_dir, state)
        return 1
    state.update(
        phase="ready",
        kubeconfig=str(sandbox.kubeconfig),
        server=sandbox.server,
        registry=sandbox.registry.host if sandbox.registry else "",
        nodes=sandbox.node_names,
        timings=sandbox.timings,
        logs=str(state_dir / "controlplane" / "logs"),
    )
    _write_state(state_dir, state)
    while not stopping.wait(1.0):
        pass
    print("[sandbox] stopping", flush=True)
    sandbox.stop()
    with contextlib.suppress(OSError):
        state_path(state_dir).unlink()
    print("[sandbox] stopped", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nodewright_bridge.sandbox.supervisor")
    parser.add_argument("state_dir", type=Path)
    parser.add_argument("request", help="JSON of Request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    request = Request(**json.loads(args.request))
    return run(args.state_dir, request)


if __name__ == "__main__":
    sys.exit(main())
