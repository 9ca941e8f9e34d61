"""The simulated kubelet's status patch sends what changed and nothing else."""

from __future__ import annotations

from typing import Any

from nodewright_bridge.sandbox.kubelet.status_patch import merging_lists, status_patch


def _status(phase: str, ready: bool, **extra: Any) -> dict[str, Any]:
    ready_cond: dict[str, Any] = {"type": "Ready", "status": "True" if ready else "False"}
    if not ready:
        ready_cond["reason"] = "PodCompleted"
    return {
        "phase": phase,
        "hostIP": "10.0.0.1",
        "podIPs": [{"ip": "10.0.0.1"}],
        "conditions": [{"type": "Initialized", "status": "True"}, ready_cond],
        "containerStatuses": [{"name": "main", "state": {"running": {}}}],
        **extra,
    }


def test_the_first_report_is_the_whole_status() -> None:
    new = _status("Running", True)
    assert status_patch(None, new) == new


def test_an_unchanged_status_is_an_empty_patch() -> None:
    assert status_patch(_status("Running", True), _status("Running", True)) == {}


def test_only_changed_fields_and_conditions_are_sent_and_atomic_lists_whole() -> None:
    old = _status("Running", True)
    new = _status("Succeeded", False)
    new["containerStatuses"] = [{"name": "main", "state": {"terminated": {"exitCode": 0}}}]
    assert status_patch(old, new) == {
        "phase": "Succeeded",
        "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
        "containerStatuses": new["containerStatuses"],
    }


def test_a_dropped_key_is_sent_as_null_at_the_top_and_inside_a_condition() -> None:
    old = _status("Failed", False, reason="NodeRebooted")
    new = _status("Running", True)
    patch = status_patch(old, new)
    assert patch["reason"] is None
    assert patch["conditions"] == [{"type": "Ready", "status": "True", "reason": None}]


def test_a_changed_set_of_conditions_orders_them_and_deletes_the_gone_one() -> None:
    old = _status("Running", True)
    new = _status("Running", True)
    new["conditions"] = [
        {"type": "Ready", "status": "True"},
        {"type": "Scheduled", "status": "True"},
    ]
    assert status_patch(old, new) == {
        "conditions": [
            {"type": "Scheduled", "status": "True"},
            {"type": "Initialized", "$patch": "delete"},
        ],
        "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "Scheduled"}],
    }


def test_a_first_report_on_a_pod_the_api_shows_replaces_its_addresses_and_keeps_the_rest() -> None:
    """A kubelet that forgot a pod and sees it again must not merge a second pod IP into the one
    the API shows (the API refuses two of one family on every report after)."""
    shown = {**_status("Pending", False), "qosClass": "BestEffort"}
    new = _status("Running", True, podIPs=[{"ip": "10.0.0.9"}])
    patch = status_patch(merging_lists(shown) or None, new)
    assert patch["podIPs"] == [{"ip": "10.0.0.9"}, {"ip": "10.0.0.1", "$patch": "delete"}]
    assert patch["$setElementOrder/podIPs"] == [{"ip": "10.0.0.9"}]
    assert "qosClass" not in patch, "a field the API server set is not ours to remove"
    assert patch["phase"] == "Running" and patch["containerStatuses"] == new["containerStatuses"]


def test_a_first_report_on_a_pod_without_a_status_is_the_whole_status() -> None:
    new = _status("Running", True)
    assert status_patch(merging_lists({"phase": "Pending"}) or None, new) == new
