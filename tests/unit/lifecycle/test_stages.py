"""The per-node stage planner: one test per rule, NodeWright's chainsaw e2e single-node flows as a
table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stage_world import T0, World, failed_result, make_cr

from lifecycle import actions as act
from lifecycle.nodestate import CordonRecord, PackageState, Stage, StageState
from lifecycle.spec import InterruptType
from lifecycle.stages import (
    PodObservation,
    PodPhase,
    backoff,
    chain,
    config_hash,
    plan_node,
    resource_id,
    rfc3339,
)
from lifecycle.status import Status

APPLY_CHAIN = ("apply", "apply-check", "config", "config-check")
UPGRADE_CHAIN = ("upgrade", "upgrade-check", "config", "config-check")
CONFIG_CHAIN = ("config", "config-check")
POST_CHAIN = ("post-interrupt", "post-interrupt-check")
UNINSTALL_CHAIN = ("uninstall", "uninstall-check")
REBOOT = {"type": "reboot"}


def of(plan_actions: tuple[act.Action, ...], kind: type[Any]) -> list[Any]:
    return [a for a in plan_actions if isinstance(a, kind)]


def complete(stage: Stage = Stage.CONFIG, **extra: Any) -> PackageState:
    return PackageState(stage=stage, state=StageState.COMPLETE, **extra)


def until_interrupt_pod(world: World) -> str:
    """Step and finish pods until an interrupt pod exists; return its name (left running)."""
    for _ in range(20):
        world.step()
        live = [n for n, p in world.pods.items() if p.interrupt and p.live]
        if live:
            return live[0]
        world.finish_pods()
    raise AssertionError("no interrupt pod")


def installed(world: World) -> World:
    """Converge a fresh world and forget what it created, so a test sees only the next change."""
    world.converge()
    world.created.clear()
    world.log.clear()
    return world


def with_spec(world: World, packages: dict[str, dict[str, Any]], **spec: Any) -> World:
    world.cr = make_cr(packages, generation=world.cr.metadata.generation + 1, **spec)
    return world


# --------------------------------------------------------------------------------------------
# The single-node flows of NodeWright's chainsaw e2e suite, as a table
# --------------------------------------------------------------------------------------------

FLOWS: list[tuple[str, dict[str, dict[str, Any]], list[tuple[str, tuple[str, ...]]]]] = [
    (
        "fresh install without interrupt runs apply and config in one pod",
        {"dexter": {"version": "1.2.3"}},
        [("dexter", APPLY_CHAIN)],
    ),
    (
        "fresh install with interrupt runs apply+config, the interrupt, then post-interrupt",
        {"dexter": {"version": "1.2.3", "interrupt": REBOOT}},
        [("dexter", APPLY_CHAIN), ("dexter", ("interrupt",)), ("dexter", POST_CHAIN)],
    ),
    (
        "depends-on runs both roots in parallel and the dependent afterwards",
        {
            "aa-fast": {"version": "1.0.0"},
            "bb-slow": {"version": "1.0.0"},
            "cc-last": {"version": "1.0.0", "dependsOn": {"aa-fast": "1.0.0", "bb-slow": "1.0.0"}},
        },
        [("aa-fast", APPLY_CHAIN), ("bb-slow", APPLY_CHAIN), ("cc-last", APPLY_CHAIN)],
    ),
    (
        "interrupt grouping runs one interrupt pod owned by the first package by name",
        {
            "dax": {
                "version": "1.0.0",
                "interrupt": {"type": "service", "services": ["foobar", "containerd"]},
            },
            "zeb": {"version": "1.0.0", "interrupt": {"type": "service", "services": ["cron"]}},
        },
        [
            ("dax", APPLY_CHAIN),
            ("zeb", APPLY_CHAIN),
            ("dax", ("interrupt",)),
            ("dax", POST_CHAIN),
            ("zeb", POST_CHAIN),
        ],
    ),
]


@pytest.mark.parametrize(("title", "packages", "expected"), FLOWS, ids=[f[0] for f in FLOWS])
def test_single_node_flow_creates_exactly_these_pods_in_this_order(
    title: str, packages: dict[str, dict[str, Any]], expected: list[tuple[str, tuple[str, ...]]]
) -> None:
    world = World(make_cr(packages))
    world.converge()
    assert world.created_stages() == expected
    assert world.status is Status.COMPLETE


def test_interrupt_grouping_merges_services_sorted_into_one_pod() -> None:
    world = World(
        make_cr(
            {
                "dax": {
                    "version": "1.0.0",
                    "interrupt": {"type": "service", "services": ["containerd", "foobar"]},
                },
                "zeb": {"version": "1.0.0", "interrupt": {"type": "service", "services": ["cron"]}},
            }
        )
    )
    world.converge()
    (pod,) = [c for c in world.created if isinstance(c, act.CreateInterruptPod)]
    assert (pod.package, pod.services, pod.members) == (
        "dax",
        ("containerd", "cron", "foobar"),
        ("dax", "zeb"),
    )


def test_the_non_owner_of_a_merged_interrupt_is_skipped_until_the_owner_succeeds() -> None:
    world = World(
        make_cr(
            {
                "dax": {"version": "1.0.0", "interrupt": {"type": "noop"}},
                "zeb": {"version": "1.0.0", "interrupt": {"type": "service", "services": ["cron"]}},
            }
        )
    )
    while not any(isinstance(c, act.CreateInterruptPod) for c in world.created):
        world.step()
        world.finish_pods()
    dax, zeb = world.state["dax|1.0.0"], world.state["zeb|1.0.0"]
    assert (dax.stage, dax.state) == (Stage.INTERRUPT, StageState.SKIPPED)
    assert (zeb.stage, zeb.state) == (Stage.INTERRUPT, StageState.IN_PROGRESS)  # service > noop
    world.finish_pods()
    world.step()
    assert {e.stage for e in world.state.values()} == {Stage.POST_INTERRUPT}


def test_upgrade_runs_upgrade_then_config_and_removes_the_older_key() -> None:
    world = installed(World(make_cr({"dexter": {"version": "1.0.0"}})))
    with_spec(world, {"dexter": {"version": "1.1.0"}})
    plan = world.step()
    (pod,) = of(plan.actions, act.CreatePackagePod)
    assert (pod.stages, pod.previous_version) == (UPGRADE_CHAIN, "1.0.0")
    assert "dexter|1.0.0" in world.state  # kept until the upgrade succeeds
    world.converge()
    assert set(world.state) == {"dexter|1.1.0"}


def test_downgrade_is_a_fresh_apply_that_keeps_the_newer_key() -> None:
    world = installed(World(make_cr({"mypkg": {"version": "2.1.4"}})))
    with_spec(world, {"mypkg": {"version": "1.2.3"}})
    plan = world.step()
    (pod,) = of(plan.actions, act.CreatePackagePod)
    assert (pod.stages, pod.previous_version) == (APPLY_CHAIN, "2.1.4")
    world.converge()
    assert set(world.state) == {"mypkg|2.1.4", "mypkg|1.2.3"}
    assert all(e.state is StageState.COMPLETE for e in world.state.values())


def test_config_change_without_a_matching_config_interrupt_runs_config_only() -> None:
    pkg = {"version": "1.0.0", "interrupt": REBOOT, "vars": {"a": 1, "b": 1}}
    pkg["configInterrupts"] = {"b": {"type": "reboot"}}
    world = installed(World(make_cr({"cfg": pkg})))
    with_spec(world, {"cfg": {**pkg, "vars": {"a": 2, "b": 1}}})
    world.allowed = True
    world.converge()
    assert world.created_stages() == [("cfg", CONFIG_CHAIN)]
    assert not any(isinstance(a, act.Cordon) for a in world.log)
    assert world.state["cfg|1.0.0"].stage is Stage.CONFIG
    assert world.node.boot_id == "boot-1"  # only the install rebooted


def test_config_change_with_a_matching_config_interrupt_drains_and_runs_that_interrupt() -> None:
    pkg = {"version": "1.0.0", "vars": {"sysctl_a": 1, "other": 1}}
    pkg["configInterrupts"] = {"sysctl_*": {"type": "service", "services": ["procps"]}}
    world = installed(World(make_cr({"cfg": pkg})))
    with_spec(world, {"cfg": {**pkg, "vars": {"sysctl_a": 2, "other": 1}}})
    world.node = replace(world.node, pods_to_evict=2)
    world.converge()
    assert world.created_stages() == [
        ("cfg", CONFIG_CHAIN),
        ("cfg", ("interrupt",)),
        ("cfg", POST_CHAIN),
    ]
    kinds = [type(a) for a in world.log if isinstance(a, (act.Cordon, act.Drain, act.Uncordon))]
    assert kinds[0] is act.Cordon and act.Drain in kinds and kinds[-1] is act.Uncordon
    (irq,) = [c for c in world.created if isinstance(c, act.CreateInterruptPod)]
    assert (irq.interrupt_type, irq.services) == (InterruptType.SERVICE, ("procps",))


def test_removing_a_var_counts_as_a_change_for_config_interrupts() -> None:
    pkg = {"version": "1.0.0", "vars": {"sysctl_a": 1, "sysctl_b": 1}}
    pkg["configInterrupts"] = {"sysctl_a": REBOOT}
    world = installed(World(make_cr({"cfg": pkg})))
    with_spec(
        world, {"cfg": {**pkg, "vars": {"sysctl_b": 1}, "configInterrupts": {"sysctl_*": REBOOT}}}
    )
    world.converge()
    assert ("cfg", ("interrupt",)) in world.created_stages()


def test_explicit_uninstall_runs_uninstall_then_uninstall_interrupt_then_drops_the_key() -> None:
    pkg = {"version": "1.0.0", "interrupt": REBOOT, "uninstall": {"enabled": True}}
    world = installed(World(make_cr({"rm-me": pkg})))
    with_spec(world, {"rm-me": {**pkg, "uninstall": {"enabled": True, "apply": True}}})
    world.converge()
    assert world.created_stages() == [
        ("rm-me", UNINSTALL_CHAIN),
        ("rm-me", ("uninstall-interrupt",)),
    ]
    assert world.state == {}
    assert not world.node.unschedulable


def test_cancelling_an_uninstall_that_has_not_run_restores_the_installed_entry() -> None:
    pkg = {"version": "1.0.0", "interrupt": REBOOT, "uninstall": {"enabled": True}}
    world = installed(World(make_cr({"rm-me": pkg})))
    with_spec(world, {"rm-me": {**pkg, "uninstall": {"enabled": True, "apply": True}}})
    world.node = replace(world.node, pods_to_evict=5)
    world.step()  # cordon
    world.node = replace(world.node, unschedulable=True)
    world.step()  # draining, uninstall not run
    assert world.state["rm-me|1.0.0"].stage is Stage.UNINSTALL
    with_spec(world, {"rm-me": pkg})
    world.converge()
    assert world.created == []
    assert world.state["rm-me|1.0.0"].stage is Stage.POST_INTERRUPT
    assert not world.node.unschedulable


def test_cancelling_during_a_running_uninstall_pod_lets_it_finish_then_reinstalls() -> None:
    pkg = {"version": "1.0.0", "uninstall": {"enabled": True}}
    world = installed(World(make_cr({"rm-me": pkg})))
    with_spec(world, {"rm-me": {**pkg, "uninstall": {"enabled": True, "apply": True}}})
    world.step()
    assert world.created_stages() == [("rm-me", UNINSTALL_CHAIN)]
    with_spec(world, {"rm-me": pkg})
    plan = world.step()
    assert not of(plan.actions, act.DeletePod)  # the running uninstall is not killed
    world.converge()
    assert world.created_stages() == [("rm-me", UNINSTALL_CHAIN), ("rm-me", APPLY_CHAIN)]


def test_uninstall_of_a_package_never_installed_is_already_done() -> None:
    pkg = {"version": "1.0.0", "uninstall": {"enabled": True, "apply": True}}
    plan = World(make_cr({"rm-me": pkg})).plan()
    assert plan.status is Status.COMPLETE
    assert not of(plan.actions, act.CreatePackagePod)


# --------------------------------------------------------------------------------------------
# Beyond NodeWright
# --------------------------------------------------------------------------------------------


def test_a_node_not_allowed_to_start_waits_and_does_nothing() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0", "interrupt": REBOOT}}), allowed=False)
    plan = world.plan()
    assert plan.status is Status.WAITING
    # Not reached yet and never labelled: the label stays absent (no Node write at all).
    assert plan.actions == ()


def test_an_upgrade_is_new_work_and_waits_for_the_rollout_planner() -> None:
    world = installed(World(make_cr({"dexter": {"version": "1.0.0"}})))
    with_spec(world, {"dexter": {"version": "2.0.0"}})
    world.allowed = False
    plan = world.plan()
    assert plan.status is Status.WAITING
    assert not of(plan.actions, act.CreatePackagePod)
    # A node labelled complete for the old spec must not keep saying so.
    assert of(plan.actions, act.SetNodeStatus) == [
        act.SetNodeStatus(node=world.node.name, cr=world.cr.metadata.name, status=Status.WAITING)
    ]


def test_a_config_change_is_new_work_and_waits_for_the_rollout_planner() -> None:
    world = installed(World(make_cr({"dexter": {"version": "1.0.0", "vars": {"a": 1}}})))
    with_spec(world, {"dexter": {"version": "1.0.0", "vars": {"a": 2}}})
    world.allowed = False
    assert world.plan().status is Status.WAITING


def test_work_in_flight_continues_when_the_node_is_no_longer_allowed_to_start() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0", "interrupt": REBOOT}}))
    world.step()  # started: cordon
    world.allowed = False
    world.converge()
    assert world.state["dexter|1.0.0"].stage is Stage.POST_INTERRUPT


def test_a_package_starts_only_when_all_its_dependencies_are_complete_on_the_node() -> None:
    world = World(
        make_cr(
            {
                "aa": {"version": "1.0.0"},
                "bb": {"version": "1.0.0"},
                "cc": {"version": "1.0.0", "dependsOn": {"aa": "1.0.0", "bb": "1.0.0"}},
            }
        )
    )
    world.step()
    world.finish_pods(fail="bb")  # aa completes, bb fails once (retry pending)
    world.tick()
    world.step()
    assert "cc|1.0.0" not in world.state
    assert [p for p, _ in world.created_stages()] == ["aa", "bb"]


def test_a_reopened_root_reruns_and_its_dependents_stay_complete() -> None:
    pkgs = {
        "dexter": {"version": "1.0.0", "vars": {"a": 1}},
        "spencer": {"version": "1.0.0", "dependsOn": {"dexter": "1.0.0"}},
    }
    world = installed(World(make_cr(pkgs)))
    with_spec(world, {**pkgs, "dexter": {"version": "1.0.0", "vars": {"a": 2}}})
    world.converge()
    assert world.created_stages() == [("dexter", CONFIG_CHAIN)]


def test_a_failing_pod_is_retried_with_back_off_then_erroring_after_max_attempts() -> None:
    world = World(make_cr({"bad": {"version": "1.0.0", "maxAttempts": 3}}))
    world.step()
    for attempt in (1, 2, 3):
        world.finish_pods(fail="bad")
        plan = world.step()
        assert len(plan.failures) == 1 and plan.failures[0].final is (attempt == 3)
        if attempt < 3:
            assert plan.status is Status.IN_PROGRESS
            assert not of(plan.actions, act.CreatePackagePod)  # backing off
            world.tick(backoff(attempt) - timedelta(seconds=1))
            assert not of(world.plan().actions, act.CreatePackagePod)
            world.tick(timedelta(seconds=1))
            (pod,) = of(world.step().actions, act.CreatePackagePod)
            assert pod.attempt == attempt + 1
    entry = world.state["bad|1.0.0"]
    assert (entry.state, entry.attempts, entry.message) == (StageState.ERRORING, 3, "boom")
    assert world.status is Status.ERRORING
    world.tick(timedelta(hours=1))
    assert not of(world.step().actions, act.CreatePackagePod)


def test_a_retry_resumes_from_the_stage_that_failed() -> None:
    world = World(make_cr({"bad": {"version": "1.0.0"}}))
    world.step()
    (name,) = world.pods
    world.pods[name] = replace(
        world.pods[name], phase=PodPhase.FAILED, result=failed_result("config-check")
    )
    world.step()
    world.tick(timedelta(hours=1))
    (pod,) = of(world.step().actions, act.CreatePackagePod)
    assert pod.stages == CONFIG_CHAIN


def test_a_pod_that_never_starts_fails_its_attempt_at_the_stage_deadline() -> None:
    world = World(
        make_cr({"slow": {"version": "1.0.0", "timeouts": {"stage": "10m"}, "maxAttempts": 1}})
    )
    world.step()
    (name,) = world.pods
    world.pods[name] = replace(world.pods[name], waiting_reason="ContainerCreating")
    world.tick(timedelta(minutes=9))
    assert world.step().status is Status.IN_PROGRESS
    world.tick(timedelta(minutes=1))
    plan = world.step()
    assert plan.status is Status.ERRORING
    assert of(plan.actions, act.DeletePod)[0].name == name
    assert "ContainerCreating" in world.state["slow|1.0.0"].message


@pytest.mark.parametrize(
    "reason",
    ["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError"],
)
def test_a_pod_that_cannot_pull_its_image_makes_the_node_erroring_at_the_pull_deadline(
    reason: str,
) -> None:
    pkg = {"version": "1.0.0", "image": "repo/ghost", "timeouts": {"stage": "30m"}}
    world = World(make_cr({"ghost": pkg}))
    world.step()
    world.tick(timedelta(seconds=30))  # the pull deadline counts from the pod's creation
    (name,) = world.pods
    world.pods[name] = replace(world.pods[name], waiting_reason=reason, created=world.now)
    world.tick(timedelta(minutes=2) - timedelta(seconds=1))
    plan = world.step()
    assert plan.status is Status.IN_PROGRESS
    assert plan.requeue_at == world.now + timedelta(seconds=1)  # wakes at the pull deadline
    world.tick(timedelta(seconds=1))
    plan = world.step()
    entry = world.state["ghost|1.0.0"]
    assert plan.status is Status.ERRORING  # not retried in place, whatever maxAttempts says
    assert (entry.state, entry.cause) == (StageState.ERRORING, "image-pull")
    assert reason in entry.message and "repo/ghost" in entry.message and "2m" in entry.message
    assert of(plan.actions, act.DeletePod)[0].name == name
    assert plan.failures[0].final


def test_a_drain_that_does_not_finish_by_its_deadline_makes_the_node_erroring() -> None:
    world = World(
        make_cr({"dexter": {"version": "1.0.0", "interrupt": REBOOT}}, drain={"timeout": "5m"}),
    )
    world.node = replace(world.node, unschedulable=True, pods_to_evict=3)
    plan = world.plan()
    (drain,) = of(plan.actions, act.Drain)
    assert drain.deadline == T0 + timedelta(minutes=5)
    world.apply(
        replace(plan, actions=tuple(a for a in plan.actions if not isinstance(a, act.Drain)))
    )
    world.tick(timedelta(minutes=5))
    plan = world.step()
    assert plan.status is Status.ERRORING
    assert plan.failures[0].stage == "drain"
    assert not world.created


def test_pods_matching_pod_non_interrupt_labels_are_waited_for_before_the_drain() -> None:
    world = World(
        make_cr(
            {"dexter": {"version": "1.0.0", "interrupt": REBOOT}},
            podNonInterruptLabels={"matchLabels": {"app": "training"}},
        )
    )
    world.node = replace(world.node, unschedulable=True, non_interrupt_pods=1, pods_to_evict=2)
    plan = world.step()
    assert of(plan.actions, act.WaitForPods) and not of(plan.actions, act.Drain)
    world.node = replace(world.node, non_interrupt_pods=0)
    assert of(world.step().actions, act.Drain)


def test_an_interrupt_package_never_applies_on_an_undrained_node() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0", "interrupt": REBOOT}}))
    world.node = replace(world.node, pods_to_evict=1)
    for _ in range(3):
        plan = world.plan()
        assert not of(plan.actions, act.CreatePackagePod)
        world.apply(
            replace(plan, actions=tuple(a for a in plan.actions if not isinstance(a, act.Drain)))
        )


def test_a_package_without_interrupt_never_cordons() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0"}}))
    world.converge()
    assert not any(isinstance(a, (act.Cordon, act.Drain)) for a in world.log)


def test_reboot_completion_needs_a_new_boot_id_not_pod_success() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0", "interrupt": REBOOT}}))
    irq = until_interrupt_pod(world)
    assert world.state["dexter|1.0.0"].boot_id == "boot-0"
    world.pods[irq] = replace(world.pods[irq], phase=PodPhase.SUCCEEDED)
    plan = world.step()
    assert world.state["dexter|1.0.0"].stage is Stage.INTERRUPT
    assert world.state["dexter|1.0.0"].state is StageState.IN_PROGRESS
    assert of(plan.actions, act.VerifyReboot)
    world.node = replace(world.node, boot_id="boot-9", ready=False)
    world.step()
    assert world.state["dexter|1.0.0"].state is StageState.IN_PROGRESS  # not Ready yet
    world.node = replace(world.node, ready=True)
    world.step()
    assert world.state["dexter|1.0.0"].stage is Stage.POST_INTERRUPT


def test_a_reboot_that_never_comes_back_fails_at_the_interrupt_deadline() -> None:
    pkg = {
        "version": "1.0.0",
        "interrupt": REBOOT,
        "timeouts": {"interrupt": "15m"},
        "maxAttempts": 1,
    }
    world = World(make_cr({"dexter": pkg}))
    for _ in range(3):
        world.step()
        world.finish_pods(reboot=False)
    world.step()
    world.tick(timedelta(minutes=15))
    plan = world.step()
    assert plan.status is Status.ERRORING
    assert "bootID" in world.state["dexter|1.0.0"].message


def test_a_restarted_controller_mid_interrupt_does_not_create_a_second_interrupt_pod() -> None:
    cr = make_cr({"dexter": {"version": "1.0.0", "interrupt": REBOOT}})
    entry = PackageState(
        stage=Stage.INTERRUPT,
        state=StageState.IN_PROGRESS,
        attempts=1,
        boot_id="boot-0",
        interrupt="reboot",
        started=rfc3339(T0),
        config_hash=config_hash(cr.spec.packages["dexter"]),
    )
    pod = PodObservation(
        "irq", "dexter", "1.0.0", ("interrupt",), 1, PodPhase.RUNNING, interrupt=True
    )
    world = World(cr, state={"dexter|1.0.0": entry}, pods={"irq": pod}, status=Status.IN_PROGRESS)
    world.node = replace(world.node, unschedulable=True, cordon=CordonRecord(holders=["tune"]))
    world.tick()
    assert not of(world.plan().actions, act.CreateInterruptPod)
    del world.pods["irq"]  # the reboot killed it
    world.reboot()
    plan = world.step()
    assert not of(plan.actions, act.CreateInterruptPod)
    assert world.state["dexter|1.0.0"].stage is Stage.POST_INTERRUPT


def test_the_pre_reboot_boot_id_is_recorded_before_the_interrupt_pod_is_created() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0", "interrupt": REBOOT}}))
    for _ in range(10):
        plan = world.plan()
        if of(plan.actions, act.CreateInterruptPod):
            break
        world.apply(plan)
        world.finish_pods()
    kinds = [type(a) for a in plan.actions]
    assert kinds.index(act.PatchNodeState) < kinds.index(act.CreateInterruptPod)
    (patch,) = of(plan.actions, act.PatchNodeState)
    assert patch.set["dexter|1.0.0"].boot_id == "boot-0"


def test_an_interrupt_waits_while_another_package_pod_runs_on_the_node() -> None:
    world = World(
        make_cr(
            {"dexter": {"version": "1.0.0", "interrupt": REBOOT}, "slowpoke": {"version": "1.0.0"}}
        )
    )
    for _ in range(4):
        world.step()
        for name, pod in list(world.pods.items()):
            if pod.package == "dexter" and pod.live:
                world.pods[name] = replace(pod, phase=PodPhase.SUCCEEDED)
    assert world.state["dexter|1.0.0"].state is StageState.COMPLETE
    assert not any(isinstance(c, act.CreateInterruptPod) for c in world.created)
    world.finish_pods()
    world.step()
    assert any(isinstance(c, act.CreateInterruptPod) for c in world.created)


def test_a_node_a_human_cordoned_stays_cordoned_after_we_finish() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0", "interrupt": REBOOT}}))
    world.node = replace(world.node, unschedulable=True)
    world.converge()
    assert world.node.unschedulable
    assert any(isinstance(a, act.Cordon) and a.was_unschedulable for a in world.log)
    assert any(isinstance(a, act.Uncordon) for a in world.log)


def test_uncordon_releases_only_our_hold_when_another_cr_still_holds_the_node() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0", "interrupt": REBOOT}}))
    world.node = replace(world.node, unschedulable=True, cordon=CordonRecord(holders=["other"]))
    world.converge()
    assert world.node.unschedulable and world.node.cordon is not None
    assert world.node.cordon.holders == ["other"]


def test_an_erroring_node_starts_no_new_work() -> None:
    pkgs = {
        "bad": {"version": "1.0.0", "maxAttempts": 1},
        "later": {"version": "1.0.0", "dependsOn": {}},
    }
    world = World(make_cr({"bad": pkgs["bad"]}))
    world.step()
    world.finish_pods(fail="bad")
    world.step()
    with_spec(world, pkgs)
    plan = world.step()
    assert plan.status is Status.ERRORING
    assert not of(plan.actions, act.CreatePackagePod)


def test_fixing_the_vars_of_an_erroring_package_retries_it_when_allowed() -> None:
    world = World(make_cr({"bad": {"version": "1.0.0", "maxAttempts": 1, "vars": {"x": 1}}}))
    world.step()
    world.finish_pods(fail="bad")
    world.step()
    with_spec(world, {"bad": {"version": "1.0.0", "maxAttempts": 1, "vars": {"x": 2}}})
    (pod,) = of(world.step().actions, act.CreatePackagePod)
    assert pod.stages == APPLY_CHAIN
    world.converge()


def test_paused_creates_no_pods_but_records_running_ones() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0"}}))
    world.step()
    world.paused = True
    world.finish_pods()
    plan = world.step()
    assert plan.status is Status.COMPLETE
    world2 = World(make_cr({"dexter": {"version": "1.0.0"}}), paused=True)
    plan = world2.plan()
    assert plan.status is Status.PAUSED and not of(plan.actions, act.CreatePackagePod)


def test_disabled_reports_disabled_and_does_nothing_else() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0"}}))
    plan = plan_node(replace(world.input(), disabled=True))
    assert plan.status is Status.DISABLED
    assert [type(a) for a in plan.actions] == [act.SetNodeStatus]


def test_a_disabled_cr_records_a_pod_that_finished_and_starts_nothing_new() -> None:
    world = World(
        make_cr(
            {
                "dexter": {"version": "1.0.0"},
                "later": {"version": "1.0.0", "dependsOn": {"dexter": "1.0.0"}},
            }
        )
    )
    world.step()
    (pod,) = world.pods
    world.disabled = True
    world.finish_pods()
    plan = world.step()
    assert plan.status is Status.DISABLED
    assert world.state["dexter|1.0.0"].state is StageState.COMPLETE
    assert [d.name for d in of(plan.actions, act.DeletePod)] == [pod] and not world.pods
    world.tick(timedelta(hours=1))
    plan = world.step()
    assert plan.status is Status.DISABLED and not of(plan.actions, act.CreatePackagePod)
    assert "later|1.0.0" not in world.state
    world.disabled = False
    (created,) = of(world.step().actions, act.CreatePackagePod)
    assert created.package == "later"


def test_a_disabled_cr_records_a_failed_pod_but_does_not_retry_it() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0"}}))
    world.step()
    world.disabled = True
    world.finish_pods(fail="dexter")
    plan = world.step()
    assert [f.package for f in plan.failures] == ["dexter"]
    assert world.state["dexter|1.0.0"].retry_at and not world.pods
    world.tick(timedelta(hours=1))
    plan = world.step()
    assert plan.status is Status.DISABLED and not of(plan.actions, act.CreatePackagePod)


def test_a_disabled_cr_leaves_a_running_pod_alone_until_its_deadline() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0", "timeouts": {"stage": "10m"}}}))
    world.step()
    world.disabled = True
    plan = world.step()
    assert not of(plan.actions, act.DeletePod) and plan.requeue_at == T0 + timedelta(minutes=10)
    world.tick(timedelta(minutes=11))
    plan = world.step()
    assert [f.message for f in plan.failures] == ["pod did not finish within 10m"]
    assert of(plan.actions, act.DeletePod) and plan.status is Status.DISABLED


def test_a_disabled_cr_starts_no_interrupt_and_keeps_its_cordon() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0", "interrupt": REBOOT}}))
    for _ in range(5):
        world.step()
        if world.pods:
            break
    assert world.pods and world.node.unschedulable  # the apply pod runs on a cordoned node
    world.disabled = True
    world.finish_pods()
    plan = world.step()
    assert world.state["dexter|1.0.0"].state is StageState.COMPLETE
    assert not world.pods and world.node.unschedulable
    assert not of(plan.actions, act.CreateInterruptPod) and not of(plan.actions, act.Cordon)
    assert not of(plan.actions, act.Uncordon)


def test_a_disabled_cr_completes_a_reboot_in_flight_and_waits_to_run_post_interrupt() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0", "interrupt": REBOOT}}))
    until_interrupt_pod(world)
    world.disabled = True
    world.finish_pods()  # the node reboots
    plan = world.step()
    entry = world.state["dexter|1.0.0"]
    assert (entry.stage, entry.state) == (Stage.INTERRUPT, StageState.COMPLETE)
    assert not of(plan.actions, act.CreatePackagePod) and world.node.unschedulable
    world.disabled = False
    (post,) = of(world.step().actions, act.CreatePackagePod)
    assert post.stages == POST_CHAIN


def test_a_stale_pod_of_this_cr_is_deleted() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0"}}))
    world.pods["old"] = PodObservation("old", "gone", "0.1.0", APPLY_CHAIN, 1, PodPhase.RUNNING)
    plan = world.plan()
    assert [d.name for d in of(plan.actions, act.DeletePod)] == ["old"]


def test_an_old_version_pod_in_flight_finishes_before_the_upgrade_starts() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0"}}))
    world.step()
    with_spec(world, {"dexter": {"version": "2.0.0"}})
    plan = world.step()
    assert not of(plan.actions, act.CreatePackagePod) and not of(plan.actions, act.DeletePod)
    world.converge()
    assert world.created_stages() == [("dexter", APPLY_CHAIN), ("dexter", UPGRADE_CHAIN)]
    assert set(world.state) == {"dexter|2.0.0"}


# --------------------------------------------------------------------------------------------
# Identities and small helpers
# --------------------------------------------------------------------------------------------


def test_config_hash_ignores_key_order_and_changes_with_any_value() -> None:
    a = make_cr({"pone": {"version": "1.0.0", "vars": {"x": 1, "y": [1, 2]}}}).spec.packages["pone"]
    b = make_cr({"pone": {"version": "1.0.0", "vars": {"y": [1, 2], "x": 1}}}).spec.packages["pone"]
    c = make_cr({"pone": {"version": "1.0.0", "vars": {"y": [2, 1], "x": 1}}}).spec.packages["pone"]
    assert config_hash(a) == config_hash(b) != config_hash(c)


def test_a_tags_change_is_a_config_change_and_untagged_packages_keep_their_old_hash() -> None:
    base = {"version": "1.0.0", "vars": {"x": 1}, "configMap": {"a.conf": "y"}}
    untagged = make_cr({"pone": base}).spec.packages["pone"]
    # The value nodes recorded before tags existed: it must not change under them.
    assert config_hash(untagged) == "75f64e2d2c2784a1"
    hashes = {
        config_hash(make_cr({"pone": {**base, **extra}}).spec.packages["pone"])
        for extra in ({}, {"tags": ["a"]}, {"tags": ["b"]}, {"skipTags": ["a"]})
    }
    assert len(hashes) == 4


def test_resource_id_is_stable_and_differs_per_generation_package_version_and_config() -> None:
    cr = make_cr({"pone": {"version": "1.0.0"}})
    cr2 = make_cr({"pone": {"version": "1.0.0"}}, generation=2)
    base = resource_id(cr, "pone", "1.0.0", "h")
    assert base == resource_id(cr, "pone", "1.0.0", "h")
    others = {
        resource_id(cr2, "pone", "1.0.0", "h"),
        resource_id(cr, "ptwo", "1.0.0", "h"),
        resource_id(cr, "pone", "1.0.1", "h"),
        resource_id(cr, "pone", "1.0.0", "g"),
    }
    assert base not in others and len(others) == 4


def test_consecutive_non_interrupt_stages_share_one_pod_with_their_checks() -> None:
    assert chain(Stage.APPLY) == APPLY_CHAIN
    assert chain(Stage.UPGRADE) == UPGRADE_CHAIN
    assert chain(Stage.POST_INTERRUPT) == POST_CHAIN


def test_back_off_doubles_and_is_capped() -> None:
    assert [backoff(n).total_seconds() for n in (1, 2, 3)] == [30, 60, 120]
    assert backoff(50) == timedelta(minutes=10)


def test_requeue_at_is_the_earliest_deadline_of_the_plan() -> None:
    world = World(make_cr({"dexter": {"version": "1.0.0", "timeouts": {"stage": "7m"}}}))
    assert world.plan().requeue_at == T0 + timedelta(minutes=7)


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------

NAMES = ("alpha", "bravo", "charlie", "delta")
KINDS = (None, "reboot", "service", "noop", "restartAllServices")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict[str, dict[str, Any]], int, bool]:
    count = draw(st.integers(1, len(NAMES)))
    packages: dict[str, dict[str, Any]] = {}
    for i, name in enumerate(NAMES[:count]):
        pkg: dict[str, Any] = {"version": f"1.{i}.0"}
        kind = draw(st.sampled_from(KINDS))
        if kind is not None:
            pkg["interrupt"] = {"type": kind, "services": ["svc"] if kind == "service" else []}
        deps = draw(st.lists(st.sampled_from(NAMES[:i]), unique=True)) if i else []
        if deps:
            pkg["dependsOn"] = {d: packages[d]["version"] for d in deps}
        packages[name] = pkg
    return packages, draw(st.integers(0, 3)), draw(st.booleans())


def _converged_in(world: World, state: Mapping[str, PackageState], name: str) -> bool:
    pkg = world.cr.spec.packages[name]
    entry = state.get(f"{name}|{pkg.version}")
    terminal = Stage.POST_INTERRUPT if pkg.interrupt is not None else Stage.CONFIG
    return entry is not None and entry.state is StageState.COMPLETE and entry.stage is terminal


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_walking_the_planner_with_successes_always_completes_and_keeps_the_invariants(
    scenario: tuple[dict[str, dict[str, Any]], int, bool],
) -> None:
    packages, to_evict, human_cordon = scenario
    world = World(make_cr(packages))
    world.node = replace(world.node, pods_to_evict=to_evict, unschedulable=human_cordon)
    for _ in range(80):
        plan = world.plan()
        assert plan == world.plan(), "planning must be deterministic"
        # Dependencies are judged on the state the plan writes first (a pod that just succeeded
        # completes its package in the same plan); drain on the node as observed.
        for a in plan.actions:
            if isinstance(a, act.CreatePackagePod):
                pkg = world.cr.spec.packages[a.package]
                if a.stages[0] in ("apply", "upgrade"):
                    assert all(_converged_in(world, plan.state, d) for d in pkg.depends_on), a
                if pkg.interrupt is not None and a.stages[0] != "post-interrupt":
                    assert world.node.unschedulable and world.node.pods_to_evict == 0, a
            if isinstance(a, act.CreateInterruptPod):
                assert world.node.unschedulable and world.node.pods_to_evict == 0, a
        world.apply(plan)
        if plan.status is Status.COMPLETE and not world.pods:
            break
        world.finish_pods()
        world.tick()
    else:
        raise AssertionError(f"never completed: {world.state}")
    assert world.node.unschedulable is human_cordon
    assert world.node.cordon is None


def test_a_drain_a_pdb_blocks_names_the_budget_and_the_pods_it_keeps() -> None:
    world = World(
        make_cr({"dexter": {"version": "1.0.0", "interrupt": REBOOT}}, drain={"timeout": "5m"}),
    )
    world.node = replace(
        world.node,
        unschedulable=True,
        pods_to_evict=1,
        blocking_pdbs=("ml/web",),
        pdb_pods=(("ml/web", ("ml/web-0",)),),
    )
    plan = world.plan()
    assert "PodDisruptionBudget ml/web (keeps pod ml/web-0)" in plan.reason
    world.apply(
        replace(plan, actions=tuple(a for a in plan.actions if not isinstance(a, act.Drain)))
    )
    world.tick(timedelta(minutes=5))
    world.step()
    message = world.state["dexter|1.0.0"].message
    assert "blocked by PodDisruptionBudget ml/web (keeps pod ml/web-0)" in message, message


def test_a_failing_service_interrupt_is_restarted_at_most_max_attempts_times() -> None:
    """The restart limit of service interrupts: ``maxAttempts`` interrupt pods per cycle (with
    back-off between them), then the node is erroring and keeps its cordon; only a fix (a spec
    change) tries again - never an endless restart loop of the node's services."""
    service = {"type": "service", "services": ["containerd"]}
    world = World(make_cr({"dexter": {"version": "1.0.0", "interrupt": service, "maxAttempts": 2}}))
    interrupt_pods = 0
    for _ in range(40):
        plan = world.step()
        if plan.status is Status.ERRORING:
            break
        for name, pod in list(world.pods.items()):
            if not pod.live:
                continue
            if pod.interrupt:
                interrupt_pods += 1
                world.pods[name] = replace(
                    pod, phase=PodPhase.FAILED, result=failed_result("interrupt")
                )
            else:
                world.finish_pods()
        world.tick(timedelta(minutes=10))
    entry = world.state["dexter|1.0.0"]
    assert (entry.stage, entry.state) == (Stage.INTERRUPT, StageState.ERRORING)
    assert interrupt_pods == 2
    for _ in range(5):  # no third restart, however long we wait
        world.tick(timedelta(hours=2))
        world.step()
    assert not [p for p in world.pods.values() if p.live and p.interrupt]
    assert world.node.unschedulable  # the cordon is kept for a fix


def test_an_interrupt_recorded_without_its_pod_drains_the_node_again_before_it_is_recreated() -> (
    None
):
    """A pod bound after the drain (a scheduler with a stale cache ignores the cordon) is evicted
    before the interrupt pod the executor held back is created."""
    world = World(cr=make_cr({"dexter": {"version": "1.2.3", "interrupt": REBOOT}}))
    name = until_interrupt_pod(world)
    del world.pods[name]  # the executor held the create: the API showed a pod to evict
    world.node = replace(world.node, pods_to_evict=1)
    held = world.step()
    assert of(held.actions, act.Drain), "the node was not drained again"
    assert not of(held.actions, act.CreateInterruptPod)
    recreated = world.step()  # the stage world's drain evicts everything
    assert [a.stage for a in of(recreated.actions, act.CreateInterruptPod)] == [Stage.INTERRUPT]
