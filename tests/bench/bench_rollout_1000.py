"""Benchmark: a rollout over 1,000 simulated nodes with the real controller.

One package whose pods take 10 s (simulate mode), an exponential policy. Prints:
- total rollout time (CR created -> Ready=True) against the floor: the sum of the batch durations,
  i.e. (number of batches the offline planner predicts) x (pod duration);
- API requests per node (the controller's own request counter, scraped from its /metrics), by
  verb, resource and response code, and the requests still sent in the 10 s after Ready;
- the controller's peak RSS and CPU seconds (``/usr/bin/time -v`` around ``nwb controller``);
- the CR status size in bytes (compact JSON);
- reconciles and the time they took (the controller's own histogram);
- when the package spec's validation pod ran (check before cordon: one pod before batch 1);
- a per-batch timeline from the simulated kubelet's side: when each batch's first and last pod
  started (the spread is API throughput: every start is a Node write, a Pod create and the
  kubelet's status write) and the gap between a batch's last pod ending and the next batch's
  first pod starting (noticing, planning and writing), and how late the kubelet's reports of
  the batch's pod ends were answered (median/most): the controller learns of an end only then,
  so a late report is the API server's (or the simulated kubelet's) share of a gap.
Targets: within 10 % of the floor, under 150 MB RSS, CR status under 20 KB.

Run: ``.venv/bin/python tests/bench/bench_rollout_1000.py [--nodes 1000] [--seconds 10]``;
``--interrupt`` gives the package a service interrupt (every node is cordoned and drained),
``--preflight`` turns check mode on: simulated check pods find every node compliant, so the
rollout is a full-fleet no-op whose time is about one round of check pods and whose cordons
(interrupt pods) are 0.
Not collected by pytest (file name) and asserts nothing: it prints figures.

The pods' 10 s come from the sandbox side: the benchmark's kubelet runner adds the
``sandbox.nodewright.io/duration`` annotation (docs/node-pod-contract.md, "In the sandbox") to
every package pod it starts, so the controller's pod spec needs no sandbox-only hook.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from profiling import (  # tests/bench: the script's folder
    ApiServerProfile,
    ControllerProfile,
    ProcessCpu,
)

from lifecycle import simulation
from lifecycle.rollout import NodeView
from lifecycle.validation import load_nodewright, load_policy
from nodewright_bridge.commands import demo
from nodewright_bridge.commands.common import connect
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.rest import Rest
from nodewright_bridge.sandbox import Sandbox
from nodewright_bridge.sandbox.kubelet.nodes import SimNode
from nodewright_bridge.sandbox.kubelet.runners import (
    DURATION_ANNOTATION,
    ContainerSpec,
    SimulatedContainer,
    SimulateRunner,
)

ROOT = Path(__file__).resolve().parents[2]
FLEET_LABEL = {"bench.nodewright.io/fleet": "rollout"}
# After Ready the bench keeps the controller running this long and counts what it still sends.
AFTER_READY_SECONDS = 10.0


class TimedRunner(SimulateRunner):
    """Simulate mode where every package pod takes ``seconds`` (unless annotated otherwise).

    The validation pod (one, before the first batch) keeps simulate mode's default second and is
    timed apart: it is not part of any batch.
    """

    def __init__(self, seconds: float, check_seconds: float = 5.0) -> None:
        self.seconds = seconds
        self.check_seconds = check_seconds
        self.starts: list[float] = []  # time.monotonic() of every package pod start
        self.uids: dict[float, str] = {}  # ... and the pod started then
        # time.monotonic() when the API answered each package pod's first ended report
        self.reported: dict[str, float] = {}
        self.validations: list[float] = []  # ... and of every validation pod start
        self.checks: list[float] = []  # ... and of every check-mode (preflight) pod start
        self.interrupts = 0  # interrupt pods: each one follows a cordon and a drain

    def start(self, node: SimNode, spec: ContainerSpec) -> SimulatedContainer:
        if spec.is_validation_pod:
            self.validations.append(time.monotonic())
            return super().start(node, spec)
        check = "--check" in spec.args
        seconds = self.check_seconds if check else self.seconds
        if spec.is_package_pod and DURATION_ANNOTATION not in spec.pod_annotations:
            notes = {**spec.pod_annotations, DURATION_ANNOTATION: f"{seconds:g}s"}
            spec = replace(spec, pod_annotations=notes)
        if spec.is_package_pod and check:
            self.checks.append(time.monotonic())
        elif spec.is_package_pod and spec.args[:1] == ("interrupt",):
            self.interrupts += 1
        elif spec.is_package_pod:
            self.starts.append(time.monotonic())
            self.uids[self.starts[-1]] = spec.pod_uid
        return super().start(node, spec)

    def ended_report(self, uid: str, phase: str) -> None:
        self.reported.setdefault(uid, time.monotonic())

    def report_lags(self, chunk: list[float], seconds: float) -> list[float]:
        """Per pod of ``chunk`` (start times): how long after its end its report was answered."""
        lags = []
        for start in chunk:
            answered = self.reported.get(self.uids.get(start, ""))
            if answered is not None:
                lags.append(answered - (start + seconds))
        return lags

    def last_answered(self, chunk: list[float]) -> float | None:
        """When the last end report of ``chunk``'s pods was answered: no controller can know
        the batch ended before then."""
        answered = [self.reported.get(self.uids.get(start, "")) for start in chunk]
        return None if None in answered else max(a for a in answered if a is not None)


def timeline(
    starts: list[float],
    sizes: list[int],
    seconds: float,
    origin: float,
    runner: TimedRunner | None = None,
) -> list[str]:
    """One line per predicted batch: start spread, the gap after the previous batch ended and,
    with ``runner``, the gap after the previous batch's last end report was answered (the
    controller's share: it learns of an end only then) and how late the kubelet's reports of
    this batch's pod ends were answered (median, most)."""
    lines = []
    ordered = sorted(starts)
    previous_end: float | None = None
    previous_known: float | None = None
    at = 0
    for number, size in enumerate(sizes, 1):
        chunk = ordered[at : at + size]
        at += size
        if not chunk:
            break
        gap = f"{chunk[0] - previous_end:5.2f}s" if previous_end is not None else "    -"
        if previous_known is not None:
            gap += f" ({chunk[0] - previous_known:5.2f}s after its last end was reported)"
        late = ""
        reported = runner.report_lags(chunk, seconds) if runner is not None else []
        if reported:
            late = f"; ends reported {statistics.median(reported):4.2f}/{max(reported):4.2f}s late"
        lines.append(
            f"    batch {number:2d} {len(chunk):5d} pods: first start t={chunk[0] - origin:6.2f}s,"
            f" spread {chunk[-1] - chunk[0]:5.2f}s, gap after previous batch {gap}{late}"
        )
        previous_end = chunk[-1] + seconds
        previous_known = runner.last_answered(chunk) if runner is not None else None
    return lines


