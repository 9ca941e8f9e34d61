"""``nwb status`` view and rendering, from fixture CR and Node objects (no cluster)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rich.console import Console

from lifecycle.spec import LabelSelector
from nodewright_bridge.commands import rolloutview
from nodewright_bridge.commands.rolloutview import (
    build_view,
    progress_lines,
    render,
    selector_string,
)

CR_NAME = "gpu-tuning"
P = "bridge.nodewright.io/"


def cr_object(*, generation: int = 1, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "bridge.nodewright.io/v1alpha1",
        "kind": "NodeWright",
        "metadata": {"name": CR_NAME, "generation": generation},
        "spec": {
            "nodeSelectors": {"matchLabels": {"pool": "gpu"}},
            "deploymentPolicy": "demo",
            "packages": {
                "sysctl-tuning": {"version": "1.0.0", "image": "localhost:5000/nw/sysctl-tuning"},
                "kmod-blacklist": {
                    "version": "1.0.0",
                    "image": "localhost:5000/nw/kmod-blacklist",
                    "dependsOn": {"sysctl-tuning": "1.0.0"},
                },
            },
        },
        "status": status if status is not None else {},
    }


def policy_object() -> dict[str, Any]:
    exponential = {"exponential": {"initialBatch": 1, "growthFactor": 2, "failureThreshold": 1}}
    return {
        "apiVersion": "bridge.nodewright.io/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": {"name": "demo"},
        "spec": {
            "default": {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 1}}},
            "compartments": [
                {
                    "name": "a100",
                    "selector": {"matchLabels": {"gpu": "a100"}},
                    "budget": {"percent": 100},
                    "strategy": exponential,
                },
                {
                    "name": "h100",
                    "selector": {"matchLabels": {"gpu": "h100"}},
                    "budget": {"percent": 100},
                    "strategy": exponential,
                },
            ],
        },
    }


def entry(stage: str, state: str, *, attempts: int = 1, updated: str, message: str = "") -> dict:
    out: dict[str, Any] = {"stage": stage, "state": state, "attempts": attempts, "updated": updated}
    if message:
        out["message"] = message
    return out


def node(
    name: str,
    gpu: str,
    *,
    status: str | None = None,
    state: dict[str, Any] | str | None = None,
    batch: tuple[str, int] | None = None,
    pool: str = "gpu",
) -> dict[str, Any]:
    labels = {"pool": pool, "gpu": gpu}
    annotations: dict[str, str] = {}
    if status is not None:
        labels[f"{P}status-{CR_NAME}"] = status
        annotations[f"{P}status-{CR_NAME}"] = status
    if state is not None:
        annotations[f"{P}state-{CR_NAME}"] = state if isinstance(state, str) else json.dumps(state)
    if batch is not None:
        annotations[f"{P}batch-{CR_NAME}"] = json.dumps(
            {"compartment": batch[0], "batch": batch[1], "order": 0}
        )
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations}}


def condition(kind: str, status: str, reason: str, message: str = "", gen: int = 1) -> dict:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": gen,
    }


def running_status(**extra: Any) -> dict[str, Any]:
    status: dict[str, Any] = {
        "observedGeneration": 1,
        "status": "in_progress",
        "completeNodes": "1/4",
        "packageList": "kmod-blacklist:1.0.0,sysctl-tuning:1.0.0",
        "policy": "demo",
        "conditions": [
            condition("Ready", "False", "Progressing", "1/4 nodes complete"),
            condition("Progressing", "True", "NodesInProgress", "1 node(s) in progress"),
            condition("Degraded", "False", "NoFailures"),
            condition("Stalled", "False", "NotStalled"),
        ],
        "compartments": {
            "a100": {
                "matched": 2,
                "ceiling": 2,
                "inProgress": 1,
                "completed": 1,
                "strategy": "exponential",
                "batchState": {"currentBatch": 2},
            },
            "h100": {"matched": 2, "ceiling": 2, "strategy": "exponential"},
        },
    }
    status.update(extra)
    return status


def fleet() -> list[dict[str, Any]]:
    t0, t1 = "2025-01-01T00:00:00Z", "2025-01-01T00:01:00Z"
    return [
        node(
            "a100-0",
            "a100",
            status="complete",
            batch=("a100", 1),
            state={
                "sysctl-tuning|1.0.0": entry("config", "complete", updated=t0),
                "kmod-blacklist|1.0.0": entry("config", "complete", updated=t1),
            },
        ),
        node(
            "a100-1",
            "a100",
            status="in_progress",
            batch=("a100", 2),
            state={
                "sysctl-tuning|1.0.0": entry("config", "complete", updated=t0),
                "kmod-blacklist|1.0.0": entry("apply", "in_progress", updated=t1),
            },
        ),
        node("h100-0", "h100"),
        node("h100-1", "h100"),
        node("cpu-0", "none", pool="cpu"),  # not targeted: not shown
    ]


def text_of(renderable: Any, width: int = 220) -> str:
    console = Console(record=True, width=width, color_system=None)
    console.print(renderable)
    return console.export_text()


def working_on(row: Any) -> tuple[str, str, str, str]:
    """A node row's status and what it runs: package, stage, state."""
    return (row.status, row.package, row.stage, row.state)


