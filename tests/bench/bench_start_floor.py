"""Benchmark: the fastest any controller could roll out on this machine (the machine's floor).

Why: the rollout benchmark compares our time with the sum of the batches' pod durations, a floor
no controller reaches: every pod start is an API write the server must take, and the simulated
kubelet's start and end reports are API writes too. This runs the same sandbox, fleet, batch
sizes and pod duration as ``bench_rollout_1000.py`` with our controller replaced by the least a
controller must do: a launcher process that creates each batch's pods (the very manifests our
controller builds, ``podspec.build_pod``, 16 creates at once as ours) and starts the next batch
the moment its watch shows the last pod of the batch ended. It writes no Node, deletes no pod,
posts no Event and plans nothing, and there is no validation pod. So its time is a lower bound
for any controller here; our overhead over it is what our own work costs.

Prints the launcher's rollout time against the sum of the batches, the per-batch timeline in
``bench_rollout_1000``'s format (start spread, gap after the previous batch, how late the
kubelet's end reports were answered) and CPU per process.

Run: ``.venv/bin/python tests/bench/bench_start_floor.py [--nodes 1000] [--seconds 10]``.
Not collected by pytest (file name) and asserts nothing: it prints figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from bench_rollout_1000 import (  # tests/bench: the script's folder
    FLEET_LABEL,
    ROOT,
    TimedRunner,
    cr_body,
    policy_body,
    prepared,
    timeline,
)
from profiling import ProcessCpu

from lifecycle import pod_records
from lifecycle.validation import load_nodewright
from nodewright_bridge.commands.common import connect
from nodewright_bridge.controller import podspec
from nodewright_bridge.controller.snapshot import meta_of, pod_phase
from nodewright_bridge.errors import ApiError
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.rest import Rest
from nodewright_bridge.sandbox import Sandbox
from nodewright_bridge.sandbox.kubelet.kubelet import ENDED_PHASES

CREATES_AT_ONCE = 16  # as the controller's node writes (node_writes.NODE_CONCURRENCY)
PACKAGE = "tuning"


def launch(kubeconfig: str, cr_name: str, plan_file: Path) -> None:
    """The launcher process: each batch's pods created, the next batch once all ended."""
    rest = connect(kubeconfig, None)
    cr = load_nodewright(rest.get(resources.NODEWRIGHTS, cr_name))
    batches: list[list[str]] = json.loads(plan_file.read_text())
    ended: set[str] = set()
    seen = threading.Condition()
    selector = f"{podspec.LABEL_CR}={cr_name}"

    def note(pods: list[dict[str, object]]) -> None:
        done = {str(meta_of(p).get("name")) for p in pods if pod_phase(p) in ENDED_PHASES}
        if done - ended:
            with seen:
                ended.update(done)
                seen.notify_all()

    def watch() -> None:
        """List, then watch from the list; again whenever the watch ends (as an informer)."""
        while True:
            try:
                listed = rest.list(
                    resources.PODS, namespace=podspec.NAMESPACE, label_selector=selector
                )
                note(listed.get("items") or [])
                version = str((listed.get("metadata") or {}).get("resourceVersion", ""))
                stream = rest.watch(
                    resources.PODS,
                    namespace=podspec.NAMESPACE,
                    label_selector=selector,
                    resource_version=version,
                    timeout_seconds=300,
                )
                for _, pod in stream:
                    note([pod])
            except ApiError as exc:
                print(f"launcher: watch ended ({exc}); listing again", file=sys.stderr)

    threading.Thread(target=watch, daemon=True).start()
    print("ready", flush=True)  # imported and watching: the bench starts the clock with "go"
    sys.stdin.readline()
    with ThreadPoolExecutor(max_workers=CREATES_AT_ONCE) as pool:
        for number, nodes in enumerate(batches, 1):
            record = json.dumps({"compartment": "default", "batch": number, "order": 0})
            pods = [
                podspec.build_pod(
                    podspec.PodRequest(
                        cr=cr,
                        package_name=PACKAGE,
                        node=node,
                        stages=("apply", "config"),
                        resource_id=f"floor-{number}",
                        node_order=0,
                        annotations={pod_records.BATCH_ANNOTATION: record},
                    )
                )
                for node in nodes
            ]
            list(pool.map(partial(_create, rest), pods))
            names = {str(meta_of(p).get("name")) for p in pods}
            with seen:
                seen.wait_for(partial(set.issubset, names, ended))


