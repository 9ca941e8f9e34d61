"""``nwb-agent interrupt``: the disruptive step the controller runs on a drained node.

Why a host flag written BEFORE acting: a reboot kills the agent, and the controller then runs the
same interrupt pod again (it cannot tell "rebooted" from "crashed" otherwise). The flag
``<host>/var/lib/nodewright/interrupts/<NW_RESOURCE_ID>/<type>.done`` makes that second run
complete at once without acting. The resource id changes with every spec change, so a new
change interrupts again. If the action fails (non-zero exit, not a reboot), the flag is removed so
the retry acts again.

Kinds:
- ``reboot``: runs ``NW_REBOOT_COMMAND`` (shell words, in the agent's namespace; the sandbox uses
  it to simulate a reboot) or else ``systemctl reboot`` in PID 1's namespaces (``nsenter``, for
  both host connections: inside a chroot systemctl refuses to reboot). Then waits up to
  ``NW_REBOOT_WAIT_SECONDS`` to be killed; still alive after that is a failure.
- ``service``: ``systemctl daemon-reload``, then ``systemctl restart <unit>`` for each unit.
- ``restartAllServices``: restarts every enabled, currently active service unit EXCEPT the
  node's lifelines (kubelet, container runtimes, dbus, journald/udevd/logind and other systemd-*,
  ssh, networking). Restarting those can cut the node off the cluster or kill this very pod; a
  package that needs that must ask for a reboot. (NodeWright's agent only reloads procps here.)
- ``noop``: records the flag.
``NW_SYSTEMCTL_COMMAND`` (shell words) replaces ``systemctl`` - for the sandbox, which has no
systemd in its nodes.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from lifecycle.results import AgentResult, Failure, StageResult, StageStatus
from lifecycle.spec import InterruptType
from playbook_adapter.agent.settings import INTERRUPT_FLAG_DIR, AgentSettings
from playbook_adapter.errors import BadInputError

NSENTER = ["nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--"]
LIFELINE_PREFIXES = (
    "kubelet",
    "containerd",
    "crio",
    "docker",
    "dbus",
    "systemd-",
    "ssh",
    "sshd",
    "networking",
    "NetworkManager",
    "getty@",
    "serial-getty@",
)
COMMAND_TIMEOUT_SECONDS = 600.0


def flag_path(settings: AgentSettings, kind: InterruptType) -> Path:
    resource = settings.resource_id or "_"
    return settings.host_path(INTERRUPT_FLAG_DIR) / resource / f"{kind.value}.done"


def interrupt(
    settings: AgentSettings,
    kind_text: str,
    services: list[str],
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[int, AgentResult]:
    """Run (or skip, if flagged) one interrupt; returns the exit code and the result."""
    try:
        kind = InterruptType(kind_text)
    except ValueError:
        known = ", ".join(k.value for k in InterruptType)
        raise BadInputError(f"--type: unknown interrupt {kind_text!r} (known: {known})") from None
    if kind is InterruptType.SERVICE and not services:
        raise BadInputError("--services: interrupt type service needs at least one unit")
    started = clock()
    flag = flag_path(settings, kind)
    if flag.exists():
        print(f"ok        interrupt  {kind.value}: already done for {settings.resource_id or '_'}")
        return 0, _result(settings, kind, clock() - started, failure=None)

    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.write_text(datetime.now(UTC).isoformat() + "\n", encoding="utf-8")
    error = _act(settings, kind, services, sleep)
    if error is not None:
        flag.unlink(missing_ok=True)
        print(f"failed    interrupt  {kind.value}: {error}")
        failure = Failure(stage="interrupt", task=kind.value, action="interrupt", message=error)
        return 1, _result(settings, kind, clock() - started, failure=failure)
    print(f"changed   interrupt  {kind.value}")
    return 0, _result(settings, kind, clock() - started, failure=None)


def _act(
    settings: AgentSettings,
    kind: InterruptType,
    services: list[str],
    sleep: Callable[[float], None],
) -> str | None:
    if kind is InterruptType.NOOP:
        return None
    if kind is InterruptType.REBOOT:
        if settings.reboot_command:
            error = _call(shlex.split(settings.reboot_command))
        else:
            error = _call([*NSENTER, "systemctl", "reboot"])
        if error is not None:
            return error
        if settings.reboot_wait_seconds > 0:
            sleep(settings.reboot_wait_seconds)
            return f"still running {settings.reboot_wait_seconds:g}s after the reboot command"
        return None
    systemctl = _systemctl(settings)
    if kind is InterruptType.SERVICE:
        units = services
    else:
        listing = subprocess.run(
            [
                *systemctl,
                "list-units",
                "--type=service",
                "--state=active",
                "--plain",
                "--no-legend",
                "--no-pager",
            ],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )
        if listing.returncode != 0:
            return f"systemctl list-units failed: {listing.stderr.strip()[-300:]}"
        units = restartable_units(listing.stdout)
    for command in (["daemon-reload"], *[["restart", unit] for unit in units]):
        error = _call([*systemctl, *command])
        if error is not None:
            return error
        print(f"changed   interrupt  systemctl {' '.join(command)}")
    return None


def restartable_units(list_units_output: str) -> list[str]:
    """Active service units from ``systemctl list-units --plain``, lifelines excluded."""
    units = []
    for line in list_units_output.splitlines():
        words = line.split()
        if not words or not words[0].endswith(".service"):
            continue
        unit = words[0]
        if unit.startswith(LIFELINE_PREFIXES):
            continue
        units.append(unit)
    return units


def _systemctl(settings: AgentSettings) -> list[str]:
    if settings.systemctl_command:
        return shlex.split(settings.systemctl_command)
    # For both host connections: systemctl inside a chroot refuses to start/stop units, so service
    # management always goes to PID 1's namespaces (hostPID is part of the pod contract).
    return [*NSENTER, "systemctl"]


def _call(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{argv[0]}: {exc}"
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()[-300:]
        return f"{shlex.join(argv)} exited {done.returncode}: {detail}"
    return None


def _result(
    settings: AgentSettings, kind: InterruptType, duration: float, *, failure: Failure | None
) -> AgentResult:
    stage = StageResult(
        name="interrupt",
        status=StageStatus.FAILED if failure else StageStatus.OK,
        ok=0 if failure else 1,
        changed=0 if failure else 1,
        failed=1 if failure else 0,
        duration_seconds=round(max(duration, 0.0), 3),
    )
    return AgentResult(
        package=settings.package, version=settings.version, stages=[stage], failure=failure
    )
