"""Check before cordon: each package spec is validated by a read-only pod before any node works.

Why: vars that violate the role's argument spec, an image that cannot be pulled or a package
whose role or task files are missing used to be found by the agent on a node that had already
been picked, cordoned and drained, and was then left erroring. One *validation pod* per package
spec finds them first, on one Ready node, without privileges or host mounts; until it passes,
the rollout picks no node (docs/role-semantics.md, "Check before cordon").

What is decided here (pure; the controller observes pods and executes):

- **Which specs need validation** (:func:`plan_validation`). A spec is identified by
  :func:`validation_key`: package name, version, image, digest and the config hash (vars,
  configMap, secretVars references and the data digest of those Secrets, tags). The last
  validation of every package is one small record in the CR status (``PackageValidation``), so
  a restarted controller does not validate again. A spec needs a pod when its key has no record
  and some targeted node has work left.
- **What a validation pod's outcome means.** The agent's ``ValidationResult`` (passed, or
  ``ArgumentSpecViolation`` / ``BrokenPackage`` with one problem per line); an image still not
  pulled after the pull deadline (the shorter of the controller's setting and the package's
  ``timeouts.stage``) is ``ImageNotFound``; a pod that ends without a result or outlives
  ``timeouts.stage`` is ``ValidationIncomplete``; a ``secretVars`` Secret or key that does not
  exist is ``SecretNotFound`` without any pod. Outside causes (``ImageNotFound``,
  ``ValidationIncomplete``) are tried again after a back-off (30 s doubling, at most 10 min);
  the others wait for a spec change, which is a new key.
- **Whether new work may start** (:attr:`ValidationPlan.gated`): while any package's current
  spec has not passed, no node gets permission to start new work (:func:`hold_views`). Work in
  flight goes on; a node already in progress that would start work of a gated package (a pod,
  a new cycle, an interrupt with it) is planned as if the CR were paused instead: it keeps what
  it holds, records what its pods report and waits (:func:`holds`, :func:`held_plan`).
- **What the conditions say**: ``failures`` and ``pending`` feed ``InvalidSpec`` in
  ``lifecycle.aggregation``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import Field, ValidationError

from lifecycle import durations, rollout, selectors
from lifecycle.actions import (
    Action,
    CreateInterruptPod,
    CreatePackagePod,
    DeletePod,
    EmitEvent,
    EventType,
    PatchNodeState,
    SetNodeStatus,
)
from lifecycle.nodestate import IGNORE_LABEL, package_key
from lifecycle.spec import PREFIX, NodeWright, Package
from lifecycle.stages import NodePlan, PodPhase, backoff, config_hash, parse_time, rfc3339
from lifecycle.status import PackageValidation, ValidationState
from lifecycle.wire import WireModel

# Validation pods carry this label (value: the package name) next to the CR label, and no
# package/version labels: the stage planner never mistakes them for package pods.
VALIDATION_LABEL = f"{PREFIX}validate"
RESULT_VERSION = 1
KEY_CHARS = 16
# Kubernetes keeps at most 4096 bytes of a termination message.
MAX_TERMINATION_BYTES = 4096
# One problem line; argument-spec messages are far shorter, a path in a deep image may not be.
PROBLEM_MAX = 300
# The record in status and the condition show this much of the problems.
MESSAGE_MAX = 1000
WAITING_DETAIL_MAX = 200
DEFAULT_PULL_DEADLINE = timedelta(minutes=2)
DEFAULT_STAGE_TIMEOUT = timedelta(minutes=30)
# Waiting reasons of a container whose image the node cannot get.
PULL_FAILURE_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
# ...of which these never recover without a spec change.
PULL_FAILURE_FINAL = frozenset({"InvalidImageName", "ErrImageNeverPull"})
NOT_READY_TOLERATION_KEY = "node.kubernetes.io/not-ready"


class Reason(StrEnum):
    """Why a package spec failed validation (the ``InvalidSpec`` reason)."""

    ARGUMENT_SPEC_VIOLATION = "ArgumentSpecViolation"
    BROKEN_PACKAGE = "BrokenPackage"
    IMAGE_NOT_FOUND = "ImageNotFound"
    SECRET_NOT_FOUND = "SecretNotFound"
    VALIDATION_INCOMPLETE = "ValidationIncomplete"


# Outside causes: tried again after a back-off even when the spec stays the same.
RETRIED = frozenset({Reason.IMAGE_NOT_FOUND, Reason.VALIDATION_INCOMPLETE})


# --------------------------------------------------------------------------------------------
# The validation pod's result (its termination message)
# --------------------------------------------------------------------------------------------


class ValidationResult(WireModel):
    """What ``nwb-agent validate`` writes to the termination log (versioned, at most 4 KiB).

    ``problems`` name the field and the rule, never a value (vars may come from Secrets).
    """

    v: int = Field(default=RESULT_VERSION, description="Result format version.")
    kind: str = Field(default="validation", description="Always 'validation'.")
    package: str = Field(default="", description="Package name (from the manifest).")
    version: str = Field(default="", description="Package version (from the manifest).")
    passed: bool = Field(default=False, description="Every check passed.")
    reason: str = Field(default="", description="ArgumentSpecViolation or BrokenPackage.")
    problems: list[str] = Field(default_factory=list, description="One line per problem.")
    problems_omitted: int = Field(default=0, ge=0, description="Problems dropped to fit.")
    unparseable: bool = Field(default=False, description="Set by the reader on garbage input.")
    raw: str = Field(default="", description="Excerpt of the text when unparseable.")

    def to_termination_message(self, max_bytes: int = MAX_TERMINATION_BYTES) -> str:
        """Compact JSON of at most ``max_bytes``: problems are cut, then the last ones dropped."""
        problems = [_clip(p, PROBLEM_MAX) for p in self.problems]
        omitted = self.problems_omitted
        while True:
            candidate = self.model_copy(
                update={
                    "problems": problems,
                    "problems_omitted": omitted,
                    "package": _clip(self.package, 100),
                    "version": _clip(self.version, 100),
                }
            )
            text = json.dumps(candidate.to_wire(), separators=(",", ":"), ensure_ascii=False)
            if len(text.encode()) <= max_bytes or not problems:
                return text
            problems = problems[:-1]
            omitted += 1


def parse_result(text: str) -> ValidationResult:
    """Read a validation pod's termination message back; never raises (garbage: unparseable)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError, TypeError):
        data = None
    if (
        isinstance(data, dict)
        and data.get("kind") == "validation"
        and isinstance(data.get("v"), int)
    ):
        try:
            return ValidationResult.model_validate(data)
        except ValidationError:
            pass
    return ValidationResult(unparseable=True, raw=_clip(text, WAITING_DETAIL_MAX))


