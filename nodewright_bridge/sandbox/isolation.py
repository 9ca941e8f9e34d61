"""Run a command "on a simulated node" without letting it touch the real machine.

Why: a chroot does not isolate mounts or kernel settings. A public hardening role applied through a
chroot connection mounts the real procfs at ``<root>/proc``, and its sysctl tasks then change the
machine's own kernel. So every command that acts on a node
root runs here:

- in its own mount, PID, UTS and IPC namespaces (``unshare``; propagation private, so nothing it
  mounts is seen outside, and everything it mounted is gone when it ends);
- with ``<root>/proc`` a fresh procfs of the new PID namespace, whose ``sys`` directory is replaced
  by the node's own writable stand-in (plain files seeded from the machine's values); the procfs
  parts a container runtime hides (``sysrq-trigger``, ``irq``, ``bus``, ``fs``, ``kcore``, ...) are
  hidden the same way (masks: the view's own ``/dev/null``);
- with ``<root>/sys`` the node's own directory (a small skeleton), ``<root>/dev`` a private tmpfs
  holding only harmless devices (``/dev/shm`` and ``/dev/pts`` its own mounts), and ``<root>/run``
  and ``<root>/tmp`` the node's own directories bound onto themselves (``nosuid,nodev``).

The ``/proc/sys`` stand-in, ``/sys``, ``/run`` and ``/tmp`` are the node's per-boot file systems: a
tmpfs each, mounted on this machine's side (``<state>/proc-sys``, ``<state>/sys``, ``<root>/run``,
``<root>/tmp``, where outside readers see them) by ``prepare_node``, made afresh at each simulated
boot and unmounted by ``release_node``; their content lasts from command to command until then.
Why file systems of their own and not directories on this machine's disk: a remount without
``bind`` (``mount -o remount,ro /sys``) reconfigures the file system behind the mount it names, and
for a bound directory that is the file system holding it. So every mount a view shows is a file
system of the node's own - the root too (an overlay, or a tmpfs copy; ``run_isolated`` refuses a
root that shares its file system with any mount outside it) - or one made inside the namespace.

So ``/proc``, ``/sys``, ``/dev``, ``/dev/shm``, ``/run`` and ``/tmp`` are mount points, as on a real
node: a hardening role's ``mount -o remount,nosuid,nodev,noexec /run``, an ``umount`` and re-mount,
``findmnt`` and Ansible's mount facts work. A change of per-mount options (``nosuid``, ``noexec``,
``ro`` with ``bind``) lasts for the command only (the next command gets fresh mounts); one that
reconfigures a node file system (``remount,ro`` without ``bind``, ``size=``) lasts, as on a node,
until the node's next boot; files written to ``/run`` or ``/tmp`` stay until then too.

Three views of the file system, chosen by the caller (``View``):
- ``HOST``: the real file system (writes outside the node root are real), with the node root
  prepared as above - for a host-side tool such as ansible-playbook with a chroot connection.
- ``NODE``: the node root becomes ``/`` (pivot_root, the rest of the machine is unreachable).
- ``CONTAINER``: ``/`` is a throw-away overlay over the real ``/`` (reads see the machine, writes
  vanish), with the node root at ``host_root_at`` and the caller's binds (volumes, the
  termination-message file) at their paths; how exec-mode pods run the agent from this repo.

Guarantees: the caller's process never changes namespace; killing the returned process (SIGKILL)
ends everything started inside (it is the parent of the new PID namespace's init).
Caveats: a command running as root inside could still deliberately mount a fresh procfs or unmount
the stand-in and then write real sysctls, load kernel modules, or change the host network
(hostNetwork is shared unless ``network=Network.NONE``). The namespaces stop accidents of ordinary
roles (``ansible.posix.mount``/``sysctl``, ``hostname``), not a hostile payload. Outside the node
root, a view still holds binds of this machine's files: the whole machine in ``HOST``, the
caller's ``binds`` (code, volumes, the termination-message file) in ``CONTAINER``; the command
itself (the agent, ansible-playbook) must not remount those. A role reaches them only by leaving
its chroot (``/proc/1/root``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO

from nodewright_bridge.sandbox import isolation_init, mounts, processes
from nodewright_bridge.sandbox.supervisor import pid_alive

# --- the parent side ------------------------------------------------------------------------


class View(StrEnum):
    HOST = "host"
    NODE = "node"
    CONTAINER = "container"


class Network(StrEnum):
    HOST = "host"  # the machine's network namespace (hostNetwork pods)
    NONE = "none"  # a private network namespace with only loopback


@dataclass(frozen=True, slots=True)
class Bind:
    """Make ``source`` (a real-host file or directory) appear at ``target``.

    ``target`` is an absolute path in the command's view (inside the node root for ``View.NODE``,
    inside the container root for ``View.CONTAINER``). For ``View.HOST`` the target must exist.
    """

    source: Path
    target: str
    read_only: bool = False


class IsolationError(Exception):
    """The isolated environment could not be prepared."""


SETUP_FAILED_EXIT = isolation_init.SETUP_FAILED_EXIT
PROC_SYS_DIR = isolation_init.PROC_SYS_DIR
SYS_DIR = isolation_init.SYS_DIR
BOOT_ID_FILE = "boot-id"
_LOCK_FILE = ".isolation.lock"
_SEEDED_MARKER = ".nwb-seeded"
# What a fresh node's /sys offers: the places roles read or tune (THP, module parameters).
SYS_SKELETON: tuple[str, ...] = (
    "block",
    "bus",
    "class/net",
    "devices/system/cpu",
    "firmware",
    "fs/cgroup",
    "kernel/mm/transparent_hugepage",
    "kernel/security",
    "module",
    "power",
)
SYS_SEED_FILES: tuple[str, ...] = (
    "kernel/mm/transparent_hugepage/enabled",
    "kernel/mm/transparent_hugepage/defrag",
)
# tmpfs options of the node's per-boot file systems. Sizes are caps (a tmpfs takes memory only as
# files fill it): the seeded /proc/sys stand-in holds ~1,500 files (~6 MB); /run and /tmp get what
# a small node's would.
PROC_SYS_FS_OPTIONS = "size=16m,mode=755"
SYS_FS_OPTIONS = "size=4m,mode=755"
NODE_DIR_FS_OPTIONS = {"run": "size=64m,mode=755", "tmp": "size=512m,mode=1777"}


@contextlib.contextmanager
def _locked(state: Path) -> Iterator[None]:
    state.mkdir(parents=True, exist_ok=True)
    with (state / _LOCK_FILE).open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _seed_proc_sys(target: Path) -> None:
    """Copy the machine's readable sysctl values into plain files (write-only ones empty)."""
    source = Path("/proc/sys")
    for dirpath, dirnames, filenames in os.walk(source):
        rel = Path(dirpath).relative_to(source)
        if rel.parts[:2] == ("fs", "binfmt_misc"):
            dirnames[:] = []  # its own file system; register files are commands, not values
        (target / rel).mkdir(parents=True, exist_ok=True)
        for name in filenames:
            src = Path(dirpath, name)
            try:
                mode = stat.S_IMODE(src.stat().st_mode)
            except OSError:
                continue
            try:
                data = src.read_bytes() if mode & 0o444 else b""
            except OSError:
                data = b""
            dst = target / rel / name
            dst.write_bytes(data)
            dst.chmod(mode | 0o200)