def _create(rest: Rest, pod: dict[str, object]) -> None:
    rest.create(resources.PODS, pod, namespace=podspec.NAMESPACE, metadata_only=True)


def run(nodes: int, seconds: float, budget: int, timeout: float) -> None:
    work = Path(tempfile.mkdtemp(prefix="nwb-bench-floor-"))
    print(f"sandbox: {nodes} simulate-mode nodes, package pods take {seconds:g}s; state {work}")
    runner = TimedRunner(seconds)
    box = Sandbox(
        work / "sandbox", nodes=nodes, labels=FLEET_LABEL, runner=runner, heartbeat_seconds=300.0
    )
    box.start()
    assert box.kubelet is not None and box.control_plane is not None
    box.kubelet.on_ended_report = runner.ended_report
    launcher: subprocess.Popen[str] | None = None
    try:
        rest, names, sizes, floor = prepared(box, budget, seconds)
        plan, at = [], 0
        for size in sizes:
            plan.append(names[at : at + size])
            at += size
        plan_file = work / "batches.json"
        plan_file.write_text(json.dumps(plan))
        rest.create(resources.DEPLOYMENT_POLICIES, policy_body(budget))
        body = cr_body()
        meta = body["metadata"]
        assert isinstance(meta, dict)
        rest.create(resources.NODEWRIGHTS, body)  # the pods' owner; no controller runs
        argv = [sys.executable, __file__, "--launch", str(box.kubeconfig), str(meta["name"])]
        launcher = subprocess.Popen(
            [*argv, str(plan_file)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert launcher.stdin is not None and launcher.stdout is not None
        if launcher.stdout.readline().strip() != "ready":
            raise SystemExit("the launcher did not start; see its error above")
        pids = {p.name: p.popen.pid for p in box.control_plane.processes}
        pids["launcher"] = launcher.pid
        pids["simulated kubelet+bench"] = os.getpid()
        cpu = ProcessCpu(pids)
        began, before = time.monotonic(), cpu.read()
        launcher.stdin.write("go\n")
        launcher.stdin.flush()
        while len(runner.reported) < nodes:
            if launcher.poll() is not None:
                raise SystemExit(f"the launcher exited ({launcher.returncode}) too soon")
            if time.monotonic() - began > timeout:
                raise SystemExit(
                    f"not done after {timeout:g}s: {len(runner.starts)} pods started, "
                    f"{len(runner.reported)} ends reported"
                )
            time.sleep(0.05)
        total = max(runner.reported.values()) - began
        after = cpu.read()
        launcher.wait(60)
    finally:
        if launcher is not None and launcher.poll() is None:
            launcher.kill()
        box.stop()
    print()
    print(f"nodes                      {nodes}")
    print(f"batches                    {len(sizes)} {sizes}")
    print(f"launcher rollout time      {total:.1f}s (launch -> last end answered)")
    print(
        f"floor (sum of batches)     {floor:.1f}s; overhead {100 * (total - floor) / floor:+.1f}%"
    )
    print("timeline (simulated kubelet; pods run exactly their duration)")
    print("\n".join(timeline(runner.starts, sizes, seconds, began, runner)))
    print(f"CPU per process, launch -> last end ({total:.1f}s)")
    print("\n".join(ProcessCpu.lines(before, after, total)))


def main() -> None:
    if sys.argv[1:2] == ["--launch"]:
        launch(sys.argv[2], sys.argv[3], Path(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0, help="package pod duration")
    parser.add_argument("--budget", type=int, default=100, help="policy budget percent")
    parser.add_argument("--timeout", type=float, default=1200.0)
    args = parser.parse_args()
    run(args.nodes, args.seconds, args.budget, args.timeout)


if __name__ == "__main__":
    main()
