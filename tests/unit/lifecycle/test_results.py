"""The agent result survives the 4 KiB termination-message limit and garbage on the way back."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle.results import (
    MAX_TERMINATION_BYTES,
    AgentResult,
    Failure,
    StageResult,
    StageStatus,
    parse_termination_message,
)

texts = st.text(max_size=3000)
stage_results = st.builds(
    StageResult,
    name=st.text(max_size=400),
    status=st.sampled_from(list(StageStatus)),
    ok=st.integers(0, 10**6),
    changed=st.integers(0, 10**6),
    failed=st.integers(0, 10**6),
    skipped=st.integers(0, 10**6),
    unreachable=st.integers(0, 10**6),
    duration_seconds=st.floats(0, 1e9, allow_nan=False, allow_infinity=False),
)
failures = st.builds(
    Failure, stage=texts, task=texts, action=texts, message=st.text(max_size=20000)
)
results = st.builds(
    AgentResult,
    package=texts,
    version=texts,
    stages=st.lists(stage_results, max_size=60),
    failure=st.none() | failures,
    reboot_requested=st.booleans(),
)


def _bytes(text: str) -> int:
    return len(text.encode("utf-8"))


@settings(max_examples=150, deadline=None)
@given(result=results)
def test_any_result_becomes_valid_json_within_4096_bytes(result: AgentResult) -> None:
    text = result.to_termination_message()
    assert _bytes(text) <= MAX_TERMINATION_BYTES
    back = parse_termination_message(text)
    assert not back.unparseable
    assert back.reboot_requested == result.reboot_requested
    assert (back.failure is None) == (result.failure is None)
    assert back.succeeded == result.succeeded or result.failure is None


@settings(max_examples=60, deadline=None)
@given(result=results, limit=st.integers(256, 8192))
def test_any_limit_of_at_least_256_bytes_is_respected(result: AgentResult, limit: int) -> None:
    text = result.to_termination_message(max_bytes=limit)
    assert _bytes(text) <= limit
    json.loads(text)


def test_a_small_result_is_written_whole_and_reads_back_equal() -> None:
    result = AgentResult(
        package="sysctl-tuning",
        version="1.2.0",
        stages=[StageResult(name="apply", status=StageStatus.OK, ok=3, changed=2)],
        reboot_requested=True,
    )
    text = result.to_termination_message()
    assert json.loads(text)["rebootRequested"] is True
    assert json.loads(text)["v"] == 1
    assert parse_termination_message(text) == result


def test_a_long_failure_message_is_shortened_before_any_stage_is_dropped() -> None:
    stages = [
        StageResult(name="apply", status=StageStatus.OK, ok=5),
        StageResult(name="apply-check", status=StageStatus.FAILED, ok=1, failed=1),
        StageResult(name="config", status=StageStatus.SKIPPED),
    ]
    failure = Failure(
        stage="apply-check", task="verify swappiness", action="assert", message="x" * 9000
    )
    result = AgentResult(package="p", version="1.0.0", stages=stages, failure=failure)
    back = parse_termination_message(result.to_termination_message())
    assert back.truncated
    assert back.stages == stages
    assert back.failure is not None
    assert back.failure.task == "verify swappiness"
    assert back.failure.message.startswith("xxxx")
    assert back.failure.message.endswith("…")


def test_when_stages_do_not_fit_only_the_failed_stage_is_kept() -> None:
    stages = [StageResult(name=f"stage-{i}-" + "s" * 150, status=StageStatus.OK) for i in range(40)]
    stages.append(StageResult(name="apply-check", status=StageStatus.FAILED, failed=1))
    failure = Failure(stage="apply-check", task="t", action="assert", message="m")
    back = parse_termination_message(
        AgentResult(stages=stages, failure=failure).to_termination_message()
    )
    assert [s.name for s in back.stages] == ["apply-check"]
    assert back.stages_omitted == 40
    assert back.failure == failure


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "not json",
        "{",
        "[]",
        "null",
        "42",
        '{"v": "one"}',
        '{"v": 0}',
        '{"no": "version"}',
        '{"v": 1, "stages": [{"name": 3}]}',
        '{"v": 1, "stages": "x"}',
        "[" * 100000,
        "\x00\xff",
    ],
)
def test_garbage_is_read_as_unparseable_without_raising(garbage: str) -> None:
    result = parse_termination_message(garbage)
    assert result.unparseable
    assert not result.succeeded
    assert len(result.raw) <= 200


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=500))
def test_parsing_never_raises(text: str) -> None:
    parse_termination_message(text)


def test_a_newer_result_version_with_unknown_fields_is_still_read() -> None:
    result = parse_termination_message('{"v": 2, "package": "p", "future": [1, 2]}')
    assert not result.unparseable
    assert result.package == "p"
