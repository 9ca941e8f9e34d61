"""Benchmark: 1,000 simulate-mode nodes - time until all are Ready, idle CPU over 30 s, then
(with --pods N) how long N simulated package pods, one per node, take from create to Succeeded.

Run: .venv/bin/python tests/bench/bench_sandbox_scale.py [--nodes 1000] [--idle 30] [--pods 1000]
Prints figures; asserts nothing about time (machines differ).
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import tempfile
import time
import urllib.request
from pathlib import Path

from nodewright_bridge.sandbox import Sandbox
from nodewright_bridge.sandbox.kubelet.runners import (
    DURATION_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
)

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / CLOCK_TICKS


def _ready_nodes(box: Sandbox) -> int:
    pki = box.kubeconfig.parent / "pki"
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    with urllib.request.urlopen(f"{box.server}/api/v1/nodes", context=context, timeout=60) as resp:
        items = json.load(resp)["items"]
    return sum(
        1
        for node in items
        if any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])
        and not node["spec"].get("taints")
    )


def _package_pods(box: Sandbox, nodes: list[str], count: int) -> None:
    api = box.api
    assert api is not None
    api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "bench"}})
    while api.get("/api/v1/namespaces/bench/serviceaccounts/default", ok_missing=True) is None:
        time.sleep(0.2)
    began = time.monotonic()
    for i in range(count):
        api.request(
            "POST",
            "/api/v1/namespaces/bench/pods",
            body={
                "metadata": {
                    "name": f"pkg-{i:04d}",
                    "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
                    "annotations": {DURATION_ANNOTATION: "1s"},
                },
                "spec": {
                    "nodeName": nodes[i % len(nodes)],
                    "restartPolicy": "Never",
                    "containers": [{"name": "agent", "image": "registry.invalid/pkg:1"}],
                },
            },
        )
    created = time.monotonic() - began
    while True:
        listed = api.get("/api/v1/namespaces/bench/pods") or {}
        done = sum(1 for p in listed.get("items", []) if p["status"].get("phase") == "Succeeded")
        if done >= count:
            break
        time.sleep(0.5)
    print(f"{count} package pods created (one client, serial): {created:6.1f} s")
    print(f"{count} package pods Succeeded (1 s runs):         {time.monotonic() - began:6.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--pods", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nwb-bench-") as tmp:
        box = Sandbox(Path(tmp), nodes=0)
        began = time.monotonic()
        box.start()
        plane_seconds = time.monotonic() - began
        assert box.kubelet is not None and box.control_plane is not None
        try:
            began = time.monotonic()
            names = [f"bench-{i:04d}" for i in range(args.nodes)]
            box.kubelet.add_nodes(names, labels={"bench": "scale"})
            registered = time.monotonic() - began
            while _ready_nodes(box) < args.nodes:
                time.sleep(0.5)
            all_ready = time.monotonic() - began
            print(f"control plane up:          {plane_seconds:6.1f} s")
            print(f"{args.nodes} nodes registered:  {registered:6.1f} s")
            print(f"{args.nodes} nodes Ready:       {all_ready:6.1f} s")
            components = {p.name: p.pid for p in box.control_plane.processes}
            components["kubelet (this process)"] = os.getpid()
            before = {name: _cpu_seconds([pid]) for name, pid in components.items()}
            time.sleep(args.idle)
            print(f"idle CPU over {args.idle:.0f} s (100% = one core):")
            for name, pid in components.items():
                used = _cpu_seconds([pid]) - before[name]
                print(f"  {name:28s} {100 * used / args.idle:6.1f} %")
            if args.pods:
                _package_pods(box, names, args.pods)
        finally:
            box.stop()


if __name__ == "__main__":
    main()