def test_each_targeted_node_shows_its_current_package_stage_state_and_compartment() -> None:
    view = build_view(cr_object(status=running_status()), fleet(), policy_obj=policy_object())
    rows = {r.name: r for r in view.nodes}
    assert set(rows) == {"a100-0", "a100-1", "h100-0", "h100-1"}
    busy = rows["a100-1"]
    assert working_on(busy) == ("in_progress", "kmod-blacklist", "apply", "in_progress")
    assert (busy.compartment, busy.batch) == ("a100", 2)
    # The newest entry of a finished node is shown; unpicked nodes get their policy compartment.
    assert rows["a100-0"].package == "kmod-blacklist"
    assert (rows["h100-0"].status, rows["h100-0"].compartment, rows["h100-0"].batch) == (
        "waiting",
        "h100",
        None,
    )
    assert [r.name for r in view.nodes][:1] == ["a100-1"]  # in progress listed before waiting


def test_a_node_whose_pod_carries_its_start_shows_in_progress_from_the_pod() -> None:
    """A fresh install's first pod carries its start (lifecycle.pod_records); the Node still
    says waiting (or nothing), the pod says what runs."""
    carried = {
        "metadata": {
            "name": "nw-h100-0",
            "labels": {
                "bridge.nodewright.io/cr": "demo",
                "bridge.nodewright.io/package": "sysctl-tuning",
                "bridge.nodewright.io/version": "1.0.0",
            },
            "annotations": {
                "bridge.nodewright.io/stages": "apply,config",
                "bridge.nodewright.io/attempt": "1",
                "bridge.nodewright.io/entry": json.dumps(
                    entry("apply", "in_progress", updated="2025-01-01T00:02:00Z")
                ),
            },
        },
        "spec": {"nodeName": "h100-0"},
        "status": {"phase": "Running"},
    }
    view = build_view(
        cr_object(status=running_status()), fleet(), policy_obj=policy_object(), pods=[carried]
    )
    rows = {r.name: r for r in view.nodes}
    assert working_on(rows["h100-0"]) == ("in_progress", "sysctl-tuning", "apply", "in_progress")
    assert rows["h100-1"].status == "waiting"


def test_an_erroring_node_is_listed_first_with_its_attempts_and_failure_message() -> None:
    nodes = fleet()
    nodes[3] = node(
        "h100-1",
        "h100",
        status="erroring",
        batch=("h100", 1),
        state={
            "sysctl-tuning|1.0.0": entry(
                "apply",
                "erroring",
                attempts=3,
                updated="2025-01-01T00:02:00Z",
                message="apply-check: task 'Verify sysctl' failed: vm.swappiness is 60",
            )
        },
    )
    view = build_view(cr_object(status=running_status()), nodes, policy_obj=policy_object())
    first = view.nodes[0]
    assert (first.name, first.attempts, first.stage) == ("h100-1", 3, "apply")
    out = text_of(render(view))
    assert "vm.swappiness is 60" in out
    assert "h100-1" in out


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("h100: 1 failed batch(es) >= threshold 1", "1 failed batch(es) >= threshold 1"),
        (
            "compartment h100 stopped after 1 consecutive failed batch(es) (failureThreshold 1)",
            "compartment h100 stopped after 1 consecutive failed batch(es) (failureThreshold 1)",
        ),
    ],
)
def test_compartments_show_batch_counters_and_the_stalled_reason(message: str, reason: str) -> None:
    status = running_status()
    status["compartments"]["h100"]["failed"] = 1
    status["compartments"]["h100"]["batchState"] = {"currentBatch": 1, "shouldStop": True}
    status["conditions"][3] = condition("Stalled", "True", "FailureThresholdReached", message)
    view = build_view(cr_object(status=status), fleet(), policy_obj=policy_object())
    comps = {c.name: c for c in view.compartments}
    assert (comps["a100"].batch, comps["a100"].completed, comps["a100"].in_progress) == (2, 1, 1)
    assert comps["h100"].stopped == reason
    assert comps["a100"].stopped == ""
    assert view.outcome == rolloutview.TERMINAL_STALLED
    out = text_of(render(view), width=400)
    assert "FailureThresholdReached" in out
    assert reason[:40] in out


