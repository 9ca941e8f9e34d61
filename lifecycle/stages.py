"""The per-node stage planner: for ONE node and ONE NodeWright, what happens next.

Input is a snapshot (the CR, the node's recorded ``PackageState`` map, a few node facts, this CR's
pods on the node, whether the rollout planner lets the node start new work, and ``now``); output is
the node's status for the CR and an ordered tuple of idempotent actions (``lifecycle.actions``).
The function is pure and deterministic, so the controller can call it on every reconcile and
``nwb plan`` can show what each node would do.

Stage graph (as NodeWright walks it; docs/architecture.md, "The per-node stage graph and
interrupts")::

    install:    [cordon, wait, drain] -> apply+config -> [interrupt -> post-interrupt] -> [uncordon]
    upgrade:    [cordon, wait, drain] -> upgrade+config -> [interrupt -> post-interrupt] -> ...
    config:     [cordon, wait, drain] -> config -> [interrupt -> post-interrupt] -> ...
    uninstall:  [cordon, wait, drain] -> uninstall -> [uninstall-interrupt] -> key removed

Brackets apply when the cycle has an interrupt (``lifecycle.interrupts.cycle_interrupts``): the
CR's, else the one the package declares, plus what the cycle's runs asked for (a reboot, service
restarts: recorded from each pod's result, kept across attempts). A request found after a stage
on an undrained node brings the brackets after it: cordon, drain, interrupt, post-interrupt. A
package's declared interrupt, once any node reported it (``NodeInput.declared``), is known when
a new cycle starts, so later nodes are drained before they apply.
Consecutive non-interrupt stages run in one pod with their checks (``apply, apply-check, config,
config-check``); interrupt and post-interrupt get their own pods. Semver decides the cycle for a
package without an entry at the spec version: an older version installed means upgrade (older keys
are removed once the upgrade succeeds), only newer ones means a downgrade, done as a fresh apply
that keeps the newer key as a marker.

Where we differ from NodeWright (docs/architecture.md, "Where we differ from NodeWright"):
- New work (first install, upgrade, config change, uninstall) starts only when
  ``allowed_to_start`` or the node is already in progress for this CR; work in flight goes on.
- A package starts only when all of its dependencies are complete on this node.
- Every wait has a deadline: stage pods (incl. image pull) ``timeouts.stage`` from the attempt's
  start, and a pod that cannot pull its image (``recovery.START_FAILURES``) the controller's pull
  deadline from its creation (then ``erroring`` at once, cause ``image-pull``);
  podNonInterruptLabels wait plus drain ``min(timeouts.drain, spec.drain.timeout)``;
  interrupts incl. reboot and Ready ``timeouts.interrupt``. A failed or expired pod is retried with
  exponential back-off up to ``maxAttempts``; then the entry is ``erroring`` with a message. An
  expired drain is not retried in place (the PDB or pod will not go away by itself): ``erroring``
  at once, with its outside cause (below).
- An erroring entry stops new work on the node (its rollout slot ends as failed) and no interrupt
  starts on an erroring node; pods already running finish and are recorded.
- Recovery (``lifecycle.recovery``): an entry records the fingerprint of the package spec each
  attempt runs with (``spec``; a wait or drain that expires records the current one), so an
  erroring entry says what it failed with, and, when the failure came from outside the
  package, its ``cause`` (drain blocked by a PDB or an unevictable pod, drain expired,
  podNonInterruptLabels pods still running, image pull, node NotReady) with ``reattemptAt`` (the
  controller's ``--outside-retry`` back-off, doubling up to ``--outside-retry-max``), both named in
  its message. A re-attempt is due when the spec changed (any field of the package; an entry
  recorded before ``spec`` existed only for a vars/configMap/secretVars/tags change), when
  the outside cause cleared in ``NodeFacts`` (no PDB or unevictable pod blocks the drain, the
  protected pods are gone, the node is Ready) or when its back-off passed. A due re-attempt is
  reported (``NodePlan.restart_due``) and happens only with the rollout's permission: the rollout
  picks the node into a new batch (``new_slot``), which re-attempts every erroring entry of the
  node (a compartment reset picks failed nodes for that reason alone). The entry restarts at
  the stage that failed with fresh attempts; ``requested`` and ``pendingHandlers`` are kept. An
  interrupt that failed runs again after the node is prepared, unless the reboot did happen and
  only Ready came late: then a new bootID and Ready complete it (no second reboot). Events
  ``RetryingAfterSpecChange``, ``RetryingAfterOutsideCause`` or ``RetryingFailedNode`` name it.
  The cordon rules hold throughout: an erroring node keeps our cordon while its cycle needs it,
  and a re-attempt continues from that cordon (no uncordon in between).
- Cordon is owned: we add this CR as a holder and release only our hold (``Uncordon`` semantics
  in ``lifecycle.actions``); a node a human cordoned counts as cordoned, so we may drain it.
- Reboot completion is a new bootID with Ready=True, never pod success alone. The pre-reboot bootID
  is written to the entries before the interrupt pod is created (``PatchNodeState`` comes first),
  so a restarted controller finds it and never reboots twice.
- A package whose cycle has an interrupt never runs a pre-interrupt stage on a node that is not
  cordoned and drained, and an interrupt starts only on a cordoned, drained, Ready node with no
  other package pod running.
- Interrupts of every package due on the node at the same time merge into one pod (one reboot
  for the lot); packages still on their way to the interrupt are waited for.
- A disabled CR still observes its pods in flight, as a paused one does: results and failures
  are recorded, nothing new starts (NodeWright skips a disabled CR's nodes entirely).
- A failed package pod is kept for its log (``NodeInput.failed_pod_ttl``, from when it ended)
  unless a newer attempt of its package succeeded; it is never taken for a live attempt, and a
  new attempt that reuses its name deletes it first. Succeeded pods are deleted at once.
- ``rerun`` on an entry (``nwb rerun``): a complete entry opens a fresh cycle of the whole role
  (cordon and drain first when the package has an interrupt), an erroring one is re-attempted;
  both only once the rollout picks the node.

Where the rules live: this module keeps ``plan_node`` (the order of the sections) and re-exports
the names callers import from it; each section is a module of its own.

- ``lifecycle.stage_inputs``: what the planner reads and returns (``NodeInput``, ``NodeFacts``,
  ``PodObservation``; ``NodePlan``, ``NodeFailure``).
- ``lifecycle.stage_identities``: config hash, digests, resource id, pod chains, back-off, times.
- ``lifecycle.stage_work``: the scratch state of one call and the helpers over the spec.
- ``lifecycle.stage_pods``: 1. pod outcomes; ``lifecycle.stage_failures``: failed attempts.
- ``lifecycle.stage_interrupts``: 2. interrupts; ``lifecycle.stage_prepare``: cordon, wait, drain.
- ``lifecycle.stage_packages``: 3. the package cycles; ``lifecycle.stage_recovery``: re-attempts.
- ``lifecycle.stage_checks``: check mode (preflight and drift).
- ``lifecycle.stage_node_status``: 4. cordon release and the node's status.
"""

