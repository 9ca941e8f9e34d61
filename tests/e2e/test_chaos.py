"""Rollouts under seeded chaos keep the invariants and end Ready or say why (``chaos.py``).

Two CRs roll out over exec-mode nodes carrying a Deployment's pods: ``reboot`` (the real
grub-params role, reboot interrupt, priority 100) and ``service`` (a simulated package with a
service interrupt, priority 200, so it follows ``reboot`` node by node; real Ansible would add
only time there). While they roll out, ``Chaos`` cordons and uncordons by hand, adds and removes
the ignore label, deletes and registers nodes again, changes vars, adds and removes a
PodDisruptionBudget, kills and restarts the controller and restarts the API server. Then it
settles: the controller runs and no budget blocks, while human cordons and ignore labels stay.

What must hold then (``judge``):
- Every CR is Ready, except where nodes carrying the ignore label keep it out: settling removed
  every outside cause, and the roles never fail on their own, so anything else is a rollout that
  did not recover.
- Its conditions match the cluster: a node that is not complete is named by a condition that
  gives a cause (or waits for another CR not complete there), an ignored node by NodesIgnored,
  and PDBBlocked names only budgets that exist.
- Where ``reboot`` is complete, the grub file carries the vars last set.
- The autouse invariant check: no eviction beyond a budget, no interrupt or reboot on an undrained
  node, at most one reboot per node (per incarnation) and per interrupt, no leaked cordon or
  taint (nodes that end erroring excepted), a human's cordon kept.

Seeds: ``CI_SEEDS`` by default; ``NWB_CHAOS_SEED=7`` (or ``7,8``) replays seeds;
``NWB_CHAOS_RUNS=10`` runs the CI seeds plus fresh random ones (their test ids name them).
``NWB_CHAOS_NODES``, ``NWB_CHAOS_OPS`` and ``NWB_CHAOS_SECONDS`` change the size of a run. Every
operation is printed with its time and seed; the log ends every failure message and invariant
report.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from chaos import WORKLOAD_APP, Chaos, OpLog, Target
from e2e_harness import (
    EXEC_REGISTRY,
    SIM_DURATION_ENV,
    SIM_REGISTRY,
    SLOW_TEST_SECONDS,
    World,
    wait_for,
)
from test_interrupts import deployment, ready_pods

pytestmark = pytest.mark.e2e

CI_SEEDS = (1, 2, 4)  # together they draw every operation (seed 4: ignore and vars)
# The size of a run: a replay needs the same (OpLog prints those set).
SIZE = {
    name: os.environ[name]
    for name in ("NWB_CHAOS_NODES", "NWB_CHAOS_OPS", "NWB_CHAOS_SECONDS")
    if os.environ.get(name)
}
NODES = int(SIZE.get("NWB_CHAOS_NODES") or 4)
MAX_OPS = int(SIZE.get("NWB_CHAOS_OPS") or 10)
CHAOS_SECONDS = float(SIZE.get("NWB_CHAOS_SECONDS") or 60)
# A cap, not a duration: a settled run ends at once. Generous, as a 2-core CI machine under
# load re-drains and reboots slower (a drain expiry, the outside back-off, a reboot).
SETTLE_SECONDS = 240.0
DRAIN_TIMEOUT = "30s"
GRUB_VARIANTS: list[dict[str, Any]] = [
    {"grub_params_cmdline": ["intel_iommu=on", "iommu=pt"]},
    {"grub_params_cmdline": ["transparent_hugepage=never"]},
    {"grub_params_cmdline": ["intel_iommu=on", "mitigations=auto"]},
]
AGENT_VARIANTS: list[dict[str, Any]] = [{"agent_level": level} for level in ("info", "debug")]


def chaos_seeds() -> list[int]:
    chosen = os.environ.get("NWB_CHAOS_SEED", "").strip()
    if chosen:
        return [int(s) for s in chosen.split(",") if s.strip()]
    runs = int(os.environ.get("NWB_CHAOS_RUNS") or len(CI_SEEDS))
    extra = [random.SystemRandom().randrange(10_000, 100_000) for _ in range(runs - len(CI_SEEDS))]
    return [*CI_SEEDS[:runs], *extra]


def reboot_cr(world: World, name: str) -> None:
    world.apply_cr(
        name,
        {
            "priority": 100,
            "interruptionBudget": {"count": 2},
            "drain": {"timeout": DRAIN_TIMEOUT},
            "packages": {
                "grub": {
                    "version": "2.0.1",
                    "image": f"{EXEC_REGISTRY}/grub-params",
                    "interrupt": {"type": "reboot"},
                    "vars": GRUB_VARIANTS[0],
                }
            },
        },
    )


def service_cr(world: World, name: str) -> None:
    world.apply_cr(
        name,
        {
            "priority": 200,
            "interruptionBudget": {"count": 2},
            "drain": {"timeout": DRAIN_TIMEOUT},
            "packages": {
                "agent": {
                    "version": "1.0.0",
                    "image": f"{SIM_REGISTRY}/agent",
                    "interrupt": {"type": "service", "services": ["agent"]},
                    "env": [{"name": SIM_DURATION_ENV, "value": "1s"}],
                    "vars": AGENT_VARIANTS[0],
                }
            },
        },
    )


def complete(world: World, cr: str) -> bool:
    return world.cr_status(cr).get("status") == "complete"


def describe(world: World, chaos: Chaos, crs: list[str]) -> list[str]:
    """The end state: each CR's status and conditions; per node its status for each CR, and how
    often the controller held it (cordon episodes) and it rebooted, from the checker's record."""
    world.invariants.sync()
    history = world.invariants.replay().history
    lines = [f"checker relists (what happened in between is unseen): {world.invariants.gaps}"]
    for cr in crs:
        status = world.cr_status(cr)
        lines.append(f"{cr}: {status.get('status')} ({status.get('completeNodes')})")
        for cond in status.get("conditions") or []:
            if cond.get("status") == "True" or cond.get("type") == "Ready":
                text = f"{cond['type']}={cond['status']} {cond.get('reason', '')}"
                lines.append(f"  {text}: {cond.get('message', '')}")
    for name in chaos.target.nodes:
        seen = history.get(name)
        record = f"holds {seen.holds}, reboots {len(seen.reboots)}" if seen else "never seen"
        if name in chaos.deleted:
            lines.append(f"node {name}: deleted ({record})")
            continue
        node = world.node(name)
        labels = node.metadata.labels or {}
        per_cr = {cr: labels.get(f"bridge.nodewright.io/status-{cr}") for cr in crs}
        flags = [
            flag
            for flag, on in (
                ("unschedulable", node.spec.unschedulable),
                ("ignored", name in chaos.ignored),
                ("human-cordoned", name in chaos.human),
            )
            if on
        ]
        lines.append(f"node {name}: {per_cr} {' '.join(flags)} ({record})")
        annotations = node.metadata.annotations or {}
        for cr in crs:
            if per_cr[cr] == "complete":
                continue
            state = json.loads(annotations.get(f"bridge.nodewright.io/state-{cr}") or "{}")
            for key, entry in sorted(state.items()):
                brief = {k: entry.get(k) for k in BRIEF if entry.get(k) not in (None, "", [], 0)}
                lines.append(f"  {cr} {key}: {brief}")
    return lines


