"""PID 1 of an isolated node command: build the node's view, run the command, reap, forward.

Why a module of its own: it is started as a plain script (``python -I -S <this file> SPEC``) for
every isolated command, so it imports only what it needs from the standard library and nothing of
the package (importing ``nodewright_bridge.sandbox`` pulls in the Kubernetes client). The parent
side and the meaning of each view are in ``nodewright_bridge.sandbox.isolation``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import signal
import stat
import sys

# os.execvpe imports it lazily, but after pivot_root into a node root the stdlib is out of reach.
import warnings  # noqa: F401

# Exit status when building the isolated environment failed (podman uses the same).
SETUP_FAILED_EXIT = 125
# Per-node state layout (under the node's isolation state dir).
PROC_SYS_DIR = "proc-sys"
SYS_DIR = "sys"
# Devices a pod may open: same major/minor as the machine's (all harmless to share).
DEVICES: tuple[str, ...] = ("null", "zero", "full", "random", "urandom", "tty")
# Node directories that are mount points on a real node but whose files must outlive one command
# (the reboot request and /var/run/reboot-required in /run, a role's downloads in /tmp): each is
# the node's per-boot tmpfs there, bound onto itself, with the options systemd gives them.
SELF_BOUND_DIRS: tuple[str, ...] = ("run", "tmp")


_MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MNT_DETACH = 2
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217, "riscv64": 41}
# Host procfs entries a container runtime hides (runc's defaults): writable ones become
# read-only, informative ones are shadowed by /dev/null.
_PROC_READ_ONLY = ("bus", "fs", "irq", "sysrq-trigger")
_PROC_MASKED = ("kcore", "keys", "latency_stats", "timer_list", "timer_stats", "sched_debug")

# The running interpreter already links libc; find_library() would spawn ldconfig (slow).
_libc = ctypes.CDLL(None, use_errno=True)


def mount(source: str, target: str, fstype: str, flags: int, data: str = "") -> None:
    """mount(2); an ``OSError`` naming the mount on failure (also used on the parent side)."""
    result = _libc.mount(
        source.encode(), target.encode(), fstype.encode(), flags, data.encode() if data else None
    )
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target} ({fstype}): {os.strerror(err)}")


def _bind(
    source: str, target: str, *, read_only: bool = False, recursive: bool = False, flags: int = 0
) -> None:
    """Bind ``source`` at ``target``; ``flags`` (``MS_NOSUID``, ...) apply to this mount only."""
    mount(source, target, "", _MS_BIND | (_MS_REC if recursive else 0))
    flags |= _MS_RDONLY if read_only else 0
    if flags:
        mount("", target, "", _MS_BIND | _MS_REMOUNT | flags)


def _inside(base: str, rel: str, *, directory: bool = True) -> str:
    """``base/rel`` as a real path inside ``base``: symlinks the node made are replaced."""
    path = base
    parts = [p for p in rel.split("/") if p and p != "."]
    for index, part in enumerate(parts):
        if part == "..":
            raise OSError(errno.EINVAL, f"path {rel!r} leaves {base}")
        path = os.path.join(path, part)
        last = index == len(parts) - 1
        if os.path.islink(path):
            os.unlink(path)
        if not os.path.lexists(path):
            if last and not directory:
                with open(path, "a"):
                    pass
            else:
                os.mkdir(path, 0o755)
    return path


def _setup_proc(proc: str, proc_sys: str, null: str) -> None:
    """A fresh procfs with the stand-in over ``sys``; ``null``, the view's own ``/dev/null``, masks
    entries (the machine's would let ``mount -o remount,ro /proc/kcore`` reconfigure its /dev)."""
    mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | _MS_NOEXEC)
    for name in _PROC_READ_ONLY:
        path = os.path.join(proc, name)
        if os.path.exists(path):
            _bind(path, path, read_only=True)
    for name in _PROC_MASKED:
        path = os.path.join(proc, name)
        if os.path.isfile(path):
            _bind(null, path)
    _bind(proc_sys, os.path.join(proc, "sys"))