def _seed_sys(target: Path) -> None:
    for rel in SYS_SKELETON:
        (target / rel).mkdir(parents=True, exist_ok=True)
    for rel in SYS_SEED_FILES:
        with contextlib.suppress(OSError):
            (target / rel).write_bytes((Path("/sys") / rel).read_bytes())


def _sysctl_files(root: Path) -> list[Path]:
    """The node's sysctl configuration in systemd-sysctl's order (first dir wins per name)."""
    chosen: dict[str, Path] = {}
    for rel in ("etc/sysctl.d", "run/sysctl.d", "usr/local/lib/sysctl.d", "usr/lib/sysctl.d"):
        directory = root / rel
        if directory.is_dir() and not directory.is_symlink():
            for path in directory.glob("*.conf"):
                chosen.setdefault(path.name, path)
    files = [chosen[name] for name in sorted(chosen)]
    conf = root / "etc/sysctl.conf"
    if conf.is_file() and not conf.is_symlink():
        files.append(conf)
    return files


def _apply_sysctl_config(root: Path, proc_sys: Path) -> None:
    """What a boot does: apply the node's sysctl.d/sysctl.conf to its /proc/sys stand-in."""
    for path in _sysctl_files(root):
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for raw in lines:
            line = raw.strip()
            if not line or line[0] in "#;" or "=" not in line:
                continue
            key, _, value = line.lstrip("-").partition("=")
            rel = key.strip().replace(".", "/")
            dst = proc_sys / rel
            if ".." in Path(rel).parts or not dst.is_file():
                continue  # unknown key: the kernel would ignore it too
            dst.write_text(value.strip() + "\n")


