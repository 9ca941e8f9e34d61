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
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from lifecycle import cycles, durations, interrupts, peering, preflight, recovery, versions
from lifecycle.actions import (
    Action,
    Cordon,
    CreateInterruptPod,
    CreatePackagePod,
    DeletePod,
    Drain,
    EmitEvent,
    EventType,
    PatchNodeState,
    SetAnnotations,
    SetLabels,
    SetNodeStatus,
    Uncordon,
    VerifyReboot,
    WaitForPods,
)
from lifecycle.errors import InvalidVersionError
from lifecycle.nodestate import (
    CordonRecord,
    PackageState,
    Stage,
    StageState,
    drift_label,
    package_key,
    preflight_annotation,
)
from lifecycle.preflight import Outcome, PreflightRecord
from lifecycle.recovery import DEFAULT_OUTSIDE_RETRY, Cause, Due, OutsideRetry
from lifecycle.results import AgentResult
from lifecycle.spec import Interrupt, InterruptType, NodeWright, Package
from lifecycle.status import Status

# First retry after 30 s, doubling, capped at 10 min: a flapping registry or apt mirror gets a
# few minutes to recover without a broken role hammering the node.
BACKOFF_BASE = timedelta(seconds=30)
BACKOFF_MAX = timedelta(minutes=10)
# A node annotation holds every entry; a long Ansible message must not crowd it.
MESSAGE_MAX = 240
# 64 bits are plenty to notice a change; the hash is stored per entry on the node.
CONFIG_HASH_CHARS = 16
KEY_DIGEST_CHARS = 10
RESOURCE_ID_CHARS = 24
# The changed-key name of a secretVars reference change (a configInterrupts glob may match it).
SECRET_VARS_KEY = "secretVars"
# A failed package pod stays this long after it ended, so ``kubectl logs`` / ``nwb logs`` can read
# it (a controller setting, ``--failed-pod-ttl``).
DEFAULT_FAILED_POD_TTL = timedelta(hours=24)
# Look again this soon while an earlier attempt's pod is being deleted to make way for a new one.
KEPT_POD_RECHECK = timedelta(seconds=2)

PRE_INTERRUPT = cycles.PRE_INTERRUPT
INTERRUPT_STAGES = cycles.INTERRUPT_STAGES
_uninstall_requested = cycles.uninstall_requested
_entry_interrupts = cycles.entry_interrupts
_is_terminal = cycles.is_terminal
_due_for_interrupt = cycles.due_for_interrupt
_CHAINS: Mapping[Stage, tuple[Stage, ...]] = {
    Stage.APPLY: (Stage.APPLY, Stage.CONFIG),
    Stage.UPGRADE: (Stage.UPGRADE, Stage.CONFIG),
    Stage.CONFIG: (Stage.CONFIG,),
    Stage.POST_INTERRUPT: (Stage.POST_INTERRUPT,),
    Stage.UNINSTALL: (Stage.UNINSTALL,),
}


# --------------------------------------------------------------------------------------------
# Inputs and output
# --------------------------------------------------------------------------------------------


class PodPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class PodObservation:
    """One of this CR's pods on the node, as the reconciler read it (labels + status).

    ``stages`` are the stages the pod runs (first = the entry's stage); an interrupt pod has
    ``("interrupt",)`` or ``("uninstall-interrupt",)`` and belongs to its owner package.
    """

    name: str
    package: str
    version: str
    stages: tuple[str, ...]
    attempt: int
    phase: PodPhase
    interrupt: bool = False
    result: AgentResult | None = None
    waiting_reason: str = ""  # e.g. ImagePullBackOff, for the timeout message
    deleting: bool = False
    finished: datetime | None = None  # when its container ended (a kept failed pod's TTL)
    created: datetime | None = None  # the pull deadline counts from here
    resource_id: str = ""  # the change it runs for; a check pod's: the basis it checks

    @property
    def live(self) -> bool:
        return self.phase in (PodPhase.PENDING, PodPhase.RUNNING, PodPhase.UNKNOWN)


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the planner needs to know about the node, computed for this CR.

    ``pods_to_evict`` counts pods a drain with this CR's drain options must still evict (see
    ``lifecycle.draining``); ``non_interrupt_pods`` counts Running/Pending pods matching the CR's
    podNonInterruptLabels; ``foreign_package_pods`` counts other CRs' live package pods.
    ``blocking_pdbs`` names (``namespace/name``) the PodDisruptionBudgets that allow no eviction of
    those pods right now and ``unevictable_pods`` counts the pods the drain options cannot evict:
    an outside cause ``drain`` has cleared when both are empty (``lifecycle.recovery``).
    """

    name: str
    boot_id: str
    ready: bool = True
    unschedulable: bool = False
    cordon: CordonRecord | None = None
    pods_to_evict: int = 0
    non_interrupt_pods: int = 0
    foreign_package_pods: int = 0
    # Other CRs' work on this node (``lifecycle.peering``): one cordon and one interrupt for all.
    peers: tuple[peering.PeerOutlook, ...] = ()
    blocking_pdbs: tuple[str, ...] = ()
    unevictable_pods: int = 0
    # each of ``blocking_pdbs`` with the pods it keeps here (``draining.pdb_protected``)
    pdb_pods: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class NodeInput:
    cr: NodeWright
    node: NodeFacts
    state: Mapping[str, PackageState]
    now: datetime
    allowed_to_start: bool
    pods: Sequence[PodObservation] = ()
    node_order: int = 0
    previous_status: Status | None = None
    paused: bool = False
    disabled: bool = False
    # Why the rollout planner will not pick this node (ignore label, untolerated taint): a node
    # that would otherwise wait for the rollout is ``blocked`` with this reason instead.
    unpickable: str = ""
    # Package key -> the interrupt the package declares, as pods on other nodes reported it: a
    # new cycle starts knowing it, so a disruptive package is drained before it is applied.
    declared: Mapping[str, Interrupt] = field(default_factory=dict)
    # Package name -> digest of the data of the Secrets its secretVars mount: new secret content
    # is a config change like new vars.
    secret_data: Mapping[str, str] = field(default_factory=dict)
    # The rollout picked the node into a new batch in this plan: an erroring node got a slot
    # again (a spec fix, a cleared outside cause, a compartment reset) and re-attempts.
    new_slot: bool = False
    # Back-off of re-attempts after an outside cause (a controller setting).
    outside_retry: OutsideRetry = DEFAULT_OUTSIDE_RETRY
    # How long a failed package pod is kept after it ended, for its log (a controller setting;
    # zero deletes it at once).
    failed_pod_ttl: timedelta = DEFAULT_FAILED_POD_TTL
    # Check mode (``lifecycle.preflight``): the node's records by package, whether the planning
    # step granted the node a check pod now (check pods have their own concurrency limit), and
    # whether the node carries the drift label of this CR.
    preflight: Mapping[str, PreflightRecord] = field(default_factory=dict)
    may_check: bool = False
    drift_labelled: bool = False


@dataclass(frozen=True, slots=True)
class NodeFailure:
    """A failed attempt or expired wait seen in this reconcile (feeds recentFailures, events)."""

    node: str
    package: str
    version: str
    stage: str
    task: str
    message: str
    time: datetime
    final: bool  # attempts exhausted or not retryable: the entry is now erroring
    attempt: int = 0  # the attempt that failed (0: unknown)
    pod: str = ""  # the pod that reported it (empty: an expired wait, a missing pod)
    output: tuple[str, ...] = ()  # last lines of that pod's log (``AgentResult.output``)


@dataclass(frozen=True, slots=True)
class NodePlan:
    node: str
    status: Status
    reason: str
    actions: tuple[Action, ...]
    state: Mapping[str, PackageState]  # the node state once the actions are applied
    failures: tuple[NodeFailure, ...] = ()
    requeue_at: datetime | None = None
    # Erroring, and a re-attempt is due (``lifecycle.recovery``): the rollout may pick it again.
    restart_due: bool = False
    # Check mode: the node waits for a check's outcome before the rollout may pick it
    # (``check_pending``), it wants a check pod it was not granted (``check_wanted``), and how many
    # of its check pods run.
    check_pending: bool = False
    check_wanted: bool = False
    checks_running: int = 0
    preflight: Mapping[str, PreflightRecord] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Hashes and identities
# --------------------------------------------------------------------------------------------


def _stable_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def config_hash(package: Package, secret_data: str = "") -> str:
    """Hash of what a config stage applies: ``vars``, ``configMap``, the ``secretVars`` refs and
    the data of those Secrets (``secret_data``: a digest the controller reads), and the tag
    selection (``tags``/``skipTags`` change which of the role's tasks run).

    The refs, data and tags join the payload only when set, so the hash of a package without
    them is the one earlier versions recorded (no fleet-wide config run after an upgrade).
    """
    payload: dict[str, Any] = {"vars": package.vars, "configMap": package.config_map}
    if package.secret_vars:
        payload["secretVars"] = [ref.to_wire() for ref in package.secret_vars]
    if secret_data:
        payload["secretData"] = secret_data
    if package.tags:
        payload["tags"] = package.tags
    if package.skip_tags:
        payload["skipTags"] = package.skip_tags
    return _sha(_stable_json(payload))[:CONFIG_HASH_CHARS]


def content_id(package: Package) -> str:
    """What the package's image content is pinned to: its digest, or ``-`` for the tag."""
    return package.digest or "-"


def config_digests(package: Package, secret_data: str = "") -> dict[str, str]:
    """Per var name / configMap key digest; ``configInterrupts`` globs match these names."""
    names = set(package.vars) | set(package.config_map)
    out: dict[str, str] = {}
    for name in sorted(names):
        value = {"var": package.vars.get(name), "file": package.config_map.get(name)}
        out[name] = _sha(_stable_json(value))[:KEY_DIGEST_CHARS]
    if package.secret_vars:
        refs = [ref.to_wire() for ref in package.secret_vars]
        out[SECRET_VARS_KEY] = _sha(_stable_json([refs, secret_data]))[:KEY_DIGEST_CHARS]
    return out


def resource_id(cr: NodeWright, package: str, version: str, hash_: str) -> str:
    """Stable identity of one change (a cycle), handed to the agent to guard interrupts.

    The generation makes a second cycle with identical content (A -> B -> A) a new identity, so
    the agent's run-once flag of the first cycle does not swallow the second cycle's reboot.
    """
    meta = cr.metadata
    text = "/".join((meta.uid, meta.name, str(meta.generation), package, version, hash_))
    return _sha(text)[:RESOURCE_ID_CHARS]


def chain(stage: Stage) -> tuple[str, ...]:
    """The stages one pod runs when the entry is at ``stage``: each non-interrupt stage + check."""
    out: list[str] = []
    for s in _CHAINS[stage]:
        out.extend((s.value, f"{s.value}-check"))
    return tuple(out)


def backoff(failed_attempts: int) -> timedelta:
    """Delay before the attempt after ``failed_attempts`` failures."""
    delay = BACKOFF_BASE * (1 << min(max(failed_attempts - 1, 0), 16))
    return min(delay, BACKOFF_MAX)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 / ISO 8601 time (``Z`` or an offset; naive means UTC), or None."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _truncate(text: str, limit: int = MESSAGE_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------------------------
# The planner
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Work:
    """Mutable scratch space of one planning call (never escapes it)."""

    inp: NodeInput
    state: dict[str, PackageState]
    actions: list[Action] = field(default_factory=list)
    failures: list[NodeFailure] = field(default_factory=list)
    wakeups: list[datetime] = field(default_factory=list)
    live_keys: set[str] = field(default_factory=set)  # keys with a live package pod
    live_interrupt: dict[str, PodObservation] = field(default_factory=dict)
    interrupting: bool = False  # an interrupt runs on the node: no new package pods
    notes: list[str] = field(default_factory=list)
    started_new: bool = False
    blocked: bool = False
    pending_new: bool = False
    restart_due: bool = False
    # (name, package, key) of the spec's packages by name; computed once per call (hot path)
    spec_items: list[tuple[str, Package, str]] | None = None
    # check mode: records by package (updated in place), packages with a live check pod, ...
    preflight: dict[str, PreflightRecord] = field(default_factory=dict)
    checking: set[str] = field(default_factory=set)
    check_pending: bool = False
    check_wanted: bool = False
    compliant: list[str] = field(default_factory=list)  # recorded complete by a check this pass

    @property
    def now(self) -> datetime:
        return self.inp.now

    def put(self, key: str, entry: PackageState, **changes: object) -> PackageState:
        """Store ``entry`` with ``changes``; ``updated`` moves only when something changed."""
        candidate = entry.model_copy(update=changes)
        if candidate == entry and self.state.get(key) == entry:
            return entry
        updated = candidate.model_copy(update={"updated": rfc3339(self.now)})
        self.state[key] = updated
        return updated


def plan_node(inp: NodeInput) -> NodePlan:
    """Plan the next step of one node for one CR (see the module docstring for the rules)."""
    if inp.disabled:
        return _plan_disabled(inp)
    work = _Work(inp=inp, state=dict(inp.state), preflight=dict(inp.preflight))
    _observe_pods(work)
    _drive_interrupts(work)
    _drive_packages(work)
    _drive_drift(work)
    _release_cordon(work)
    status, reason = _node_status(work)
    return _finish(work, status, reason)


def _plan_disabled(inp: NodeInput) -> NodePlan:
    """Disabled: pods in flight are still observed, as under pause.

    Their results and failures are recorded and deadlines kept, so re-enabling never finds a
    stale entry; nothing new starts (no pod, stage, cordon, drain or retry) and the cordon we hold
    stays, as NodeWright's disable leaves it.
    """
    work = _Work(
        inp=replace(inp, paused=True), state=dict(inp.state), preflight=dict(inp.preflight)
    )
    _observe_pods(work)
    _drive_interrupts(work)
    return _finish(work, Status.DISABLED, "CR is disabled")


def _finish(work: _Work, status: Status, reason: str) -> NodePlan:
    inp = work.inp
    node, cr = inp.node.name, inp.cr.metadata.name
    changed = {k: v for k, v in work.state.items() if inp.state.get(k) != v}
    removed = tuple(sorted(k for k in inp.state if k not in work.state))
    head: list[Action] = []
    if changed or removed:
        head.append(PatchNodeState(node=node, cr=cr, set=changed, remove=removed))
    if status != inp.previous_status:
        head.append(SetNodeStatus(node=node, cr=cr, status=status))
    head.extend(_preflight_writes(work))
    return NodePlan(
        node=node,
        status=status,
        reason=reason,
        actions=(*head, *work.actions),
        state=dict(work.state),
        failures=tuple(work.failures),
        requeue_at=min(work.wakeups) if work.wakeups else None,
        restart_due=work.restart_due,
        check_pending=work.check_pending,
        check_wanted=work.check_wanted,
        checks_running=len(work.checking),
        preflight=dict(work.preflight),
    )


# ---- helpers over the spec ---------------------------------------------------------------


def _hash(work: _Work, name: str, pkg: Package) -> str:
    return config_hash(pkg, work.inp.secret_data.get(name, ""))


def _fingerprint(work: _Work, name: str, pkg: Package) -> str:
    return recovery.fingerprint(pkg, work.inp.secret_data.get(name, ""))


def _digests(work: _Work, name: str, pkg: Package) -> dict[str, str]:
    return config_digests(pkg, work.inp.secret_data.get(name, ""))


def _spec_package(work: _Work, key: str) -> tuple[str, Package] | None:
    name, _, version = key.partition("|")
    pkg = work.inp.cr.spec.packages.get(name)
    if pkg is None or pkg.version != version:
        return None
    return name, pkg


def _converged(work: _Work, name: str, pkg: Package) -> bool:
    entry = work.state.get(package_key(name, pkg.version))
    if _uninstall_requested(pkg):
        return entry is None
    return (
        entry is not None
        and not entry.rerun
        and _is_terminal(pkg, entry)
        and entry.config_hash == _hash(work, name, pkg)
        and not _content_changed(entry, pkg)
        and not _remediating(work, name, pkg, entry)
    )


def _content_changed(entry: PackageState, pkg: Package) -> bool:
    """The image moved from one pinned digest to another (a tag or a first pin is no change)."""
    wanted = content_id(pkg)
    return entry.content not in ("", "-", wanted) and wanted != "-"


def _duration(text: str, fallback: timedelta) -> timedelta:
    try:
        return durations.parse_duration(text)
    except ValueError:
        return fallback


def _stage_timeout(pkg: Package) -> timedelta:
    return _duration(pkg.timeouts.stage, timedelta(minutes=30))


def _interrupt_timeout(pkg: Package) -> timedelta:
    return _duration(pkg.timeouts.interrupt, timedelta(minutes=20))


def _drain_timeout(work: _Work, pkg: Package) -> timedelta:
    own = _duration(pkg.timeouts.drain, timedelta(minutes=30))
    return min(own, _duration(work.inp.cr.spec.drain.timeout, own))


def _wake(work: _Work, moment: datetime) -> None:
    work.wakeups.append(moment)


# ---- 1. pod outcomes -----------------------------------------------------------------------


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


def _observe_pods(work: _Work) -> None:
    inp = work.inp
    failed: list[PodObservation] = []  # failed package pods, recorded: kept for their log
    succeeded: set[str] = set()  # keys whose pod succeeded in this pass
    for pod in sorted(inp.pods, key=lambda p: p.name):
        if pod.stages and pod.stages[0] in CHECK_STAGES:
            _observe_check_pod(work, pod)
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
        spec = _spec_package(work, key)
        timeout = _stage_timeout(spec[1]) if spec else timedelta(minutes=30)
        started = parse_time(entry.started) or inp.now
        failure = pod.result.failure if pod.result is not None else None
        pull_at = _pull_deadline(work, pod, started)
        if pod.phase is PodPhase.SUCCEEDED and failure is None:
            _advance(work, key, _note_requests(work, key, entry, pod), pod)
            work.actions.append(DeletePod(name=pod.name, node=inp.node.name, reason="succeeded"))
            succeeded.add(key)
        elif pod.phase is PodPhase.FAILED or pod.phase is PodPhase.SUCCEEDED:
            stage = failure.stage if failure is not None else entry.stage.value
            task = failure.task if failure is not None else ""
            message = failure.message if failure is not None else _pod_failure_text(pod)
            _note_requests(work, key, entry, pod)
            _fail_attempt(work, key, stage, task, message, by_package=failure is not None, pod=pod)
            failed.append(pod)
        elif pull_at is not None and inp.now >= pull_at:
            _pull_failed(work, key, pod)
            work.actions.append(DeletePod(name=pod.name, node=inp.node.name, reason="image pull"))
        elif inp.now >= started + timeout:
            why = f" ({pod.waiting_reason})" if pod.waiting_reason else ""
            message = f"pod did not finish within {_fmt_duration(timeout)}{why}"
            pull = pod.waiting_reason in recovery.PULL_REASONS
            cause = Cause.IMAGE_PULL if pull else None
            _fail_attempt(work, key, entry.stage.value, "", message, cause=cause)
            work.actions.append(DeletePod(name=pod.name, node=inp.node.name, reason="deadline"))
        else:
            work.live_keys.add(key)
            _wake(work, min(started + timeout, pull_at or started + timeout))
    for pod in failed:
        _keep_or_delete_failed(work, pod, succeeded)


def _failed_package_pod(pod: PodObservation) -> bool:
    """A package pod (not an interrupt pod) that ended with a failure: its log is worth keeping."""
    if pod.interrupt or pod.live:
        return False
    failure = pod.result.failure if pod.result is not None else None
    return pod.phase is PodPhase.FAILED or (pod.phase is PodPhase.SUCCEEDED and failure is not None)


def _keep_or_delete_failed(work: _Work, pod: PodObservation, succeeded: set[str]) -> None:
    """The failed-pod TTL rule: a failed package pod whose failure is recorded stays until
    ``finished + failed_pod_ttl``, or until a newer attempt of its package succeeds (a pod in
    this pass, or the entry is complete or gone). It never counts as an attempt (``_pod_matches``
    is false once the failure is recorded) and never blocks one: a new attempt that would reuse
    its name deletes it first (``_kept_in_the_way``)."""
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
        reason = f"failed; kept {_fmt_duration(ttl)} for its log"
    if reason:
        work.actions.append(DeletePod(name=pod.name, node=inp.node.name, reason=reason))
    else:
        assert pod.finished is not None
        _wake(work, pod.finished + ttl)


def _kept_in_the_way(work: _Work, name: str, pkg: Package, stage: Stage, attempt: int) -> bool:
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


def _pull_deadline(work: _Work, pod: PodObservation, started: datetime) -> datetime | None:
    """When a package pod that cannot get its image (``recovery.START_FAILURES``) makes its
    entry erroring: the pull deadline after the pod was created; None if it is not stuck so."""
    if pod.waiting_reason not in recovery.START_FAILURES:
        return None
    return max(started, pod.created or started) + work.inp.outside_retry.pull_deadline


def _pull_failed(work: _Work, key: str, pod: PodObservation) -> None:
    """Past the pull deadline: erroring at once with cause ``image-pull`` (re-attempted on the
    outside back-off or a spec change), not only at ``timeouts.stage``."""
    spec = _spec_package(work, key)
    image = f" for image {spec[1].image}" if spec is not None else ""
    limit = _fmt_duration(work.inp.outside_retry.pull_deadline)
    text = f"{pod.waiting_reason}{image}: the pod could not start within {limit}"
    entry = work.state[key]
    text = _give_up(work, key, entry, _truncate(text), Cause.IMAGE_PULL)
    _record_failure(work, key, entry.stage.value, "", text, final=True)


def _fmt_duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def _pod_failure_text(pod: PodObservation) -> str:
    if pod.result is not None and pod.result.unparseable:
        return f"pod failed without a readable result: {pod.result.raw}"
    return "pod failed without a result"


def _note_requests(work: _Work, key: str, entry: PackageState, pod: PodObservation) -> PackageState:
    """Record what a finished package pod reported: the package's declared interrupt, what its
    run asked for (kept across the cycle's attempts) and the handlers it left owed."""
    result = pod.result
    if result is None or result.unparseable:
        return entry
    requested = interrupts.requested_interrupt(
        entry.requested, reboot=result.reboot_requested, services=result.restart_services
    )
    declared = result.declared_interrupt or entry.declared
    if entry.preflight in (Outcome.CHANGES.value, DRIFTED):
        declared = entry.declared  # check mode knew what the handlers ask for: not the guess
    updated = work.put(
        key,
        entry,
        declared=declared,
        requested=requested,
        pending_handlers=list(result.pending_handlers),
    )
    asked = result.reboot_requested or bool(result.restart_services)
    spec = _spec_package(work, key)
    if asked and spec is not None:
        _announce_request(work, key, spec[1], updated, result.request_reasons)
    return updated


def _announce_request(
    work: _Work, key: str, pkg: Package, entry: PackageState, reasons: Sequence[str]
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
            message=_truncate(f"{name} {version} asked for {what}{why}; {tail}", 1000),
            type=EventType.WARNING if reason == "InterruptRequestOverridden" else EventType.NORMAL,
        )
    )


