"""Check mode of the stage planner: preflight and drift (the rules: ``lifecycle.preflight``).

A cycle of a package with ``preflight`` (or one that remediates drift) first runs its stages in
check mode; when nothing would change, the entry is recorded complete without a pod, cordon,
drain or interrupt. Drift detection checks a converged node every interval. Check pods have
their own slots; the records and the drift label are written at the end of each pass.
"""

from __future__ import annotations

from datetime import timedelta

from lifecycle import cycles, preflight, stage_pods
from lifecycle.actions import (
    Action,
    CreatePackagePod,
    DeletePod,
    EmitEvent,
    SetAnnotations,
    SetLabels,
)
from lifecycle.nodestate import PackageState, Stage, StageState, drift_label, preflight_annotation
from lifecycle.preflight import Outcome, PreflightRecord
from lifecycle.spec import Package
from lifecycle.stage_identities import (
    CHAINS,
    content_id,
    parse_time,
    rfc3339,
    truncate,
)
from lifecycle.stage_inputs import PodObservation, PodPhase
from lifecycle.stage_work import (
    Work,
    check_basis,
    config_digests_of,
    config_hash_of,
    converged,
    drift_found,
    drift_record,
    duration,
    fingerprint,
    fmt_duration,
    fresh_cycle,
    node_started,
    pod_failure_text,
    previous_version,
    spec_items,
    stage_timeout,
    wake,
)

PREFLIGHT_STAGE = preflight.PREFLIGHT_STAGE
DRIFT_STAGE = "drift"
CHECK_STAGES = frozenset({PREFLIGHT_STAGE, DRIFT_STAGE})
# ``PackageState.preflight`` of a cycle that remediates what a drift check found.
DRIFTED = "drifted"
_CHECKED_KINDS = frozenset({"install", "config", "reapply"})


def preflighted(work: Work, pkg: Package, key: str, kind: str) -> bool:
    """The cycle about to open is decided by check mode: the package asks for a preflight, or
    it remediates what a drift check found. A rerun (``nwb rerun``) runs the role regardless."""
    entry = work.state.get(key)
    if kind not in _CHECKED_KINDS or (entry is not None and entry.rerun):
        return False
    if pkg.preflight:
        return True
    name = key.partition("|")[0]
    return kind == "reapply" and drift_record(work, name) is not None


def _check_chain(work: Work, name: str, pkg: Package, kind: str) -> tuple[str, ...]:
    """The stages a check of this cycle runs (no ``-check`` stages: they verify a change made)."""
    if kind == "config":
        stage = Stage.CONFIG
    elif kind == "install":
        stage, _ = previous_version(work, name, pkg.version)
    else:
        stage = Stage.APPLY
    return tuple(s.value for s in CHAINS[stage])


def _may_check(work: Work) -> bool:
    """A check pod may start: granted a check slot, or the node works for the rollout anyway."""
    inp = work.inp
    if inp.paused or work.interrupting or not inp.node.ready:
        return False
    return inp.may_check or inp.allowed_to_start or node_started(work)


def checked(work: Work, name: str, pkg: Package, kind: str) -> PreflightRecord | None:
    """The check's outcome for the cycle about to open, or None while it is not known (a check
    pod is started when the node may, else the node asks for a check slot)."""
    basis = check_basis(work, name, pkg, kind)
    record = work.preflight.get(name)
    if record is not None and record.basis == basis:
        return record
    work.check_pending = True
    if name in work.checking:
        work.notes.append(f"{name}: checking in check mode whether the node would change")
        return None
    if not _may_check(work):
        work.check_wanted = True
        work.notes.append(f"{name}: waiting for a check-mode slot")
        return None
    first = DRIFT_STAGE if record is not None and record.drift else PREFLIGHT_STAGE
    _create_check_pod(work, name, pkg, (first, *_check_chain(work, name, pkg, kind)), basis)
    return None


def _create_check_pod(
    work: Work, name: str, pkg: Package, stages: tuple[str, ...], basis: str
) -> None:
    inp = work.inp
    _, previous = previous_version(work, name, pkg.version)
    deadline = inp.now + stage_timeout(pkg)
    work.actions.append(
        CreatePackagePod(
            node=inp.node.name,
            cr=inp.cr.metadata.name,
            package=name,
            version=pkg.version,
            stages=stages,
            resource_id=basis,
            node_order=inp.node_order,
            attempt=1,
            config_hash=config_hash_of(work, name, pkg),
            deadline=deadline,
            previous_version=previous,
        )
    )
    work.checking.add(name)
    work.notes.append(f"{name}: checking in check mode whether the node would change")
    wake(work, deadline)


def observe_check_pod(work: Work, pod: PodObservation) -> None:
    """A check pod: running (its deadline and pull deadline kept), or ended: its outcome is
    recorded under the basis it ran for and the pod deleted (check pods keep nothing)."""
    inp = work.inp
    pkg = inp.cr.spec.packages.get(pod.package)
    if pod.deleting:
        if pod.live:
            work.checking.add(pod.package)
        return
    if pkg is None or pod.version != pkg.version:
        work.actions.append(DeletePod(name=pod.name, node=inp.node.name, reason="no longer wanted"))
        return
    drift = pod.stages[0] == DRIFT_STAGE
    if pod.live:
        created = pod.created or inp.now
        timeout = stage_timeout(pkg)
        pull_at = stage_pods.pull_deadline(work, pod, created)
        if pull_at is not None and inp.now >= pull_at:
            why = f"the check pod could not pull its image ({pod.waiting_reason})"
        elif inp.now >= created + timeout:
            why = f"the check pod did not finish within {fmt_duration(timeout)}"
        else:
            work.checking.add(pod.package)
            wake(work, min(created + timeout, pull_at or created + timeout))
            return
        verdict = preflight.judge(None, pod_failure=why)
        reason = "check deadline"
    else:
        failed = pod.phase is PodPhase.FAILED and (pod.result is None or pod.result.unparseable)
        why = pod_failure_text(pod) if failed else ""
        verdict = preflight.judge(pod.result, pod_failure=why)
        reason = "checked"
    work.preflight[pod.package] = verdict.model_copy(
        update={"basis": pod.resource_id, "at": rfc3339(inp.now), "drift": drift}
    )
    work.actions.append(DeletePod(name=pod.name, node=inp.node.name, reason=reason))


