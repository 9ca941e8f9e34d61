"""DeletionBlocked (reasons as in NodeWright): a CR being deleted while paused or disabled, with
uninstall work pending, or while a node's state annotation does not parse, says so instead of
looking hung; the condition clears once it is unblocked."""

from __future__ import annotations

from datetime import timedelta

import pytest
from stage_world import T0, make_cr

from lifecycle.aggregation import (
    AggregationInput,
    NodeStatusView,
    aggregate,
    deletion_blocked_by_malformed_state,
)
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


def test_unparsable_state_blocks_deletion_telling_which_annotation_to_fix_on_which_nodes() -> None:
    previous = status(paused=True)
    malformed = {f"node-{i}": "Expecting value: line 1 column 1 (char 0)" for i in range(7)}
    value = deletion_blocked_by_malformed_state(
        previous, cr="tune", generation=3, malformed=malformed, now=T0
    )
    cond = blocked(value)
    assert cond is not None and (cond.status, cond.reason) == ("True", "MalformedNodeState")
    assert "fix or remove annotation bridge.nodewright.io/state-tune on node" in cond.message
    assert "node-0, node-1, node-2, node-3, node-4 and 2 more" in cond.message
    assert "node-5" not in cond.message and "Expecting value" in cond.message
    assert value.observed_generation == 3 and value.status is previous.status
    others = [c.type for c in value.conditions if c.type != "DeletionBlocked"]
    assert others == [c.type for c in previous.conditions]


def test_a_blocked_deletion_keeps_its_transition_time_while_it_stays_blocked() -> None:
    first = deletion_blocked_by_malformed_state(
        NodeWrightStatus(), cr="tune", generation=1, malformed={"n1": "bad"}, now=T0
    )
    later = T0 + timedelta(minutes=5)
    again = deletion_blocked_by_malformed_state(
        first, cr="tune", generation=1, malformed={"n1": "bad"}, now=later
    )
    assert again == first