def _advance(work: _Work, key: str, entry: PackageState, pod: PodObservation) -> None:
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
        spec = _spec_package(work, key)
        if spec is not None and _entry_interrupts(spec[1], entry):
            work.put(key, entry, stage=Stage.UNINSTALL, state=StageState.COMPLETE, **done)
        else:
            del work.state[key]
        return
    if Stage.CONFIG.value in pod.stages or Stage.UPGRADE.value in pod.stages:
        _drop_older_versions(work, pod.package, pod.version)
    work.put(key, entry, stage=last, state=StageState.COMPLETE, **done)


def _drop_older_versions(work: _Work, name: str, version: str) -> None:
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


def _fail_attempt(
    work: _Work,
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
    spec = _spec_package(work, key)
    max_attempts = spec[1].max_attempts if spec is not None else 1
    final = entry.attempts >= max_attempts
    text = _truncate(message or "failed")
    if cause is None and not by_package:
        cause = _outside_cause(work, key)
    if final:
        text = _give_up(work, key, entry, text, cause, stage=failed_stage)
    else:
        retry = work.now + backoff(entry.attempts)
        work.put(key, entry, stage=failed_stage, retry_at=rfc3339(retry), message=text)
        _wake(work, retry)
    _record_failure(work, key, stage, task, text, final=final, attempt=entry.attempts, pod=pod)


def _outside_cause(work: _Work, key: str) -> Cause | None:
    """The outside cause of a failure nobody reported: an unpullable interrupt image, NotReady."""
    pod = work.live_interrupt.get(key)
    if pod is not None and pod.waiting_reason in recovery.PULL_REASONS:
        return Cause.IMAGE_PULL
    if not work.inp.node.ready:
        return Cause.NOT_READY
    return None


def _give_up(
    work: _Work,
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
    if not entry.spec and (spec := _spec_package(work, key)) is not None:
        fields["spec"] = _fingerprint(work, *spec)
    if cause is not None:
        at = work.now + work.inp.outside_retry.delay(entry.reattempts)
        note = f"; {_reattempt_text(cause, at)}"
        message = _truncate(message, MESSAGE_MAX - len(note)) + note
        fields.update(cause=cause.value, reattempt_at=rfc3339(at))
        _wake(work, at)
    fields.update(changes, state=StageState.ERRORING, message=message)
    work.put(key, entry, **fields)
    return message


def _reattempt_text(cause: Cause, at: datetime) -> str:
    when = recovery.until(cause)
    return f"re-attempt {when} or at {rfc3339(at)}" if when else f"re-attempt at {rfc3339(at)}"


def _record_failure(
    work: _Work,
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
            message=_truncate(f"{what}: {message} ({tail})", 1000),
            type=EventType.WARNING,
        )
    )


# ---- 2. interrupts -------------------------------------------------------------------------


def _spec_items(work: _Work) -> list[tuple[str, Package, str]]:
    if work.spec_items is None:
        work.spec_items = [
            (name, pkg, package_key(name, pkg.version))
            for name, pkg in sorted(work.inp.cr.spec.packages.items())
        ]
    return work.spec_items


def _node_erroring(work: _Work) -> bool:
    return any(
        (e := work.state.get(key)) is not None and e.state is StageState.ERRORING
        for _, _, key in _spec_items(work)
    )


def _on_way_to_interrupt(work: _Work, pkg: Package, key: str, entry: PackageState) -> bool:
    """Pre-interrupt work of an interrupt cycle still running: the group waits for it."""
    if entry.stage not in PRE_INTERRUPT or not _entry_interrupts(pkg, entry):
        return False
    return entry.state is StageState.IN_PROGRESS or key in work.live_keys


def _owner(work: _Work) -> tuple[str, PackageState] | None:
    for _, _, key in _spec_items(work):
        entry = work.state.get(key)
        if (
            entry is not None
            and entry.stage in INTERRUPT_STAGES
            and entry.state is StageState.IN_PROGRESS
        ):
            return key, entry
    return None


def _members(work: _Work) -> list[str]:
    return [
        key
        for _, _, key in _spec_items(work)
        if (e := work.state.get(key)) is not None
        and e.stage in INTERRUPT_STAGES
        and e.state in (StageState.SKIPPED, StageState.IN_PROGRESS)
        and not e.interrupt_by
    ]


def _group_id(work: _Work, keys: Sequence[str]) -> str:
    return _sha(",".join(sorted(work.state[k].resource_id for k in keys)))[:RESOURCE_ID_CHARS]


def _drive_interrupts(work: _Work) -> None:
    owner = _owner(work)
    if owner is not None:
        _drive_running_interrupt(work, *owner)
        return
    if _drive_joined(work):
        return
    if work.inp.paused or _node_erroring(work):
        return
    due: dict[str, tuple[str, Package, PackageState]] = {}
    for name, pkg, key in _spec_items(work):
        entry = work.state.get(key)
        if entry is None:
            continue
        if _on_way_to_interrupt(work, pkg, key, entry):
            work.notes.append(f"interrupt waits for {name}")
            return
        if (
            _due_for_interrupt(pkg, entry)
            and entry.stage not in (Stage.UNINSTALL, Stage.UNINSTALL_INTERRUPT)
            and not entry.interrupt_by
            and _vars_moved(work, name, pkg, entry)
        ):
            _reapply_config(work, name, pkg, key, entry)  # _drive_packages starts its pod
            return
        if _due_for_interrupt(pkg, entry):
            due[key] = (name, pkg, entry)
    if not due:
        return
    candidates = {name: _entry_interrupts(pkg, entry) for name, pkg, entry in due.values()}
    merged = interrupts.merge(candidates)
    if merged is None:
        _skip_interrupt(work, due)
        return
    facts = work.inp.node
    gate = peering.interrupt_gate(work.inp.cr.metadata.name, facts.peers)
    if gate.action == "join":
        assert gate.peer is not None
        _join_interrupt(work, due, gate.peer)
        return
    if gate.action == "wait":
        work.notes.append(gate.reason)
        return
    busy = len(work.live_keys) + facts.foreign_package_pods
    if not facts.ready or busy:
        work.notes.append("interrupt waits for the node to be Ready and idle")
        return
    if not _prepare(work, [key for key in due]):
        return
    owner_key = next(k for k, (name, _, _) in due.items() if name == merged.owner)
    merged_with = sorted(gate.merge or {})
    if merged_with:  # one interrupt for every rollout due on the node (lifecycle.peering)
        theirs = {f"{peer}/": list(asked) for peer, asked in (gate.merge or {}).items()}
        shared = interrupts.merge({**candidates, **theirs})
        assert shared is not None
        merged = interrupts.MergedInterrupt(shared.type, shared.services, merged.owner)
    now_text = rfc3339(work.now)
    for key, (_, _, entry) in due.items():
        common = {
            "stage": _interrupt_stage(entry),
            "boot_id": facts.boot_id,
            "retry_at": "",
            "message": "",
        }
        if key == owner_key:
            work.put(
                key,
                entry,
                state=StageState.IN_PROGRESS,
                attempts=1,
                started=now_text,
                interrupt=merged.type.value,
                merged_with=merged_with,
                **common,
            )
        else:
            work.put(
                key,
                entry,
                state=StageState.SKIPPED,
                attempts=0,
                interrupt="",
                merged_with=[],
                **common,
            )
    _create_interrupt_pod(work, owner_key, merged.type, merged.services)


def _interrupt_stage(entry: PackageState) -> Stage:
    """The stage a due entry is at once its interrupt starts."""
    if entry.stage is Stage.UNINSTALL:
        return Stage.UNINSTALL_INTERRUPT
    return Stage.INTERRUPT if entry.stage is Stage.CONFIG else entry.stage


def _join_interrupt(
    work: _Work, due: Mapping[str, tuple[str, Package, PackageState]], peer: peering.PeerOutlook
) -> None:
    """An earlier CR's running interrupt performs ours too: mark the due entries as its."""
    kind = peer.running_type or InterruptType.NOOP
    for key, (_, _, entry) in due.items():
        work.put(
            key,
            entry,
            stage=_interrupt_stage(entry),
            state=StageState.SKIPPED,
            attempts=0,
            started=rfc3339(work.now),
            retry_at="",
            message="",
            boot_id=peer.boot_id or None,
            interrupt=kind.value,
            interrupt_by=peer.name,
            merged_with=[],
        )
    work.notes.append(f"interrupt runs with nodewright {peer.name}'s")


def _drive_joined(work: _Work) -> bool:
    """Entries an earlier CR's interrupt performs: done, still running, or due again.

    Done is a new bootID with Ready for a reboot, else the earlier CR's record of the finished
    interrupt. If that interrupt failed or its CR is gone, the entries are due again and this
    CR runs its own. True while one still waits.
    """
    inp = work.inp
    facts = inp.node
    me = inp.cr.metadata.name
    peers = {p.name: p for p in facts.peers}
    waiting = False
    for name, pkg, key in _spec_items(work):
        entry = work.state.get(key)
        if entry is None or not entry.interrupt_by:
            continue
        peer = peers.get(entry.interrupt_by)
        reboot = entry.interrupt == InterruptType.REBOOT.value
        rebooted = reboot and bool(entry.boot_id) and facts.boot_id != entry.boot_id
        deadline = (parse_time(entry.started) or inp.now) + _interrupt_timeout(pkg)
        running = peer is not None and peer.running and peer.performs_for(me)
        finished = peer is not None and peer.finished and peer.performs_for(me)
        if (rebooted or (finished and not reboot)) and facts.ready:
            _interrupt_done(work, key, entry, interrupt_by="", interrupt="")
        elif (running or rebooted) and inp.now < deadline:
            waiting = True
            _wake(work, deadline)
            work.notes.append(f"{name}: interrupt runs with nodewright {entry.interrupt_by}'s")
        else:  # failed, gone or late: due again, run by this CR
            work.put(key, entry, interrupt_by="", interrupt="", boot_id=None)
    return waiting


def _interrupt_done(work: _Work, key: str, entry: PackageState, **also: object) -> None:
    """The entry's interrupt finished: an uninstall's key goes, any other entry moves on to
    its post-interrupt stage (``also``: more fields to reset)."""
    if entry.stage is Stage.UNINSTALL_INTERRUPT:
        del work.state[key]
        return
    work.put(
        key,
        entry,
        stage=Stage.INTERRUPT,
        state=StageState.COMPLETE,
        attempts=0,
        retry_at="",
        **also,
    )


def _skip_interrupt(work: _Work, due: Mapping[str, tuple[str, Package, PackageState]]) -> None:
    """Due entries whose interrupt vanished from the spec: nothing to run, move on."""
    for key, (_, _, entry) in due.items():
        if entry.stage is Stage.UNINSTALL or entry.stage is Stage.UNINSTALL_INTERRUPT:
            del work.state[key]
        else:
            work.put(key, entry, stage=Stage.INTERRUPT, state=StageState.COMPLETE)


def _create_interrupt_pod(
    work: _Work, owner_key: str, kind: InterruptType, services: tuple[str, ...]
) -> None:
    inp = work.inp
    entry = work.state[owner_key]
    name, _, version = owner_key.partition("|")
    pkg = inp.cr.spec.packages[name]
    members = _members(work)
    deadline = (parse_time(entry.started) or inp.now) + _interrupt_timeout(pkg)
    work.actions.append(
        CreateInterruptPod(
            node=inp.node.name,
            cr=inp.cr.metadata.name,
            package=name,
            version=version,
            stage=entry.stage,
            interrupt_type=kind,
            services=services,
            members=tuple(k.partition("|")[0] for k in members),
            resource_id=_group_id(work, members),
            node_order=inp.node_order,
            attempt=entry.attempts,
            deadline=deadline,
        )
    )
    work.started_new = True
    _wake(work, deadline)


def _drive_running_interrupt(work: _Work, key: str, entry: PackageState) -> None:
    inp = work.inp
    facts = inp.node
    name = key.partition("|")[0]
    pkg = inp.cr.spec.packages[name]
    retry_at = parse_time(entry.retry_at)
    reboot = entry.interrupt == InterruptType.REBOOT.value
    rebooted = bool(entry.boot_id) and facts.boot_id != entry.boot_id
    if retry_at is not None and reboot and rebooted:
        # The failed pod was the reboot killing it before the new bootID showed (the node's
        # status write can lag, e.g. while the API server restarts): the reboot is done.
        if facts.ready:
            _complete_interrupt(work, None)
        else:
            work.notes.append("waiting for the node to be Ready after its reboot")
        return
    if retry_at is not None:
        if inp.now < retry_at:
            _wake(work, retry_at)
            return
        if inp.paused or not facts.ready or not _prepare(work, [key]):
            return
        entry = work.put(
            key,
            entry,
            attempts=entry.attempts + 1,
            retry_at="",
            started=rfc3339(inp.now),
            boot_id=facts.boot_id,
        )
        for member in _members(work):
            if member != key:
                work.put(member, work.state[member], boot_id=facts.boot_id)
        _create_interrupt_pod(
            work, key, InterruptType(entry.interrupt or InterruptType.NOOP), _services(work)
        )
        return
    pod = work.live_interrupt.get(key)
    started = parse_time(entry.started) or inp.now
    deadline = started + _interrupt_timeout(pkg)
    failure = pod.result.failure if pod is not None and pod.result is not None else None
    if reboot:
        done = rebooted and facts.ready
        # A NotReady node is rebooting: its killed pod is no failure.
        failed = pod is not None and pod.phase is PodPhase.FAILED and not rebooted and facts.ready
    else:
        done = (
            pod is not None and pod.phase is PodPhase.SUCCEEDED and failure is None and facts.ready
        )
        failed = pod is not None and (
            pod.phase is PodPhase.FAILED
            or (pod.phase is PodPhase.SUCCEEDED and failure is not None)
        )
    if done:
        _complete_interrupt(work, pod)
        return
    if failed:
        assert pod is not None
        message = failure.message if failure is not None else _pod_failure_text(pod)
        _fail_attempt(work, key, entry.stage.value, "", message)
        work.actions.append(DeletePod(name=pod.name, node=facts.name, reason="failed"))
        return
    if inp.now >= deadline:
        if entry.interrupt == InterruptType.REBOOT.value:
            message = (
                f"node did not come back with a new bootID and Ready within "
                f"{_fmt_duration(_interrupt_timeout(pkg))}"
            )
        else:
            message = f"interrupt did not finish within {_fmt_duration(_interrupt_timeout(pkg))}"
        _fail_attempt(work, key, entry.stage.value, "", message)
        if pod is not None:
            work.actions.append(DeletePod(name=pod.name, node=facts.name, reason="deadline"))
        return
    _wake(work, deadline)
    if entry.interrupt == InterruptType.REBOOT.value and (
        pod is None or pod.phase is PodPhase.SUCCEEDED or rebooted
    ):
        work.actions.append(
            VerifyReboot(node=facts.name, old_boot_id=entry.boot_id or "", deadline=deadline)
        )
    if pod is None and not rebooted and not inp.paused:
        # Recorded but no pod: the controller stopped between the patch and the create, or the
        # pod was removed. The agent's per-resource flag makes the re-created pod a no-op if it
        # already ran; a new bootID (checked above) is what counts for a reboot.
        _create_interrupt_pod(
            work, key, InterruptType(entry.interrupt or InterruptType.NOOP), _services(work)
        )


def _services(work: _Work) -> tuple[str, ...]:
    candidates: dict[str, list[Interrupt]] = {}
    for key in _members(work):
        spec = _spec_package(work, key)
        if spec is not None:
            candidates[spec[0]] = _entry_interrupts(spec[1], work.state[key])
    for peer in work.inp.node.peers:
        if peer.joined_to_me:
            candidates[f"{peer.name}/"] = list(peer.joined_to_me)
    merged = interrupts.merge(candidates)
    return merged.services if merged is not None else ()


def _complete_interrupt(work: _Work, pod: PodObservation | None) -> None:
    for key in _members(work):
        _interrupt_done(work, key, work.state[key])
    if pod is not None:
        work.actions.append(DeletePod(name=pod.name, node=work.inp.node.name, reason="succeeded"))


# ---- 3. packages ---------------------------------------------------------------------------


def _prepare(work: _Work, keys: Sequence[str]) -> bool:
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
        spec = _spec_package(work, key)
        if spec is None:
            continue
        start = max(
            (t for t in (parse_time(entry.started), parse_time(entry.retry_at)) if t),
            default=inp.now,
        )
        anchors.append(start + _drain_timeout(work, spec[1]))
    deadline = min(anchors, default=inp.now + timedelta(minutes=30))
    if inp.now >= deadline:
        stage, why, cause = _unprepared(facts)
        for key in keys:
            # Nothing ran: what failed was the preparation for the spec as it is now.
            current = _spec_package(work, key)
            ran = {"spec": _fingerprint(work, *current)} if current is not None else {}
            text = _give_up(work, key, work.state[key], _truncate(why), cause, **ran)
            _record_failure(work, key, stage, "", text, final=True)
        return False
    _wake(work, deadline)
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


def _previous_version(work: _Work, name: str, version: str) -> tuple[Stage, str]:
    """Cycle stage for a package without an entry at ``version`` and the version it replaces."""
    others: list[str] = []
    for key in work.state:
        other_name, _, other_version = key.partition("|")
        if other_name == name and other_version != version:
            others.append(other_version)
    lower: list[str] = []
    higher: list[str] = []
    for other in others:
        try:
            change = versions.direction(other, version)
        except InvalidVersionError:
            continue
        if change is versions.VersionChange.UPGRADE:
            lower.append(other)
        elif change is versions.VersionChange.DOWNGRADE:
            higher.append(other)
    if lower:
        return Stage.UPGRADE, _max_version(lower)
    if higher:
        return Stage.APPLY, _max_version(higher)
    return Stage.APPLY, ""


def _max_version(candidates: Sequence[str]) -> str:
    best = candidates[0]
    for other in candidates[1:]:
        if versions.compare(other, best) > 0:
            best = other
    return best


def _node_started(work: _Work) -> bool:
    return work.inp.previous_status is Status.IN_PROGRESS or _entries_in_flight(work)


def _entries_in_flight(work: _Work) -> bool:
    return any(
        (e := work.state.get(key)) is not None
        and e.state in (StageState.IN_PROGRESS, StageState.SKIPPED)
        for _, _, key in _spec_items(work)
    )


def _drive_packages(work: _Work) -> None:
    inp = work.inp
    _restart_failed(work)
    erroring = _node_erroring(work)
    work.interrupting = _owner(work) is not None
    may_start = not inp.paused and not erroring and (inp.allowed_to_start or _node_started(work))
    for name, pkg, key in _spec_items(work):
        entry = work.state.get(key)
        other_live = any(k.partition("|")[0] == name and k != key for k in work.live_keys)
        if key in work.live_keys or other_live:
            continue
        if _uninstall_requested(pkg):
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
    _await_recovery(work)


# ---- recovery of erroring entries (lifecycle.recovery) ---------------------------------------


def _restart_due(work: _Work, name: str, pkg: Package, entry: PackageState) -> Due | None:
    """Why the erroring ``entry`` deserves another attempt now, or None (``lifecycle.recovery``)."""
    if entry.rerun:
        return Due.REQUESTED
    if entry.spec:
        if entry.spec != _fingerprint(work, name, pkg):
            return Due.SPEC
    elif entry.config_hash and entry.config_hash != _hash(work, name, pkg):
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


def _await_recovery(work: _Work) -> None:
    """Erroring entries that were not restarted: say whether a re-attempt is due (the rollout
    then picks the node again) and wake up when a back-off ends."""
    for name, pkg, key in _spec_items(work):
        entry = work.state.get(key)
        if entry is None or entry.state is not StageState.ERRORING:
            continue
        if _restart_due(work, name, pkg, entry) is not None:
            work.restart_due = True
        elif (at := parse_time(entry.reattempt_at)) is not None:
            _wake(work, at)


def _restart_failed(work: _Work) -> None:
    """Re-attempt erroring entries, from the stage that failed with fresh attempts.

    Only with the rollout's permission (a failed node has no batch slot): the due entries when
    the node may start work, and every erroring entry when the rollout picked the node into a new
    batch (``new_slot``: it was given the slot for a re-attempt). What the cycle's runs asked for
    (``requested``) and the handlers they left owed (``pendingHandlers``) are kept.
    """
    inp = work.inp
    if inp.paused or not inp.allowed_to_start:
        return
    for name, pkg, key in _spec_items(work):
        entry = work.state.get(key)
        if entry is None or entry.state is not StageState.ERRORING or key in work.live_keys:
            continue
        due = _restart_due(work, name, pkg, entry)
        if due is None and inp.new_slot:
            due = Due.PICKED
        if due is not None:
            _restart(work, (name, pkg), key, entry, due)


def _restart(
    work: _Work, spec: tuple[str, Package], key: str, entry: PackageState, due: Due
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
        "spec": _fingerprint(work, name, pkg),  # an interrupt re-run runs no package pod
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
        _wake(work, inp.now)
    else:
        fields["resource_id"] = resource_id(inp.cr, name, pkg.version, _hash(work, name, pkg))
    work.put(key, entry, **fields)
    work.started_new = True
    _announce_restart(work, key, entry, due)


def _announce_restart(work: _Work, key: str, entry: PackageState, due: Due) -> None:
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
    failed = _truncate(entry.message, 300)
    message = (
        f"{name} {version} on {inp.node.name}: re-attempt from {entry.stage.value} after "
        f"{why}; it had failed: {failed}"
    )
    for kind, obj in (("Node", inp.node.name), ("NodeWright", inp.cr.metadata.name)):
        work.actions.append(
            EmitEvent(kind=kind, name=obj, reason=reason, message=_truncate(message, 1000))
        )


def _deps_ready(work: _Work, name: str, pkg: Package) -> bool:
    packages = work.inp.cr.spec.packages
    for dep in sorted(pkg.depends_on):
        dep_pkg = packages.get(dep)
        if dep_pkg is None or _uninstall_requested(dep_pkg):
            work.blocked = True
            work.notes.append(f"{name} depends on {dep}, which is not installable")
            return False
        if not _converged(work, dep, dep_pkg):
            return False
    return True


def _start(work: _Work, name: str, pkg: Package, key: str, *, may_start: bool, kind: str) -> None:
    """Open a new cycle for ``key`` (install, upgrade, downgrade, config, uninstall, reapply);
    an erroring entry is re-attempted by ``_restart`` instead."""
    work.pending_new = True
    if kind != "uninstall" and not _deps_ready(work, name, pkg):
        return
    checked: PreflightRecord | None = None
    if _preflighted(work, pkg, key, kind):
        checked = _checked(work, name, pkg, kind)
        if checked is None:
            return  # waiting for the check's outcome
        if checked.outcome is Outcome.COMPLIANT:
            _record_compliant(work, name, pkg, key, checked)
            return
    if not may_start:
        return
    inp = work.inp
    entry = work.state.get(key)
    hash_ = _hash(work, name, pkg)
    base = {
        "state": StageState.IN_PROGRESS,
        "attempts": 0,
        "retry_at": "",
        "message": "",
        "started": rfc3339(inp.now),
        "resource_id": resource_id(inp.cr, name, pkg.version, hash_),
        "boot_id": None,
        "interrupt": "",
        "requested": None,
        "merged_with": [],
        "interrupt_by": "",
        "cause": "",
        "reattempt_at": "",
        "reattempts": 0,
        "rerun": False,
    }
    known = inp.declared.get(key)
    if known is not None and (entry is None or entry.declared is None):
        base["declared"] = known
    if checked is not None:
        base.update(_checked_fields(checked))
        work.preflight.pop(name, None)  # consumed: the entry records it from here on
    elif kind != "uninstall":
        base.update(preflight="", preflight_tasks=[])
    if kind == "install":
        stage, _ = _previous_version(work, name, pkg.version)
        entry = work.put(key, PackageState(stage=stage, state=StageState.IN_PROGRESS), **base)
    elif kind == "config":
        assert entry is not None
        changed = interrupts.changed_keys(entry.config_keys, _digests(work, name, pkg))
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
    work: _Work, name: str, pkg: Package, key: str, entry: PackageState, *, may_start: bool
) -> None:
    if _is_terminal(pkg, entry):
        wanted = content_id(pkg)
        if entry.rerun or _content_changed(entry, pkg) or _remediating(work, name, pkg, entry):
            _start(work, name, pkg, key, may_start=may_start, kind="reapply")
        elif entry.content not in ("", wanted) and entry.config_hash == _hash(work, name, pkg):
            # Pinning (or unpinning) the digest of what runs is not a change of content: it
            # is recorded, so the next digest change is seen as one.
            work.put(key, entry, content=wanted)
        elif entry.config_hash != _hash(work, name, pkg):
            _start(work, name, pkg, key, may_start=may_start, kind="config")
        return
    if entry.stage in (Stage.APPLY, Stage.UPGRADE):
        nxt = Stage.CONFIG
    elif entry.stage is Stage.INTERRUPT:
        nxt = Stage.POST_INTERRUPT
    else:
        return  # config or uninstall waiting for its interrupt (see _drive_interrupts)
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


def _continue(work: _Work, name: str, pkg: Package, key: str, entry: PackageState) -> None:
    """Keep an in-progress entry moving: wait for back-off, prepare the node, create its pod."""
    inp = work.inp
    retry_at = parse_time(entry.retry_at)
    if retry_at is not None and inp.now < retry_at:
        _wake(work, retry_at)
        return
    started = parse_time(entry.started) or inp.now
    if entry.attempts and retry_at is None:
        # A pod for this attempt was asked for but is gone (never created, or deleted by hand).
        timeout = _stage_timeout(pkg)
        if inp.now >= started + timeout:
            message = f"pod did not finish within {_fmt_duration(timeout)} (pod missing)"
            _fail_attempt(work, key, entry.stage.value, "", message)
            return
    if inp.paused:
        return
    if work.interrupting:
        work.notes.append(f"{name} waits for the running interrupt")
        return
    if entry.stage is Stage.POST_INTERRUPT and _vars_moved(work, name, pkg, entry):
        entry = _reapply_config(work, name, pkg, key, entry)
    needs_prep = entry.stage in PRE_INTERRUPT and bool(_entry_interrupts(pkg, entry))
    if needs_prep and not _prepare(work, [key]):
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
    if attempt != entry.attempts and _kept_in_the_way(work, name, pkg, entry.stage, attempt):
        _wake(work, inp.now + KEPT_POD_RECHECK)
        return
    hash_ = _hash(work, name, pkg)
    digests = _digests(work, name, pkg)
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
        spec=_fingerprint(work, name, pkg),
    )
    _, previous = _previous_version(work, name, pkg.version)
    deadline = started + _stage_timeout(pkg)
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
    _wake(work, deadline)


