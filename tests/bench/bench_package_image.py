"""Benchmark: package image build times, size and push time (prints figures; CI does not time).

Run as root on a machine with podman and docker-registry (``make setup``):

    .venv/bin/python tests/bench/bench_package_image.py [--cold]

Figures: importing the sandbox rootfs as a base image, building the agent base (``--cold`` forces
a rebuild; the wheel download then comes from pip's cache after the first run), building a
package on the cached agent base, the image size, and pushing to a local registry.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from nodewright_bridge.sandbox import rootfs
from playbook_adapter import imaging, introspection

ROLE = Path(__file__).resolve().parents[2] / "examples" / "roles" / "sysctl-tuning"


def _timed(label: str, started: float) -> float:
    elapsed = time.monotonic() - started
    print(f"{label:<44} {elapsed:7.1f} s")
    return elapsed


def _registry(state: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    state.mkdir(parents=True, exist_ok=True)
    config = state / "config.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {state / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n",
        encoding="utf-8",
    )
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1):
                break
        except OSError:
            time.sleep(0.1)
    return proc, f"127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cold", action="store_true", help="re-import base, rebuild agent base")
    args = parser.parse_args()
    engine = imaging.detect_engine()
    base_rootfs = rootfs.ensure_base_rootfs()
    base = f"localhost/nwb-base:{base_rootfs.name}"

    started = time.monotonic()
    if args.cold:
        imaging.import_rootfs(engine, base_rootfs, base)
    else:
        imaging.ensure_rootfs_image(engine, base_rootfs, base)
    _timed("base image from rootfs (tar | podman import)", started)
    print(f"{'base image size':<44} {imaging.image_size(engine, base) / 1e6:7.0f} MB")

    started = time.monotonic()
    agent_base = imaging.ensure_agent_base(engine, base, rebuild=args.cold)
    _timed(f"agent base ({'built' if agent_base.built else 'cached'})", started)
    print(f"{'agent base size':<44} {imaging.image_size(engine, agent_base.image) / 1e6:7.0f} MB")

    with tempfile.TemporaryDirectory(prefix="nwb-bench-") as tmp:
        work = Path(tmp)
        role = work / ROLE.name
        shutil.copytree(ROLE, role)
        introspection.write_manifest(role, introspection.introspect_role(role, version="1.3.0"))
        registry, address = _registry(work / "registry")
        try:
            tag = f"{address}/pkgs/{ROLE.name}"
            started = time.monotonic()
            result = imaging.build_package(
                role, engine=engine, tag=tag, base_image=base, now=datetime.now(tz=UTC)
            )
            _timed("package build on the cached agent base", started)
            print(f"{'package image size':<44} {result.size_bytes / 1e6:7.0f} MB")
            started = time.monotonic()
            imaging.push_image(engine, result.image, tls_verify=False)
            _timed("push to a local registry (first push)", started)
            started = time.monotonic()
            imaging.push_image(engine, result.image, tls_verify=False)
            _timed("push again (all layers present)", started)
        finally:
            registry.terminate()
            registry.wait(10)


if __name__ == "__main__":
    main()
