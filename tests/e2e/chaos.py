"""Seeded chaos while rollouts run (``test_chaos.py`` drives it).

A ``Chaos`` run owns a ``random.Random(seed)``, a World with its nodes, CRs and workload, and the
controller process. ``run()`` applies operations at random moments until the rollouts are complete,
the operation budget is spent or time is up; ``settle()`` then does what a person does so that the
rollouts can finish, and keeps what must be seen to survive (a human's cordon, the ignore label).

Every step draws the same numbers from the generator whatever the cluster looks like (the
operation by weight, a target fraction, two parameters, the pause before it), so a seed replays
the same operations at the same moments; only the targets can differ where timing changed which
nodes qualify. Each operation is logged with its offset from the start, its wall-clock time and
the seed (``OpLog``); the lines also go into the invariant report (``Invariants.add_context``).

Operations (each bounded per run):
- ``cordon``: a human cordons a schedulable node nobody holds, with a write conditional on the
  node's resourceVersion (so the transition is the human's, and the checker sees it as such).
- ``uncordon``: the human lifts one of their own cordons, only while no controller hold is
  recorded (conditional again), and declares the write to the checker (``allow_uncordon``).
- ``ignore`` / ``unignore``: add or remove ``bridge.nodewright.io/ignore=true``.
- ``delete-node`` / ``readd-node``: the kubelet stops serving a node and deletes it; later it
  registers it again under the same name, a new machine with a fresh root filesystem.
- ``vars``: change the vars of one CR's package.
- ``pdb`` / ``unpdb``: a PodDisruptionBudget over the workload's pods: ``minAvailable`` = replicas
  (blocks every eviction) or replicas - 1 (one at a time); at most one exists at a time.
- ``kill-controller``: SIGKILL (a crash: the Lease is only taken over after it expires) or SIGTERM
  (a rolling update); a new ``nwb controller`` process starts after a random pause.
- ``restart-apiserver``: crash or stop the sandbox's kube-apiserver, down for up to 3 s, and
  start it again in place (``Sandbox.restart_apiserver``).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from e2e_harness import World, wait_for
from kubernetes.client.exceptions import ApiException

IGNORE = "bridge.nodewright.io/ignore"
CORDON = "bridge.nodewright.io/cordon"
WORKLOAD_APP = "web"
REPLAY_HINT = "{settings}NWB_CHAOS_SEED={seed} .venv/bin/pytest -q -s tests/e2e/test_chaos.py"


class Skip(Exception):  # noqa: N818 - not an error: the step found nothing to act on
    """The operation drawn has nothing to act on now (logged, counts as a step)."""


@dataclass(frozen=True, slots=True)
class Operation:
    name: str
    weight: float
    limit: int  # at most this many applied per run


OPERATIONS = (
    Operation("cordon", 3, 4),
    Operation("uncordon", 2, 3),
    Operation("ignore", 2, 2),
    Operation("unignore", 2, 2),
    Operation("delete-node", 1, 2),
    Operation("readd-node", 1.5, 2),
    Operation("vars", 2, 3),
    Operation("pdb", 2, 3),
    Operation("unpdb", 2, 3),
    Operation("kill-controller", 2, 2),
    Operation("restart-apiserver", 1.5, 2),
)


class OpLog:
    """What the chaos did, when, under which seed; printed as it happens."""

    def __init__(
        self,
        seed: int,
        sink: Callable[[Iterable[str]], None] | None = None,
        settings: Mapping[str, object] | None = None,
    ) -> None:
        """``settings``: the environment a replay needs besides the seed (run size)."""
        self.seed = seed
        self.began = time.monotonic()
        env = "".join(f"{k}={v} " for k, v in (settings or {}).items())
        self.lines: list[str] = [
            f"chaos seed {seed} (replay: {REPLAY_HINT.format(settings=env, seed=seed)})",
        ]
        self._sink = sink
        if sink is not None:
            sink(self.lines)

    def add(self, what: str, detail: str = "") -> None:
        offset = time.monotonic() - self.began
        clock = datetime.now().strftime("%H:%M:%S.%f")[:-3]
        line = f"  +{offset:6.1f}s {clock} [seed {self.seed}] {what}" + (
            f": {detail}" if detail else ""
        )
        self.lines.append(line)
        print(line, flush=True)
        if self._sink is not None:
            self._sink([line])

    def text(self) -> str:
        return "\n".join(self.lines)


@dataclass
class Target:
    """The world the chaos acts on."""

    nodes: list[str]
    namespace: str  # the workload's
    replicas: int
    # CR name -> (package, the vars variants to switch between)
    packages: dict[str, tuple[str, list[dict[str, Any]]]]


OUTSIDE_RETRY = ("--outside-retry", "15s", "--outside-retry-max", "30s")


@dataclass
class Chaos:
    world: World
    seed: int
    target: Target
    log: OpLog
    rng: random.Random = field(init=False)
    controller: subprocess.Popen[bytes] | None = None
    restart_at: float | None = None
    generation: int = 0
    human: set[str] = field(default_factory=set)  # nodes under a human's cordon
    ignored: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    pdb: str | None = None
    pdbs_made: int = 0
    vars: dict[str, dict[str, Any]] = field(default_factory=dict)  # CR -> vars last set
    applied: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    # -- the controller ------------------------------------------------------------------------

    def start_controller(self) -> None:
        self.generation += 1
        identity = f"chaos-{self.generation}"
        # A short outside back-off: a drain that only ran out of time (nothing seen blocking
        # it) comes back within the settle phase, as the setting promises.
        self.controller = self.world.spawn_controller(identity, OUTSIDE_RETRY)
        self.restart_at = None
        self.log.add("controller started", f"{identity}, log {self.world.logs[-1]}")

    def _restart_due(self) -> None:
        if self.restart_at is not None and time.monotonic() >= self.restart_at:
            self.start_controller()

    def idle(self, seconds: float) -> None:
        """Sleep, starting the controller again when its pause is over."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self._restart_due()
            time.sleep(min(left, 0.2))
        self._restart_due()

    # -- the loop ------------------------------------------------------------------------------

    def run(
        self,
        *,
        done: Callable[[], bool],
        max_ops: int,
        max_seconds: float,
        pause: tuple[float, float] = (2.0, 7.0),
    ) -> None:
        """Operations at random moments (a pause before each step) until ``max_ops`` were applied
        (a skipped step does not count; at most three times as many steps), ``max_seconds`` are
        up or ``done()`` says the rollouts are complete."""
        deadline = time.monotonic() + max_seconds
        for _ in range(3 * max_ops):
            self.idle(self.rng.uniform(*pause))
            if time.monotonic() > deadline:
                self.log.add("chaos time is up")
                return
            if _safely(done):
                self.log.add("rollouts complete; chaos stops")
                return
            self.step()
            if sum(self.applied.values()) >= max_ops:
                self.log.add("operation budget spent")
                return
        self.log.add("step budget spent")

    def step(self) -> None:
        op = self.rng.choices(OPERATIONS, weights=[o.weight for o in OPERATIONS])[0]
        pick, first, second = self.rng.random(), self.rng.random(), self.rng.random()
        if self.applied[op.name] >= op.limit:
            self.skipped[op.name] += 1
            self.log.add(op.name, f"skipped (its limit, {op.limit}, is reached)")
            return
        action = getattr(self, "_" + op.name.replace("-", "_"))
        try:
            detail = action(pick, first, second)
        except Skip as why:
            self.skipped[op.name] += 1
            self.log.add(op.name, f"skipped ({why})")
            return
        except ApiException as exc:
            self.skipped[op.name] += 1
            self.log.add(op.name, f"failed: HTTP {exc.status} {exc.reason}")
            return
        self.applied[op.name] += 1
        self.log.add(op.name, detail)

    # -- helpers -------------------------------------------------------------------------------

    def present(self) -> list[str]:
        return [n for n in self.target.nodes if n not in self.deleted]

    @staticmethod
    def _choose(candidates: Iterable[str], pick: float, why: str) -> str:
        ordered = sorted(candidates)
        if not ordered:
            raise Skip(why)
        return ordered[min(int(pick * len(ordered)), len(ordered) - 1)]

    def _node(self, name: str) -> Any:
        return self.world.core.read_node(name)

    @staticmethod
    def _holders(node: Any) -> list[str]:
        text = (node.metadata.annotations or {}).get(CORDON)
        if not text:
            return []
        try:
            return list(json.loads(text).get("holders") or [])
        except ValueError:
            return ["<unparsable>"]

    def _conditional(self, name: str, node: Any, spec: dict[str, Any]) -> Any:
        body = {"metadata": {"resourceVersion": node.metadata.resource_version}, "spec": spec}
        try:
            return self.world.core.patch_node(name, body)
        except ApiException as exc:
            if exc.status == 409:
                raise Skip(f"{name} changed under the human's hand (409)") from exc
            raise

    # -- the operations ------------------------------------------------------------------------

    def _cordon(self, pick: float, first: float, second: float) -> str:
        free = []
        for name in self.present():
            node = self._node(name)
            if not node.spec.unschedulable and not self._holders(node):
                free.append(name)
        name = self._choose(free, pick, "no schedulable node without a controller hold")
        self._conditional(name, self._node(name), {"unschedulable": True})
        self.human.add(name)
        return f"{name} cordoned by hand"

    def _uncordon(self, pick: float, first: float, second: float) -> str:
        candidates = []
        for name in sorted(self.human & set(self.present())):
            node = self._node(name)
            if node.spec.unschedulable and not self._holders(node):
                candidates.append(name)
        name = self._choose(candidates, pick, "no human cordon without a controller hold")
        done = self._conditional(name, self._node(name), {"unschedulable": False})
        self.world.invariants.allow_uncordon(name, int(done.metadata.resource_version))
        self.human.discard(name)
        return f"{name} uncordoned by hand (rv {done.metadata.resource_version})"

    def _ignore(self, pick: float, first: float, second: float) -> str:
        name = self._choose(set(self.present()) - self.ignored, pick, "every node is ignored")
        self.world.core.patch_node(name, {"metadata": {"labels": {IGNORE: "true"}}})
        self.ignored.add(name)
        return f"{name} labelled {IGNORE}=true"

    def _unignore(self, pick: float, first: float, second: float) -> str:
        name = self._choose(self.ignored - self.deleted, pick, "no node is ignored")
        self.world.core.patch_node(name, {"metadata": {"labels": {IGNORE: None}}})
        self.ignored.discard(name)
        return f"{name} no longer ignored"

    def _delete_node(self, pick: float, first: float, second: float) -> str:
        if len(self.present()) <= len(self.target.nodes) - 2:
            raise Skip("two nodes are gone already")
        name = self._choose(self.present(), pick, "no node left")
        kubelet = self.world.env.box.kubelet
        assert kubelet is not None
        kubelet.remove_nodes([name])
        self.deleted.add(name)
        self.human.discard(name)
        self.ignored.discard(name)
        return f"{name} deleted (the kubelet stopped serving it)"

    def _readd_node(self, pick: float, first: float, second: float) -> str:
        name = self._choose(self.deleted, pick, "no node is deleted")
        kubelet = self.world.env.box.kubelet
        assert kubelet is not None
        kubelet.add_nodes([name], labels=self.world.labels)
        self.deleted.discard(name)
        wait_for(lambda: self.world.node_ready(name), what=f"{name} Ready again", timeout=60)
        return f"{name} registered again (a new machine, same name)"

    def _vars(self, pick: float, first: float, second: float) -> str:
        cr = self._choose(self.target.packages, pick, "no CR")
        package, variants = self.target.packages[cr]
        current = self.vars.get(cr)
        others = [v for v in variants if v != current] or variants
        chosen = others[min(int(first * len(others)), len(others) - 1)]
        self.world.patch_cr(cr, {"spec": {"packages": {package: {"vars": chosen}}}})
        self.vars[cr] = chosen
        return f"{cr} package {package} vars -> {chosen}"

    def _pdb(self, pick: float, first: float, second: float) -> str:
        if self.pdb is not None:
            raise Skip(f"PodDisruptionBudget {self.pdb} exists")
        blocking = first < 0.6
        minimum = self.target.replicas if blocking else self.target.replicas - 1
        self.pdbs_made += 1
        name = f"{WORKLOAD_APP}-{self.pdbs_made}"
        labels = {"app": WORKLOAD_APP}
        self.world.pdb(self.target.namespace, name, min_available=minimum, labels=labels)
        self.pdb = name
        how = "blocks every eviction" if blocking else "allows one eviction at a time"
        return f"PodDisruptionBudget {self.target.namespace}/{name} minAvailable {minimum} ({how})"

    def _unpdb(self, pick: float, first: float, second: float) -> str:
        if self.pdb is None:
            raise Skip("no PodDisruptionBudget")
        name, self.pdb = self.pdb, None
        self.world.env.policy.delete_namespaced_pod_disruption_budget(name, self.target.namespace)
        return f"PodDisruptionBudget {self.target.namespace}/{name} deleted"

    def _kill_controller(self, pick: float, first: float, second: float) -> str:
        proc = self.controller
        if proc is None or proc.poll() is not None:
            raise Skip("the controller is down already")
        crash = first < 0.6
        proc.send_signal(signal.SIGKILL if crash else signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        pause = round(second * 4, 1)
        self.restart_at = time.monotonic() + pause
        how = "SIGKILL" if crash else "SIGTERM"
        return (
            f"controller chaos-{self.generation} {how} (exit {proc.poll()}); a new one in {pause}s"
        )

    def _restart_apiserver(self, pick: float, first: float, second: float) -> str:
        down = round(first * 3, 1)
        crash = second < 0.5
        took = self.world.env.box.restart_apiserver(down_seconds=down, crash=crash)
        how = "crashed (SIGKILL)" if crash else "stopped (SIGTERM)"
        return f"kube-apiserver {how}, down {down}s, back in place after {took}s"

    # -- the end -------------------------------------------------------------------------------

    def settle(self) -> None:
        """What must be undone for the rollouts to finish; the rest is kept on purpose."""
        if self.controller is None or self.controller.poll() is not None:
            self.start_controller()
        if self.pdb is not None:
            self._unpdb(0.0, 0.0, 0.0)
            self.log.add("settle", "the PodDisruptionBudget deleted (it may block forever)")
        kept = {
            "human cordons": sorted(self.human),
            "ignored": sorted(self.ignored),
            "deleted": sorted(self.deleted),
        }
        self.log.add("settle", f"kept on purpose: {kept}")
        self.log.add(
            "operations",
            f"applied {dict(sorted(self.applied.items()))}, "
            f"skipped {dict(sorted(self.skipped.items()))}",
        )


def _safely(check: Callable[[], bool]) -> bool:
    try:
        return bool(check())
    except Exception:  # the API may be restarting
        return False
