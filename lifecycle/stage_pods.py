"""Section 1 of the stage planner: what this CR's pods on the node did.

A package pod that runs its entry's current attempt completes the entry's chain when it
succeeded, or fails the attempt when it failed, could not pull its image or passed its deadline;
what its run asked for (a reboot, service restarts) is recorded. A failed pod is kept for its log
(``NodeInput.failed_pod_ttl``); other pods are deleted. Interrupt pods are noted for
``lifecycle.stage_interrupts``, check pods go to ``lifecycle.stage_checks``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from lifecycle import cycles, interrupts, recovery, stage_checks, stage_failures, versions
from lifecycle.actions import DeletePod, EmitEvent, EventType
from lifecycle.cycles import INTERRUPT_STAGES
from lifecycle.errors import InvalidVersionError
from lifecycle.nodestate import PackageState, Stage, StageState, package_key
from lifecycle.preflight import Outcome
from lifecycle.recovery import Cause
from lifecycle.spec import Package
from lifecycle.stage_identities import chain, parse_time, rfc3339, truncate
from lifecycle.stage_inputs import PodObservation, PodPhase
from lifecycle.stage_work import (
    Work,
    fmt_duration,
    pod_failure_text,
    spec_package,
    stage_timeout,
    wake,
)


def _pod_matches(entry: PackageState | None, pod: PodObservation) -> bool:
    if entry is None or not pod.stages or entry.retry_at:
        return False
    try:
        first = Stage(pod.stages[0])
    except ValueError:
        return False
    if pod.interrupt != (first in INTERRUPT_STAGES):
        return False
    return (
        entry.stage is first
        and entry.state is StageState.IN_PROGRESS
        and entry.attempts == pod.attempt
    )


def observe_pods(work: Work) -> None:
    inp = work.inp
    failed: list[PodObservation] = []  # failed package pods, recorded: kept for their log
    succeeded: set[str] = set()  # keys whose pod succeeded in this pass
    for pod in sorted(inp.pods, key=lambda p: p.name):
        if pod.stages and pod.stages[0] in stage_checks.CHECK_STAGES:
            stage_checks.observe_check_pod(work, pod)
            continue
        key = package_key(pod.package, pod.version)
        entry = work.state.get(key)
        if pod.deleting:
            if pod.live and _pod_matches(entry, pod):
                work.live_keys.add(key)
            continue
        if not _pod_matches(entry, pod):
            if _failed_package_pod(pod):
                failed.append(pod)
                continue
            reason = "finished and recorded" if not pod.live else "no longer wanted"
            work.actions.append(DeletePod(name=pod.name, node=inp.node.name, reason=reason))
            continue
        assert entry is not None
        if pod.interrupt:
            work.live_interrupt[key] = pod
            continue
        spec = spec_package(work, key)
        timeout = stage_timeout(spec[1]) if spec else timedelta(minutes=30)
        started = parse_time(entry.started) or inp.now
        failure = pod.result.failure if pod.result is not None else None
        pull_at = pull_deadline(work, pod, started)
        if pod.phase is PodPhase.SUCCEEDED and failure is None:
            _advance(work, key, _note_requests(work, key, entry, pod), pod)
            work.actions.append(DeletePod(name=pod.name, node=inp.node.name, reason="succeeded"))
            succeeded.add(key)
        elif pod.phase is PodPhase.FAILED or pod.phase is PodPhase.SUCCEEDED:
            stage = failure.stage if failure is not None else entry.stage.value
            task = failure.task if failure is not None else ""
            message = failure.message if failure is not None else pod_failure_text(pod)
            _note_requests(work, key, entry, pod)
            stage_failures.fail_attempt(
                work, key, stage, task, message, by_package=failure is not None, pod=pod
            )
            failed.append(pod)
        elif pull_at is not None and inp.now >= pull_at:
            _pull_failed(work, key, pod)
            work.actions.append(DeletePod(name=pod.name, node=inp.node.name, reason="image pull"))
        elif inp.now >= started + timeout:
            why = f" ({pod.waiting_reason})" if pod.waiting_reason else ""
            message = f"pod did not finish within {fmt_duration(timeout)}{why}"
            pull = pod.waiting_reason in recovery.PULL_REASONS
            cause = Cause.IMAGE_PULL if pull else None
            stage_failures.fail_attempt(work, key, entry.stage.value, "", message, cause=cause)
            work.actions.append(DeletePod(name=pod.name, node=inp.node.name, reason="deadline"))
        else:
            work.live_keys.add(key)
            wake(work, min(started + timeout, pull_at or started + timeout))
    for pod in failed:
        _keep_or_delete_failed(work, pod, succeeded)


def _failed_package_pod(pod: PodObservation) -> bool:
    """A package pod (not an interrupt pod) that ended with a failure: its log is worth keeping."""
    if pod.interrupt or pod.live:
        return False
    failure = pod.result.failure if pod.result is not None else None
    return pod.phase is PodPhase.FAILED or (pod.phase is PodPhase.SUCCEEDED and failure is not None)


def _keep_or_delete_failed(work: Work, pod: PodObservation, succeeded: set[str]) -> None:
    """The failed-pod TTL rule: a failed package pod whose failure is recorded stays until
    ``finished + failed_pod_ttl``, or until a newer attempt of its package succeeds (a pod in
    this pass, or the entry is complete or gone). It never counts as an attempt (``_pod_matches``
    is false once the failure is recorded) and never blocks one: a new attempt that would reuse
    its name deletes it first (``kept_in_the_way``)."""
    inp = work.inp
    key = package_key(pod.package, pod.version)
    entry = work.state.get(key)
    ttl = inp.failed_pod_ttl
    reason = ""
    if ttl <= timedelta(0) or pod.finished is None:
        reason = "failed"
    elif entry is None:
        reason = "failed; the node no longer records its package"
    elif key in succeeded or entry.state is StageState.COMPLETE:
        reason = "failed; a newer attempt succeeded"
    elif inp.now >= pod.finished + ttl:
        reason = f"failed; kept {fmt_duration(ttl)} for its log"
    if reason:
        work.actions.append(DeletePod(name=pod.name, node=inp.node.name, reason=reason))
    else:
        assert pod.finished is not None
        wake(work, pod.finished + ttl)


def kept_in_the_way(work: Work, name: str, pkg: Package, stage: Stage, attempt: int) -> bool:
    """A finished pod with the name the next attempt's pod gets (names are deterministic: a
    kept failed pod, or a succeeded one being deleted) is deleted first; creating over it would
    find the old pod and take its outcome for the new attempt's."""
    first = chain(stage)[0]
    in_the_way = False
    for pod in work.inp.pods:
        if (
            pod.package != name
            or pod.version != pkg.version
            or pod.interrupt
            or pod.live
            or pod.attempt != attempt
            or pod.stages[:1] != (first,)
        ):
            continue
        in_the_way = True
        if not pod.deleting and not any(
            isinstance(a, DeletePod) and a.name == pod.name for a in work.actions
        ):
            reason = "replaced by a new attempt"
            work.actions.append(DeletePod(name=pod.name, node=work.inp.node.name, reason=reason))
    if in_the_way:
        work.notes.append(f"{name} waits for the earlier attempt's pod to be deleted")
    return in_the_way