@pytest.mark.parametrize(
    ("ready", "progressing", "degraded", "generation", "expected"),
    [
        ("True", "False", "False", 1, rolloutview.TERMINAL_OK),
        ("True", "False", "False", 2, None),  # Ready of the previous generation
        ("False", "True", "True", 1, None),  # failures, but other nodes still move
        ("False", "False", "True", 1, rolloutview.TERMINAL_DEGRADED),
        ("False", "True", "False", 1, None),
    ],
)
def test_a_watch_ends_only_on_a_current_ready_stalled_or_settled_degraded_rollout(
    ready: str, progressing: str, degraded: str, generation: int, expected: str | None
) -> None:
    status = running_status()
    status["conditions"] = [
        condition("Ready", ready, "X"),
        condition("Progressing", progressing, "X"),
        condition("Degraded", degraded, "X"),
        condition("Stalled", "False", "X"),
    ]
    view = build_view(cr_object(generation=generation, status=status), fleet())
    assert view.outcome == expected


def test_a_malformed_state_annotation_is_reported_on_its_node_instead_of_crashing() -> None:
    nodes = [node("a100-0", "a100", status="in_progress", state="{not json")]
    view = build_view(cr_object(status=running_status()), nodes)
    (row,) = view.nodes
    assert row.status == "in_progress"
    assert "does not parse" in row.message


def test_a_cr_without_status_yet_renders_with_zero_counts_and_waiting_nodes() -> None:
    view = build_view(cr_object(status={}), fleet(), policy_obj=policy_object())
    assert view.status == "unknown"
    assert view.complete_nodes == "0/4"
    assert {r.status for r in view.nodes} == {"complete", "in_progress", "waiting"}
    assert view.outcome is None
    assert "NodeWright gpu-tuning" in text_of(render(view))


def test_beyond_max_nodes_the_rest_are_counted_by_status() -> None:
    view = build_view(cr_object(status=running_status()), fleet(), policy_obj=policy_object())
    out = text_of(render(view, max_nodes=2))
    assert "… 2 more" in out
    assert "1 complete, 1 waiting" in out


def test_the_final_summary_lists_every_node_and_the_verdict() -> None:
    status = running_status(status="complete", completeNodes="4/4")
    status["conditions"][0] = condition("Ready", "True", "NodesConverged", "4/4 nodes complete")
    view = build_view(cr_object(status=status), fleet(), policy_obj=policy_object())
    out = text_of(rolloutview.summary(view))
    for name in ("a100-0", "a100-1", "h100-0", "h100-1"):
        assert name in out
    assert "rollout complete" in out


def test_progress_lines_report_only_what_changed() -> None:
    before = build_view(cr_object(status=running_status()), fleet(), policy_obj=policy_object())
    first = progress_lines(None, before)
    assert any(line.startswith("node a100-1 [a100 batch 2]: in_progress") for line in first)
    assert any(line.startswith("compartment a100: batch 2, 1/2 complete") for line in first)
    nodes = fleet()
    nodes[2] = node(
        "h100-0",
        "h100",
        status="in_progress",
        batch=("h100", 1),
        state={"sysctl-tuning|1.0.0": entry("apply", "in_progress", updated="2025-01-01T00:03Z")},
    )
    after = build_view(cr_object(status=running_status()), nodes, policy_obj=policy_object())
    assert progress_lines(before, after) == [
        # the compartment's batch is the one its first node was picked in
        "compartment h100: batch 1, 0/2 complete, 0 in progress, 0 failed",
        "node h100-0 [h100 batch 1]: in_progress, sysctl-tuning 1.0.0 apply in_progress",
    ]
    assert progress_lines(after, after) == []