def checked_fields(record: PreflightRecord) -> dict[str, object]:
    """What an entry opened after a check records: the outcome and, for ``changes``, the
    interrupt the handlers that would fire ask for instead of the package's declared guess."""
    outcome = DRIFTED if record.drift and record.outcome is Outcome.CHANGES else record.outcome
    fields: dict[str, object] = {
        "preflight": str(outcome),
        "preflight_tasks": list(record.tasks[: preflight.MAX_TASKS]),
    }
    if record.outcome is Outcome.CHANGES:
        fields["declared"] = None
        fields["requested"] = record.interrupt
    elif record.declared is not None:
        fields["declared"] = record.declared
    return fields


def record_compliant(
    work: Work, name: str, pkg: Package, key: str, record: PreflightRecord
) -> None:
    """Check mode found nothing to change: the cycle is complete without a pod, a cordon, a
    drain or an interrupt, and takes no batch slot."""
    entry = work.state.get(key) or PackageState(stage=Stage.CONFIG, state=StageState.COMPLETE)
    work.put(
        key,
        entry,
        **{
            **fresh_cycle(work, name, pkg),
            "stage": Stage.CONFIG,
            "state": StageState.COMPLETE,
            "declared": record.declared or entry.declared,
            "config_hash": config_hash_of(work, name, pkg),
            "config_keys": config_digests_of(work, name, pkg),
            "changed_keys": [],
            "content": content_id(pkg),
            "spec": fingerprint(work, name, pkg),
            "pending_handlers": [],
            "preflight": Outcome.COMPLIANT.value,
            "preflight_tasks": [],
        },
    )
    stage_pods.drop_older_versions(work, name, pkg.version)
    work.preflight.pop(name, None)
    work.compliant.append(f"{name} {pkg.version}")


def _drift_interval(work: Work) -> timedelta | None:
    detection = work.inp.cr.spec.drift_detection
    if detection is None:
        return None
    return duration(detection.interval, timedelta(hours=1))


def drive_drift(work: Work) -> None:
    """Drift detection: where the CR is complete on the node, check each package in check mode
    every interval after its last check (jittered), paced by the check slots."""
    interval = _drift_interval(work)
    inp = work.inp
    if interval is None or inp.paused:
        return
    items = spec_items(work)
    if any(not converged(work, name, pkg) for name, pkg, _ in items):
        return
    for name, pkg, key in items:
        entry = work.state.get(key)
        if entry is None or cycles.uninstall_requested(pkg) or name in work.checking:
            continue
        basis = check_basis(work, name, pkg, "reapply")
        record = drift_record(work, name)
        last = parse_time(record.at) if record is not None and record.basis == basis else None
        last = last or parse_time(entry.updated) or inp.now
        due = preflight.drift_due(last, interval, inp.node.name, name)
        if inp.now < due:
            wake(work, due)
            continue
        if not _may_check(work):
            work.check_wanted = True
            continue
        stages = (DRIFT_STAGE, *_check_chain(work, name, pkg, "reapply"))
        _create_check_pod(work, name, pkg, stages, basis)


def _drifted(work: Work) -> bool:
    """The node shows drift for this CR: a drift check found changes on a complete entry, or a
    remediation of one is still open."""
    for name, pkg, key in spec_items(work):
        entry = work.state.get(key)
        if entry is None:
            continue
        if entry.preflight == DRIFTED and not cycles.is_terminal(pkg, entry):
            return True
        if drift_found(work, name, pkg, entry):
            return True
    return False


def preflight_writes(work: Work) -> list[Action]:
    """The check-mode bookkeeping of the pass: the records annotation, the drift label, and one
    Event for the packages a check recorded complete without disruption."""
    inp = work.inp
    node, cr = inp.node.name, inp.cr.metadata.name
    packages = inp.cr.spec.packages
    for name in [n for n in work.preflight if n not in packages]:
        del work.preflight[name]
    out: list[Action] = []
    if work.preflight != dict(inp.preflight):
        value = preflight.dump_records(work.preflight)
        out.append(SetAnnotations(node=node, annotations={preflight_annotation(cr): value}))
    drifted = _drifted(work) if (work.preflight or inp.drift_labelled) else False
    work.drifted = drifted
    if drifted != inp.drift_labelled:
        out.append(SetLabels(node=node, labels={drift_label(cr): "true" if drifted else None}))
    if work.compliant:
        what = ", ".join(work.compliant)
        out.append(
            EmitEvent(
                kind="Node",
                name=node,
                reason="PreflightCompliant",
                message=truncate(
                    f"{cr}: check mode found nothing to change for {what}; recorded complete "
                    "without cordon, drain or interrupt",
                    1000,
                ),
            )
        )
    return out
