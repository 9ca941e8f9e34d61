"""The pure check-mode rules: outcomes of a check run, bases, drift schedule, check slots, and
the bounded counts and ``Drifted`` condition in the CR status (``lifecycle.preflight``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from stage_world import check_result, make_cr

from lifecycle import aggregation, preflight
from lifecycle.nodestate import PackageState, Stage, StageState
from lifecycle.preflight import Outcome, PreflightRecord
from lifecycle.results import AgentResult, Failure
from lifecycle.spec import InterruptType
from lifecycle.status import CompartmentStatus, Status

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_nothing_changed_and_no_handler_is_compliant() -> None:
    assert preflight.judge(check_result(0)).outcome is Outcome.COMPLIANT


def test_changes_carry_the_interrupt_the_handlers_ask_for() -> None:
    verdict = preflight.judge(check_result(2, tasks=("a", "b"), reboot=True))
    assert verdict.outcome is Outcome.CHANGES
    assert verdict.tasks == ["a", "b"]
    assert verdict.interrupt is not None and verdict.interrupt.type is InterruptType.REBOOT
    assert preflight.judge(check_result(1)).interrupt is None  # a file rewritten: no reboot


def test_owed_handlers_alone_are_changes() -> None:
    owed = check_result(0).model_copy(update={"pending_handlers": ["restart foo"]})
    assert preflight.judge(owed).outcome is Outcome.CHANGES


def test_what_check_mode_cannot_tell_is_unknown_with_the_reason() -> None:
    shell = preflight.judge(check_result(1, unsupported=("Rebuild: shell has no check mode",)))
    assert shell.outcome is Outcome.UNKNOWN and "Rebuild" in shell.tasks[0]
    failed = check_result(0).model_copy(
        update={"failure": Failure(stage="apply", task="Install", message="no such package")}
    )
    assert "apply / Install: no such package" in preflight.judge(failed).tasks[0]
    assert preflight.judge(AgentResult()).outcome is Outcome.UNKNOWN  # no check report
    missing = preflight.judge(None, pod_failure="pod did not finish within 30m")
    assert missing.outcome is Outcome.UNKNOWN and "30m" in missing.tasks[0]


def test_a_basis_changes_with_the_spec_or_what_the_node_had() -> None:
    base = preflight.basis("spec1", "install", "-")
    assert base == preflight.basis("spec1", "install", "-")
    assert base != preflight.basis("spec2", "install", "-")
    assert base != preflight.basis("spec1", "install", '[["p|1.0.0"]]')


def test_drift_checks_are_jittered_within_a_tenth_of_the_interval_and_stable() -> None:
    hour = timedelta(hours=1)
    due = [preflight.drift_due(T0, hour, f"n{i}", "p") for i in range(50)]
    assert all(T0 + hour <= d <= T0 + hour * 1.1 for d in due)
    assert len(set(due)) > 40  # spread, not all at once
    assert preflight.drift_due(T0, hour, "n1", "p") == preflight.drift_due(T0, hour, "n1", "p")


def test_check_slots_are_the_limit_minus_those_running() -> None:
    assert preflight.grant(["a", "b", "c"], running=1, limit=3) == {"a", "b"}
    assert preflight.grant(["a"], running=5, limit=3) == frozenset()


def test_records_round_trip_and_garbage_is_dropped() -> None:
    record = PreflightRecord(basis="b", outcome=Outcome.CHANGES, tasks=["t"], at="x")
    text = preflight.dump_records({"p": record})
    assert preflight.parse_records(text) == {"p": record}
    assert preflight.dump_records({}) is None
    assert preflight.parse_records("not json") == {}
    assert preflight.parse_records('{"p": {"outcome": "bogus"}}') == {}


def entry(check: str) -> PackageState:
    return PackageState(stage=Stage.CONFIG, state=StageState.COMPLETE, preflight=check)


def test_a_node_counts_as_its_least_certain_package() -> None:
    versions = {"a": "1.0.0", "b": "1.0.0"}
    both = {"a|1.0.0": entry("compliant"), "b|1.0.0": entry("changes")}
    assert preflight.node_check(versions, both, {}) == "changing"
    pending = {"a": PreflightRecord(basis="x", outcome=Outcome.UNKNOWN)}
    assert preflight.node_check(versions, both, pending) == "unknown"
    assert preflight.node_check(versions, {"a|1.0.0": entry("")}, {}) == ""


def test_status_counts_checks_per_compartment_and_names_the_first_drift() -> None:
    cr = make_cr({"pkg": {"version": "1.0.0"}}, driftDetection={"interval": "1h"})
    base = aggregation.AggregationInput(
        cr=cr,
        nodes=[aggregation.NodeStatusView(n, Status.COMPLETE) for n in ("n1", "n2", "n3")],
        now=T0,
        compartments={"__default__": CompartmentStatus(matched=3)},
    )
    quiet = aggregation.aggregate(base)
    drifted = next(c for c in quiet.conditions if c.type == "Drifted")
    assert (drifted.status, drifted.reason) == ("False", "NoDrift")
    checks = {"n1": "compliant", "n2": "compliant", "n3": "changing"}
    assert aggregation.checks_summary(checks) == "2 compliant, 1 changing"
    status = aggregation.aggregate(
        aggregation.AggregationInput(
            cr=cr,
            nodes=base.nodes,
            now=T0,
            checks=checks,
            drifted=[aggregation.DriftView("n3", "pkg", ("Write sysctl file",))],
        )
    )
    assert status.checks == "2 compliant, 1 changing"
    drifted = next(c for c in status.conditions if c.type == "Drifted")
    assert drifted.status == "True"
    assert "1 node(s) drifted; first: n3, package pkg (tasks: Write sysctl file)" in drifted.message
