"""Section 3 of the stage planner: the packages' cycles (install, upgrade, config, uninstall).

New work starts only when the rollout lets the node start (or it is in progress already) and the
package's dependencies are complete; a cycle goes on from stage to stage, prepares the node
first when it has an interrupt, and reapplies config when vars move mid-cycle. Re-attempts of
erroring entries are ``lifecycle.stage_recovery``; check mode before a cycle opens is
``lifecycle.stage_checks``.
"""

from __future__ import annotations

from datetime import timedelta

from lifecycle import (
    cycles,
    interrupts,
    peering,
    stage_checks,
    stage_failures,
    stage_interrupts,
    stage_pods,
    stage_prepare,
    stage_recovery,
)
from lifecycle.actions import CreatePackagePod
from lifecycle.cycles import INTERRUPT_STAGES, PRE_INTERRUPT
from lifecycle.nodestate import PackageState, Stage, StageState
from lifecycle.preflight import Outcome, PreflightRecord
from lifecycle.spec import Package
from lifecycle.stage_identities import chain, content_id, parse_time, rfc3339
from lifecycle.stage_work import (
    Work,
    config_digests_of,
    config_hash_of,
    content_changed,
    converged,
    fingerprint,
    fmt_duration,
    fresh_cycle,
    node_erroring,
    node_started,
    previous_version,
    remediating,
    spec_items,
    stage_timeout,
    wake,
)

# Look again this soon while an earlier attempt's pod is being deleted to make way for a new one.
KEPT_POD_RECHECK = timedelta(seconds=2)


def drive_packages(work: Work) -> None:
    inp = work.inp
    stage_recovery.restart_failed(work)
    erroring = node_erroring(work)
    work.interrupting = stage_interrupts.interrupt_owner(work) is not None
    may_start = not inp.paused and not erroring and (inp.allowed_to_start or node_started(work))
    for name, pkg, key in spec_items(work):
        entry = work.state.get(key)
        other_live = any(k.partition("|")[0] == name and k != key for k in work.live_keys)
        if key in work.live_keys or other_live:
            continue
        if cycles.uninstall_requested(pkg):
            _drive_uninstall(work, name, pkg, key, entry, may_start=may_start)
            continue
        if entry is not None and entry.stage is Stage.UNINSTALL:
            entry = _cancel_uninstall(work, pkg, key, entry)
        if entry is None:
            _start(work, name, pkg, key, may_start=may_start, kind="install")
        elif entry.state is StageState.COMPLETE:
            _after_complete(work, name, pkg, key, entry, may_start=may_start)
        elif entry.state is StageState.IN_PROGRESS and entry.stage not in INTERRUPT_STAGES:
            _continue(work, name, pkg, key, entry)
    stage_recovery.await_recovery(work)


def _deps_ready(work: Work, name: str, pkg: Package) -> bool:
    packages = work.inp.cr.spec.packages
    for dep in sorted(pkg.depends_on):
        dep_pkg = packages.get(dep)
        if dep_pkg is None or cycles.uninstall_requested(dep_pkg):
            work.blocked = True
            work.notes.append(f"{name} depends on {dep}, which is not installable")
            return False
        if not converged(work, dep, dep_pkg):
            return False
    return True


