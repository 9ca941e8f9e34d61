"""Benchmark: the controller image's size and what makes it up (prints figures; nothing asserted).

Run as root on a machine with podman (``make setup``):

    .venv/bin/python tests/bench/bench_controller_image.py [--rebuild]

Figures: build time (``--rebuild`` forces a build; otherwise an identical build is re-used), the
image size against the 250 MB target, the slim Python base's share, and the largest installed
distributions in the image's venv (measured inside the image, byte code included).
"""

from __future__ import annotations

import argparse
import json
import time

from nodewright_bridge.images.controller import build_controller_image
from nodewright_bridge.sandbox import rootfs
from playbook_adapter import imaging

TARGET_MB = 250
_MEASURE = """
import json, os
site = '/opt/nwb/lib/python3.11/site-packages'
def size(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(root, name)).st_size
    return total
parts = {name: size(os.path.join(site, name)) for name in os.listdir(site)}
print(json.dumps({"venv": size('/opt/nwb'), "usr": size('/usr'), "parts": parts}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rebuild", action="store_true", help="build even if unchanged")
    args = parser.parse_args()
    engine = imaging.detect_engine("podman")
    started = time.monotonic()
    result = build_controller_image(engine, rootfs.ensure_base_rootfs(), rebuild=args.rebuild)
    elapsed = time.monotonic() - started
    base_mb = imaging.image_size(engine, result.base_image) / 1e6
    size_mb = result.size_bytes / 1e6
    print(f"{'image':<36} {result.image}")
    print(f"{'build (' + ('built' if result.built else 're-used') + ')':<36} {elapsed:7.1f} s")
    print(f"{'image size':<36} {size_mb:7.1f} MB (target < {TARGET_MB} MB)")
    print(f"{'  slim Python base':<36} {base_mb:7.1f} MB ({result.base_image})")
    shown = engine.run(
        [
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "python3",
            result.image,
            "-c",
            _MEASURE,
        ]
    )
    measured = json.loads(shown.stdout)
    print(f"{'  /opt/nwb (venv, byte code incl.)':<36} {measured['venv'] / 1e6:7.1f} MB")
    largest = sorted(measured["parts"].items(), key=lambda item: -item[1])[:8]
    for name, size in largest:
        print(f"{'    ' + name:<36} {size / 1e6:7.1f} MB")


if __name__ == "__main__":
    main()