def policy_body(budget_percent: int) -> dict[str, object]:
    return {
        "apiVersion": "bridge.nodewright.io/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": {"name": "bench-exponential"},
        "spec": {
            "default": {
                "budget": {"percent": budget_percent},
                "strategy": {"exponential": {"initialBatch": 1, "growthFactor": 2}},
            }
        },
    }


def cr_body(*, interrupt: bool = False, preflight: bool = False) -> dict[str, object]:
    package: dict[str, object] = {
        "version": "1.0.0",
        "image": "sim.bench.local/nwb/tuning",
        "vars": {"level": 1},
    }
    if interrupt:  # a service restart: cordon and drain first (simulated pods never reboot)
        package["interrupt"] = {"type": "service", "services": ["tuned"]}
    if preflight:  # simulated check pods find nothing to change: a full-fleet no-op rollout
        package["preflight"] = True
    return {
        "apiVersion": "bridge.nodewright.io/v1alpha1",
        "kind": "NodeWright",
        "metadata": {"name": "bench-rollout"},
        "spec": {
            "nodeSelectors": {"matchLabels": FLEET_LABEL},
            "deploymentPolicy": "bench-exponential",
            "hostConnection": "chroot",
            "packages": {"tuning": package},
        },
    }


def predicted_batches(names: list[str], budget_percent: int) -> list[int]:
    cr = load_nodewright(cr_body())
    policy = load_policy(policy_body(budget_percent))
    nodes = [NodeView(name=n, labels=dict(FLEET_LABEL)) for n in names]
    sim = simulation.simulate(cr, policy, nodes, start=datetime(2025, 1, 1, tzinfo=UTC))
    return [len(b.nodes) for b in sim.batches]