def _start(work: Work, name: str, pkg: Package, key: str, *, may_start: bool, kind: str) -> None:
    """Open a new cycle for ``key`` (install, upgrade, downgrade, config, uninstall, reapply);
    an erroring entry is re-attempted by ``stage_recovery`` instead."""
    work.pending_new = True
    if kind != "uninstall" and not _deps_ready(work, name, pkg):
        return
    checked: PreflightRecord | None = None
    if stage_checks.preflighted(work, pkg, key, kind):
        checked = stage_checks.checked(work, name, pkg, kind)
        if checked is None:
            return  # waiting for the check's outcome
        if checked.outcome is Outcome.COMPLIANT:
            stage_checks.record_compliant(work, name, pkg, key, checked)
            return
    if not may_start:
        return
    inp = work.inp
    entry = work.state.get(key)
    base = fresh_cycle(work, name, pkg)
    known = inp.declared.get(key)
    if known is not None and (entry is None or entry.declared is None):
        base["declared"] = known
    if checked is not None:
        base.update(stage_checks.checked_fields(checked))
        work.preflight.pop(name, None)  # consumed: the entry records it from here on
    elif kind != "uninstall":
        base.update(preflight="", preflight_tasks=[])
    if kind == "install":
        stage, _ = previous_version(work, name, pkg.version)
        entry = work.put(key, PackageState(stage=stage, state=StageState.IN_PROGRESS), **base)
    elif kind == "config":
        assert entry is not None
        changed = interrupts.changed_keys(entry.config_keys, config_digests_of(work, name, pkg))
        entry = work.put(
            key,
            entry,
            stage=Stage.CONFIG,
            changed_keys=changed or [interrupts.ALL_KEYS],
            **base,
        )
    elif kind == "uninstall":
        assert entry is not None
        entry = work.put(key, entry, stage=Stage.UNINSTALL, changed_keys=[], **base)
    else:  # reapply: new image content at the same version, or a rerun: the whole role again
        assert kind == "reapply" and entry is not None
        entry = work.put(key, entry, stage=Stage.APPLY, changed_keys=[], **base)
    work.started_new = True
    _continue(work, name, pkg, key, entry)


def _after_complete(
    work: Work, name: str, pkg: Package, key: str, entry: PackageState, *, may_start: bool
) -> None:
    if cycles.is_terminal(pkg, entry):
        wanted = content_id(pkg)
        if entry.rerun or content_changed(entry, pkg) or remediating(work, name, pkg, entry):
            _start(work, name, pkg, key, may_start=may_start, kind="reapply")
        elif entry.content not in ("", wanted) and entry.config_hash == config_hash_of(
            work, name, pkg
        ):
            # Pinning (or unpinning) the digest of what runs is not a change of content: it
            # is recorded, so the next digest change is seen as one.
            work.put(key, entry, content=wanted)
        elif entry.config_hash != config_hash_of(work, name, pkg):
            _start(work, name, pkg, key, may_start=may_start, kind="config")
        return
    if entry.stage in (Stage.APPLY, Stage.UPGRADE):
        nxt = Stage.CONFIG
    elif entry.stage is Stage.INTERRUPT:
        nxt = Stage.POST_INTERRUPT
    else:
        return  # config or uninstall waiting for its interrupt (stage_interrupts)
    entry = work.put(
        key,
        entry,
        stage=nxt,
        state=StageState.IN_PROGRESS,
        attempts=0,
        retry_at="",
        started=rfc3339(work.now),
    )
    _continue(work, name, pkg, key, entry)


def _continue(work: Work, name: str, pkg: Package, key: str, entry: PackageState) -> None:
    """Keep an in-progress entry moving: wait for back-off, prepare the node, create its pod."""
    inp = work.inp
    retry_at = parse_time(entry.retry_at)
    if retry_at is not None and inp.now < retry_at:
        wake(work, retry_at)
        return
    started = parse_time(entry.started) or inp.now
    if entry.attempts and retry_at is None:
        # A pod for this attempt was asked for but is gone (never created, or deleted by hand).
        timeout = stage_timeout(pkg)
        if inp.now >= started + timeout:
            message = f"pod did not finish within {fmt_duration(timeout)} (pod missing)"
            stage_failures.fail_attempt(work, key, entry.stage.value, "", message)
            return
    if inp.paused:
        return
    if work.interrupting:
        work.notes.append(f"{name} waits for the running interrupt")
        return
    if entry.stage is Stage.POST_INTERRUPT and vars_moved(work, name, pkg, entry):
        entry = reapply_config(work, name, pkg, key, entry)
    needs_prep = entry.stage in PRE_INTERRUPT and bool(cycles.entry_interrupts(pkg, entry))
    if needs_prep and not stage_prepare.prepare(work, [key]):
        return
    if not inp.node.ready:
        work.notes.append("waiting for the node to be Ready")
        return
    interrupt_cycle = needs_prep or entry.stage is Stage.POST_INTERRUPT
    ordered = peering.pods_wait(inp.node.peers, interrupt_cycle=interrupt_cycle)
    if ordered:
        work.notes.append(f"{name} {ordered}")
        return
    attempt = entry.attempts if entry.attempts and retry_at is None else entry.attempts + 1
    if attempt != entry.attempts and stage_pods.kept_in_the_way(
        work, name, pkg, entry.stage, attempt
    ):
        wake(work, inp.now + KEPT_POD_RECHECK)
        return
    hash_ = config_hash_of(work, name, pkg)
    digests = config_digests_of(work, name, pkg)
    changed = entry.changed_keys
    if changed:  # a config cycle: keys changed since the cycle opened are part of it too
        changed = sorted(set(changed) | set(interrupts.changed_keys(entry.config_keys, digests)))
    if attempt != entry.attempts or entry.retry_at:
        started = inp.now
    entry = work.put(
        key,
        entry,
        attempts=attempt,
        retry_at="",
        started=rfc3339(started),
        config_hash=hash_,
        config_keys=digests,
        changed_keys=changed,
        content=content_id(pkg),
        spec=fingerprint(work, name, pkg),
    )
    _, previous = previous_version(work, name, pkg.version)
    deadline = started + stage_timeout(pkg)
    work.actions.append(
        CreatePackagePod(
            node=inp.node.name,
            cr=inp.cr.metadata.name,
            package=name,
            version=pkg.version,
            stages=chain(entry.stage),
            resource_id=entry.resource_id,
            node_order=inp.node_order,
            attempt=attempt,
            config_hash=hash_,
            deadline=deadline,
            previous_version=previous,
        )
    )
    work.live_keys.add(key)
    wake(work, deadline)


