"""Changes that land while a disruptive cycle is open are in effect when the node completes.

The pods that ran before the change used the old vars; the planner runs the config stage again
on the node still cordoned and drained, and the interrupt still runs once.
"""

from __future__ import annotations

from stage_world import World, make_cr

from lifecycle.stages import config_hash
from lifecycle.status import Status

REBOOT = {"version": "1.0.0", "interrupt": {"type": "reboot"}}


def with_vars(value: int) -> dict[str, object]:
    return {"tuning": {**REBOOT, "vars": {"grub_args": value}}}


def run_until(world: World, done: object, limit: int = 30) -> None:
    for _ in range(limit):
        world.step()
        if callable(done) and done():
            return
        world.finish_pods()
        world.tick()
    raise AssertionError(f"not reached: {world.state}")


def test_vars_changed_while_the_apply_runs_are_applied_before_the_one_reboot() -> None:
    world = World(cr=make_cr(with_vars(1)))
    run_until(world, lambda: any(p.live for p in world.pods.values()))
    world.cr = make_cr(with_vars(2))  # the apply pod runs with grub_args=1
    world.converge()
    stages = [s for _, s in world.created_stages()]
    assert stages == [
        ("apply", "apply-check", "config", "config-check"),
        ("config", "config-check"),
        ("interrupt",),
        ("post-interrupt", "post-interrupt-check"),
    ]
    assert world.boots == 1
    entry = world.state["tuning|1.0.0"]
    assert entry.config_hash == config_hash(world.cr.spec.packages["tuning"])


def test_vars_changed_after_the_reboot_run_config_again_before_complete() -> None:
    world = World(cr=make_cr(with_vars(1)))
    for _ in range(30):  # up to the reboot, before the post-interrupt pod exists
        world.step()
        world.finish_pods()
        world.tick()
        if world.boots:
            break
    world.cr = make_cr(with_vars(2))
    world.converge()
    entry = world.state["tuning|1.0.0"]
    assert entry.config_hash == config_hash(world.cr.spec.packages["tuning"])
    configs = [s for _, s in world.created_stages() if s[0] == "config"]
    assert configs == [("config", "config-check")]
    assert world.boots == 1  # no configInterrupts match grub_args: no second reboot
    assert world.status is Status.COMPLETE


def test_a_reboot_pod_seen_failed_before_the_new_boot_id_is_not_rebooted_again() -> None:
    """The reboot killed the interrupt pod and the controller saw the failure before the node's
    new bootID (its status write lagged): once the new bootID shows, the interrupt is done."""
    world = World(cr=make_cr(with_vars(1)))
    for _ in range(30):
        world.step()
        live = [n for n, p in world.pods.items() if p.live and p.interrupt]
        if live:
            break
        world.finish_pods()
        world.tick()
    assert len(live) == 1
    world.finish_pods(fail="*")  # the pod ends Failed; the node still shows the old bootID
    world.step()
    assert world.state["tuning|1.0.0"].retry_at, "a retry is scheduled"
    world.reboot()  # now the new bootID shows
    world.converge()
    interrupts = [s for _, s in world.created_stages() if s == ("interrupt",)]
    assert interrupts == [("interrupt",)]
    assert world.boots == 1
