"""A node the rollout planner will never pick (ignore label, untolerated taint) reports
``blocked`` with the reason instead of ``waiting`` (as NodeWright does); work already running
on it is not affected."""

from __future__ import annotations

from dataclasses import replace

from stage_world import World, make_cr

from lifecycle import actions as act
from lifecycle.stages import plan_node
from lifecycle.status import Status


def test_a_node_that_cannot_be_picked_is_blocked_with_the_reason_and_does_nothing() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0"}}), allowed=False)
    plan = plan_node(replace(world.input(), unpickable="taints not tolerated: gpu=a:NoSchedule"))
    assert plan.status is Status.BLOCKED
    assert "taints not tolerated" in plan.reason
    assert [type(a) for a in plan.actions] == [act.SetNodeStatus]


def test_a_complete_node_stays_complete_even_if_it_could_not_be_picked_now() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0"}}))
    world.converge()
    world.allowed = False
    plan = plan_node(replace(world.input(), unpickable="node has the ignore label"))
    assert plan.status is Status.COMPLETE