def prepared(box: Sandbox, budget: int, seconds: float) -> tuple[Rest, list[str], list[int], float]:
    """A client of the started sandbox with the CRDs and namespace in place, its node names, the
    batch sizes the offline planner predicts and the floor (printed)."""
    rest: Rest = connect(str(box.kubeconfig), None)
    demo.ensure_crds(rest)
    demo.ensure_namespace(rest, demo.CONTROLLER_NAMESPACE)
    names = [n.name for n in box.nodes]
    batches = predicted_batches(names, budget)
    floor = len(batches) * seconds
    print(f"  planner: {len(batches)} batches {batches}; floor {floor:.0f}s")
    return rest, names, batches, floor


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def sample(metrics_text: str, name: str) -> float:
    """Sum of every sample of metric ``name`` (all label sets)."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def requests_by_kind(metrics_text: str, *, codes: bool = False) -> dict[str, float]:
    """Request counts per "verb resource" (with ``codes``: per "verb resource code")."""
    out: dict[str, float] = {}
    pattern = re.compile(r"^nwb_api_requests_total\{([^}]*)\} ([0-9.e+]+)$")
    for line in metrics_text.splitlines():
        match = pattern.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        key = f"{labels.get('verb', '?')} {labels.get('resource', '?')}"
        if codes:
            key += f" {labels.get('code', '?')}"
        out[key] = out.get(key, 0.0) + float(match.group(2))
    return out


def wait_ready(port: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the controller did not become ready")


def condition(cr: dict[str, object], kind: str) -> dict[str, object] | None:
    status = cr.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for cond in conditions or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def parse_time_v(text: str) -> dict[str, float]:
    fields = {
        "Maximum resident set size (kbytes)": "rss_kb",
        "User time (seconds)": "user_s",
        "System time (seconds)": "sys_s",
    }
    out: dict[str, float] = {}
    for line in text.splitlines():
        key, _, value = line.strip().rpartition(": ")
        if key in fields:
            out[fields[key]] = float(value)
    return out


def run(  # noqa: PLR0917 - the command line's options, passed once
    nodes: int,
    seconds: float,
    budget: int,
    timeout: float,
    log_level: str,
    interrupt: bool = False,
    preflight: bool = False,
    profile: Path | None = None,
    check_concurrency: int | None = None,
) -> None:
    work = Path(tempfile.mkdtemp(prefix="nwb-bench-rollout-"))
    print(f"sandbox: {nodes} simulate-mode nodes, package pods take {seconds:g}s; state {work}")
    began = time.monotonic()
    runner = TimedRunner(seconds)
    box = Sandbox(
        work / "sandbox",
        nodes=nodes,
        labels=FLEET_LABEL,
        runner=runner,
        # a real kubelet reports an unchanged node status every 5 min (nodeStatusReportFrequency;
        # its liveness goes to a Lease, which the controller does not watch)
        heartbeat_seconds=300.0,
        apiserver_args=["--profiling=true"] if profile else [],
    )
    box.start()
    assert box.kubelet is not None
    box.kubelet.on_ended_report = runner.ended_report
    print(f"  started in {time.monotonic() - began:.1f}s")
    controller: subprocess.Popen[bytes] | None = None
    spy: ControllerProfile | None = None
    apiserver: ApiServerProfile | None = None
    try:
        rest, _, batches, floor = prepared(box, budget, seconds)
        port = free_port()
        time_file = work / "time-v.txt"
        log = work / "controller.log"
        argv = [
            "/usr/bin/time",
            "-v",
            "-o",
            str(time_file),
            sys.executable,
            "-c",
            "from nodewright_bridge.cli import main; main()",
            "controller",
            "--kubeconfig",
            str(box.kubeconfig),
            "--metrics-addr",
            f"127.0.0.1:{port}",
            "--log-format",
            "json",
            "--log-level",
            log_level,
            "--no-leader-elect",
        ]
        if check_concurrency is not None:
            argv += ["--check-concurrency", str(check_concurrency)]
        with log.open("wb") as out:
            controller = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        wait_ready(port)
        if profile is not None:
            profile.mkdir(parents=True, exist_ok=True)
            spy = ControllerProfile(controller_pid(controller), profile)
            plane = box.control_plane
            assert plane is not None and plane.pki is not None
            apiserver = ApiServerProfile(
                plane.server,
                plane.pki.admin_token.token,
                plane.binaries["kube-apiserver"].path,
                profile,
            )
        # The API server is profiled from the start of the second-to-last batch to past the
        # start of the last one: the largest batch starts, where the API server saturates.
        profile_from = sum(batches[:-2])
        plane = box.control_plane
        assert plane is not None
        pids = {p.name: p.popen.pid for p in plane.processes}
        pids["controller"] = controller_pid(controller)
        pids["simulated kubelet+bench"] = os.getpid()
        cpu = ProcessCpu(pids)
        largest = max(range(len(batches)), key=lambda i: batches[i])
        window = (sum(batches[:largest]) + 1, sum(batches[: largest + 1]))
        marks: dict[str, tuple[float, dict[str, float]]] = {}
        rest.create(resources.DEPLOYMENT_POLICIES, policy_body(budget))
        idle_requests = sum(requests_by_kind(scrape(port)).values())
        posted = time.monotonic()
        rest.create(resources.NODEWRIGHTS, cr_body(interrupt=interrupt, preflight=preflight))
        # The rollout starts when the CR exists; the create call's own latency is printed apart.
        created = time.monotonic()
        marks["created"] = (created, cpu.read())
        print(f"  the API server took {created - posted:.2f}s to create the CR")
        last_line = ""
        cr: dict[str, object] = {}
        while time.monotonic() - created < timeout:
            cr = rest.get(resources.NODEWRIGHTS, "bench-rollout")
            ready = condition(cr, "Ready")
            status = cr.get("status")
            done = status.get("completeNodes", "") if isinstance(status, dict) else ""
            line = f"  t={time.monotonic() - created:6.1f}s complete {done}"
            if line.split("complete")[1] != last_line:
                print(line, flush=True)
                last_line = line.split("complete")[1]
            for mark, count in zip(("batch", "batch started"), window, strict=True):
                if mark not in marks and len(runner.starts) >= count:
                    marks[mark] = (time.monotonic(), cpu.read())
            if ready is not None and ready.get("status") == "True":
                marks["ready"] = (time.monotonic(), cpu.read())
                break
            if (
                apiserver is not None
                and not apiserver.path.exists()
                and (len(runner.starts) >= profile_from)
            ):
                apiserver.start(int(seconds * 2 + 5))
                profile_from = nodes + 1  # once
            if controller.poll() is not None:
                raise RuntimeError(f"the controller exited ({controller.returncode}); see {log}")
            time.sleep(0.25)
        total = time.monotonic() - created
        final = scrape(port)
        counts = requests_by_kind(final)
        coded = requests_by_kind(final, codes=True)
        # What the controller still sends once the CR says Ready (background deletes, Events).
        time.sleep(AFTER_READY_SECONDS)
        after = requests_by_kind(scrape(port), codes=True)
        late = {k: v - coded.get(k, 0.0) for k, v in after.items() if v > coded.get(k, 0.0)}
        reconciles = sample(final, "nwb_reconcile_duration_seconds_count")
        reconcile_seconds = sample(final, "nwb_reconcile_duration_seconds_sum")
        status_bytes = len(json.dumps(cr.get("status") or {}, separators=(",", ":")))
    finally:
        if spy is not None:
            spy.stop()
        if controller is not None and controller.poll() is None:
            # Signal the controller itself: /usr/bin/time only reports once its child exits.
            os.kill(controller_pid(controller), signal.SIGTERM)
            try:
                controller.wait(60)
            except subprocess.TimeoutExpired:
                controller.kill()
                controller.wait()
        box.stop()
    usage = parse_time_v(time_file.read_text()) if time_file.exists() else {}
    requests = sum(counts.values()) - idle_requests
    print()
    print(f"nodes                      {nodes}")
    print(f"batches                    {len(batches)} {batches}")
    print(f"rollout time               {total:.1f}s (CR created -> Ready)")
    print(
        f"floor (sum of batches)     {floor:.1f}s; overhead {100 * (total - floor) / floor:+.1f}%"
    )
    print(f"API requests               {requests:.0f} during the rollout, "
          f"{requests / nodes:.2f} per node ({idle_requests:.0f} before it)")  # fmt: skip
    for key, value in sorted(coded.items(), key=lambda kv: -kv[1]):
        print(f"    {key:40s} {value:.0f} ({value / nodes:.2f} per node)")
    print(f"  in the {AFTER_READY_SECONDS:g}s after Ready   {sum(late.values()):.0f}")
    for key, value in sorted(late.items(), key=lambda kv: -kv[1]):
        print(f"    {key:40s} {value:.0f}")
    if usage:
        print(f"controller peak RSS        {usage.get('rss_kb', 0) / 1024:.1f} MB")
        cpu_seconds = usage.get("user_s", 0) + usage.get("sys_s", 0)
        print(f"controller CPU             {cpu_seconds:.1f}s (user {usage.get('user_s', 0):.1f}s)")
    print(f"CR status size             {status_bytes} bytes")
    print(f"reconciles                 {reconciles:.0f}, {reconcile_seconds:.1f}s in all")
    print("timeline (simulated kubelet; pods run exactly their duration)")
    for at in runner.validations:
        first = (
            f", first package pod t={min(runner.starts) - created:.2f}s" if runner.starts else ""
        )
        print(f"    validation pod started t={at - created:.2f}s (it takes 1s){first}")
    for line in timeline(runner.starts, batches, seconds, created, runner):
        print(line)
    if runner.starts:
        tail = total - (max(runner.starts) + seconds - created)
        print(f"    last pod ended -> CR Ready: {tail:.2f}s (the bench polls every 0.25 s)")
    if runner.checks:
        span = max(runner.checks) - min(runner.checks) + runner.check_seconds
        print(
            f"check pods                 {len(runner.checks)} (first t="
            f"{min(runner.checks) - created:.2f}s, all done within {span:.1f}s; "
            f"{runner.check_seconds:g}s each)"
        )
    print(
        f"package pods               {len(runner.starts)}; interrupt pods (each after a cordon "
        f"and drain) {runner.interrupts}"
    )
    if "ready" in marks:
        (t0, c0), (t1, c1) = marks["created"], marks["ready"]
        print(f"CPU per process, CR created -> Ready ({t1 - t0:.1f}s)")
        print("\n".join(ProcessCpu.lines(c0, c1, t1 - t0)))
    if "batch" in marks and "batch started" in marks:
        (t0, c0), (t1, c1) = marks["batch"], marks["batch started"]
        print(f"CPU per process while batch {largest + 1}'s pods start ({t1 - t0:.1f}s)")
        print("\n".join(ProcessCpu.lines(c0, c1, max(t1 - t0, 0.01))))
    if spy is not None:
        print(f"controller profile (py-spy, kept in {spy.raw})")
        print("\n".join(spy.summary()))
    if apiserver is not None:
        print(f"API server profile (pprof from batch {len(batches) - 1}'s start; {apiserver.path})")
        print("\n".join(apiserver.summary()))


def controller_pid(proc: subprocess.Popen[bytes]) -> int:
    """The controller's own pid: the child of ``/usr/bin/time``."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return int(children[0]) if children else proc.pid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0, help="package pod duration")
    parser.add_argument("--budget", type=int, default=100, help="policy budget percent")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--log-level", default="info", help="the controller's (its log is kept)")
    parser.add_argument(
        "--interrupt", action="store_true", help="the package restarts a service (cordon+drain)"
    )
    parser.add_argument(
        "--preflight",
        action="store_true",
        help="preflight: true; simulated checks find every node compliant (a no-op rollout)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="profile the controller (py-spy) and the API server (pprof) into DIR",
    )
    parser.add_argument(
        "--check-concurrency",
        type=int,
        help="the controller's check pods at once (its default: 10)",
    )
    args = parser.parse_args()
    run(
        args.nodes,
        args.seconds,
        args.budget,
        args.timeout,
        args.log_level,
        interrupt=args.interrupt,
        preflight=args.preflight,
        profile=args.profile,
        check_concurrency=args.check_concurrency,
    )


if __name__ == "__main__":
    main()
