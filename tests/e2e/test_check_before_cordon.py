"""Check before cordon: a package spec that cannot work (vars against the role's argument spec,
an image no node can pull) is found by one unprivileged validation pod, reported in
``InvalidSpec`` with the field, and touches no node: no cordon, no package pod, no state. Fixing
the spec validates it again and the rollout goes on by itself."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from e2e_harness import (
    EXEC_REGISTRY,
    MISSING_REGISTRY,
    SIM_REGISTRY,
    SLOW_TEST_SECONDS,
    World,
    wait_for,
)

pytestmark = pytest.mark.e2e

PREFIX = "bridge.nodewright.io/"


@dataclass
class Seen:
    """What a sampler saw while the spec was broken."""

    package_pods: set[str] = field(default_factory=set)
    validation_pods: dict[str, Any] = field(default_factory=dict)
    cordoned: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)  # our state/batch/cordon keys on the nodes


@contextmanager
def sampling(world: World, cr: str, nodes: list[str]) -> Iterator[Seen]:
    seen = Seen()
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            try:
                seen.package_pods.update(p.metadata.name for p in world.package_pods(cr))
                for pod in world.validation_pods(cr):
                    seen.validation_pods[pod.metadata.name] = pod
                for name in nodes:
                    node = world.node(name)
                    if node.spec.unschedulable:
                        seen.cordoned.add(name)
                    notes = node.metadata.annotations or {}
                    seen.keys.update(
                        k
                        for k in notes
                        if k in (f"{PREFIX}state-{cr}", f"{PREFIX}batch-{cr}", f"{PREFIX}cordon")
                    )
            except Exception:  # a slow API read; sample again
                continue

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(10)


def invalid_spec(world: World, cr: str) -> dict[str, Any]:
    found = wait_for(
        lambda: (c := world.condition(cr, "InvalidSpec")) and c["status"] == "True" and c,
        what="InvalidSpec True",
    )
    assert isinstance(found, dict)
    return found


def assert_untouched(world: World, cr: str, nodes: list[str], seen: Seen) -> None:
    assert seen.package_pods == set(), "no package pod may start for a spec that fails"
    assert seen.cordoned == set(), "no node may be cordoned for a spec that fails"
    assert seen.keys == set(), "no node state may be written for a spec that fails"
    assert world.cr_status(cr)["status"] == "blocked"
    ready = world.condition(cr, "Ready")
    assert ready is not None and ready["status"] == "False"
    for pod in seen.validation_pods.values():  # read-only work: nothing of the host
        spec = pod.spec
        assert not spec.host_pid
        assert not [v for v in spec.volumes or [] if v.host_path is not None]
        assert not (spec.containers[0].security_context.privileged or False)
        assert spec.node_name in nodes


@pytest.mark.timeout(SLOW_TEST_SECONDS)
def test_vars_against_the_argument_spec_touch_no_node_and_the_fix_rolls_out(world: World) -> None:
    nodes = world.add_nodes(2)
    cr = world.cr_name("argspec")
    with sampling(world, cr, nodes) as seen:
        world.apply_cr(
            cr,
            {
                "interruptionBudget": {"count": 2},
                "packages": {
                    "tuning": {
                        "version": "1.0.0",
                        "image": f"{EXEC_REGISTRY}/sysctl-tuning",
                        "interrupt": {"type": "reboot"},
                        "vars": {"sysctl_tuning_settings": "vm.swappiness=10"},
                    }
                },
            },
        )
        world.start_controller()
        cond = invalid_spec(world, cr)
        assert cond["reason"] == "ArgumentSpecViolation"
        assert (
            "spec.packages.tuning.vars.sysctl_tuning_settings: must be of type object"
            in cond["message"]
        ), cond
        assert "vm.swappiness" not in cond["message"], "a var's value is never shown"
        wait_for(lambda: not world.validation_pods(cr), what="the validation pod deleted")
    assert seen.validation_pods, "the spec was checked by a validation pod"
    assert_untouched(world, cr, nodes, seen)
    boots = {n: world.boot_id(n) for n in nodes}

    world.patch_cr(
        cr,
        {
            "spec": {
                "packages": {"tuning": {"vars": {"sysctl_tuning_settings": {"vm.swappiness": 10}}}}
            }
        },
    )
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="rollout", timeout=240)
    cond = world.condition(cr, "InvalidSpec")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "Valid")
    validation = world.cr_status(cr)["validations"]["tuning"]
    assert validation["state"] == "passed"
    for n in nodes:
        assert world.state(cr, n)["tuning|1.0.0"]["state"] == "complete"
        assert world.boot_id(n) != boots[n], "the fixed spec's reboot ran"
        assert not world.node(n).spec.unschedulable


def test_an_image_no_node_can_pull_touches_no_node_and_the_fix_rolls_out(world: World) -> None:
    nodes = world.add_nodes(2)
    cr = world.cr_name("noimage")
    with sampling(world, cr, nodes) as seen:
        world.apply_cr(
            cr,
            {
                "interruptionBudget": {"count": 2},
                "packages": {
                    "ghost": {
                        "version": "1.0.0",
                        "image": f"{MISSING_REGISTRY}/ghost",
                        "interrupt": {"type": "service", "services": ["ghost.service"]},
                        "timeouts": {"stage": "6s"},  # bounds the pull deadline too
                    }
                },
            },
        )
        world.start_controller()
        cond = invalid_spec(world, cr)
        assert cond["reason"] == "ImageNotFound"
        assert f"spec.packages.ghost.image: {MISSING_REGISTRY}/ghost:1.0.0" in cond["message"]
        assert "ErrImagePull" in cond["message"] or "ImagePullBackOff" in cond["message"]
        wait_for(lambda: not world.validation_pods(cr), what="the validation pod deleted")
    assert_untouched(world, cr, nodes, seen)

    world.patch_cr(cr, {"spec": {"packages": {"ghost": {"image": f"{SIM_REGISTRY}/ghost"}}}})
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="rollout")
    cond = world.condition(cr, "InvalidSpec")
    assert cond is not None and cond["status"] == "False"
    for n in nodes:
        assert world.state(cr, n)["ghost|1.0.0"]["state"] == "complete"
        assert not world.node(n).spec.unschedulable
