"""Preparing the node for disruptive work: cordon (our hold), wait, drain.

Used before an interrupt (``lifecycle.stage_interrupts``) and before the pre-interrupt stage of
a cycle with an interrupt (``lifecycle.stage_packages``). Every wait and drain has a deadline;
one that expires makes its entries ``erroring`` with its outside cause (``lifecycle.recovery``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from lifecycle import stage_failures
from lifecycle.actions import Action, Cordon, Drain, WaitForPods
from lifecycle.recovery import Cause
from lifecycle.stage_identities import parse_time, truncate
from lifecycle.stage_inputs import NodeFacts
from lifecycle.stage_work import Work, drain_timeout, fingerprint, spec_package, wake


def prepare(work: Work, keys: Sequence[str]) -> bool:
    """Cordon, wait for podNonInterruptLabels pods, drain. True once the node is ready."""
    inp = work.inp
    facts = inp.node
    cr = inp.cr.metadata.name
    holders = facts.cordon.holders if facts.cordon is not None else []
    if (cr not in holders or not facts.unschedulable) and not any(
        isinstance(a, Cordon) for a in work.actions
    ):
        was = facts.unschedulable if facts.cordon is None else facts.cordon.was_unschedulable
        work.actions.append(Cordon(node=facts.name, holder=cr, was_unschedulable=was))
    if not facts.unschedulable:
        work.notes.append("cordoning")
        return False
    if facts.pods_to_evict == 0 and facts.non_interrupt_pods == 0:
        return True
    anchors: list[datetime] = []
    for key in keys:
        entry = work.state[key]
        spec = spec_package(work, key)
        if spec is None:
            continue
        start = max(
            (t for t in (parse_time(entry.started), parse_time(entry.retry_at)) if t),
            default=inp.now,
        )
        anchors.append(start + drain_timeout(work, spec[1]))
    deadline = min(anchors, default=inp.now + timedelta(minutes=30))
    if inp.now >= deadline:
        stage, why, cause = _unprepared(facts)
        for key in keys:
            # Nothing ran: what failed was the preparation for the spec as it is now.
            current = spec_package(work, key)
            ran = {"spec": fingerprint(work, *current)} if current is not None else {}
            text = stage_failures.give_up(work, key, work.state[key], truncate(why), cause, **ran)
            stage_failures.record_failure(work, key, stage, "", text, final=True)
        return False
    wake(work, deadline)
    action: Action
    if facts.non_interrupt_pods:
        selector = inp.cr.spec.pod_non_interrupt_labels
        assert selector is not None  # the reconciler counts such pods only for a selector
        action = WaitForPods(node=facts.name, selector=selector, deadline=deadline)
        note = "waiting for podNonInterruptLabels pods"
    else:
        action = Drain(node=facts.name, cr=cr, deadline=deadline, options=inp.cr.spec.drain)
        note = f"draining ({facts.pods_to_evict} pod(s) to evict)"
        if facts.blocking_pdbs:
            note = f"draining ({facts.pods_to_evict} pod(s) to evict; {_budgets_text(facts)})"
    # One wait or drain per node and plan, with the earliest deadline of the packages asking.
    for i, existing in enumerate(work.actions):
        if type(existing) is type(action):
            assert isinstance(existing, (WaitForPods, Drain))
            if deadline < existing.deadline:
                work.actions[i] = action
            return False
    work.actions.append(action)
    work.notes.append(note)
    return False


def _unprepared(facts: NodeFacts) -> tuple[str, str, Cause]:
    """Stage, message and outside cause of a wait or drain that reached its deadline."""
    if facts.non_interrupt_pods:
        why = f"{facts.non_interrupt_pods} podNonInterruptLabels pod(s) still running"
        return "wait", why, Cause.PROTECTED_PODS
    why = f"drain did not finish: {facts.pods_to_evict} pod(s) still to evict"
    if facts.blocking_pdbs:
        return "drain", f"{why}, blocked by {_budgets_text(facts)}", Cause.DRAIN
    if facts.unevictable_pods:
        why = f"{why}, {facts.unevictable_pods} of them not evictable with these drain options"
        return "drain", why, Cause.DRAIN
    return "drain", why, Cause.DRAIN_EXPIRED


def _budgets_text(facts: NodeFacts) -> str:
    """``PodDisruptionBudget a/x (keeps pod a/p), b/y``: the budgets and the pods they keep."""
    kept = dict(facts.pdb_pods)
    parts = []
    for budget in facts.blocking_pdbs:
        pods = kept.get(budget, ())
        shown = ", ".join(pods[:3]) + (f" and {len(pods) - 3} more" if len(pods) > 3 else "")
        parts.append(f"{budget} (keeps pod {shown})" if pods else budget)
    return "PodDisruptionBudget " + ", ".join(parts)