def _vars_moved(work: _Work, name: str, pkg: Package, entry: PackageState) -> bool:
    """The vars (configMap, secrets, tags) changed after this cycle applied them."""
    return bool(entry.config_hash) and entry.config_hash != _hash(work, name, pkg)


def _reapply_config(
    work: _Work, name: str, pkg: Package, key: str, entry: PackageState
) -> PackageState:
    """The vars changed while the cycle was open (its pods ran with the old ones): run the
    config stage again now, on the node still cordoned and drained, so "complete" means the new
    vars are in effect. Before the interrupt, the cycle keeps its interrupt (one for both);
    after it, the new vars are a config cycle of their own (``configInterrupts`` decide)."""
    digests = _digests(work, name, pkg)
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
    work: _Work, name: str, pkg: Package, key: str, entry: PackageState | None, *, may_start: bool
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
    work: _Work, pkg: Package, key: str, entry: PackageState
) -> PackageState | None:
    """``uninstall.apply`` went back to false while the uninstall had not finished."""
    if entry.state is StageState.COMPLETE:
        return entry  # uninstalled already, only the interrupt is left: it finishes
    if entry.attempts == 0 and not entry.retry_at and entry.state is StageState.IN_PROGRESS:
        terminal = Stage.POST_INTERRUPT if _entry_interrupts(pkg, entry) else Stage.CONFIG
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


