"""What ``nwb reset`` and ``nwb rerun`` change in a node's state, the bounded failure tails the
controller keeps, and the agent result's output tail (``lifecycle.resetting``, ``rerunning``,
``failure_tails``, ``results``)."""

from __future__ import annotations

import json

from stage_world import make_cr

from lifecycle import failure_tails
from lifecycle.nodestate import CordonRecord, PackageState, Stage, StageState
from lifecycle.rerunning import mark_rerun
from lifecycle.resetting import reset_node
from lifecycle.results import MAX_TERMINATION_BYTES, AgentResult, Failure, parse_termination_message

DONE = PackageState(stage=Stage.CONFIG, state=StageState.COMPLETE)
FAILED = PackageState(stage=Stage.APPLY, state=StageState.ERRORING, attempts=2)
RUNNING = PackageState(stage=Stage.APPLY, state=StageState.IN_PROGRESS, attempts=1)


def test_a_full_reset_forgets_everything_and_releases_only_our_cordon() -> None:
    state = {"a|1.0.0": DONE, "b|1.0.0": FAILED}
    ours = CordonRecord(holders=["tune"], was_unschedulable=False)
    change = reset_node("tune", state, ours)
    assert change.state is None and change.clear_status and change.clear_batch
    assert change.removed == ("a|1.0.0", "b|1.0.0")
    assert change.cordon is not None and change.cordon.uncordon and change.cordon.record is None


def test_a_reset_keeps_a_human_cordon_and_another_crs_hold() -> None:
    human = CordonRecord(holders=["tune"], was_unschedulable=True)
    change = reset_node("tune", {"a|1.0.0": DONE}, human)
    assert change.cordon is not None and not change.cordon.uncordon
    shared = CordonRecord(holders=["driver", "tune"], was_unschedulable=False)
    change = reset_node("tune", {"a|1.0.0": DONE}, shared)
    assert change.cordon is not None and not change.cordon.uncordon
    assert change.cordon.record is not None and change.cordon.record.holders == ["driver"]
    assert reset_node("tune", {}, CordonRecord(holders=["driver"])).cordon is None


def test_a_package_reset_drops_only_its_entries_and_leaves_the_cordon_to_the_planner() -> None:
    state = {"a|1.0.0": DONE, "a|0.9.0": DONE, "b|1.0.0": FAILED}
    change = reset_node("tune", state, CordonRecord(holders=["tune"]), packages=["a"])
    assert change.removed == ("a|0.9.0", "a|1.0.0")
    assert change.state == {"b|1.0.0": FAILED} and change.cordon is None
    assert not change.clear_status
    assert reset_node("tune", state, None, packages=["zzz"]).empty
    last = reset_node("tune", {"b|1.0.0": FAILED}, CordonRecord(holders=["tune"]), packages=["b"])
    assert last.state is None and last.cordon is not None  # nothing of the CR is left


def test_rerun_marks_entries_at_rest_and_says_why_it_does_not_mark_the_others() -> None:
    cr = make_cr(
        {
            "aa": {"version": "1.0.0"},
            "bb": {"version": "1.0.0"},
            "cc": {"version": "1.0.0"},
            "dd": {"version": "1.0.0"},
        }
    )
    state = {"aa|1.0.0": DONE, "bb|1.0.0": FAILED, "cc|1.0.0": RUNNING}
    rerun = mark_rerun(state, cr.spec.packages)
    assert rerun.marked == ("aa", "bb")
    assert rerun.state["aa|1.0.0"].rerun and rerun.state["bb|1.0.0"].rerun
    assert not rerun.state["cc|1.0.0"].rerun
    assert "in progress" in rerun.refused["cc"] and "no state" in rerun.refused["dd"]
    assert mark_rerun(state, cr.spec.packages, "nope").refused == {
        "nope": "is not a package of the CR"
    }
    again = mark_rerun(rerun.state, cr.spec.packages, "aa")
    assert not again.marked and "already" in again.refused["aa"]


def tail(
    attempt: int, time: str, package: str = "pkg", lines: int = 3
) -> failure_tails.FailureTail:
    return failure_tails.FailureTail(
        cr="tune",
        package=package,
        version="1.0.0",
        stage="apply",
        attempt=attempt,
        task="Set sysctl",
        message="boom",
        time=time,
        pod=f"nw-tune-pkg-a{attempt}",
        lines=[f"line {i}" for i in range(lines)],
    )


def test_failure_tails_are_bounded_per_attempt_and_per_package() -> None:
    data: dict[str, str] = {}
    for i in range(failure_tails.KEEP_ATTEMPTS + 3):
        data = failure_tails.merged(data, tail(i + 1, f"2026-01-01T12:00:{i:02d}Z"))
    data = failure_tails.merged(data, tail(1, "2026-01-01T11:00:00Z", package="other"))
    kept = failure_tails.tails_of(data, "tune", "pkg")
    assert [t.attempt for t in kept] == [4, 5, 6, 7, 8]  # the newest KEEP_ATTEMPTS
    assert len(failure_tails.tails_of(data, "tune")) == failure_tails.KEEP_ATTEMPTS + 1
    huge = failure_tails.bounded(tail(1, "2026-01-01T12:00:00Z", lines=2000))
    assert len(huge.encode()) <= failure_tails.MAX_TAIL_BYTES
    parsed = failure_tails.parse(huge)
    assert parsed is not None and parsed.lines[-1] == "line 1999"  # the newest lines stay
    assert all(ch.isalnum() or ch in "-._" for ch in failure_tails.tail_key(parsed))


def test_the_output_tail_is_shortened_then_dropped_before_any_decision_fact() -> None:
    result = AgentResult(
        failure=Failure(stage="apply", task="t", message="m" * 200),
        output=[f"{i} " + "x" * 300 for i in range(20)],
        reboot_requested=True,
    )
    text = result.to_termination_message()
    assert len(text.encode()) <= MAX_TERMINATION_BYTES
    back = parse_termination_message(text)
    assert back.reboot_requested and back.failure is not None and back.failure.message == "m" * 200
    assert 0 < len(back.output) <= 8 and back.output[-1].startswith("19 ")
    small = AgentResult(failure=Failure(stage="apply"), output=["ok  apply  a"])
    assert json.loads(small.to_termination_message())["output"] == ["ok  apply  a"]
