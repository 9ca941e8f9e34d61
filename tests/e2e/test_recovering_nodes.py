"""Failed nodes come back once their cause is fixed, without anyone editing annotations:
a drain blocked by a PodDisruptionBudget (the cause clears), an image that cannot be pulled (the
CR's image is fixed) and a compartment stopped by failureThreshold (the var is fixed and the CR
annotated ``bridge.nodewright.io/reset-compartment``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from e2e_harness import EXEC_REGISTRY, FLAKY_REGISTRY, SIM_REGISTRY, World, wait_for
from kubernetes import client

pytestmark = pytest.mark.e2e

RESET = "bridge.nodewright.io/reset-compartment"


def web(world: World, namespace: str) -> None:
    """One ``app=web`` replica on the test's nodes."""
    labels = {"app": "web"}
    world.env.apps.create_namespaced_deployment(
        namespace,
        client.V1Deployment(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1DeploymentSpec(
                replicas=1,
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(
                        node_selector=dict(world.labels),
                        containers=[client.V1Container(name="c", image="busybox")],
                    ),
                ),
            ),
        ),
    )


def running(world: World, namespace: str) -> list[str]:
    pods = world.core.list_namespaced_pod(namespace, label_selector="app=web").items
    return [
        p.metadata.name
        for p in pods
        if p.metadata.deletion_timestamp is None and p.status.phase == "Running"
    ]


def events(world: World, reason: str, about: str) -> list[Any]:
    """Events with ``reason`` about the object named ``about`` (cluster-scoped: ``default``)."""
    found = client.EventsV1Api(world.env.api).list_namespaced_event("default").items
    return [e for e in found if e.reason == reason and e.regarding and e.regarding.name == about]


def complete(world: World, cr: str) -> bool:
    return world.cr_status(cr).get("status") == "complete"


def test_a_drain_blocked_by_a_pdb_is_re_attempted_once_the_pdb_is_deleted(world: World) -> None:
    (node,) = world.add_nodes(1)
    ns = world.namespace()
    web(world, ns)
    wait_for(lambda: len(running(world, ns)) == 1, what="web pod running")
    world.pdb(ns, "web-pdb", min_available=1, labels={"app": "web"})
    cr = world.cr_name("tune")
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 1},
            "drain": {"timeout": "5s"},
            "packages": {
                "tune": {
                    "version": "1.0.0",
                    "image": f"{SIM_REGISTRY}/tune",
                    "interrupt": {"type": "noop"},
                }
            },
        },
    )
    world.start_controller()
    wait_for(lambda: world.node_status(cr, node) == "erroring", what="node erroring")
    entry = world.state(cr, node)["tune|1.0.0"]
    assert entry["cause"] == "drain", entry
    assert f"blocked by PodDisruptionBudget {ns}/web-pdb" in entry["message"], entry
    assert "re-attempt when no PodDisruptionBudget" in entry["message"], entry
    held = world.node(node)
    assert held.spec.unschedulable  # an erroring node keeps our cordon
    assert json.loads(held.metadata.annotations["bridge.nodewright.io/cordon"])["holders"] == [cr]
    assert len(running(world, ns)) == 1  # the budget was never broken
    # Nothing else changes: deleting the budget is what brings the node back.
    world.env.policy.delete_namespaced_pod_disruption_budget("web-pdb", ns)
    wait_for(lambda: complete(world, cr), what="complete after the PDB is gone")
    done = world.state(cr, node)["tune|1.0.0"]
    assert (done["stage"], done["state"]) == ("post-interrupt", "complete")
    assert "cause" not in done and "reattemptAt" not in done
    after = world.node(node)
    assert not after.spec.unschedulable
    assert "bridge.nodewright.io/cordon" not in (after.metadata.annotations or {})
    wait_for(lambda: events(world, "RetryingAfterOutsideCause", node), what="re-attempt Event")


def test_an_image_that_cannot_be_pulled_recovers_when_the_cr_fixes_the_image(
    world: World,
) -> None:
    """The validation pod pulled the image on the first node; the second cannot reach the
    registry. Its pull failure is an outside cause, and a new image in the CR restarts it."""
    first, second = world.add_nodes(2)
    assert world.env.runner is not None
    world.env.runner.failing_pulls.add(second)
    cr = world.cr_name("ghost")
    pkg = {
        "version": "1.0.0",
        "image": f"{FLAKY_REGISTRY}/ghost",
        "timeouts": {"stage": "5s"},
        "maxAttempts": 1,
    }
    world.apply_cr(cr, {"interruptionBudget": {"count": 2}, "packages": {"ghost": pkg}})
    try:
        world.start_controller()
        wait_for(lambda: world.node_status(cr, second) == "erroring", what="node erroring")
        entry = world.state(cr, second)["ghost|1.0.0"]
        assert entry["cause"] == "image-pull", entry
        assert "ImagePull" in entry["message"] or "ErrImagePull" in entry["message"], entry
        assert "re-attempt at" in entry["message"], entry
        wait_for(lambda: world.node_status(cr, first) == "complete", what="first node complete")
        world.patch_cr(cr, {"spec": {"packages": {"ghost": {"image": f"{SIM_REGISTRY}/ghost"}}}})
        wait_for(lambda: complete(world, cr), what="complete with the fixed image")
    finally:
        world.env.runner.failing_pulls.discard(second)
    assert world.state(cr, second)["ghost|1.0.0"]["state"] == "complete"
    wait_for(lambda: events(world, "RetryingAfterSpecChange", second), what="re-attempt Event")


def test_a_stalled_compartment_resumes_after_the_fix_and_the_reset_annotation(
    world: World,
) -> None:
    nodes = world.add_nodes(2)
    policy = world.cr_name("strict")
    world.apply_policy(
        policy,
        {
            "default": {
                "budget": {"count": 1},
                "strategy": {
                    "fixed": {"initialBatch": 1, "failureThreshold": 1, "safetyLimit": 100}
                },
            },
            "compartments": [],
        },
    )
    cr = world.cr_name("probe")
    world.apply_cr(
        cr,
        {
            "deploymentPolicy": policy,
            "packages": {
                "probe": {
                    "version": "1.0.0",
                    "image": f"{EXEC_REGISTRY}/probe",
                    "maxAttempts": 1,
                    "vars": {"probe_verify_ok": False},
                }
            },
        },
    )
    world.start_controller()
    wait_for(
        lambda: (c := world.condition(cr, "Stalled")) and c["status"] == "True",
        what="Stalled",
        timeout=180,
    )
    (failed,) = [n for n in nodes if world.state(cr, n)]
    assert world.node_status(cr, failed) == "erroring"
    world.patch_cr(
        cr,
        {
            "metadata": {"annotations": {RESET: "__default__"}},
            "spec": {"packages": {"probe": {"vars": {"probe_verify_ok": True}}}},
        },
    )
    wait_for(lambda: complete(world, cr), what="complete after the reset", timeout=180)
    for node in nodes:
        assert world.state(cr, node)["probe|1.0.0"]["state"] == "complete"
    after = world.get_cr(cr)
    assert RESET not in (after["metadata"].get("annotations") or {})  # handled once
    stalled = world.condition(cr, "Stalled")
    assert stalled is None or stalled["status"] == "False"
    wait_for(lambda: events(world, "CompartmentReset", cr), what="reset Event")