# --------------------------------------------------------------------------------------------
# Inputs and output
# --------------------------------------------------------------------------------------------


def validation_key(package: Package, secret_data: str = "") -> str:
    """Identity of what a validation checks: a change of any part is a new spec to validate."""
    payload = {
        "version": package.version,
        "image": package.image,
        "digest": package.digest or "",
        "config": config_hash(package, secret_data),
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_CHARS]


def image_reference(package: Package) -> str:
    """``image@digest`` when pinned, else ``image:version`` (what a node pod runs)."""
    return (
        f"{package.image}@{package.digest}"
        if package.digest
        else f"{package.image}:{package.version}"
    )


@dataclass(frozen=True, slots=True)
class ValidationPod:
    """One validation pod of the CR, as the controller read it."""

    name: str
    package: str
    key: str
    attempt: int
    node: str
    phase: PodPhase
    started: datetime | None = None
    waiting_reason: str = ""
    waiting_message: str = ""
    result: ValidationResult | None = None
    ended: str = ""  # how the container ended when it left no result ("exit code 1 (Error)")
    deleting: bool = False

    @property
    def live(self) -> bool:
        return self.phase in (PodPhase.PENDING, PodPhase.RUNNING, PodPhase.UNKNOWN)


@dataclass(frozen=True, slots=True)
class CandidateNode:
    """A targeted node a validation pod could run on."""

    name: str
    ready: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[selectors.Taint, ...] = ()


