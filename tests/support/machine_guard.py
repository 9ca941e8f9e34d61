"""What sandbox tests read on the real machine to prove a role on a simulated node left it alone.

Why a shared helper: integration and e2e tests both compare this machine's mount table and kernel
settings before and after roles ran on simulated nodes. Other tests on the same box mount and
unmount node roots at any moment, so the comparison covers the machine's own system mounts (``/``,
``/proc``, ``/sys``, ``/dev``, ``/run``, ``/tmp`` and everything under the first four and ``/run``),
the ones a leaked ``mount`` or ``sysctl`` would change, and not the sandboxes' node roots. Nor
the network namespaces container runtimes bind under ``/run/netns`` while their containers run
(``nsfs`` mounts: with the suite on two pytest-xdist workers, the other worker's podman tests
make and drop them at any moment).
"""

from __future__ import annotations

from pathlib import Path

SYSTEM_MOUNTS = ("/", "/proc", "/sys", "/dev", "/run", "/tmp")
_SYSTEM_TREES = ("/proc/", "/sys/", "/dev/", "/run/")


def _fs_type(fields: list[str]) -> str:
    """The file-system type of a mountinfo line split into fields (after the ``-``)."""
    return fields[fields.index("-", 6) + 1]


def _watched(fields: list[str], extra: tuple[str, ...] = ()) -> bool:
    point = fields[4]
    if not (point in SYSTEM_MOUNTS or point.startswith(_SYSTEM_TREES) or point in extra):
        return False
    return _fs_type(fields) != "nsfs"


def machine_mounts() -> list[str]:
    """This process's ``/proc/self/mountinfo`` lines for the machine's system mounts, in order."""
    with open("/proc/self/mountinfo") as handle:
        lines = handle.read().splitlines()
    return [line for line in lines if _watched(line.split())]


def mount_options(mountinfo: str) -> dict[str, set[str]]:
    """Mount point -> its per-mount options, from mountinfo text (a stacked mount: the top one)."""
    options: dict[str, set[str]] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 5:
            options[fields[4]] = set(fields[5].split(","))
    return options


def machine_mount_flags(extra: tuple[str, ...] = ()) -> dict[str, tuple[str, str]]:
    """Mount point -> (per-mount options, file-system options) of the machine's system mounts and
    of the mount points in ``extra``; the top mount where several are stacked. Why options only:
    other tests may add or drop mounts under /run or /dev meanwhile, but an option change (``ro``)
    on one of the machine's mounts must never happen."""
    with open("/proc/self/mountinfo") as handle:
        lines = handle.read().splitlines()
    flags: dict[str, tuple[str, str]] = {}
    for line in lines:
        fields = line.split()
        if _watched(fields, extra):
            flags[fields[4]] = (fields[5], fields[fields.index("-", 6) + 3])
    return flags


def host_sysctl(rel: str) -> str:
    """This machine's value of ``/proc/sys/<rel>`` (``rel`` like ``vm/swappiness``)."""
    return (Path("/proc/sys") / rel).read_text().strip()