# ---- 4. cordon release and status ----------------------------------------------------------


def _needs_cordon(work: _Work) -> bool:
    """Some interrupt cycle of this CR is open on the node (erroring ones keep the cordon)."""
    for _, pkg, key in _spec_items(work):
        entry = work.state.get(key)
        if entry is None:
            continue
        if entry.stage in INTERRUPT_STAGES:
            return True
        if entry.stage is Stage.POST_INTERRUPT:
            if entry.state is not StageState.COMPLETE:
                return True
        elif _entry_interrupts(pkg, entry) and not _is_terminal(pkg, entry):
            return True
    return False


def _recovery_note(work: _Work, name: str, pkg: Package, entry: PackageState) -> str:
    """What brings an erroring entry back, for the node's status reason."""
    due = _restart_due(work, name, pkg, entry)
    if due is not None:
        return f"; re-attempt due ({due.value}): waiting for the rollout to pick the node again"
    if recovery.cause_of(entry.cause) is not None:
        return ""  # the message says when it is re-attempted
    return "; a change to the package's spec retries it"


def _release_cordon(work: _Work) -> None:
    facts = work.inp.node
    cr = work.inp.cr.metadata.name
    if facts.cordon is None or cr not in facts.cordon.holders:
        return
    if any(isinstance(a, Cordon) for a in work.actions) or _needs_cordon(work):
        return
    work.actions.append(Uncordon(node=facts.name, holder=cr))