@dataclass(frozen=True, slots=True)
class ValidationInput:
    cr: NodeWright
    now: datetime
    records: Mapping[str, PackageValidation]  # the CR status' validations
    pods: Sequence[ValidationPod] = ()
    nodes: Sequence[CandidateNode] = ()
    secret_data: Mapping[str, str] = field(default_factory=dict)  # package -> Secret data digest
    # package -> what its secretVars name that does not exist ("Secret s", "key k of Secret s")
    missing_secrets: Mapping[str, Sequence[str]] = field(default_factory=dict)
    pull_deadline: timedelta = DEFAULT_PULL_DEADLINE
    work_pending: bool = True  # some targeted node has work left for the CR
    may_start: bool = True  # False while the CR is disabled: pods in flight are still judged


@dataclass(frozen=True, slots=True)
class PodToStart:
    """A validation pod the controller creates (deterministic name, so a create is idempotent)."""

    package: str
    key: str
    node: str
    attempt: int
    started: datetime
    deadline: datetime


@dataclass(frozen=True, slots=True)
class SpecFailure:
    """A package spec that failed validation (``InvalidSpec``)."""

    package: str
    reason: str
    message: str
    retry_at: str = ""


@dataclass(frozen=True, slots=True)
class ValidationPlan:
    records: Mapping[str, PackageValidation]  # to keep in the CR status (spec packages only)
    gated: frozenset[str]  # packages whose current spec has not passed
    start: tuple[PodToStart, ...] = ()
    delete: tuple[str, ...] = ()  # validation pods to delete (after the status is written)
    failures: tuple[SpecFailure, ...] = ()
    pending: tuple[str, ...] = ()  # for people: what validation still waits for
    events: tuple[EmitEvent, ...] = ()
    requeue_at: datetime | None = None

    @property
    def open(self) -> bool:
        """New work may start: every package's current spec passed."""
        return not self.gated


def open_plan(records: Mapping[str, PackageValidation]) -> ValidationPlan:
    """No validation this pass (the CR is being deleted): the gate is open, records are kept."""
    return ValidationPlan(records=dict(records), gated=frozenset())


# --------------------------------------------------------------------------------------------
# The decision
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Work:
    inp: ValidationInput
    records: dict[str, PackageValidation] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    start: list[PodToStart] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    failures: list[SpecFailure] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    events: list[EmitEvent] = field(default_factory=list)
    wakeups: list[datetime] = field(default_factory=list)

    def drop(self, pod: ValidationPod) -> None:
        if not pod.deleting and pod.name not in self.delete:
            self.delete.append(pod.name)


def plan_validation(inp: ValidationInput) -> ValidationPlan:
    """Which validation pods to start or delete, what the records become, what is gated."""
    work = _Work(inp=inp)
    packages = inp.cr.spec.packages
    by_package: dict[str, list[ValidationPod]] = {}
    for pod in sorted(inp.pods, key=lambda p: p.name):
        if pod.package in packages:
            by_package.setdefault(pod.package, []).append(pod)
        else:
            work.drop(pod)  # its package left the spec
    for name, pkg in sorted(packages.items()):
        _plan_package(work, name, pkg, by_package.get(name, []))
    return ValidationPlan(
        records=work.records,
        gated=frozenset(work.gated),
        start=tuple(work.start),
        delete=tuple(work.delete),
        failures=tuple(work.failures),
        pending=tuple(work.pending),
        events=tuple(work.events),
        requeue_at=min(work.wakeups) if work.wakeups else None,
    )


