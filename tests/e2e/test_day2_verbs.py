"""The day-2 verbs on the sandbox, run through the CLI as a user runs them (``nwb VERB`` and
``kubectl nodewright VERB`` are the same command), and ``nwb logs`` of a failed attempt after its
pod is gone, with the secrets kept out."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from click.testing import CliRunner, Result
from e2e_harness import EXEC_REGISTRY, NAMESPACE, SIM_REGISTRY, World, wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nodewright_bridge.cli import main

pytestmark = pytest.mark.e2e

P = "bridge.nodewright.io/"


def nwb(world: World, *args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(main, [*args, "--kubeconfig", str(world.env.kubeconfig)])
    assert result.exit_code == code, (args, result.output, result.exception)
    return result


def annotations(world: World, cr: str) -> dict[str, str]:
    return dict(world.get_cr(cr)["metadata"].get("annotations") or {})


def complete(world: World, cr: str) -> bool:
    return world.cr_status(cr).get("status") == "complete"


def entry(world: World, cr: str, node: str) -> dict[str, Any]:
    return dict(world.state(cr, node).get("tune|1.0.0") or {})


def test_pause_resume_disable_enable_ignore_rerun_reset_and_nodes(world: World) -> None:
    n0, n1 = world.add_nodes(2)
    cr = world.cr_name("tune")
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 2},
            "packages": {
                "tune": {
                    "version": "1.0.0",
                    "image": f"{SIM_REGISTRY}/tune",
                    "interrupt": {"type": "noop"},
                }
            },
        },
    )
    # pause before the controller runs: nothing starts
    dry = nwb(world, "pause", cr, "--dry-run")
    assert "(dry run)" in dry.output and P + "pause" not in annotations(world, cr)
    assert f"nodewright/{cr}: paused ({P}pause=true)" in nwb(world, "pause", cr).output
    assert annotations(world, cr)[P + "pause"] == "true"
    assert "already" in nwb(world, "pause", cr).output
    world.start_controller()
    wait_for(lambda: world.node_status(cr, n0) == "paused", what="paused node status")
    assert not world.package_pods(cr)
    assert "resumed" in nwb(world, "resume", cr).output
    wait_for(lambda: complete(world, cr), what="complete after resume", timeout=180)

    rows = json.loads(nwb(world, "nodes", cr, "-o", "json").output)
    assert [(r["node"], r["status"]) for r in rows] == [(n0, "complete"), (n1, "complete")]
    assert rows[0]["packages"][0]["state"] == "complete"
    assert n0 in nwb(world, "nodes").output

    # disable asks first; a no changes nothing
    refused = CliRunner().invoke(
        main, ["disable", cr, "--kubeconfig", str(world.env.kubeconfig)], input="n\n"
    )
    assert refused.exit_code == 1 and P + "disable" not in annotations(world, cr)
    assert "disabled" in nwb(world, "disable", cr, "--yes").output
    assert annotations(world, cr)[P + "disable"] == "true"
    assert "enabled" in nwb(world, "enable", cr).output
    assert P + "disable" not in annotations(world, cr)
    not_stalled = nwb(world, "resume-compartment", cr, "__default__", "--yes").output
    assert "not Stalled; nothing changed" in not_stalled

    assert "ignored" in nwb(world, "ignore", n1).output
    assert (world.node(n1).metadata.labels or {})[P + "ignore"] == "true"
    assert "not ignored" in nwb(world, "unignore", n1).output
    assert P + "ignore" not in (world.node(n1).metadata.labels or {})

    # rerun on a node a human cordoned: the package runs again through cordon, drain and its
    # interrupt, and the human's cordon stays
    world.core.patch_node(n0, {"spec": {"unschedulable": True}})
    before = entry(world, cr, n0)
    out = nwb(world, "rerun", cr, "--node", n0, "--yes").output
    assert "marked to run again" in out and entry(world, cr, n0)["rerun"] is True
    wait_for(
        lambda: (
            (e := entry(world, cr, n0)).get("state") == "complete"
            and not e.get("rerun")
            and e.get("started") != before.get("started")
            and world.node_status(cr, n0) == "complete"
        ),
        what="rerun complete",
        timeout=180,
    )
    assert world.node(n0).spec.unschedulable  # the human's cordon
    assert nwb(world, "rerun", cr, "--node", n0, "--package", "nope", "--yes", code=1)

    # reset is refused while a pod of the CR runs on the node (one without package labels: the
    # controller leaves it alone, the verb counts it)
    world.core.create_namespaced_pod(
        NAMESPACE,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name=f"busy-{world.id}", labels={P + "cr": cr}),
            spec=client.V1PodSpec(
                node_name=n1, containers=[client.V1Container(name="c", image="busybox")]
            ),
        ),
    )
    wait_for(
        lambda: (
            world.core.read_namespaced_pod(f"busy-{world.id}", NAMESPACE).status.phase == "Running"
        ),
        what="the busy pod running",
    )
    busy = CliRunner().invoke(
        main, ["reset", cr, "--node", n1, "--yes", "--kubeconfig", str(world.env.kubeconfig)]
    )
    assert busy.exit_code == 1 and "still run there" in busy.output
    assert entry(world, cr, n1)  # nothing was reset
    world.core.delete_namespaced_pod(f"busy-{world.id}", NAMESPACE, grace_period_seconds=0)
    wait_for(lambda: not world.package_pods(cr), what="the busy pod gone")

    # reset forgets the CR on n1; the rollout picks it again and it is installed afresh
    dry = nwb(world, "reset", cr, "--node", n1, "--dry-run").output
    assert "(dry run)" in dry and entry(world, cr, n1)
    out = nwb(world, "reset", cr, "--node", n1, "--yes").output
    assert f"node/{n1}: reset nodewright/{cr}" in out and f"{P}state-{cr} removed" in out
    wait_for(
        lambda: (
            entry(world, cr, n1).get("state") == "complete"
            and world.node_status(cr, n1) == "complete"
        ),
        what="n1 installed again after the reset",
        timeout=180,
    )


def test_logs_of_a_failed_attempt_after_its_pod_is_gone_keep_secrets_out(world: World) -> None:
    nodes = world.add_nodes(2)  # the first batch (one node) fails: the compartment stalls
    token, password = "tok-0f9e8d7c6b", "pw-a1b2c3d4e5"
    secret = world.cr_name("leaky-secret")
    world.core.create_namespaced_secret(
        NAMESPACE,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name=secret), string_data={"leaky_password": password}
        ),
    )
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
    cr = world.cr_name("leaky")
    package = {
        "version": "1.0.0",
        "image": f"{EXEC_REGISTRY}/leaky",
        "maxAttempts": 1,
        "vars": {"leaky_token": token},
        "secretVars": [{"secretName": secret}],
    }
    try:
        world.apply_cr(cr, {"deploymentPolicy": policy, "packages": {"leaky": package}})
        world.start_controller()
        try:
            wait_for(
                lambda: (c := world.condition(cr, "Stalled")) and c["status"] == "True",
                what="Stalled",
                timeout=180,
            )
        except AssertionError:
            raise AssertionError(
                (world.cr_status(cr), [world.state(cr, n) for n in nodes])
            ) from None
        (node,) = [n for n in nodes if world.state(cr, n)]
        (kept,) = world.package_pods(cr)
        assert kept.status.phase == "Failed"  # kept for its log, not deleted

        out = nwb(world, "logs", cr, "--node", node).output
        assert "failed task: Log in to the config server" in out
        assert "login refused for token" in out and "********" in out
        assert "Prepare the login" in out  # the lines before the failure
        assert token not in out and password not in out
        assert nwb(world, "logs", cr, "--node", node, "--attempt", "7", code=1)

        # the fix and resume-compartment: the new attempt replaces the kept pod
        world.patch_cr(cr, {"spec": {"packages": {"leaky": {"vars": {"leaky_fail": False}}}}})
        out = nwb(world, "resume-compartment", cr, "__default__", "--yes").output
        assert f"{P}reset-compartment=__default__" in out
        wait_for(lambda: complete(world, cr), what="complete after the fix", timeout=180)
        wait_for(lambda: not world.package_pods(cr), what="the kept failed pod deleted")

        out = nwb(world, "logs", cr, "--node", node, "--package", "leaky").output
        assert "attempt 1: failed" in out and "gone; last lines kept by the controller" in out
        assert "failed task: Log in to the config server" in out
        kept_data = world.core.read_namespaced_config_map(f"nwb-logs-{node}", NAMESPACE).data
        assert kept_data and all(token not in v and password not in v for v in kept_data.values())
    finally:
        with contextlib.suppress(ApiException):
            world.core.delete_namespaced_secret(secret, NAMESPACE)
        for name in nodes:
            with contextlib.suppress(ApiException):
                world.core.delete_namespaced_config_map(f"nwb-logs-{name}", NAMESPACE)