def _setup_dev(dev: str) -> None:
    mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=755,size=65536k")
    for name in DEVICES:
        info = os.stat(os.path.join("/dev", name))
        os.mknod(os.path.join(dev, name), stat.S_IFCHR | 0o666, info.st_rdev)
        os.chmod(os.path.join(dev, name), 0o666)
    for sub, mode in (("pts", 0o755), ("shm", 0o1777), ("mqueue", 0o755)):
        os.mkdir(os.path.join(dev, sub), mode)
        os.chmod(os.path.join(dev, sub), mode)
    mount("devpts", os.path.join(dev, "pts"), "devpts", MS_NOSUID | _MS_NOEXEC,
          "newinstance,ptmxmode=0666,mode=0620,gid=5")  # fmt: skip
    mount("shm", os.path.join(dev, "shm"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for name, target in (
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, os.path.join(dev, name))


def _setup_system_dirs(base: str, state: str) -> None:
    """A private /dev, procfs with the /proc/sys stand-in and the node's /sys under ``base``."""
    dev = _inside(base, "dev")
    _setup_dev(dev)
    _setup_proc(_inside(base, "proc"), os.path.join(state, PROC_SYS_DIR), os.path.join(dev, "null"))
    _bind(os.path.join(state, SYS_DIR), _inside(base, "sys"))


def _setup_node_dirs(root: str, state: str) -> None:
    """The node root's standard mount points: the system dirs, then /run and /tmp (the node's
    per-boot tmpfs, mounted on the machine's side) bound onto themselves. Why the extra bind: a
    role's ``mount -o remount,noexec /run`` then changes this namespace's mount only, and its
    ``umount /run`` uncovers the very same files (which outside readers such as the kubelet's
    reboot-request check see, and which last until the node's simulated reboot)."""
    _setup_system_dirs(root, state)
    for name in SELF_BOUND_DIRS:
        path = _inside(root, name)
        _bind(path, path, flags=MS_NOSUID | MS_NODEV)


def _pivot(new_root: str) -> None:
    number = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown architecture {os.uname().machine}")
    os.chdir(new_root)
    if _libc.syscall(number, b".", b".") != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"pivot_root {new_root}: {os.strerror(err)}")
    if _libc.umount2(b".", _MNT_DETACH) != 0:  # the old root, stacked under the new one
        err = ctypes.get_errno()
        raise OSError(err, f"detach old root: {os.strerror(err)}")
    os.chdir("/")


def _apply_binds(base: str, binds: list[list[object]]) -> None:
    for source, target, read_only in sorted(binds, key=lambda b: str(b[1]).count("/")):
        src = str(source)
        path = _inside(base, str(target), directory=os.path.isdir(src))
        _bind(src, path, read_only=bool(read_only), recursive=True)


def _build(spec: dict[str, object]) -> None:
    root, state = str(spec["root"]), str(spec["state"])
    view = str(spec["view"])
    binds = spec["binds"]
    assert isinstance(binds, list)
    mount("", "/", "", _MS_REC | _MS_PRIVATE)  # belt and braces: nothing propagates out
    hostname = str(spec["hostname"])
    if not hostname:
        try:
            with open(os.path.join(root, "etc/hostname")) as handle:
                hostname = handle.read().strip()
        except OSError:
            pass
    if hostname:
        _libc.sethostname(hostname.encode(), len(hostname.encode()))
    # The parent has checked that the root is a file system of its own (so a mount point).
    _setup_node_dirs(root, state)
    if view == "host":
        for source, target, read_only in binds:
            _bind(str(source), str(target), read_only=bool(read_only), recursive=True)
    elif view == "node":
        _apply_binds(root, binds)
        _pivot(root)
    else:
        scratch = str(spec["scratch"])
        mount("tmpfs", scratch, "tmpfs", 0, "mode=755")
        upper, work, merged = (os.path.join(scratch, n) for n in ("upper", "work", "root"))
        for path in (upper, work, merged):
            os.mkdir(path)
        mount("overlay", merged, "overlay", 0, f"lowerdir=/,upperdir={upper},workdir={work}")
        _setup_system_dirs(merged, state)
        mount("tmpfs", _inside(merged, "tmp"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
        if spec["host_root_at"]:
            _bind(root, _inside(merged, str(spec["host_root_at"])), recursive=True)
        _apply_binds(merged, binds)
        _pivot(merged)


def _init(spec: dict[str, object]) -> int:
    """PID 1 of the node: build the view, start the command, reap orphans, forward signals."""
    try:
        _build(spec)
    except OSError as exc:
        print(f"nodewright-bridge isolation: {exc}", file=sys.stderr)
        return SETUP_FAILED_EXIT
    argv = [str(a) for a in spec["argv"]]  # type: ignore[attr-defined]  # JSON list
    child = os.fork()
    if child == 0:
        try:
            os.setsid()
            os.chdir(str(spec["cwd"]))
            os.execvpe(argv[0], argv, dict(os.environ))
        except OSError as exc:
            print(f"nodewright-bridge isolation: cannot run {argv[0]}: {exc}", file=sys.stderr)
            os._exit(127 if exc.errno == errno.ENOENT else 126)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue
        if pid == child:
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else (
                128 + os.WTERMSIG(status)
            )  # fmt: skip


if __name__ == "__main__":
    sys.exit(_init(json.loads(sys.argv[1])))
