"""Section 4 of the stage planner, the end of a pass: our cordon and the node's status.

The cordon we hold is released once no cycle on the node needs it; the node's status for the
CR and its reason are decided from the entries as the pass left them.
"""

from __future__ import annotations

from lifecycle import cycles, recovery, stage_recovery
from lifecycle.actions import Cordon, Uncordon
from lifecycle.cycles import INTERRUPT_STAGES
from lifecycle.nodestate import PackageState, Stage, StageState
from lifecycle.spec import Package
from lifecycle.stage_identities import truncate
from lifecycle.stage_work import (
    Work,
    converged,
    entries_in_flight,
    node_erroring,
    node_started,
    spec_items,
)
from lifecycle.status import Status


def _needs_cordon(work: Work) -> bool:
    """Some interrupt cycle of this CR is open on the node (erroring ones keep the cordon)."""
    for _, pkg, key in spec_items(work):
        entry = work.state.get(key)
        if entry is None:
            continue
        if entry.stage in INTERRUPT_STAGES:
            return True
        if entry.stage is Stage.POST_INTERRUPT:
            if entry.state is not StageState.COMPLETE:
                return True
        elif cycles.entry_interrupts(pkg, entry) and not cycles.is_terminal(pkg, entry):
            return True
    return False


def _recovery_note(work: Work, name: str, pkg: Package, entry: PackageState) -> str:
    """What brings an erroring entry back, for the node's status reason."""
    due = stage_recovery.restart_due(work, name, pkg, entry)
    if due is not None:
        return f"; re-attempt due ({due.value}): waiting for the rollout to pick the node again"
    if recovery.cause_of(entry.cause) is not None:
        return ""  # the message says when it is re-attempted
    return "; a change to the package's spec retries it"


def release_cordon(work: Work) -> None:
    facts = work.inp.node
    cr = work.inp.cr.metadata.name
    if facts.cordon is None or cr not in facts.cordon.holders:
        return
    if any(isinstance(a, Cordon) for a in work.actions) or _needs_cordon(work):
        return
    work.actions.append(Uncordon(node=facts.name, holder=cr))


def node_status(work: Work) -> tuple[Status, str]:
    inp = work.inp
    pending = [name for name, pkg, _ in spec_items(work) if not converged(work, name, pkg)]
    if not pending:
        return Status.COMPLETE, "all packages complete"
    if inp.paused:
        return Status.PAUSED, "CR is paused"
    if node_erroring(work):
        errs = [
            f"{name}: {e.message}{_recovery_note(work, name, pkg, e)}"
            for name, pkg, key in spec_items(work)
            if (e := work.state.get(key)) is not None and e.state is StageState.ERRORING
        ]
        return Status.ERRORING, truncate("; ".join(errs), 500)
    active = bool(work.live_keys) or work.started_new or entries_in_flight(work)
    if work.blocked and not active:
        return Status.BLOCKED, truncate("; ".join(work.notes), 500)
    if active or node_started(work):
        note = "; ".join(work.notes) if work.notes else f"working on {', '.join(pending)}"
        return Status.IN_PROGRESS, truncate(note, 500)
    if work.blocked:
        return Status.BLOCKED, truncate("; ".join(work.notes), 500)
    if work.check_pending:
        return Status.WAITING, truncate("; ".join(work.notes) or "waiting for check mode", 500)
    if work.pending_new and not inp.allowed_to_start:
        if inp.unpickable:
            return Status.BLOCKED, truncate(inp.unpickable, 500)
        return Status.WAITING, "waiting for the rollout to reach this node"
    return Status.WAITING, f"waiting: {', '.join(pending)}"
