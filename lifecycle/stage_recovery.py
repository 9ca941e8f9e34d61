"""Re-attempts of erroring entries (the rules: ``lifecycle.recovery``).

When a re-attempt is due (the spec changed, the outside cause cleared, the back-off passed) the
plan reports it; it happens when the rollout gives the node a new slot, at the stage that failed.
"""

from __future__ import annotations

from lifecycle import recovery
from lifecycle.actions import EmitEvent
from lifecycle.cycles import INTERRUPT_STAGES
from lifecycle.nodestate import PackageState, StageState
from lifecycle.recovery import Due
from lifecycle.spec import InterruptType, Package
from lifecycle.stage_identities import parse_time, resource_id, rfc3339, truncate
from lifecycle.stage_work import Work, config_hash_of, fingerprint, spec_items, wake


def restart_due(work: Work, name: str, pkg: Package, entry: PackageState) -> Due | None:
    """Why the erroring ``entry`` deserves another attempt now, or None (``lifecycle.recovery``)."""
    if entry.rerun:
        return Due.REQUESTED
    if entry.spec:
        if entry.spec != fingerprint(work, name, pkg):
            return Due.SPEC
    elif entry.config_hash and entry.config_hash != config_hash_of(work, name, pkg):
        return Due.SPEC  # recorded before ``spec`` existed: the config hash is all we know
    cause = recovery.cause_of(entry.cause)
    if cause is None:
        return None
    facts = work.inp.node
    blockers = recovery.Blockers(
        ready=facts.ready,
        blocking_pdbs=facts.blocking_pdbs,
        unevictable_pods=facts.unevictable_pods,
        protected_pods=facts.non_interrupt_pods,
    )
    if recovery.cleared(cause, blockers):
        return Due.CLEARED
    at = parse_time(entry.reattempt_at)
    if at is None or work.now >= at:
        return Due.BACKOFF
    return None


def await_recovery(work: Work) -> None:
    """Erroring entries that were not restarted: say whether a re-attempt is due (the rollout
    then picks the node again) and wake up when a back-off ends."""
    for name, pkg, key in spec_items(work):
        entry = work.state.get(key)
        if entry is None or entry.state is not StageState.ERRORING:
            continue
        if restart_due(work, name, pkg, entry) is not None:
            work.restart_due = True
        elif (at := parse_time(entry.reattempt_at)) is not None:
            wake(work, at)


def restart_failed(work: Work) -> None:
    """Re-attempt erroring entries, from the stage that failed with fresh attempts.

    Only with the rollout's permission (a failed node has no batch slot): the due entries when
    the node may start work, and every erroring entry when the rollout picked the node into a new
    batch (``new_slot``: it was given the slot for a re-attempt). What the cycle's runs asked for
    (``requested``) and the handlers they left owed (``pendingHandlers``) are kept.
    """
    inp = work.inp
    if inp.paused or not inp.allowed_to_start:
        return
    for name, pkg, key in spec_items(work):
        entry = work.state.get(key)
        if entry is None or entry.state is not StageState.ERRORING or key in work.live_keys:
            continue
        due = restart_due(work, name, pkg, entry)
        if due is None and inp.new_slot:
            due = Due.PICKED
        if due is not None:
            _restart(work, (name, pkg), key, entry, due)


def _restart(
    work: Work, spec: tuple[str, Package], key: str, entry: PackageState, due: Due
) -> None:
    inp = work.inp
    facts = inp.node
    name, pkg = spec
    now = rfc3339(inp.now)
    # A new spec starts a new back-off; an outside re-attempt doubles it.
    outside = due in (Due.CLEARED, Due.BACKOFF)
    fresh = due in (Due.SPEC, Due.REQUESTED)
    reattempts = 0 if fresh else entry.reattempts + (1 if outside else 0)
    fields: dict[str, object] = {
        "state": StageState.IN_PROGRESS,
        "attempts": 0,
        "retry_at": "",
        "message": "",
        "started": now,
        "spec": fingerprint(work, name, pkg),  # an interrupt re-run runs no package pod
        "cause": "",
        "reattempt_at": "",
        "reattempts": reattempts,
        "rerun": False,
    }
    if entry.stage in INTERRUPT_STAGES:
        # The interrupt runs again after the node is prepared (the retry path of a running
        # interrupt), unless the reboot did happen and only Ready was late: then it completes
        # as soon as the node is Ready, without a second reboot.
        rebooted = bool(entry.boot_id) and facts.boot_id != entry.boot_id
        fields["attempts"] = 1
        if not (rebooted and entry.interrupt == InterruptType.REBOOT.value):
            fields["attempts"] = 0
            fields["retry_at"] = now
        wake(work, inp.now)
    else:
        fields["resource_id"] = resource_id(
            inp.cr, name, pkg.version, config_hash_of(work, name, pkg)
        )
    work.put(key, entry, **fields)
    work.started_new = True
    _announce_restart(work, key, entry, due)


def _announce_restart(work: Work, key: str, entry: PackageState, due: Due) -> None:
    name, _, version = key.partition("|")
    inp = work.inp
    cause = recovery.cause_of(entry.cause)
    if due is Due.SPEC:
        reason, why = "RetryingAfterSpecChange", "the package's spec changed"
    elif due is Due.REQUESTED:
        reason, why = "RerunRequested", "a rerun was asked for"
    elif cause is not None and due in (Due.CLEARED, Due.BACKOFF):
        reason, why = "RetryingAfterOutsideCause", f"{cause.value} ({due.value})"
    else:
        reason, why = "RetryingFailedNode", "the rollout picked the node again"
    failed = truncate(entry.message, 300)
    message = (
        f"{name} {version} on {inp.node.name}: re-attempt from {entry.stage.value} after "
        f"{why}; it had failed: {failed}"
    )
    for kind, obj in (("Node", inp.node.name), ("NodeWright", inp.cr.metadata.name)):
        work.actions.append(
            EmitEvent(kind=kind, name=obj, reason=reason, message=truncate(message, 1000))
        )