# What an end report shows of a node entry that is not complete.
BRIEF = ("stage", "state", "attempts", "interrupt", "interruptBy", "mergedWith", "message")


# Conditions that can name why a node is not complete (Ready and Progressing only count them).
CAUSES = frozenset(
    {
        "Degraded",
        "Stalled",
        "PDBBlocked",
        "TaintNotTolerable",
        "NodesIgnored",
        "NodeStateMalformed",
        "InvalidSpec",
        "PolicyNotFound",
        "DeletionBlocked",
    }
)
PDB_NAME = re.compile(rf"[a-z0-9-]+/{WORKLOAD_APP}-[0-9]+")


@dataclass
class Verdict:
    not_ready: list[str] = field(default_factory=list)  # settled, yet not Ready
    unexplained: list[str] = field(default_factory=list)  # conditions vs. the cluster


def finished(world: World, chaos: Chaos, cr: str) -> bool:
    """Complete on every node present that does not carry the ignore label (an ignored node
    that is not complete keeps the CR Blocked by design: NodesIgnored names it)."""
    states = {n: world.node_status(cr, n) for n in chaos.present()}
    if any(state != "complete" for n, state in states.items() if n not in chaos.ignored):
        return False
    return complete(world, cr) or any(state != "complete" for state in states.values())


