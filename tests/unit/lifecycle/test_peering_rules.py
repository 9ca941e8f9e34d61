"""Two rollouts on one node disrupt it once: one cordon, one drain, one merged interrupt.

Two stage planners (one per CR) share one simulated node. Each pass, each CR sees the other's
recorded state as a ``PeerOutlook`` and its sequencing readiness as the controller computes it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest
from stage_world import World, make_cr

from lifecycle import actions as act
from lifecycle import peering, sequencing
from lifecycle.nodestate import Stage, StageState
from lifecycle.spec import NodeWright
from lifecycle.status import Status


def named(name: str, priority: int, packages: dict[str, dict[str, Any]]) -> NodeWright:
    cr = make_cr(packages, priority=priority)
    meta = cr.metadata.model_copy(update={"name": name, "uid": f"uid-{name}"})
    return cr.model_copy(update={"metadata": meta})


REBOOT = {"version": "1.0.0", "interrupt": {"type": "reboot"}}
SERVICE = {"version": "1.0.0", "interrupt": {"type": "service", "services": ["kubelet"]}}
PLAIN = {"version": "1.0.0"}


@dataclass
class SharedNode:
    """Two Worlds (CRs) on one node: node facts are copied between them after every pass."""

    worlds: list[World]
    unschedulable_trace: list[bool]

    @classmethod
    def of(cls, *crs: NodeWright, pods_to_evict: int = 2) -> SharedNode:
        worlds = [World(cr=cr) for cr in crs]
        node = replace(worlds[0].node, pods_to_evict=pods_to_evict)
        for w in worlds:
            w.node = node
        return cls(worlds, [])

    def progress(self, w: World) -> sequencing.CRProgress:
        name = w.cr.metadata.name
        holders = w.node.cordon.holders if w.node.cordon is not None else []
        joinable = {"n1"} if w.status is Status.IN_PROGRESS and name in holders else set()
        return sequencing.CRProgress.of(
            w.cr,
            targets=["n1"],
            complete_on=["n1"] if w.status is Status.COMPLETE else [],
            joinable_on=joinable,
        )

    def pass_of(self, w: World) -> None:
        me = w.cr.metadata.name
        others = [o for o in self.worlds if o is not w]
        holders = w.node.cordon.holders if w.node.cordon is not None else []
        peers = tuple(
            peering.outlook(
                o.cr,
                o.state,
                me=me,
                earlier=(o.cr.spec.priority, o.cr.metadata.name) < (w.cr.spec.priority, me),
                holds_cordon=o.cr.metadata.name in holders,
                complete=o.status is Status.COMPLETE,
                idle=False,
            )
            for o in others
        )
        foreign = sum(1 for o in others for p in o.pods.values() if p.live)
        w.node = replace(w.node, peers=peers, foreign_package_pods=foreign)
        w.allowed = sequencing.node_ready(me, "n1", [self.progress(x) for x in self.worlds])
        w.step()
        for o in others:
            o.node = replace(w.node, peers=(), foreign_package_pods=0)
        self.unschedulable_trace.append(w.node.unschedulable)

    def finish_pods(self) -> None:
        for w in self.worlds:
            before = w.node.boot_id
            w.finish_pods()
            if w.node.boot_id != before:  # a reboot: every CR sees the new bootID
                for o in self.worlds:
                    o.node = replace(o.node, boot_id=w.node.boot_id, ready=True)
                    assert not any(p.live for p in o.pods.values()), "pod ran during a reboot"

    def run(self, *, order: tuple[int, ...] = (0, 1), limit: int = 60) -> None:
        for _ in range(limit):
            for i in order:
                self.pass_of(self.worlds[i])
            if all(w.status is Status.COMPLETE and not w.pods for w in self.worlds):
                return
            self.finish_pods()
            for w in self.worlds:
                w.tick()
        states = [w.state for w in self.worlds]
        raise AssertionError(f"not complete after {limit} rounds: {states}")

    @property
    def boots(self) -> int:
        return sum(w.boots for w in self.worlds)

    def one_cordon(self) -> bool:
        """Schedulable, then unschedulable without a gap, then schedulable at the end."""
        trace = self.unschedulable_trace
        first = trace.index(True)
        last = len(trace) - 1 - trace[::-1].index(True)
        return all(trace[first : last + 1]) and not trace[-1]


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_two_reboot_rollouts_reboot_the_node_once(order: tuple[int, ...]) -> None:
    first = named("a-driver", 100, {"driver": REBOOT})
    second = named("b-tuning", 200, {"tuning": REBOOT})
    shared = SharedNode.of(first, second)

    shared.run(order=order)

    assert shared.boots == 1
    assert shared.one_cordon()
    interrupts = [
        c for w in shared.worlds for c in w.created if isinstance(c, act.CreateInterruptPod)
    ]
    assert len(interrupts) == 1 and interrupts[0].cr == "a-driver"
    a, b = shared.worlds
    assert a.state["driver|1.0.0"].merged_with == ["b-tuning"]
    assert b.state["tuning|1.0.0"].stage is Stage.POST_INTERRUPT


def test_applies_keep_priority_order() -> None:
    first = named("a-driver", 100, {"driver": REBOOT})
    second = named("b-tuning", 200, {"tuning": REBOOT})
    shared = SharedNode.of(first, second)
    order: list[str] = []
    for _ in range(60):
        for w in shared.worlds:
            before = len(w.created)
            shared.pass_of(w)
            order.extend(
                f"{c.cr}:{c.stages[0]}"
                for c in w.created[before:]
                if isinstance(c, act.CreatePackagePod)
            )
        if all(w.status is Status.COMPLETE and not w.pods for w in shared.worlds):
            break
        shared.finish_pods()
        for w in shared.worlds:
            w.tick()
    assert order == [
        "a-driver:apply",
        "b-tuning:apply",
        "a-driver:post-interrupt",
        "b-tuning:post-interrupt",
    ]


def test_a_service_restart_rides_on_the_earlier_reboot() -> None:
    shared = SharedNode.of(
        named("a-driver", 100, {"driver": REBOOT}), named("b-svc", 200, {"svc": SERVICE})
    )
    shared.run()
    assert shared.boots == 1
    kinds = [
        c.interrupt_type.value
        for w in shared.worlds
        for c in w.created
        if isinstance(c, act.CreateInterruptPod)
    ]
    assert kinds == ["reboot"]


def test_a_later_reboot_upgrades_the_earlier_service_restart() -> None:
    shared = SharedNode.of(
        named("a-svc", 100, {"svc": SERVICE}), named("b-driver", 200, {"driver": REBOOT})
    )
    shared.run()
    pods = [c for w in shared.worlds for c in w.created if isinstance(c, act.CreateInterruptPod)]
    assert [(p.cr, p.interrupt_type.value) for p in pods] == [("a-svc", "reboot")]
    assert shared.boots == 1
    assert shared.one_cordon()


def test_a_later_rollout_without_interrupt_waits_for_the_earlier_to_complete() -> None:
    shared = SharedNode.of(
        named("a-driver", 100, {"driver": REBOOT}), named("b-plain", 200, {"plain": PLAIN})
    )
    shared.run()
    a, b = shared.worlds
    assert shared.boots == 1
    # b's apply ran on the node only after a-driver's reboot and post-interrupt.
    b_apply = next(i for i, x in enumerate(b.log) if isinstance(x, act.CreatePackagePod))
    assert b.log[b_apply].cr == "b-plain"
    assert a.state["driver|1.0.0"].stage is Stage.POST_INTERRUPT
    assert b.state["plain|1.0.0"].state is StageState.COMPLETE


def test_a_failed_shared_interrupt_leaves_the_later_rollout_due_again() -> None:
    first = named("a-driver", 100, {"driver": {**SERVICE, "maxAttempts": 1}})
    second = named("b-svc", 200, {"svc": SERVICE})
    shared = SharedNode.of(first, second)
    a, b = shared.worlds
    for _ in range(30):
        for w in shared.worlds:
            shared.pass_of(w)
        if any(e.interrupt_by for e in b.state.values()):
            break
        shared.finish_pods()
        for w in shared.worlds:
            w.tick()
    assert b.state["svc|1.0.0"].interrupt_by == "a-driver"
    a.finish_pods(fail="driver")  # the shared service restart fails for good
    for _ in range(3):
        for w in shared.worlds:
            shared.pass_of(w)
    assert a.state["driver|1.0.0"].state is StageState.ERRORING
    entry = b.state["svc|1.0.0"]
    assert not entry.interrupt_by
    # b runs its own interrupt now: the earlier CR is erroring (not waited for).
    assert any(isinstance(c, act.CreateInterruptPod) and c.cr == "b-svc" for c in b.created)
