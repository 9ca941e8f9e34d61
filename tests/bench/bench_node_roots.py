"""Prints the cost of simulated-node plumbing: overlay root per node, isolation per command,
podman run overhead. Run as root: `.venv/bin/python tests/bench/bench_node_roots.py [N]`.
(The cold debootstrap time is printed by the first `ensure_base_rootfs` on a machine.)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nodewright_bridge.sandbox import isolation, rootfs

ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
PODMAN = ("podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs")


def timed(fn: object, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - start)
    return out


def show(label: str, samples: list[float]) -> None:
    print(f"{label:48s} median {statistics.median(samples) * 1000:8.1f} ms  "
          f"max {max(samples) * 1000:8.1f} ms  (n={len(samples)})")  # fmt: skip


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    base = rootfs.ensure_base_rootfs(print)
    size = subprocess.run(["du", "-sm", str(base)], capture_output=True, text=True, check=True)
    print(f"base rootfs {base.name}: {size.stdout.split()[0]} MB")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        made: list[rootfs.NodeRoot] = []

        def mount_one() -> None:
            made.append(rootfs.mount_node_root(base, work / f"n{len(made)}"))

        show("overlay node root mount", timed(mount_one, runs))
        node = made[0]
        state = work / "iso"

        def boot() -> None:
            isolation.prepare_node(node.path, state, str(time.time()))

        show("new boot (tmpfs + /proc/sys seed) per node", timed(boot, 5))
        show("plain subprocess `true`", timed(lambda: subprocess.run(["true"], check=True), runs))
        for view in isolation.View:

            def one(view: isolation.View = view) -> None:
                proc = isolation.run_isolated(node.path, state, ["true"], env=ENV, view=view)
                assert proc.wait() == 0

            show(f"isolated `true` ({view.value} view)", timed(one, runs))
        image = f"localhost/nwb-test-base:{base.name}"
        if subprocess.run([*PODMAN, "image", "exists", image], check=False).returncode == 0:
            cmd = [*PODMAN, "run", "--rm", "--privileged", "--network=host",
                   f"-v={node.path}:/host", image, "true"]  # fmt: skip
            show("podman run --rm --privileged `true`",
                 timed(lambda: subprocess.run(cmd, check=True), max(3, runs // 4)))  # fmt: skip
        show("release (per-boot file systems unmounted)",
             timed(lambda: isolation.release_node(node.path, state), 1))  # fmt: skip
        for one_root in made:
            rootfs.unmount_node_root(one_root)


if __name__ == "__main__":
    main()