def _node_status(work: _Work) -> tuple[Status, str]:
    inp = work.inp
    pending = [name for name, pkg, _ in _spec_items(work) if not _converged(work, name, pkg)]
    if not pending:
        return Status.COMPLETE, "all packages complete"
    if inp.paused:
        return Status.PAUSED, "CR is paused"
    if _node_erroring(work):
        errs = [
            f"{name}: {e.message}{_recovery_note(work, name, pkg, e)}"
            for name, pkg, key in _spec_items(work)
            if (e := work.state.get(key)) is not None and e.state is StageState.ERRORING
        ]
        return Status.ERRORING, _truncate("; ".join(errs), 500)
    active = bool(work.live_keys) or work.started_new or _entries_in_flight(work)
    if work.blocked and not active:
        return Status.BLOCKED, _truncate("; ".join(work.notes), 500)
    if active or _node_started(work):
        note = "; ".join(work.notes) if work.notes else f"working on {', '.join(pending)}"
        return Status.IN_PROGRESS, _truncate(note, 500)
    if work.blocked:
        return Status.BLOCKED, _truncate("; ".join(work.notes), 500)
    if work.check_pending:
        return Status.WAITING, _truncate("; ".join(work.notes) or "waiting for check mode", 500)
    if work.pending_new and not inp.allowed_to_start:
        if inp.unpickable:
            return Status.BLOCKED, _truncate(inp.unpickable, 500)
        return Status.WAITING, "waiting for the rollout to reach this node"
    return Status.WAITING, f"waiting: {', '.join(pending)}"


