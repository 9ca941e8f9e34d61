"""DeletionBlocked (reference §2.9): a CR being deleted while paused or disabled, with uninstall
work pending, says so instead of looking hung; the condition clears once it is unblocked."""

from __future__ import annotations

import pytest
from stage_world import T0, make_cr

from lifecycle.aggregation import AggregationInput, NodeStatusView, aggregate
from lifecycle.status import Condition, NodeWrightStatus, Status


def status(**kw: object) -> NodeWrightStatus:
    cr = make_cr({"tune": {"version": "1.0.0"}})
    nodes = [NodeStatusView("n1", Status.PAUSED), NodeStatusView("n2", Status.COMPLETE)]
    return aggregate(AggregationInput(cr=cr, nodes=nodes, now=T0, **kw))  # type: ignore[arg-type]


def blocked(value: NodeWrightStatus) -> Condition | None:
    return next((c for c in value.conditions if c.type == "DeletionBlocked"), None)


@pytest.mark.parametrize(
    ("flags", "reason", "annotation"),
    [
        ({"paused": True}, "PausedWithPendingUninstall", "bridge.nodewright.io/pause"),
        ({"disabled": True}, "DisabledWithPendingUninstall", "bridge.nodewright.io/disable"),
    ],
)
def test_a_held_cr_being_deleted_with_uninstalls_pending_is_deletion_blocked_naming_the_nodes(
    flags: dict[str, bool], reason: str, annotation: str
) -> None:
    cond = blocked(status(deletion_pending=["n1"], **flags))
    assert cond is not None
    assert (cond.status, cond.reason) == ("True", reason)
    assert "n1" in cond.message and annotation in cond.message


def test_deletion_blocked_clears_once_unblocked_and_is_absent_when_not_deleting() -> None:
    held = status(deletion_pending=["n1"], paused=True)
    going = blocked(status(deletion_pending=["n1"], previous=held))
    assert going is not None and (going.status, going.reason) == ("False", "Uninstalling")
    assert blocked(status(paused=True)) is None
    assert blocked(status(deletion_pending=[], paused=True)) is None


def test_both_annotations_are_named_when_the_cr_is_paused_and_disabled() -> None:
    cond = blocked(status(deletion_pending=["n1", "n2"], paused=True, disabled=True))
    assert cond is not None and cond.reason == "DisabledWithPendingUninstall"
    assert "bridge.nodewright.io/pause" in cond.message
    assert "bridge.nodewright.io/disable" in cond.message
    assert "2 node(s)" in cond.message
