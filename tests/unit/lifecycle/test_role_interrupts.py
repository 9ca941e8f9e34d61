"""The role decides the interrupt: what its package declares and what its runs ask for reach the
node as cordon, drain, the interrupt and post-interrupt; a CR's own interrupt wins and the
overridden request is recorded, never dropped."""

from __future__ import annotations

from stage_world import World, make_cr

from lifecycle import actions as act
from lifecycle.nodestate import Stage, StageState
from lifecycle.results import AgentResult
from lifecycle.spec import Interrupt, InterruptType
from lifecycle.status import Status

APPLY_CHAIN = ("apply", "apply-check", "config", "config-check")
POST_CHAIN = ("post-interrupt", "post-interrupt-check")
REBOOT_ASKED = AgentResult(reboot_requested=True, request_reasons=["reboot requested by 'Reboot'"])


def cordoned_before_interrupt(world: World) -> bool:
    """Every interrupt pod was created after a Cordon and a finished drain (none to evict)."""
    cordoned = False
    for action in world.log:
        if isinstance(action, act.Cordon):
            cordoned = True
        if isinstance(action, act.CreateInterruptPod) and not cordoned:
            return False
    return True


def test_a_reboot_a_handler_asked_for_drains_and_reboots_the_node_once() -> None:
    world = World(cr=make_cr({"grub": {"version": "1.0.0"}}))
    world.node = world.node.__class__(name="n1", boot_id="boot-0", pods_to_evict=2)
    world.results["grub"] = REBOOT_ASKED
    world.converge()
    assert world.created_stages() == [
        ("grub", APPLY_CHAIN),
        ("grub", ("interrupt",)),
        ("grub", POST_CHAIN),
    ]
    assert world.boots == 1
    assert cordoned_before_interrupt(world)
    assert any(isinstance(a, act.Drain) for a in world.log)
    assert not world.node.unschedulable and world.node.cordon is None
    entry = world.state["grub|1.0.0"]
    assert (entry.stage, entry.state) == (Stage.POST_INTERRUPT, StageState.COMPLETE)
    assert entry.requested == Interrupt(type=InterruptType.REBOOT)
    (event,) = world.events("InterruptRequested")
    assert "reboot requested by 'Reboot'" in event.message


def test_the_package_declared_interrupt_is_used_when_the_cr_sets_none() -> None:
    world = World(cr=make_cr({"agent": {"version": "1.0.0"}}))
    declared = Interrupt(type=InterruptType.SERVICE, services=["agent"])
    world.results["agent"] = AgentResult(declared_interrupt=declared)
    world.converge()
    interrupts = [c for c in world.created if isinstance(c, act.CreateInterruptPod)]
    assert [(i.interrupt_type, i.services) for i in interrupts] == [
        (InterruptType.SERVICE, ("agent",))
    ]
    assert world.state["agent|1.0.0"].declared == declared


def test_requested_restarts_merge_with_the_declared_services() -> None:
    world = World(cr=make_cr({"agent": {"version": "1.0.0"}}))
    world.results["agent"] = AgentResult(
        declared_interrupt=Interrupt(type=InterruptType.SERVICE, services=["agent"]),
        restart_services=["fabric", "agent"],
    )
    world.converge()
    (pod,) = [c for c in world.created if isinstance(c, act.CreateInterruptPod)]
    assert (pod.interrupt_type, pod.services) == (InterruptType.SERVICE, ("agent", "fabric"))


def test_an_explicit_cr_interrupt_wins_and_the_overridden_request_is_recorded() -> None:
    world = World(cr=make_cr({"grub": {"version": "1.0.0", "interrupt": {"type": "noop"}}}))
    world.results["grub"] = REBOOT_ASKED
    world.converge()
    assert world.boots == 0
    interrupts = [c for c in world.created if isinstance(c, act.CreateInterruptPod)]
    assert [i.interrupt_type for i in interrupts] == [InterruptType.NOOP]
    assert world.state["grub|1.0.0"].requested == Interrupt(type=InterruptType.REBOOT)
    (event,) = world.events("InterruptRequestOverridden")
    assert "not performed: the CR sets interrupt noop" in event.message
    assert not world.events("InterruptRequested")


def test_a_request_from_a_failed_attempt_survives_the_retry_that_reports_nothing() -> None:
    world = World(cr=make_cr({"grub": {"version": "1.0.0"}}))
    world.step()
    world.results["grub"] = REBOOT_ASKED.model_copy(update={"pending_handlers": ["Reboot"]})
    world.finish_pods(fail="grub")
    world.step()
    entry = world.state["grub|1.0.0"]
    assert entry.requested == Interrupt(type=InterruptType.REBOOT)
    assert entry.pending_handlers == ["Reboot"]
    world.converge()
    assert world.boots == 1
    assert world.state["grub|1.0.0"].pending_handlers == []


def test_a_vars_change_reboots_only_when_its_run_asks_for_it() -> None:
    world = World(cr=make_cr({"tune": {"version": "1.0.0", "vars": {"swappiness": 10}}}))
    world.converge()
    assert world.boots == 0

    world.cr = make_cr({"tune": {"version": "1.0.0", "vars": {"swappiness": 20}}}, generation=2)
    world.created.clear()
    world.converge()
    assert world.created_stages() == [("tune", ("config", "config-check"))]
    assert world.boots == 0

    world.cr = make_cr({"tune": {"version": "1.0.0", "vars": {"grub": "iommu=on"}}}, generation=3)
    world.created.clear()
    world.results["tune"] = REBOOT_ASKED
    world.converge()
    assert world.created_stages() == [
        ("tune", ("config", "config-check")),
        ("tune", ("interrupt",)),
        ("tune", POST_CHAIN),
    ]
    assert world.boots == 1
    assert cordoned_before_interrupt(world)


def test_a_request_after_the_interrupt_is_announced_not_acted_on() -> None:
    world = World(cr=make_cr({"grub": {"version": "1.0.0", "interrupt": {"type": "reboot"}}}))
    for _ in range(12):
        plan = world.step()
        post = [p for p in world.pods.values() if p.stages[0] == "post-interrupt"]
        if post:
            world.results["grub"] = REBOOT_ASKED
        world.finish_pods()
        world.tick()
        if plan.status is Status.COMPLETE and not world.pods:
            break
    assert world.boots == 1
    assert world.events("InterruptRequestOverridden")


def test_a_declared_interrupt_other_nodes_reported_drains_this_node_before_it_applies() -> None:
    world = World(cr=make_cr({"grub": {"version": "1.0.0"}}))
    world.node = world.node.__class__(name="n1", boot_id="boot-0", pods_to_evict=1)
    world.declared["grub|1.0.0"] = Interrupt(type=InterruptType.REBOOT)
    world.converge()
    first_pod = next(i for i, a in enumerate(world.log) if isinstance(a, act.CreatePackagePod))
    drain = next(i for i, a in enumerate(world.log) if isinstance(a, act.Drain))
    assert drain < first_pod, "the package was applied before the node was drained"
    assert world.boots == 1