def pull_deadline(work: Work, pod: PodObservation, started: datetime) -> datetime | None:
    """When a package pod that cannot get its image (``recovery.START_FAILURES``) makes its
    entry erroring: the pull deadline after the pod was created; None if it is not stuck so."""
    if pod.waiting_reason not in recovery.START_FAILURES:
        return None
    return max(started, pod.created or started) + work.inp.outside_retry.pull_deadline


def _pull_failed(work: Work, key: str, pod: PodObservation) -> None:
    """Past the pull deadline: erroring at once with cause ``image-pull`` (re-attempted on the
    outside back-off or a spec change), not only at ``timeouts.stage``."""
    spec = spec_package(work, key)
    image = f" for image {spec[1].image}" if spec is not None else ""
    limit = fmt_duration(work.inp.outside_retry.pull_deadline)
    text = f"{pod.waiting_reason}{image}: the pod could not start within {limit}"
    entry = work.state[key]
    text = stage_failures.give_up(work, key, entry, truncate(text), Cause.IMAGE_PULL)
    stage_failures.record_failure(work, key, entry.stage.value, "", text, final=True)


def _note_requests(work: Work, key: str, entry: PackageState, pod: PodObservation) -> PackageState:
    """Record what a finished package pod reported: the package's declared interrupt, what its
    run asked for (kept across the cycle's attempts) and the handlers it left owed."""
    result = pod.result
    if result is None or result.unparseable:
        return entry
    requested = interrupts.requested_interrupt(
        entry.requested, reboot=result.reboot_requested, services=result.restart_services
    )
    declared = result.declared_interrupt or entry.declared
    if entry.preflight in (Outcome.CHANGES.value, stage_checks.DRIFTED):
        declared = entry.declared  # check mode knew what the handlers ask for: not the guess
    updated = work.put(
        key,
        entry,
        declared=declared,
        requested=requested,
        pending_handlers=list(result.pending_handlers),
    )
    asked = result.reboot_requested or bool(result.restart_services)
    spec = spec_package(work, key)
    if asked and spec is not None:
        _announce_request(work, key, spec[1], updated, result.request_reasons)
    return updated