# ---- check mode: preflight and drift (``lifecycle.preflight``) -------------------------------

PREFLIGHT_STAGE = preflight.PREFLIGHT_STAGE
DRIFT_STAGE = "drift"
CHECK_STAGES = frozenset({PREFLIGHT_STAGE, DRIFT_STAGE})
# ``PackageState.preflight`` of a cycle that remediates what a drift check found.
DRIFTED = "drifted"
_CHECKED_KINDS = frozenset({"install", "config", "reapply"})


def _drift_record(work: _Work, name: str) -> PreflightRecord | None:
    record = work.preflight.get(name)
    return record if record is not None and record.drift else None


def _preflighted(work: _Work, pkg: Package, key: str, kind: str) -> bool:
    """The cycle about to open is decided by check mode: the package asks for a preflight, or
    it remediates what a drift check found. A rerun (``nwb rerun``) runs the role regardless."""
    entry = work.state.get(key)
    if kind not in _CHECKED_KINDS or (entry is not None and entry.rerun):
        return False
    if pkg.preflight:
        return True
    name = key.partition("|")[0]
    return kind == "reapply" and _drift_record(work, name) is not None


def _had(work: _Work, name: str) -> str:
    """What the node records of ``name`` (every version): part of a check's basis."""
    rows = sorted(
        (k, e.stage.value, e.state.value, e.config_hash, e.content)
        for k, e in work.state.items()
        if k.partition("|")[0] == name
    )
    return _stable_json(rows) if rows else "-"


