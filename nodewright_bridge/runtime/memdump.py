"""A debugging aid: where the controller's memory goes (``NWB_MEMDUMP``, ``NWB_MEMDUMP_SITES``).

Why: the controller's peak RSS at thousands of nodes is a target (the rollout benchmark prints
it), and "what holds the memory" is the question every change to it starts from. With
``NWB_MEMDUMP=/some/file`` in its environment, ``nwb controller`` appends to that file on every
``SIGUSR1`` its RSS and high-water mark and the totals of CPython's small-object allocator (bytes
in live blocks against arenas held: what RSS holds beyond live objects). With
``NWB_MEMDUMP_SITES=1`` as well it starts :mod:`tracemalloc` (one frame per allocation) and lists
the top allocation sites by file:line instead; CPython then reports no allocator totals, and
tracing costs CPU and memory of its own (several times slower; the RSS includes the traces).
Without ``NWB_MEMDUMP`` nothing is installed: no cost.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from types import FrameType

ENV = "NWB_MEMDUMP"
SITES_ENV = "NWB_MEMDUMP_SITES"
TOP_SITES = 40


def install(target: str | None, *, sites: bool = False) -> bool:
    """Dump to ``target`` on SIGUSR1 (``sites``: trace allocations too); nothing when empty."""
    if not target:
        return False
    path = Path(target)
    if sites:
        tracemalloc.start(1)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        dump(path)

    signal.signal(signal.SIGUSR1, on_signal)
    return True


def dump(path: Path) -> None:
    """Append the RSS figures and the allocator totals or top allocation sites to ``path``."""
    lines = [
        f"== {time.strftime('%H:%M:%S')} {_status_line('VmRSS')} {_status_line('VmHWM')}",
        f"  rss by mapping: {_rss_by_mapping()}",
        "  gc collections/collected/uncollectable by generation: "
        + " ".join(
            f"{g['collections']}/{g['collected']}/{g['uncollectable']}" for g in gc.get_stats()
        )
        + f"; pending {gc.get_count()}",
    ]
    if not tracemalloc.is_tracing():
        lines.extend(_pymalloc_summary())
    else:
        current, peak = tracemalloc.get_traced_memory()
        lines.append(f"  traced {current / 2**20:.1f} MB (peak {peak / 2**20:.1f} MB)")
        for stat in tracemalloc.take_snapshot().statistics("lineno")[:TOP_SITES]:
            frame = stat.traceback[0]
            lines.append(
                f"{stat.size / 2**20:8.2f} MB {stat.count:9d} blocks  "
                f"{frame.filename}:{frame.lineno}"
            )
    with path.open("a", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")


_PYMALLOC_KEYS = ("arenas highwater", "arenas allocated current", "bytes in", "bytes lost to")


def _pymalloc_summary() -> list[str]:
    """The totals of ``sys._debugmallocstats()`` (it writes to fd 2, so fd 2 is lent a file)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as out:
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode(errors="replace")
    rows = (line.lstrip("# ").strip() for line in text.splitlines())
    return [f"  pymalloc {row}" for row in rows if row.startswith(_PYMALLOC_KEYS)]


def _rss_by_mapping() -> str:
    """Resident kB of the C heap, of anonymous mappings (pymalloc arenas, thread stacks, big
    blocks, other threads' malloc arenas) and of files (the interpreter, libraries)."""
    totals = {"heap": 0, "anon": 0, "files": 0}
    where = "anon"
    try:
        with open("/proc/self/smaps", encoding="utf-8") as smaps:
            for line in smaps:
                head = line.split(maxsplit=6)
                if "-" in head[0] and len(head) >= 5:  # a mapping's first line
                    name = head[5].strip() if len(head) > 5 else ""
                    where = "files" if name.startswith("/") else "anon"
                    if name == "[heap]":
                        where = "heap"
                elif head[0] == "Rss:":
                    totals[where] += int(head[1])
    except OSError:
        return "?"
    return " ".join(f"{key} {kb // 1024} MB" for key, kb in totals.items())


def _status_line(field: str) -> str:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return " ".join(line.split())
    except OSError:
        pass
    return f"{field}: ?"