@dataclass(frozen=True, slots=True)
class _Spec:
    """One package of the CR and the identity of its current spec."""

    name: str
    pkg: Package
    key: str

    @property
    def ref(self) -> str:
        return image_reference(self.pkg)


def _plan_package(work: _Work, name: str, pkg: Package, pods: list[ValidationPod]) -> None:
    inp = work.inp
    key = validation_key(pkg, inp.secret_data.get(name, ""))
    spec = _Spec(name, pkg, key)
    record = inp.records.get(name)
    decided = record if record is not None and record.key == key else None
    for stale in pods:
        if stale.key != key:
            work.drop(stale)  # validates a spec that is no longer wanted
    current = [p for p in pods if p.key == key and not p.deleting]
    if decided is not None and decided.state is ValidationState.PASSED:
        work.records[name] = decided
        for done in current:
            work.drop(done)
        return
    work.gated.add(name)
    if record is not None:
        work.records[name] = record  # an older spec's record stays until this one is decided
    if decided is not None and not decided.retry_at:
        _failed(work, name, decided)
        for done in current:
            work.drop(done)
        return
    attempt = decided.attempts + 1 if decided is not None else 1
    if decided is not None:
        retry_at = parse_time(decided.retry_at)
        if retry_at is not None and inp.now < retry_at:
            _failed(work, name, decided)
            work.wakeups.append(retry_at)
            for done in current:
                work.drop(done)
            return
    pod = max((p for p in current if p.attempt == attempt), key=lambda p: p.name, default=None)
    for other in current:
        if other is not pod:
            work.drop(other)
    if pod is None:
        _start(work, spec, attempt, decided)
        return
    _judge(work, spec, pod, decided)


def _start(work: _Work, spec: _Spec, attempt: int, decided: PackageValidation | None) -> None:
    inp = work.inp
    name, pkg, key = spec.name, spec.pkg, spec.key
    if decided is not None:
        _failed(work, name, decided)  # still failed until the new attempt says otherwise
    if not inp.work_pending:
        return  # nothing to roll out: nothing to validate yet
    missing = inp.missing_secrets.get(name)
    if missing:
        paths = [f"spec.packages.{name}.secretVars: {what} not found" for what in missing]
        _decide(work, spec, attempt, Reason.SECRET_NOT_FOUND, paths)
        return
    if not inp.may_start:
        work.pending.append(f"{name} {pkg.version}: not validated (the CR is disabled)")
        return
    node = pick_node(inp.cr, inp.nodes)
    if node is None:
        work.pending.append(f"{name} {pkg.version}: waits for a Ready node to validate on")
        return
    deadline = inp.now + stage_timeout(pkg)
    work.start.append(PodToStart(name, key, node, attempt, inp.now, deadline))
    work.pending.append(f"{name} {pkg.version}: validating on node {node}")
    work.wakeups.append(min(deadline, inp.now + pull_deadline(inp, pkg)))