def _check_basis(work: _Work, name: str, pkg: Package, kind: str) -> str:
    return preflight.basis(_fingerprint(work, name, pkg), kind, _had(work, name))


def _check_chain(work: _Work, name: str, pkg: Package, kind: str) -> tuple[str, ...]:
    """The stages a check of this cycle runs (no ``-check`` stages: they verify a change made)."""
    if kind == "config":
        stage = Stage.CONFIG
    elif kind == "install":
        stage, _ = _previous_version(work, name, pkg.version)
    else:
        stage = Stage.APPLY
    return tuple(s.value for s in _CHAINS[stage])


def _may_check(work: _Work) -> bool:
    """A check pod may start: granted a check slot, or the node works for the rollout anyway."""
    inp = work.inp
    if inp.paused or work.interrupting or not inp.node.ready:
        return False
    return inp.may_check or inp.allowed_to_start or _node_started(work)


def _checked(work: _Work, name: str, pkg: Package, kind: str) -> PreflightRecord | None:
    """The check's outcome for the cycle about to open, or None while it is not known (a check
    pod is started when the node may, else the node asks for a check slot)."""
    basis = _check_basis(work, name, pkg, kind)
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
    work: _Work, name: str, pkg: Package, stages: tuple[str, ...], basis: str
) -> None:
    inp = work.inp
    _, previous = _previous_version(work, name, pkg.version)
    deadline = inp.now + _stage_timeout(pkg)
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
            config_hash=_hash(work, name, pkg),
            deadline=deadline,
            previous_version=previous,
        )
    )
    work.checking.add(name)
    work.notes.append(f"{name}: checking in check mode whether the node would change")
    _wake(work, deadline)


def _observe_check_pod(work: _Work, pod: PodObservation) -> None:
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
        timeout = _stage_timeout(pkg)
        pull_at = _pull_deadline(work, pod, created)
        if pull_at is not None and inp.now >= pull_at:
            why = f"the check pod could not pull its image ({pod.waiting_reason})"
        elif inp.now >= created + timeout:
            why = f"the check pod did not finish within {_fmt_duration(timeout)}"
        else:
            work.checking.add(pod.package)
            _wake(work, min(created + timeout, pull_at or created + timeout))
            return
        verdict = preflight.judge(None, pod_failure=why)
        reason = "check deadline"
    else:
        failed = pod.phase is PodPhase.FAILED and (pod.result is None or pod.result.unparseable)
        why = _pod_failure_text(pod) if failed else ""
        verdict = preflight.judge(pod.result, pod_failure=why)
        reason = "checked"
    work.preflight[pod.package] = verdict.model_copy(
        update={"basis": pod.resource_id, "at": rfc3339(inp.now), "drift": drift}
    )
    work.actions.append(DeletePod(name=pod.name, node=inp.node.name, reason=reason))


def _checked_fields(record: PreflightRecord) -> dict[str, object]:
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


def _record_compliant(
    work: _Work, name: str, pkg: Package, key: str, record: PreflightRecord
) -> None:
    """Check mode found nothing to change: the cycle is complete without a pod, a cordon, a
    drain or an interrupt, and takes no batch slot."""
    inp = work.inp
    hash_ = _hash(work, name, pkg)
    entry = work.state.get(key) or PackageState(stage=Stage.CONFIG, state=StageState.COMPLETE)
    work.put(
        key,
        entry,
        stage=Stage.CONFIG,
        state=StageState.COMPLETE,
        attempts=0,
        retry_at="",
        message="",
        started=rfc3339(inp.now),
        resource_id=resource_id(inp.cr, name, pkg.version, hash_),
        boot_id=None,
        interrupt="",
        declared=record.declared or entry.declared,
        requested=None,
        merged_with=[],
        interrupt_by="",
        cause="",
        reattempt_at="",
        reattempts=0,
        rerun=False,
        config_hash=hash_,
        config_keys=_digests(work, name, pkg),
        changed_keys=[],
        content=content_id(pkg),
        spec=_fingerprint(work, name, pkg),
        pending_handlers=[],
        preflight=Outcome.COMPLIANT.value,
        preflight_tasks=[],
    )
    _drop_older_versions(work, name, pkg.version)
    work.preflight.pop(name, None)
    work.compliant.append(f"{name} {pkg.version}")


def _drift_interval(work: _Work) -> timedelta | None:
    detection = work.inp.cr.spec.drift_detection
    if detection is None:
        return None
    return _duration(detection.interval, timedelta(hours=1))


def _remediating(work: _Work, name: str, pkg: Package, entry: PackageState) -> bool:
    """A drift check found this complete entry's node changed and the CR remediates drift."""
    detection = work.inp.cr.spec.drift_detection
    if detection is None or not detection.remediate:
        return False
    record = _drift_record(work, name)
    if record is None or record.outcome is not Outcome.CHANGES:
        return False
    return entry.state is StageState.COMPLETE and record.basis == _check_basis(
        work, name, pkg, "reapply"
    )


def _drive_drift(work: _Work) -> None:
    """Drift detection: where the CR is complete on the node, check each package in check mode
    every interval after its last check (jittered), paced by the check slots."""
    interval = _drift_interval(work)
    inp = work.inp
    if interval is None or inp.paused:
        return
    items = _spec_items(work)
    if any(not _converged(work, name, pkg) for name, pkg, _ in items):
        return
    for name, pkg, key in items:
        entry = work.state.get(key)
        if entry is None or _uninstall_requested(pkg) or name in work.checking:
            continue
        basis = _check_basis(work, name, pkg, "reapply")
        record = _drift_record(work, name)
        last = parse_time(record.at) if record is not None and record.basis == basis else None
        last = last or parse_time(entry.updated) or inp.now
        due = preflight.drift_due(last, interval, inp.node.name, name)
        if inp.now < due:
            _wake(work, due)
            continue
        if not _may_check(work):
            work.check_wanted = True
            continue
        stages = (DRIFT_STAGE, *_check_chain(work, name, pkg, "reapply"))
        _create_check_pod(work, name, pkg, stages, basis)


def _drifted(work: _Work) -> bool:
    """The node shows drift for this CR: a drift check found changes on a complete entry, or a
    remediation of one is still open."""
    for name, pkg, key in _spec_items(work):
        entry = work.state.get(key)
        record = _drift_record(work, name)
        if entry is None:
            continue
        if entry.preflight == DRIFTED and not _is_terminal(pkg, entry):
            return True
        if (
            record is not None
            and record.outcome is Outcome.CHANGES
            and entry.state is StageState.COMPLETE
            and record.basis == _check_basis(work, name, pkg, "reapply")
        ):
            return True
    return False


def _preflight_writes(work: _Work) -> list[Action]:
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
    if drifted != inp.drift_labelled:
        out.append(SetLabels(node=node, labels={drift_label(cr): "true" if drifted else None}))
    if work.compliant:
        what = ", ".join(work.compliant)
        out.append(
            EmitEvent(
                kind="Node",
                name=node,
                reason="PreflightCompliant",
                message=_truncate(
                    f"{cr}: check mode found nothing to change for {what}; recorded complete "
                    "without cordon, drain or interrupt",
                    1000,
                ),
            )
        )
    return out