def _real_dir(path: Path) -> None:
    """Make ``path`` (inside a node root) a real directory: a symlink or file there is removed."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    path.mkdir(parents=True, exist_ok=True)


def boot_filesystems(root: Path, state: Path) -> list[tuple[Path, str]]:
    """The node's per-boot file systems: (mount point on this machine, tmpfs options)."""
    return [
        (state / PROC_SYS_DIR, PROC_SYS_FS_OPTIONS),
        (state / SYS_DIR, SYS_FS_OPTIONS),
        *((root / name, NODE_DIR_FS_OPTIONS[name]) for name in isolation_init.SELF_BOUND_DIRS),
    ]


def prepare_node(root: Path, state: Path, boot_id: str) -> bool:
    """Make the node's per-boot state match ``boot_id``; True when this started a new boot.

    A new boot (first use, after ``release_node``, or after a simulated reboot changed the id)
    replaces the node's per-boot file systems with fresh ones (so ``/run`` and ``/tmp`` are empty,
    and a role's remount of one is undone), seeds the ``/proc/sys`` stand-in and ``/sys``, applies
    the node's sysctl configuration, and writes ``boot_id`` to ``/proc/sys/kernel/random/boot_id``.
    Safe to call before every command.
    """
    root, state = root.resolve(), state.resolve()
    with _locked(state):
        id_file = state / BOOT_ID_FILE
        filesystems = boot_filesystems(root, state)
        if (
            id_file.is_file()
            and id_file.read_text().strip() == boot_id
            and all(os.path.ismount(path) for path, _ in filesystems)
        ):
            return False
        for path, options in filesystems:
            mounts.unmount(path)  # the previous boot's, if any
            _real_dir(path)
            mounts.mount_tmpfs(path, options)
        proc_sys = state / PROC_SYS_DIR
        _seed_proc_sys(proc_sys)
        _seed_sys(state / SYS_DIR)
        (root / "run/lock").mkdir()
        _apply_sysctl_config(root, proc_sys)
        boot_file = proc_sys / "kernel/random/boot_id"
        if boot_file.parent.is_dir():
            boot_file.write_text(boot_id + "\n")
        id_file.write_text(boot_id + "\n")
        return True


def release_node(root: Path, state: Path) -> None:
    """Unmount the node's per-boot file systems, as powering the node off would discard them;
    its next ``prepare_node`` starts a new boot. Nothing mounted is fine."""
    root, state = root.resolve(), state.resolve()
    with contextlib.ExitStack() as stack:
        if state.is_dir():
            stack.enter_context(_locked(state))
        for path, _ in reversed(boot_filesystems(root, state)):
            mounts.unmount(path)


