"""Conditions are recomputed from what a pass sees of the nodes and PDBs, never carried over from
the last transition: PDBBlocked while a node still needs its drain (also once it went erroring),
NodesIgnored for every targeted node with the ignore label (also a complete one)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from stage_world import T0, make_cr

from lifecycle.aggregation import (
    NAMES_MAX,
    DrainView,
    aggregate,
    carries_ignore_label,
    drain_pending,
    rollout_input,
)
from lifecycle.nodestate import IGNORE_LABEL
from lifecycle.rollout import RolloutPlan
from lifecycle.status import Condition, NodeWrightStatus, Status

S = Status
CR = make_cr({"tune": {"version": "1.0.0", "interrupt": {"type": "reboot"}}})


def plan(ignored: tuple[str, ...] = ()) -> RolloutPlan:
    return RolloutPlan(
        compartments={},
        assignment={},
        allowed=(),
        records={},
        released=(),
        orders={},
        blocked=(),
        ignored=ignored,
        waiting=(),
        stopped={},
        next_node_order=0,
    )


def status_of(
    node_status: dict[str, Status],
    *,
    previous: NodeWrightStatus | None = None,
    minutes: int = 0,
    rollout: RolloutPlan | None = None,
    **kw: object,
) -> NodeWrightStatus:
    return aggregate(
        rollout_input(
            CR,
            rollout or plan(),
            node_status,
            T0 + timedelta(minutes=minutes),
            previous=previous,
            **kw,  # type: ignore[arg-type]
        )
    )


def cond(status: NodeWrightStatus, type_: str) -> Condition:
    return next(c for c in status.conditions if c.type == type_)


def blocked_drain(name: str = "n0", status: Status = S.ERRORING, **kw: object) -> DrainView:
    fields: dict[str, object] = {
        "held": True,
        "to_evict": 2,
        "blocking_pdbs": ("ml/train",),
        **kw,
    }
    return DrainView(name=name, status=status, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("view", "pending"),
    [
        (blocked_drain(status=S.IN_PROGRESS), True),
        (blocked_drain(status=S.ERRORING), True),  # the drain deadline expired, cordon held
        (blocked_drain(held=False), False),  # a human's cordon or none: no drain of ours
        (blocked_drain(to_evict=0), False),  # drained: nothing left to stop it
        (blocked_drain(status=S.COMPLETE), False),
        (blocked_drain(status=S.PAUSED), False),  # nothing is drained while paused
        (blocked_drain(status=S.WAITING), False),
    ],
)
def test_a_drain_is_pending_while_we_hold_the_cordon_for_unfinished_work_and_pods_remain(
    view: DrainView, pending: bool
) -> None:
    assert drain_pending(view) is pending


def test_pdb_blocked_stays_true_once_the_blocked_node_goes_erroring() -> None:
    draining = status_of(
        {"n0": S.IN_PROGRESS, "n1": S.COMPLETE},
        pdb_blocked={"n0": ["ml/train"]},  # the executor's refusal this pass
        drains=[blocked_drain(status=S.IN_PROGRESS)],
    )
    expired = status_of(
        {"n0": S.ERRORING, "n1": S.COMPLETE},
        previous=draining,
        minutes=30,
        drains=[blocked_drain(status=S.ERRORING)],  # no drain runs: no refusal any more
    )
    c = cond(expired, "PDBBlocked")
    assert (c.status, c.reason) == ("True", "EvictionBlocked")
    assert c.message == "PodDisruptionBudget ml/train blocks eviction on node(s) n0"
    assert c.last_transition_time == cond(draining, "PDBBlocked").last_transition_time


def test_pdb_blocked_turns_false_when_the_budget_is_gone_although_the_node_stays_erroring() -> None:
    blocked = status_of({"n0": S.ERRORING}, drains=[blocked_drain()])
    cleared = status_of(
        {"n0": S.ERRORING},
        previous=blocked,
        minutes=1,
        drains=[blocked_drain(blocking_pdbs=())],  # the PDB was deleted; the pods still there
    )
    c = cond(cleared, "PDBBlocked")
    assert (c.status, c.reason) == ("False", "NoBlockingPDB")
    assert c.last_transition_time == "2026-01-01T12:01:00Z"


def test_an_exhausted_budget_on_a_node_that_needs_no_drain_blocks_nothing() -> None:
    status = status_of(
        {"n0": S.COMPLETE, "n1": S.IN_PROGRESS},
        drains=[
            blocked_drain("n0", status=S.COMPLETE),
            blocked_drain("n1", status=S.IN_PROGRESS, held=False),  # not cordoned by us
        ],
    )
    assert cond(status, "PDBBlocked").status == "False"


def test_an_erroring_drain_blocked_by_unevictable_pods_names_them() -> None:
    why = "pod ml/debug has no controller and would be lost by eviction; delete it"
    status = status_of(
        {"n0": S.ERRORING}, drains=[blocked_drain(blocking_pdbs=(), blockers=(why,))]
    )
    c = cond(status, "PDBBlocked")
    assert (c.status, c.reason) == ("True", "DrainBlocked")
    assert c.message == f"node n0: {why}"


def test_a_budget_refusing_and_observed_exhausted_is_named_once_with_each_node() -> None:
    status = status_of(
        {"n0": S.IN_PROGRESS, "n1": S.ERRORING},
        pdb_blocked={"n0": ["ml/train"]},
        drains=[blocked_drain("n0", status=S.IN_PROGRESS), blocked_drain("n1")],
    )
    assert cond(status, "PDBBlocked").message == (
        "PodDisruptionBudget ml/train blocks eviction on node(s) n0, n1"
    )


def test_pdb_blocked_stays_bounded_with_many_blocked_nodes_and_budgets() -> None:
    views = [blocked_drain(f"n{i:03d}", blocking_pdbs=(f"ml/pdb-{i:03d}",)) for i in range(500)]
    status = status_of({v.name: S.ERRORING for v in views}, drains=views)
    message = cond(status, "PDBBlocked").message
    assert message.count("PodDisruptionBudget") == NAMES_MAX
    assert len(message) < 1000


def test_nodes_ignored_names_a_labelled_node_whatever_its_status() -> None:
    # The rollout reports only the candidates it skipped; a complete node (its plan kept) or a
    # running member that got the label later is not among them.
    status = status_of(
        {"n0": S.COMPLETE, "n1": S.IN_PROGRESS, "n2": S.BLOCKED},
        rollout=plan(ignored=("n2",)),
        ignored=["n0", "n1"],
    )
    c = cond(status, "NodesIgnored")
    assert (c.status, c.message) == ("True", "Node [n0, n1, n2] ignored by label.")


def test_nodes_ignored_turns_false_once_the_label_is_gone_and_is_bounded() -> None:
    many = status_of({f"n{i}": S.COMPLETE for i in range(40)}, ignored=[f"n{i}" for i in range(40)])
    assert cond(many, "NodesIgnored").message == "40 nodes are ignored by label."
    gone = status_of({f"n{i}": S.COMPLETE for i in range(40)}, previous=many, minutes=1)
    c = cond(gone, "NodesIgnored")
    assert (c.status, c.message) == ("False", "No nodes are ignored.")


def test_conditions_are_not_carried_over_from_the_previous_status() -> None:
    blocked = status_of(
        {"n0": S.ERRORING}, drains=[blocked_drain()], ignored=["n0"], pdb_blocked={"n0": ["a/b"]}
    )
    assert cond(blocked, "PDBBlocked").status == cond(blocked, "NodesIgnored").status == "True"
    again = status_of({"n0": S.ERRORING}, previous=blocked, minutes=1)
    assert cond(again, "PDBBlocked").status == cond(again, "NodesIgnored").status == "False"
    assert status_of({"n0": S.ERRORING}, previous=again, minutes=2) == again  # nothing moved


@pytest.mark.parametrize(
    ("labels", "ignored"),
    [({IGNORE_LABEL: "true"}, True), ({IGNORE_LABEL: "false"}, False), ({}, False)],
)
def test_only_the_ignore_label_set_to_true_ignores_a_node(
    labels: dict[str, str], ignored: bool
) -> None:
    assert carries_ignore_label(labels) is ignored