from __future__ import annotations

from dataclasses import replace

from lifecycle import (
    pod_records,
    stage_checks,
    stage_interrupts,
    stage_node_status,
    stage_packages,
    stage_pods,
)
from lifecycle.actions import Action, CreatePackagePod, PatchNodeState, SetNodeStatus
from lifecycle.cycles import INTERRUPT_STAGES, PRE_INTERRUPT
from lifecycle.nodestate import PackageState, package_key
from lifecycle.stage_checks import CHECK_STAGES, DRIFT_STAGE, DRIFTED, PREFLIGHT_STAGE
from lifecycle.stage_identities import (
    BACKOFF_BASE,
    BACKOFF_MAX,
    CONFIG_HASH_CHARS,
    KEY_DIGEST_CHARS,
    MESSAGE_MAX,
    RESOURCE_ID_CHARS,
    SECRET_VARS_KEY,
    backoff,
    chain,
    config_digests,
    config_hash,
    content_id,
    parse_time,
    resource_id,
    rfc3339,
)
from lifecycle.stage_inputs import (
    DEFAULT_FAILED_POD_TTL,
    NodeFacts,
    NodeFailure,
    NodeInput,
    NodePlan,
    PodObservation,
    PodPhase,
)
from lifecycle.stage_packages import KEPT_POD_RECHECK
from lifecycle.stage_work import Work
from lifecycle.status import Status

__all__ = [
    "BACKOFF_BASE",
    "BACKOFF_MAX",
    "CHECK_STAGES",
    "CONFIG_HASH_CHARS",
    "DEFAULT_FAILED_POD_TTL",
    "DRIFTED",
    "DRIFT_STAGE",
    "INTERRUPT_STAGES",
    "KEPT_POD_RECHECK",
    "KEY_DIGEST_CHARS",
    "MESSAGE_MAX",
    "PREFLIGHT_STAGE",
    "PRE_INTERRUPT",
    "RESOURCE_ID_CHARS",
    "SECRET_VARS_KEY",
    "NodeFacts",
    "NodeFailure",
    "NodeInput",
    "NodePlan",
    "PodObservation",
    "PodPhase",
    "backoff",
    "chain",
    "config_digests",
    "config_hash",
    "content_id",
    "parse_time",
    "plan_node",
    "resource_id",
    "rfc3339",
]


