"""Root filesystems for simulated nodes: one cached debootstrap base, a copy-on-write root per node.

Why: exec and podman pods map a hostPath ``/`` to "the node's root filesystem". Each simulated node
needs its own, cheap to create and impossible to confuse with the real machine's ``/``. A Debian
``minbase`` tree with Python (what Ansible modules need) is built once per machine and cached; every
node gets an overlayfs over it (the node's writes land in its own upper directory), or, where
overlayfs cannot be mounted, a copy in a tmpfs of its own. Either way the root is a file system of
the node's own, never a directory on this machine's disk: ``mount -o remount,ro /`` inside a node
reconfigures the file system behind its root (see ``isolation``).

Guarantees:
- The base is built at most once per cache key, even with concurrent callers (a file lock, a
  temporary build directory and an atomic rename; a half-built tree is never used).
- The mirror is the one apt on this machine already uses, read at run time.
- A mounted node root never outlives the process that mounted it (``mounts.track``).

Caveats:
- Building needs root and ``debootstrap``; a cold build downloads ~100 MB and takes ~1 minute.
- A copied root lives in memory (~270 MB a node): its changes last until it is unmounted.
- A node root is only a directory tree. Running anything in it safely needs
  ``nodewright_bridge.sandbox.isolation`` (a chroot alone does not isolate mounts or sysctls).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from nodewright_bridge.sandbox import mounts

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]

# What roles commonly need on a node, kept lean. python3-apt: the apt/package modules import it.
# systemd is installed (not run) so `systemctl enable`/unit files behave offline; procps gives
# `sysctl`, kmod `modprobe`, gpg `apt-key`-style key handling, acl `become_user`, sudo `become`.
BASE_PACKAGES: tuple[str, ...] = (
    "python3",
    "python3-apt",
    "procps",
    "kmod",
    "iproute2",
    "sudo",
    "ca-certificates",
    "gpg",
    "acl",
    "systemd",
)
# Bump when the way the tree is made changes, so old caches are not reused.
ROOTFS_FORMAT = 1
# debootstrap's variant: the smallest tree that still has apt and dpkg.
VARIANT = "minbase"
# Written into the finished tree; its presence marks a complete build.
METADATA_FILE = ".nwb-rootfs.json"
# The tmpfs of a copied node root: a cap (memory is taken as files fill it), ~8x the base tree.
COPY_ROOT_FS_OPTIONS = "size=2g,mode=755"


class RootfsError(Exception):
    """The base root filesystem could not be built or a node root could not be mounted."""


def cache_dir() -> Path:
    """The shared cache directory (``NWB_CACHE_DIR`` or ``~/.cache/nodewright-bridge``)."""
    override = os.environ.get("NWB_CACHE_DIR")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "nodewright-bridge"


def host_suite(os_release: Path = Path("/etc/os-release")) -> str:
    """This machine's Debian codename (the suite the base rootfs is made from)."""
    try:
        text = os_release.read_text()
    except OSError as exc:
        raise RootfsError(f"cannot read {os_release}: {exc}") from exc
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key == "VERSION_CODENAME" and value.strip().strip('"'):
            return value.strip().strip('"')
    raise RootfsError(f"{os_release} has no VERSION_CODENAME")


def _deb822_stanzas(text: str) -> Iterator[dict[str, str]]:
    stanza: dict[str, str] = {}
    last = ""
    for raw in [*text.splitlines(), ""]:
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if stanza:
                yield stanza
            stanza, last = {}, ""
        elif raw[0].isspace() and last:
            stanza[last] += " " + raw.strip()
        else:
            key, _, value = raw.partition(":")
            last = key.strip().lower()
            stanza[last] = value.strip()