def run_isolated(
    root: Path,
    state: Path,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    binds: Sequence[Bind] = (),
    view: View = View.HOST,
    host_root_at: str = "/host",
    network: Network = Network.HOST,
    hostname: str = "",
    cwd: str = "",
    boot_id: str = "",
    stdin: int | IO[bytes] | None = subprocess.DEVNULL,
    stdout: int | IO[bytes] | None = None,
    stderr: int | IO[bytes] | None = None,
    die_with_parent: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` isolated on the node whose root is ``root``; see the module docstring.

    Args:
        root: the node's root filesystem (e.g. ``NodeRoot.path``): a file system of its own.
        state: the node's isolation state directory (``/proc/sys`` stand-in, ``/sys``, boot id).
        argv: the command; resolved with ``env["PATH"]`` inside the chosen view.
        env: the command's complete environment.
        binds: extra files/directories to show at given paths (applied in path order).
        view: what ``/`` is for the command (``View``).
        host_root_at: ``View.CONTAINER`` only: where the node root appears ("" = nowhere;
            a ``Bind(root, path)`` in ``binds`` works too).
        network: share the machine's network namespace or get a private, loopback-only one.
        hostname: the command's host name (own UTS namespace); default: the node root's
            ``/etc/hostname``.
        cwd: working directory inside the view (default ``/``).
        boot_id: if given, ``prepare_node(root, state, boot_id)`` runs first.
        stdin: as for ``subprocess.Popen``; ``stdout``/``stderr`` likewise.
        die_with_parent: SIGKILL everything inside when the calling thread ends (a long-lived
            node, such as the kubelet tier's, must not outlive a killed sandbox).

    Returns:
        The process; its exit status is the command's (``SETUP_FAILED_EXIT`` if the isolated
        environment could not be built, with the reason on stderr). ``kill()`` ends everything
        inside; ``terminate()`` passes SIGTERM to the command.
    """
    if shutil.which("unshare") is None:
        raise IsolationError("unshare (util-linux) is not installed")
    root, state = root.resolve(), state.resolve()
    if not root.is_dir():
        raise IsolationError(f"node root {root} is not a directory")
    if not mounts.private_filesystem(root):
        raise IsolationError(
            f"node root {root} is not a file system of its own (a mount point whose file system "
            "no mount outside it uses, such as the sandbox's overlay): a remount inside the node "
            "would reconfigure the file system holding it"
        )
    if boot_id:
        prepare_node(root, state, boot_id)
    unprepared = mounts.not_private(path for path, _ in boot_filesystems(root, state))
    if unprepared:
        names = ", ".join(str(path) for path in unprepared)
        raise IsolationError(f"node state {state} is not prepared ({names}; pass boot_id)")
    scratch = state / "mnt"
    if view is View.CONTAINER:
        scratch.mkdir(parents=True, exist_ok=True)
    spec = {
        "root": str(root),
        "state": str(state),
        "argv": list(argv),
        "binds": [[str(b.source.resolve()), b.target, b.read_only] for b in binds],
        "view": view.value,
        "host_root_at": host_root_at,
        "hostname": hostname,
        "cwd": cwd or "/",
        "scratch": str(scratch),
    }
    flags = ["--mount", "--pid", "--uts", "--ipc", "--fork", "--kill-child"]
    if network is Network.NONE:
        flags.append("--net")
    cmd = [
        "unshare",
        *flags,
        "--propagation",
        "private",
        sys.executable,
        "-I",  # the command's env must not steer the init (PYTHONPATH, ...)
        "-S",
        # Run as a script: importing the package would pull in the whole sandbox (slow).
        str(Path(isolation_init.__file__).resolve()),
        json.dumps(spec),
    ]
    preexec = None
    if die_with_parent:
        cmd, preexec = processes.dying_with_parent(cmd)
    return subprocess.Popen(
        cmd,
        preexec_fn=preexec,  # noqa: PLW1509 - only without setpriv (see processes)
        env=dict(env),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
    )


# How long a kill waits for the command's PID namespace to empty after unshare is gone.
NAMESPACE_EXIT_SECONDS = 10.0


def kill_isolated(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the command and return once everything it started is dead.

    Why not ``proc.kill(); proc.wait()``: ``proc`` is unshare, and ``--kill-child`` kills the
    inner init only once unshare has died; the kernel then kills the rest of the namespace. So
    unshare's exit comes first, and a caller that looked at once could still find the command's
    processes alive (a loaded machine made that visible). The init exits, and turns zombie (not
    alive to ``pid_alive``), only after every other process of its namespace is gone.
    """
    inner = _children(proc.pid) if proc.poll() is None else []
    proc.kill()  # nothing if it has ended already
    proc.wait()
    deadline = time.monotonic() + NAMESPACE_EXIT_SECONDS
    while any(pid_alive(pid) for pid in inner) and time.monotonic() < deadline:
        time.sleep(0.01)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


def stop_isolated(proc: subprocess.Popen[bytes], *, grace: float = 5.0) -> int:
    """SIGTERM the command, then SIGKILL everything after ``grace`` seconds; the exit status."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # unshare ignores it; the inner init forwards it
        try:
            return proc.wait(grace)
        except subprocess.TimeoutExpired:
            kill_isolated(proc)
    return proc.wait()