def plan_node(inp: NodeInput) -> NodePlan:
    """Plan the next step of one node for one CR (see the module docstring for the rules)."""
    if inp.disabled:
        return _plan_disabled(inp)
    work = Work(inp=inp, state=dict(inp.state), preflight=dict(inp.preflight))
    stage_pods.observe_pods(work)
    stage_interrupts.drive_interrupts(work)
    stage_packages.drive_packages(work)
    stage_checks.drive_drift(work)
    stage_node_status.release_cordon(work)
    status, reason = stage_node_status.node_status(work)
    return _finish(work, status, reason)


def _plan_disabled(inp: NodeInput) -> NodePlan:
    """Disabled: pods in flight are still observed, as under pause.

    Their results and failures are recorded and deadlines kept, so re-enabling never finds a
    stale entry; nothing new starts (no pod, stage, cordon, drain or retry) and the cordon we hold
    stays, as NodeWright's disable leaves it.
    """
    work = Work(inp=replace(inp, paused=True), state=dict(inp.state), preflight=dict(inp.preflight))
    stage_pods.observe_pods(work)
    stage_interrupts.drive_interrupts(work)
    return _finish(work, Status.DISABLED, "CR is disabled")


def _unreached(work: Work, status: Status) -> bool:
    """The rollout has not reached the node yet: it waits, has never carried a status label for
    the CR and records nothing of it. Its label is left absent (``nwb status`` and the CR's counts
    show it waiting): labelling every targeted node ``waiting`` when a CR appears would be a Node
    write per node before the first pod, each one a watch event for every Node watcher."""
    inp = work.inp
    return (
        status is Status.WAITING
        and inp.previous_status is None
        and not inp.state
        and not work.state
        and not inp.preflight
        and not work.preflight
    )


def _riding(
    work: Work,
    status: Status,
    changed: dict[str, PackageState],
    removed: tuple[str, ...],
    extra: list[Action],
) -> CreatePackagePod | None:
    """The pass's only action is the pod of a fresh install: it carries its start
    (``lifecycle.pod_records``) and the Node is not written."""
    if status is not Status.IN_PROGRESS or extra or len(work.actions) != 1:
        return None
    (action,) = work.actions
    if not isinstance(action, CreatePackagePod):
        return None
    key = pod_records.may_ride(work.inp.state, changed, removed, work.inp.previous_status)
    if key != package_key(action.package, action.version):
        return None
    return replace(action, carries=changed[key])


def _finish(work: Work, status: Status, reason: str) -> NodePlan:
    inp = work.inp
    node, cr = inp.node.name, inp.cr.metadata.name
    changed = {k: v for k, v in work.state.items() if inp.state.get(k) != v}
    removed = tuple(sorted(k for k in inp.state if k not in work.state))
    head: list[Action] = []
    extra = stage_checks.preflight_writes(work)
    riding = _riding(work, status, changed, removed, extra)
    if riding is not None:
        return _plan(work, status, reason, (riding,))
    # A node working on a carried start keeps its label until the result is written with it.
    quiet = _unreached(work, status) or (
        bool(inp.carried) and not changed and not removed and status is Status.IN_PROGRESS
    )
    relabel = status != inp.previous_status and not quiet
    if inp.carried and (changed or removed or relabel):
        # The Node is written anyway: the entries pods carry go with it (``pod_records``).
        changed = {k: work.state[k] for k in sorted(inp.carried) if k in work.state} | changed
    if changed or removed:
        head.append(PatchNodeState(node=node, cr=cr, set=changed, remove=removed))
    if relabel:
        head.append(SetNodeStatus(node=node, cr=cr, status=status))
    head.extend(extra)
    return _plan(work, status, reason, (*head, *work.actions))


def _plan(work: Work, status: Status, reason: str, plan_actions: tuple[Action, ...]) -> NodePlan:
    """The plan shares the input's mappings when the pass left them equal: kept plans of settled
    nodes (5,000 of them in a large rollout) would otherwise each hold a second copy."""
    inp = work.inp
    return NodePlan(
        node=work.inp.node.name,
        status=status,
        reason=reason,
        actions=plan_actions,
        state=inp.state if work.state == inp.state else dict(work.state),
        failures=tuple(work.failures),
        requeue_at=min(work.wakeups) if work.wakeups else None,
        restart_due=work.restart_due,
        check_pending=work.check_pending,
        check_wanted=work.check_wanted,
        checks_running=len(work.checking),
        preflight=inp.preflight if work.preflight == inp.preflight else dict(work.preflight),
        drifted=work.drifted,
    )
