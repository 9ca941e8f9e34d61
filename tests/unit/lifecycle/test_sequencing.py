"""Priority and sequencing between CRs; pause and disable (NodeWright's rules)."""

from __future__ import annotations

from lifecycle import sequencing
from lifecycle.nodestate import DISABLE_ANNOTATION, PAUSE_ANNOTATION
from lifecycle.sequencing import CRProgress
from lifecycle.spec import NodeWright, Sequencing

NODES = frozenset({"n1", "n2", "n3"})


def cr(
    name: str,
    priority: int,
    *,
    seq: Sequencing = Sequencing.NODE,
    targets: frozenset[str] = NODES,
    complete_on: frozenset[str] = frozenset(),
    paused: bool = False,
    disabled: bool = False,
) -> CRProgress:
    return CRProgress(name, priority, seq, targets, complete_on, paused=paused, disabled=disabled)


def test_crs_are_ordered_by_priority_then_name() -> None:
    crs = [cr("b", 10), cr("a", 10), cr("z", 1)]
    assert [c.name for c in sequencing.ordered(crs)] == ["z", "a", "b"]


def test_node_sequencing_gates_each_node_on_the_earlier_cr_completing_there() -> None:
    crs = [cr("driver", 100, complete_on=frozenset({"n1"})), cr("tuning", 200)]
    assert sequencing.node_ready("tuning", "n1", crs)
    assert not sequencing.node_ready("tuning", "n2", crs)
    assert sequencing.node_blockers("tuning", "n2", crs) == ["driver"]
    assert sequencing.ready_nodes("tuning", crs) == {"n1"}


def test_an_earlier_cr_that_does_not_target_the_node_does_not_gate_it() -> None:
    crs = [cr("driver", 100, targets=frozenset({"n1"})), cr("tuning", 200)]
    assert sequencing.node_ready("tuning", "n2", crs)


def test_all_sequencing_gates_every_node_until_complete_everywhere() -> None:
    crs = [
        cr("driver", 100, seq=Sequencing.ALL, complete_on=frozenset({"n1", "n2"})),
        cr("tuning", 200),
    ]
    assert not sequencing.node_ready("tuning", "n1", crs)
    assert sequencing.waiting_on_all("tuning", crs) == ["driver"]
    done = [cr("driver", 100, seq=Sequencing.ALL, complete_on=NODES), cr("tuning", 200)]
    assert sequencing.ready_nodes("tuning", done) == NODES


def test_a_paused_cr_still_blocks_later_ones_but_a_disabled_one_does_not() -> None:
    paused = [cr("driver", 100, paused=True), cr("tuning", 200)]
    assert not sequencing.node_ready("tuning", "n1", paused)
    disabled = [cr("driver", 100, disabled=True), cr("tuning", 200)]
    assert sequencing.node_ready("tuning", "n1", disabled)


def test_a_paused_cr_that_is_complete_on_the_node_does_not_block_it() -> None:
    crs = [cr("driver", 100, paused=True, complete_on=frozenset({"n1"})), cr("tuning", 200)]
    assert sequencing.node_ready("tuning", "n1", crs)


def test_later_crs_never_gate_earlier_ones() -> None:
    crs = [cr("first", 1), cr("second", 2, seq=Sequencing.ALL)]
    assert sequencing.ready_nodes("first", crs) == NODES


def test_pause_and_disable_need_the_exact_value_true() -> None:
    assert sequencing.is_paused({PAUSE_ANNOTATION: "true"})
    assert not sequencing.is_paused({PAUSE_ANNOTATION: "True"})
    assert not sequencing.is_paused({})
    assert sequencing.is_disabled({DISABLE_ANNOTATION: "true"})
    assert not sequencing.is_disabled({DISABLE_ANNOTATION: "yes"})


def test_progress_is_built_from_a_cr_object() -> None:
    obj = NodeWright.model_validate(
        {
            "metadata": {"name": "x", "annotations": {PAUSE_ANNOTATION: "true"}},
            "spec": {"priority": 7, "sequencing": "all"},
        }
    )
    progress = CRProgress.of(obj, targets=["a", "b"], complete_on=["a"])
    assert progress.paused
    assert not progress.disabled
    assert progress.priority == 7
    assert progress.sequencing is Sequencing.ALL
    assert not progress.complete_everywhere