def test_the_json_shape_is_stable() -> None:
    view = build_view(cr_object(status=running_status()), fleet(), policy_obj=policy_object())
    data = view.to_json()
    assert set(data) == {
        "name",
        "generation",
        "observedGeneration",
        "status",
        "completeNodes",
        "packages",
        "policy",
        "outcome",
        "conditions",
        "compartments",
        "nodes",
        "nodeCounts",
        "recentFailures",
        "problems",
        "checks",
    }
    assert data["nodes"]["a100-1"] == {
        "status": "in_progress",
        "compartment": "a100",
        "batch": 2,
        "package": "kmod-blacklist",
        "version": "1.0.0",
        "stage": "apply",
        "state": "in_progress",
        "attempts": 1,
        "message": "",
        "updated": "2025-01-01T00:01:00Z",
        "check": "",
        "packages": [
            {
                "package": "kmod-blacklist",
                "version": "1.0.0",
                "stage": "apply",
                "state": "in_progress",
            },
            {
                "package": "sysctl-tuning",
                "version": "1.0.0",
                "stage": "config",
                "state": "complete",
            },
        ],
    }
    assert data["compartments"]["a100"]["batch"] == 2
    json.dumps(data)  # serialisable as is


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({}, ""),
        ({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2"),
        (
            {
                "matchExpressions": [
                    {"key": "gpu", "operator": "In", "values": ["h100", "a100"]},
                    {"key": "zone", "operator": "NotIn", "values": ["x"]},
                    {"key": "ready", "operator": "Exists"},
                    {"key": "bad", "operator": "DoesNotExist"},
                ]
            },
            "gpu in (a100,h100),zone notin (x),ready,!bad",
        ),
    ],
)
def test_node_selectors_become_the_api_label_selector(
    selector: dict[str, Any], expected: str
) -> None:
    assert selector_string(LabelSelector.model_validate(selector)) == expected


def test_a_watch_remembers_batches_after_the_controller_releases_the_records() -> None:
    memory: dict[str, tuple[str, int]] = {}
    running = build_view(cr_object(status=running_status()), fleet(), policy_obj=policy_object())
    rolloutview.remember_batches(running, memory)
    released = fleet()
    released[1]["metadata"]["annotations"].pop(f"{P}batch-{CR_NAME}")
    later = build_view(cr_object(status=running_status()), released, policy_obj=policy_object())
    assert {r.name: r.batch for r in later.nodes}["a100-1"] is None
    filled = rolloutview.remember_batches(later, memory)
    assert {r.name: r.batch for r in filled.nodes} == {
        "a100-0": 1,
        "a100-1": 2,
        "h100-0": None,
        "h100-1": None,
    }


def test_the_summary_lists_every_package_of_every_node() -> None:
    view = build_view(cr_object(status=running_status()), fleet(), policy_obj=policy_object())
    console = Console(width=200, record=True)
    console.print(rolloutview.summary(view))
    text = console.export_text()
    a100_1 = [line for line in text.splitlines() if "a100-1" in line]
    assert a100_1 and "kmod-blacklist 1.0.0" in a100_1[0]
    assert text.count("sysctl-tuning 1.0.0") == text.count("kmod-blacklist 1.0.0") >= 2


def test_a_compartment_shows_the_last_batch_its_nodes_reached_after_a_reset() -> None:
    done = running_status()
    for comp in done["compartments"].values():
        comp.update(inProgress=0, completed=comp["matched"], batchState={"currentBatch": 1})
    view = build_view(cr_object(status=done), fleet(), policy_obj=policy_object())
    assert {c.name: c.batch for c in view.compartments}["a100"] == 2  # a100-1 is in batch 2
    ahead = running_status()
    ahead["compartments"]["a100"]["batchState"] = {"currentBatch": 3}  # opened, nobody in it
    view = build_view(cr_object(status=ahead), fleet(), policy_obj=policy_object())
    assert {c.name: c.batch for c in view.compartments}["a100"] == 2


def test_an_empty_default_compartment_is_not_listed() -> None:
    status = running_status()
    status["compartments"]["__default__"] = {"matched": 0, "ceiling": 0, "completed": 0}
    view = build_view(cr_object(status=status), fleet(), policy_obj=policy_object())
    assert "__default__" not in {c.name for c in view.compartments}