def apt_mirror(suite: str, apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror URI apt on this machine uses for ``suite`` (never hard-coded).

    Reads deb822 ``sources.list.d/*.sources`` first, then one-line ``sources.list(.d/*.list)``.
    """
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        for stanza in _deb822_stanzas(path.read_text()):
            if stanza.get("enabled", "yes").lower() == "no":
                continue
            if "deb" not in stanza.get("types", "").split():
                continue
            if suite in stanza.get("suites", "").split() and stanza.get("uris"):
                return stanza["uris"].split()[0]
    lists = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for path in lists:
        if not path.is_file():
            continue
        for raw in path.read_text().splitlines():
            words = [w for w in raw.split("#", 1)[0].split() if not w.startswith("[")]
            if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                return words[1]
    raise RootfsError(f"no apt source for suite {suite!r} under {apt_dir}")


def _arch() -> str:
    out = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() or os.uname().machine


def rootfs_key(suite: str, arch: str, packages: tuple[str, ...] = BASE_PACKAGES) -> str:
    """The cache key: what the tree contains (not where it was downloaded from)."""
    recipe = json.dumps(
        {"f": ROOTFS_FORMAT, "suite": suite, "arch": arch, "variant": VARIANT, "pkgs": packages}
    )
    return f"{suite}-{arch}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _quiet(_: str) -> None:
    return None


def ensure_base_rootfs(progress: Progress = _quiet, *, cache: Path | None = None) -> Path:
    """The cached base root filesystem, built with debootstrap on first use.

    Args:
        progress: receives one human-readable line at a time while building.
        cache: cache directory (default ``cache_dir()``).

    Returns:
        The directory of the finished tree (``<cache>/rootfs/<key>``).
    """
    suite = host_suite()
    key = rootfs_key(suite, _arch())
    base = (cache or cache_dir()) / "rootfs"
    final = base / key
    if (final / METADATA_FILE).is_file():
        return final
    with _locked(base / f"{key}.lock"):
        if (final / METADATA_FILE).is_file():
            return final
        _build(final, suite, progress)
    return final


def _build(final: Path, suite: str, progress: Progress) -> None:
    if shutil.which("debootstrap") is None:
        raise RootfsError("debootstrap is not installed (run: make system-deps)")
    mirror = apt_mirror(suite)
    work = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    if work.exists():
        shutil.rmtree(work)
    for stale in final.parent.glob(f"{final.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)  # a crashed earlier build (we hold the lock)
    progress(f"building the node base rootfs ({suite}, {VARIANT}); cold builds take ~1 minute")
    started = time.monotonic()
    cmd = [
        "debootstrap",
        f"--variant={VARIANT}",
        f"--include={','.join(BASE_PACKAGES)}",
        suite,
        str(work),
        mirror,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    tail: list[str] = []
    for raw in proc.stdout:
        line = raw.rstrip()
        tail = [*tail[-19:], line]
        if line.startswith(("I: Retrieving", "I: Validating", "I: Extracting", "I: Unpacking")):
            continue  # one line per package: too chatty for progress
        progress(line)
    if proc.wait() != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise RootfsError("debootstrap failed:\n" + "\n".join(tail))
    _finish(work, suite)
    (work / METADATA_FILE).write_text(
        json.dumps(
            {
                "suite": suite,
                "variant": VARIANT,
                "packages": list(BASE_PACKAGES),
                "format": ROOTFS_FORMAT,
                "build_seconds": round(time.monotonic() - started, 1),
            }
        )
    )
    work.rename(final)
    progress(f"node base rootfs ready in {time.monotonic() - started:.0f}s")


def _finish(tree: Path, suite: str) -> None:
    """Make the tree behave like a node's disk: no daemons started by installs, no stale caches."""
    policy = tree / "usr/sbin/policy-rc.d"
    policy.write_text(
        "#!/bin/sh\n# nodewright-bridge sandbox node: never start services.\nexit 101\n"
    )
    policy.chmod(0o755)
    (tree / "etc/hostname").write_text("nwb-node\n")
    machine_id = tree / "etc/machine-id"
    machine_id.write_text("")  # each node gets its own on first write, like a fresh image
    for cache in (tree / "var/cache/apt/archives").glob("*.deb"):
        cache.unlink()
    logger.debug("rootfs finished", extra={"suite": suite, "tree": str(tree)})


class RootMode(StrEnum):
    OVERLAY = "overlay"
    COPY = "copy"


@dataclass(frozen=True, slots=True)
class NodeRoot:
    """A node's root filesystem: ``path`` is what hostPath ``/`` means on that node."""

    path: Path
    mode: RootMode
    base: Path
    node_dir: Path


def _mounted_fstype(path: Path) -> str:
    """The type of the file system mounted at ``path`` ("" if none): overlay, tmpfs, ..."""
    target = os.path.realpath(path)
    found = [m.fstype for m in mounts.table() if m.point == target]
    return found[-1] if found else ""


def mount_node_root(base: Path, node_dir: Path, *, copy: bool = False) -> NodeRoot:
    """Give a node a copy-on-write root at ``<node_dir>/root`` over ``base``.

    overlayfs with the node's upper/work directories under ``node_dir`` (so the node's changes
    survive unmount and remount); where overlayfs fails (or with ``copy``), ``base`` copied into a
    tmpfs mounted there (its changes end with the mount). Idempotent: an already mounted root is
    returned as is.
    """
    root = node_dir / "root"
    upper, work = node_dir / "upper", node_dir / "work"
    for path in (root, upper, work):
        path.mkdir(parents=True, exist_ok=True)
    fstype = _mounted_fstype(root)
    if fstype:
        mounts.track(root)  # ours now, if a gone process mounted it
        mode = RootMode.OVERLAY if fstype == "overlay" else RootMode.COPY
        return NodeRoot(root, mode, base, node_dir)
    if not copy:
        options = f"lowerdir={base},upperdir={upper},workdir={work}"
        done = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options, str(root)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0:
            mounts.track(root)
            return NodeRoot(root, RootMode.OVERLAY, base, node_dir)
        logger.warning(
            "overlay mount failed; copying the base into a tmpfs",
            extra={"error": done.stderr.strip()},
        )
    mounts.mount_tmpfs(root, COPY_ROOT_FS_OPTIONS, flags=0)
    copied = subprocess.run(
        ["cp", "-a", f"{base}/.", f"{root}/"], capture_output=True, text=True, check=False
    )
    if copied.returncode != 0:
        mounts.unmount(root)
        raise RootfsError(f"cannot copy the base rootfs to {root}: {copied.stderr.strip()}")
    return NodeRoot(root, RootMode.COPY, base, node_dir)


def unmount_node_root(node: NodeRoot, *, remove: bool = False) -> None:
    """Unmount a node root (an overlay's changes stay in ``upper``); ``remove`` deletes everything.

    What is mounted below the root (the node's per-boot file systems, if ``isolation`` did not
    release them) goes with it.
    """
    point = os.path.realpath(node.path)
    below = [Path(m.point) for m in mounts.table() if m.point.startswith(point + "/")]
    if below or _mounted_fstype(node.path):
        done = subprocess.run(["umount", "-R", point], capture_output=True, check=False)
        if done.returncode != 0:  # still busy (a process holds it): detach now, free later
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    for path in [*below, node.path]:
        mounts.untrack(path)
    if remove and not _mounted_fstype(node.path):
        shutil.rmtree(node.node_dir, ignore_errors=True)
