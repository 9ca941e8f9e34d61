"""Failed attempts and expired waits, shared by the planner's sections.

A failure is retried after back-off until ``maxAttempts`` run out; then, or when it came from
outside the package (``lifecycle.recovery``), the entry is ``erroring`` with what it failed
with. Each one is recorded as a ``NodeFailure`` and an Event. Pod outcomes, interrupts and the
node's preparation (cordon, wait, drain) all end up here.
"""

from __future__ import annotations

from datetime import datetime

from lifecycle import recovery
from lifecycle.actions import EmitEvent, EventType
from lifecycle.cycles import INTERRUPT_STAGES
from lifecycle.nodestate import PackageState, Stage, StageState
from lifecycle.recovery import Cause
from lifecycle.stage_identities import MESSAGE_MAX, backoff, rfc3339, truncate
from lifecycle.stage_inputs import NodeFailure, PodObservation
from lifecycle.stage_work import Work, fingerprint, spec_package, wake


def fail_attempt(
    work: Work,
    key: str,
    stage: str,
    task: str,
    message: str,
    *,
    cause: Cause | None = None,
    by_package: bool = False,
    pod: PodObservation | None = None,
) -> None:
    """Record a failed attempt: retry after back-off, or ``erroring`` once attempts run out.

    ``cause``: the failure came from outside the package; without one, and unless the package's
    own run reported the failure (``by_package``), a node that is not Ready or an interrupt pod
    that cannot pull its image is the cause (``lifecycle.recovery``).
    """
    entry = work.state[key]
    base = stage.removesuffix("-check")
    try:
        failed_stage = Stage(base)
    except ValueError:
        failed_stage = entry.stage
    if entry.stage in INTERRUPT_STAGES or failed_stage in INTERRUPT_STAGES:
        failed_stage = entry.stage
    spec = spec_package(work, key)
    max_attempts = spec[1].max_attempts if spec is not None else 1
    final = entry.attempts >= max_attempts
    text = truncate(message or "failed")
    if cause is None and not by_package:
        cause = _outside_cause(work, key)
    if final:
        text = give_up(work, key, entry, text, cause, stage=failed_stage)
    else:
        retry = work.now + backoff(entry.attempts)
        work.put(key, entry, stage=failed_stage, retry_at=rfc3339(retry), message=text)
        wake(work, retry)
    record_failure(work, key, stage, task, text, final=final, attempt=entry.attempts, pod=pod)


def _outside_cause(work: Work, key: str) -> Cause | None:
    """The outside cause of a failure nobody reported: an unpullable interrupt image, NotReady."""
    pod = work.live_interrupt.get(key)
    if pod is not None and pod.waiting_reason in recovery.PULL_REASONS:
        return Cause.IMAGE_PULL
    if not work.inp.node.ready:
        return Cause.NOT_READY
    return None


def give_up(
    work: Work,
    key: str,
    entry: PackageState,
    message: str,
    cause: Cause | None,
    **changes: object,
) -> str:
    """Make ``key`` erroring, recording what it failed with (``lifecycle.recovery``): the spec its
    attempt ran with (``changes`` may name it; the current one when none was recorded), and for an
    outside cause the cause and when it is re-attempted (named in the message). Returns the
    message recorded."""
    fields: dict[str, object] = {"cause": "", "reattempt_at": ""}
    if not entry.spec and (spec := spec_package(work, key)) is not None:
        fields["spec"] = fingerprint(work, *spec)
    if cause is not None:
        at = work.now + work.inp.outside_retry.delay(entry.reattempts)
        note = f"; {_reattempt_text(cause, at)}"
        message = truncate(message, MESSAGE_MAX - len(note)) + note
        fields.update(cause=cause.value, reattempt_at=rfc3339(at))
        wake(work, at)
    fields.update(changes, state=StageState.ERRORING, message=message)
    work.put(key, entry, **fields)
    return message


def _reattempt_text(cause: Cause, at: datetime) -> str:
    when = recovery.until(cause)
    return f"re-attempt {when} or at {rfc3339(at)}" if when else f"re-attempt at {rfc3339(at)}"


def record_failure(
    work: Work,
    key: str,
    stage: str,
    task: str,
    message: str,
    *,
    final: bool,
    attempt: int = 0,
    pod: PodObservation | None = None,
) -> None:
    name, _, version = key.partition("|")
    node = work.inp.node.name
    result = pod.result if pod is not None else None
    output = tuple(result.output) if result is not None else ()
    work.failures.append(
        NodeFailure(
            node,
            name,
            version,
            stage,
            task,
            message,
            work.now,
            final=final,
            attempt=attempt,
            pod=pod.name if pod is not None else "",
            output=output,
        )
    )
    what = f"{name} {version} {stage}" + (f" task {task!r}" if task else "")
    tail = "giving up" if final else "will retry"
    work.actions.append(
        EmitEvent(
            kind="Node",
            name=node,
            reason="PackageFailed" if final else "PackageRetry",
            message=truncate(f"{what}: {message} ({tail})", 1000),
            type=EventType.WARNING,
        )
    )