def judge(world: World, chaos: Chaos, crs: list[str]) -> Verdict:
    """After settling every outside cause is gone (no budget blocks, the controller and the API
    run, the roles do not fail), so every CR must be Ready, except for nodes the ignore label
    keeps out. Whatever a CR's state, its conditions must match the cluster: each node that is not
    complete is named by a condition giving a cause (or waits for another CR not complete there),
    each ignored node by NodesIgnored, and PDBBlocked names only budgets that exist."""
    verdict = Verdict()
    present = chaos.present()
    state = {(cr, n): world.node_status(cr, n) for cr in crs for n in present}
    budgets = {
        f"{p.metadata.namespace}/{p.metadata.name}"
        for p in world.env.policy.list_namespaced_pod_disruption_budget(
            chaos.target.namespace
        ).items
    }
    for cr in crs:
        status = world.cr_status(cr)
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        true = {
            k: str(c.get("message", "")) for k, c in conditions.items() if c.get("status") == "True"
        }
        ready = conditions.get("Ready") or {}
        kept_out = all(state[(cr, n)] == "complete" or n in chaos.ignored for n in present) and any(
            state[(cr, n)] != "complete" for n in present
        )
        if ready.get("status") != "True" and not kept_out:
            verdict.not_ready.append(
                f"{cr} ends {status.get('status')}: Ready {ready.get('status')} "
                f"{ready.get('reason')}: {ready.get('message')}"
            )
        for name in sorted(chaos.ignored & set(present)):
            if name not in true.get("NodesIgnored", ""):
                said = conditions.get("NodesIgnored", {}).get(
                    "message", "no NodesIgnored condition"
                )
                verdict.unexplained.append(
                    f"{cr}: {name} carries the ignore label, but NodesIgnored says {said!r}"
                )
        stale = sorted(set(PDB_NAME.findall(true.get("PDBBlocked", ""))) - budgets)
        if stale:
            verdict.unexplained.append(
                f"{cr}: PDBBlocked names {stale}, which no longer exist: {true['PDBBlocked']!r}"
            )
        causes = [text for kind, text in true.items() if kind in CAUSES]
        for name in present:
            if name in chaos.ignored or state[(cr, name)] == "complete":
                continue
            if state[(cr, name)] == "waiting" and any(
                state[(other, name)] != "complete" for other in crs if other != cr
            ):
                continue  # another CR comes first on this node
            if not any(name in text for text in causes):
                verdict.unexplained.append(
                    f"{cr}: {name} is {state[(cr, name)]} and no condition names a cause "
                    f"(true conditions: {sorted(true)})"
                )
    return verdict


def grub_not_in_effect(world: World, chaos: Chaos, cr: str) -> list[str]:
    """Nodes where ``cr`` is complete but the grub file lacks the vars last set."""
    wanted = (chaos.vars.get(cr) or GRUB_VARIANTS[0])["grub_params_cmdline"]
    kubelet = world.env.box.kubelet
    assert kubelet is not None
    problems = []
    for name in chaos.present():
        if name in chaos.ignored or world.node_status(cr, name) != "complete":
            continue
        root = kubelet.nodes[name].root_dir
        assert root is not None
        text = (root / "etc/default/grub").read_text()
        line = next((ln for ln in text.splitlines() if ln.startswith("GRUB_CMDLINE_LINUX=")), "")
        params = line.partition("=")[2].strip('"').split()
        missing = [p for p in wanted if p not in params]
        if missing:
            problems.append(f"{name}: {cr} complete but {missing} not in {line!r}")
    return problems


@pytest.mark.timeout(SLOW_TEST_SECONDS)
@pytest.mark.parametrize("seed", chaos_seeds(), ids=lambda s: f"seed-{s}")
def test_rollouts_under_chaos_keep_the_invariants_and_end_ready_or_say_why(
    world: World, seed: int
) -> None:
    log = OpLog(seed, sink=world.invariants.add_context, settings=SIZE)
    nodes = world.add_nodes(NODES)
    ns = world.namespace()
    replicas = NODES
    deployment(world, ns, WORKLOAD_APP, replicas)
    wait_for(lambda: len(ready_pods(world, ns, WORKLOAD_APP)) == replicas, what="workload ready")
    reboot, service = world.cr_name("reboot"), world.cr_name("service")
    reboot_cr(world, reboot)
    service_cr(world, service)
    crs = [reboot, service]
    target = Target(
        nodes=nodes,
        namespace=ns,
        replicas=replicas,
        packages={reboot: ("grub", GRUB_VARIANTS), service: ("agent", AGENT_VARIANTS)},
    )
    chaos = Chaos(world, seed, target, log)
    log.add("start", f"nodes {nodes}, CRs {crs}, workload {ns}/{WORKLOAD_APP} x{replicas}")
    chaos.start_controller()
    chaos.run(
        done=lambda: all(complete(world, cr) for cr in crs),
        max_ops=MAX_OPS,
        max_seconds=CHAOS_SECONDS,
    )
    chaos.settle()
    began = time.monotonic()
    try:
        wait_for(
            lambda: all(finished(world, chaos, cr) for cr in crs),
            what="every CR complete (but for ignored nodes)",
            timeout=SETTLE_SECONDS,
            interval=1.0,
        )
        log.add(
            "every CR complete but for ignored nodes",
            f"{time.monotonic() - began:.0f}s after settling",
        )
    except AssertionError:
        log.add("not every CR is complete", f"after {SETTLE_SECONDS:.0f}s of settling")
    for line in describe(world, chaos, crs):
        log.add("end", line)
    for cr in crs:
        for name in chaos.present():
            if world.node_status(cr, name) == "erroring":
                world.invariants.expect_held(name, f"{cr} ends erroring on it")
    verdict = judge(world, chaos, crs)
    grub = grub_not_in_effect(world, chaos, reboot)
    sections = [
        ("not Ready although settling removed every outside cause", verdict.not_ready),
        ("conditions that do not name the cause or disagree with the cluster", verdict.unexplained),
        ("complete, but the vars last set are not in effect", grub),
    ]
    report = [f"{title}:\n  " + "\n  ".join(items) for title, items in sections if items]
    assert not report, "\n".join(["the rollouts did not end well", *report, log.text()])