def _judge(work: _Work, spec: _Spec, pod: ValidationPod, decided: PackageValidation | None) -> None:
    """A validation pod of the current spec: passed, failed, or still running."""
    inp = work.inp
    name, pkg = spec.name, spec.pkg
    started = pod.started or inp.now
    timeout = stage_timeout(pkg)
    pulling = min(timeout, pull_deadline(inp, pkg))
    ref = spec.ref
    if not pod.live:
        result = pod.result
        if result is not None and not result.unparseable and result.passed:
            _decide(work, spec, pod.attempt, None, [])
        elif result is not None and not result.unparseable:
            reason = _reason(result.reason)
            problems = [_path(name, ref, p) for p in result.problems]
            if result.problems_omitted:
                problems.append(f"and {result.problems_omitted} more problem(s)")
            _decide(work, spec, pod.attempt, reason, problems or [result.reason])
        else:
            how = pod.ended or "without a result"
            if result is not None and result.raw:
                how = f"{how}: {result.raw}"
            problem = (
                f"spec.packages.{name}: validation pod {pod.name} ended without a result ({how})"
            )
            _decide(work, spec, pod.attempt, Reason.VALIDATION_INCOMPLETE, [problem])
        work.drop(pod)
        return
    waiting = pod.waiting_reason
    detail = (
        f"{waiting}: {_clip(pod.waiting_message, WAITING_DETAIL_MAX)}"
        if pod.waiting_message
        else waiting
    )
    if waiting in PULL_FAILURE_FINAL or (
        waiting in PULL_FAILURE_REASONS and inp.now >= started + pulling
    ):
        problem = (
            f"spec.packages.{name}.image: {ref} cannot be pulled on node {pod.node} ({detail})"
        )
        retried = waiting not in PULL_FAILURE_FINAL
        _decide(work, spec, pod.attempt, Reason.IMAGE_NOT_FOUND, [problem], retried=retried)
        work.drop(pod)
        return
    if inp.now >= started + timeout:
        why = f" ({detail})" if detail else ""
        problem = (
            f"spec.packages.{name}: validation pod {pod.name} did not finish within "
            f"{_fmt(timeout)}{why}"
        )
        _decide(work, spec, pod.attempt, Reason.VALIDATION_INCOMPLETE, [problem])
        work.drop(pod)
        return
    if decided is not None:
        _failed(work, name, decided)
    work.pending.append(f"{name} {pkg.version}: validating on node {pod.node}")
    work.wakeups.append(started + timeout)
    if pod.phase is PodPhase.PENDING and inp.now < started + pulling:
        work.wakeups.append(started + pulling)


def _decide(
    work: _Work,
    spec: _Spec,
    attempt: int,
    reason: Reason | None,
    problems: Sequence[str],
    *,
    retried: bool | None = None,
) -> None:
    """Record the outcome of this spec's validation (``reason`` None: it passed)."""
    inp = work.inp
    name, pkg, key, ref = spec.name, spec.pkg, spec.key, spec.ref
    if reason is None:
        record = PackageValidation(
            key=key,
            version=pkg.version,
            image=ref,
            state=ValidationState.PASSED,
            time=rfc3339(inp.now),
            attempts=attempt,
        )
        work.records[name] = record
        work.gated.discard(name)
        work.events.append(
            _event(inp.cr, "SpecValidated", f"package {name} {pkg.version} ({ref}) validated")
        )
        return
    retry = reason in RETRIED if retried is None else retried
    retry_at = rfc3339(inp.now + backoff(attempt)) if retry else ""
    record = PackageValidation(
        key=key,
        version=pkg.version,
        image=ref,
        state=ValidationState.FAILED,
        reason=reason.value,
        message=_clip("; ".join(problems), MESSAGE_MAX),
        time=rfc3339(inp.now),
        attempts=attempt,
        retry_at=retry_at,
    )
    work.records[name] = record
    work.gated.add(name)
    _failed(work, name, record)
    if retry_at:
        moment = parse_time(retry_at)
        if moment is not None:
            work.wakeups.append(moment)
    tail = (
        f" (validated again at {retry_at})" if retry_at else " (fix the spec; no node was touched)"
    )
    work.events.append(
        _event(inp.cr, reason.value, _clip(f"{record.message}{tail}", 1000), warning=True)
    )


def _failed(work: _Work, name: str, record: PackageValidation) -> None:
    if all(f.package != name for f in work.failures):
        work.failures.append(SpecFailure(name, record.reason, record.message, record.retry_at))


def _reason(text: str) -> Reason:
    try:
        return Reason(text)
    except ValueError:
        return Reason.BROKEN_PACKAGE


def _path(name: str, ref: str, problem: str) -> str:
    """The agent names vars from their root (``vars.x``); the CR user wants the CR's path."""
    if problem.startswith("vars"):
        return f"spec.packages.{name}.{problem}"
    return f"spec.packages.{name}.image: {ref}: {problem}"