def vars_moved(work: Work, name: str, pkg: Package, entry: PackageState) -> bool:
    """The vars (configMap, secrets, tags) changed after this cycle applied them."""
    return bool(entry.config_hash) and entry.config_hash != config_hash_of(work, name, pkg)


def reapply_config(
    work: Work, name: str, pkg: Package, key: str, entry: PackageState
) -> PackageState:
    """The vars changed while the cycle was open (its pods ran with the old ones): run the
    config stage again now, on the node still cordoned and drained, so "complete" means the new
    vars are in effect. Before the interrupt, the cycle keeps its interrupt (one for both);
    after it, the new vars are a config cycle of their own (``configInterrupts`` decide)."""
    digests = config_digests_of(work, name, pkg)
    moved = interrupts.changed_keys(entry.config_keys, digests) or [interrupts.ALL_KEYS]
    if entry.stage is Stage.POST_INTERRUPT:
        changed = moved
    else:
        changed = sorted(set(entry.changed_keys) | set(moved)) if entry.changed_keys else []
    work.notes.append(f"{name}: vars changed during the cycle; config runs again")
    return work.put(
        key,
        entry,
        stage=Stage.CONFIG,
        state=StageState.IN_PROGRESS,
        attempts=0,
        retry_at="",
        message="",
        started=rfc3339(work.now),
        changed_keys=changed,
        interrupt="",
        boot_id=None,
    )


def _drive_uninstall(
    work: Work, name: str, pkg: Package, key: str, entry: PackageState | None, *, may_start: bool
) -> None:
    if entry is None:
        return
    if entry.stage in INTERRUPT_STAGES or (
        entry.stage is Stage.UNINSTALL and entry.state is StageState.COMPLETE
    ):
        return  # handled with the interrupts
    if entry.stage is Stage.UNINSTALL and entry.state is StageState.IN_PROGRESS:
        _continue(work, name, pkg, key, entry)
        return
    if entry.stage is Stage.UNINSTALL and entry.state is StageState.ERRORING:
        return
    _start(work, name, pkg, key, may_start=may_start, kind="uninstall")


def _cancel_uninstall(
    work: Work, pkg: Package, key: str, entry: PackageState
) -> PackageState | None:
    """``uninstall.apply`` went back to false while the uninstall had not finished."""
    if entry.state is StageState.COMPLETE:
        return entry  # uninstalled already, only the interrupt is left: it finishes
    if entry.attempts == 0 and not entry.retry_at and entry.state is StageState.IN_PROGRESS:
        terminal = Stage.POST_INTERRUPT if cycles.entry_interrupts(pkg, entry) else Stage.CONFIG
        # Never ran: the package is still installed exactly as before.
        return work.put(
            key,
            entry,
            stage=terminal,
            state=StageState.COMPLETE,
            changed_keys=[],
            message="",
        )
    del work.state[key]  # partly uninstalled: install again from scratch
    return None