def _announce_request(
    work: Work, key: str, pkg: Package, entry: PackageState, reasons: Sequence[str]
) -> None:
    name, _, version = key.partition("|")
    asked = entry.requested
    if asked is None:
        return
    what = asked.type.value + (f" ({', '.join(asked.services)})" if asked.services else "")
    why = f": {'; '.join(reasons)}" if reasons else ""
    if interrupts.overridden(pkg, asked):
        assert pkg.interrupt is not None
        reason = "InterruptRequestOverridden"
        tail = f"not performed: the CR sets interrupt {pkg.interrupt.type.value}"
    elif entry.stage is Stage.POST_INTERRUPT:
        reason = "InterruptRequestOverridden"
        tail = "not performed: asked for after the interrupt (it would disrupt the node twice)"
    else:
        reason = "InterruptRequested"
        tail = "cordon, drain and the interrupt follow"
    work.actions.append(
        EmitEvent(
            kind="Node",
            name=work.inp.node.name,
            reason=reason,
            message=truncate(f"{name} {version} asked for {what}{why}; {tail}", 1000),
            type=EventType.WARNING if reason == "InterruptRequestOverridden" else EventType.NORMAL,
        )
    )


def _advance(work: Work, key: str, entry: PackageState, pod: PodObservation) -> None:
    """A package pod succeeded: its whole chain is complete."""
    last = Stage(pod.stages[0])
    for name in pod.stages:
        if not name.endswith("-check"):
            try:
                last = Stage(name)
            except ValueError:
                continue
    done = {"attempts": 0, "retry_at": "", "message": "", "started": rfc3339(work.now)}
    if last is Stage.UNINSTALL:
        spec = spec_package(work, key)
        if spec is not None and cycles.entry_interrupts(spec[1], entry):
            work.put(key, entry, stage=Stage.UNINSTALL, state=StageState.COMPLETE, **done)
        else:
            del work.state[key]
        return
    if Stage.CONFIG.value in pod.stages or Stage.UPGRADE.value in pod.stages:
        drop_older_versions(work, pod.package, pod.version)
    work.put(key, entry, stage=last, state=StageState.COMPLETE, **done)


def drop_older_versions(work: Work, name: str, version: str) -> None:
    """An upgrade finished: older versions' entries are replaced (newer ones stay as markers)."""
    for key in list(work.state):
        other_name, _, other_version = key.partition("|")
        if other_name != name or other_version == version:
            continue
        try:
            change = versions.direction(other_version, version)
        except InvalidVersionError:
            continue
        if change is versions.VersionChange.UPGRADE:
            del work.state[key]