def _event(cr: NodeWright, reason: str, message: str, *, warning: bool = False) -> EmitEvent:
    return EmitEvent(
        kind="NodeWright",
        name=cr.metadata.name,
        reason=reason,
        message=message,
        type=EventType.WARNING if warning else EventType.NORMAL,
    )


def stage_timeout(pkg: Package) -> timedelta:
    """The whole validation pod's deadline: the package's ``timeouts.stage``."""
    try:
        return durations.parse_duration(pkg.timeouts.stage)
    except ValueError:
        return DEFAULT_STAGE_TIMEOUT


def pull_deadline(inp: ValidationInput, pkg: Package) -> timedelta:
    return min(inp.pull_deadline, stage_timeout(pkg))


def pick_node(cr: NodeWright, nodes: Sequence[CandidateNode]) -> str | None:
    """The node a validation pod runs on: Ready, not ignored, every taint tolerated as for the
    CR's node pods; the first by name, so every pass (and a restarted controller) picks alike."""
    tolerations = rollout.tolerations_for(cr)
    for node in sorted(nodes, key=lambda n: n.name):
        if not node.ready or node.labels.get(IGNORE_LABEL) == "true":
            continue
        bad = selectors.untolerated_taints(node.taints, tolerations)
        if any(t.key != NOT_READY_TOLERATION_KEY for t in bad):
            continue
        return node.name
    return None


# --------------------------------------------------------------------------------------------
# The gate
# --------------------------------------------------------------------------------------------


def hold_views(views: Sequence[rollout.NodeView]) -> list[rollout.NodeView]:
    """The rollout planner's views while the gate is closed: no node may be given new work.

    Every node is shown as not ready for the CR (as sequencing does): batches are evaluated as
    usual, but no batch is picked and no member is allowed to start; nodes in progress carry
    on by the stage planner's own rule.
    """
    return [replace(v, ready=False) if v.ready else v for v in views]


def gated_keys(cr: NodeWright, gated: frozenset[str]) -> frozenset[str]:
    """Node-state keys (``name|version``) of the gated packages' current versions."""
    packages = cr.spec.packages
    return frozenset(package_key(n, packages[n].version) for n in gated if n in packages)


def holds(cr: NodeWright, gated: frozenset[str], planned: NodePlan, paused: NodePlan) -> bool:
    """The node's plan would start work of a gated package (compared with the same node planned
    as paused, which only records what its pods report): a pod of that package, an interrupt
    including it, or a cycle of it opened or moved on."""
    if not gated:
        return False
    for action in planned.actions:
        if isinstance(action, CreatePackagePod) and action.package in gated:
            return True
        if isinstance(action, CreateInterruptPod) and (
            action.package in gated or set(action.members) & gated
        ):
            return True
    keys = gated_keys(cr, gated)
    return any(planned.state.get(k) != paused.state.get(k) for k in keys)


def may_hold(planned: NodePlan) -> bool:
    """Cheap pre-check: only a plan that writes state or starts something can start work."""
    return any(not isinstance(a, (EmitEvent, SetNodeStatus, DeletePod)) for a in planned.actions)


def held_plan(planned: NodePlan, paused: NodePlan, gated: frozenset[str]) -> NodePlan:
    """The plan of a node that waits for validation: ``paused``'s actions and state, with the
    status the node really has (it is still in progress) and a reason naming the packages."""
    names = ", ".join(sorted(gated))
    status_actions: list[Action] = [a for a in planned.actions if isinstance(a, SetNodeStatus)]
    head: list[Action] = [a for a in paused.actions if isinstance(a, PatchNodeState)]
    rest: list[Action] = [
        a for a in paused.actions if not isinstance(a, (PatchNodeState, SetNodeStatus))
    ]
    return replace(
        paused,
        status=planned.status,
        reason=f"waits for the validation of {names} before new work",
        actions=(*head, *status_actions, *rest),
    )


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fmt(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"
