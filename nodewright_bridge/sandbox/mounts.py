"""The sandbox's mounts on this machine: made safely, found in the mount table, never leaked.

Why a module: node roots and each node's per-boot file systems are this machine's mounts, and
three things must hold for all of them. (1) They are made without following a symlink a node may
have put at the mount point (``mount_tmpfs``). (2) Code can tell whether a directory is a file
system of its own, used by no mount outside it (``private_filesystem``): a ``mount -o remount,ro``
without ``bind`` inside a node view reconfigures the file system behind the mount it names, so
every mount a node view shows must be such a one, never a bind of a directory on this machine's
disk. (3) They never outlive the process that made them (``track``), as follows.

Node roots (overlay, or a tmpfs holding a copy) and each node's per-boot file systems (tmpfs
for ``/proc/sys``, ``/sys``, ``/run``, ``/tmp``) are mounted in the machine's own mount namespace,
where outside readers (the kubelet's reboot-request check, tests) see them. A process that ends
without releasing its nodes (SIGKILL, a crash, an exit that skips ``finally``) would leave them
mounted under directories nobody owns any more - and a later ``rm -r`` of such a directory would
empty them and then fail. So the first ``track`` starts a small watcher process (``python -I -S``,
standard library only) that reads a pipe only this process writes: each tracked mount point is
announced on it and withdrawn by ``untrack``; when the pipe closes - this process is gone, however
it ended - the watcher detaches what is still announced, deepest first, and exits.

Guarantees: a detach is lazy (``MNT_DETACH``: gone from the tree at once even while busy) and never
follows a symlink at the mount point. The watcher runs in its own session and ignores SIGINT and
SIGHUP, so a terminal's Ctrl-C reaching this process's group does not end it first.
A child forked from this process (``os.fork``) closes its copy of the pipe and owns none of
these mounts.
Caveats: SIGKILL of the watcher itself leaves the mounts (nothing else watches); if it dies while
this process lives, the next ``track``/``untrack`` starts a new one told everything held.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from nodewright_bridge.sandbox.isolation_init import MS_NODEV, MS_NOSUID, mount

__all__ = [
    "MS_NODEV",
    "MS_NOSUID",
    "Mount",
    "mount_tmpfs",
    "not_private",
    "private_filesystem",
    "table",
    "track",
    "unmount",
    "untrack",
]

_MNT_DETACH = 2
_UMOUNT_NOFOLLOW = 8
_libc = ctypes.CDLL(None, use_errno=True)
_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True, slots=True)
class Mount:
    """One line of ``/proc/self/mountinfo``: ``device`` (major:minor) names the file system."""

    device: str
    point: str
    options: str
    fstype: str
    super_options: str


def _unescape(field: str) -> str:
    raw = _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)
    return raw.encode("latin-1", "surrogateescape").decode("utf-8", "surrogateescape")


def table() -> list[Mount]:
    """This process's mounts, in mount order (for one mount point, the last one is on top)."""
    with open("/proc/self/mountinfo", encoding="latin-1") as handle:
        lines = handle.read().splitlines()
    found = []
    for line in lines:
        fields = line.split()
        dash = fields.index("-", 6)
        found.append(
            Mount(fields[2], _unescape(fields[4]), fields[5], fields[dash + 1], fields[dash + 3])
        )
    return found


def not_private(paths: Iterable[Path]) -> list[Path]:
    """Those of ``paths`` that are not a mount point of a file system of their own (one that no
    mount outside that path uses), from one read of the mount table."""
    mounts = table()
    bad = []
    for path in paths:
        point = os.path.realpath(path)
        here = [m for m in mounts if m.point == point]
        inside = point.rstrip("/") + "/"
        if not here or any(
            m.device == here[-1].device and m.point != point and not m.point.startswith(inside)
            for m in mounts
        ):
            bad.append(path)
    return bad


def private_filesystem(path: Path) -> bool:
    """True when ``path`` is a mount point whose file system no mount outside ``path`` uses."""
    return not not_private([path])


def mount_tmpfs(path: Path, options: str, *, flags: int = MS_NOSUID | MS_NODEV) -> None:
    """A fresh tmpfs on directory ``path`` (a symlink there is refused, never followed), tracked.

    ``options`` are tmpfs's own (``size=16m,mode=755``); ``flags`` mount flags (``MS_NOSUID``...).
    """
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY)
    try:
        mount("tmpfs", f"/proc/self/fd/{fd}", "tmpfs", flags, options)
    finally:
        os.close(fd)
    track(path)


def unmount(path: Path) -> None:
    """Unmount what is mounted at ``path`` (detached lazily if busy; nothing there is fine)."""
    target = os.fsencode(_key(path))
    if _libc.umount2(target, _UMOUNT_NOFOLLOW) != 0:
        err = ctypes.get_errno()
        if err == errno.EBUSY:
            if _libc.umount2(target, _MNT_DETACH | _UMOUNT_NOFOLLOW) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"detach {path}: {os.strerror(err)}")
        elif err not in (errno.EINVAL, errno.ENOENT):  # EINVAL: not a mount point
            raise OSError(err, f"umount {path}: {os.strerror(err)}")
    untrack(path)


# (3) The watcher: the pipe's lines are "+<path>" / "-<path>"; at EOF it detaches what is left.
_WATCHER = r"""
import ctypes, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
held = set()
for line in sys.stdin.buffer:
    path = line[1:].rstrip(b"\n")
    if line[:1] == b"+":
        held.add(path)
    else:
        held.discard(path)
libc = ctypes.CDLL(None, use_errno=True)
for path in sorted(held, key=lambda p: -p.count(b"/")):
    libc.umount2(path, 2 | 8)  # MNT_DETACH | UMOUNT_NOFOLLOW
"""


class _Guard:
    """This process's watcher and the mount points it has been told about."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.watcher: subprocess.Popen[bytes] | None = None
        self.held: set[str] = set()

    def forget(self) -> None:
        """After a fork, in the child: it owns none of these mounts, nor the watcher's pipe."""
        if self.watcher is not None and self.watcher.stdin is not None:
            with contextlib.suppress(OSError):
                self.watcher.stdin.close()
        self.lock, self.watcher, self.held = threading.Lock(), None, set()

    def send(self, line: str) -> None:
        """Write one line to the watcher; a new watcher is told all of ``held`` instead (which
        already includes the change ``line`` announces)."""
        if self.watcher is not None and self.watcher.poll() is None:
            assert self.watcher.stdin is not None
            try:
                self.watcher.stdin.write(line.encode("utf-8", "surrogateescape"))
                self.watcher.stdin.flush()
                return
            except BrokenPipeError:
                pass
        # First use, or the watcher died (then it is told everything again).
        self.watcher = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _WATCHER],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert self.watcher.stdin is not None
        held = "".join(f"+{path}\n" for path in sorted(self.held))
        self.watcher.stdin.write(held.encode("utf-8", "surrogateescape"))
        self.watcher.stdin.flush()


_guard = _Guard()
os.register_at_fork(after_in_child=_guard.forget)


def _key(path: Path) -> str:
    """The mount point's name: its parent resolved, its last part as is (a symlink put there
    later must not change the name)."""
    absolute = os.path.abspath(path)
    text = os.path.join(os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute))
    if "\n" in text:
        raise ValueError(f"mount point {text!r} contains a newline")
    return text


def track(path: Path) -> None:
    """``path`` is a mount point this process now owns (made, or taken over from a process that
    is gone): detach it if this process ends before ``untrack``. Idempotent."""
    key = _key(path)
    with _guard.lock:
        if key not in _guard.held:
            _guard.held.add(key)
            _guard.send(f"+{key}\n")


def untrack(path: Path) -> None:
    """``path`` was unmounted by this process (or never tracked): forget it."""
    key = _key(path)
    with _guard.lock:
        if key in _guard.held:
            _guard.held.discard(key)
            _guard.send(f"-{key}\n")
