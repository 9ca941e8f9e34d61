"""The agent's result: what one package pod tells the controller when it ends.

Why a model of its own: the only channel from a node back to the controller is the pod's
termination message (Kubernetes keeps at most 4096 bytes of it), and the controller and the stage
planner make decisions from it (which stage failed, which task and why, whether the role asked for a
reboot). So the shape is versioned (``"v": 1``), small, and both ends share this one definition.

Guarantees:
- ``AgentResult.to_termination_message`` always returns valid JSON of at most ``max_bytes`` UTF-8
  bytes. When the full result does not fit it first shortens the output tail (the last lines of
  the run's log, for people), then drops it, then shortens the failure message, then drops the
  details of stages that did not fail, then all stage details, and marks ``truncated``. The facts
  the controller decides on (failed or not, failing stage, what the role asked for: the package's
  declared interrupt, rebootRequested, deferred service restarts, pending handlers; a check
  run's counts of changed and unsupported tasks) survive every step; only their human-readable
  reasons may be dropped.
- ``parse_termination_message`` never raises: garbage (empty, not JSON, wrong shape, a pod killed
  before writing) comes back as a result with ``unparseable`` set and a short excerpt of the text.
"""

from __future__ import annotations

import json
from enum import StrEnum

from pydantic import Field, ValidationError

from lifecycle.spec import Interrupt
from lifecycle.wire import WireModel

RESULT_VERSION = 1
# Kubernetes truncates a container's termination message to 4096 bytes; anything we write beyond
# that would be cut mid-JSON by the kubelet, so we cut it ourselves, safely.
MAX_TERMINATION_BYTES = 4096
# Below this the smallest possible result (version, flags, failing stage) cannot be promised.
MIN_TERMINATION_BYTES = 256
# Keeps one very long task or action name from crowding out the message that explains the failure.
MAX_NAME_CHARS = 200
# Enough of an unparseable message to recognise what produced it, short enough for a condition.
RAW_EXCERPT_CHARS = 200
# Handler names and reasons are for people and the node state; beyond these they are cut (unit
# names, which decide the interrupt, never are: too many of them escalate to a reboot instead).
MAX_REQUEST_ITEMS = 16
MAX_REQUEST_NAME_CHARS = 100
ELLIPSIS = "…"
# The output tail is for people: when the result is too big it shrinks to these few, shorter
# lines, then goes (before anything the controller decides on).
SHORT_OUTPUT_LINES = 8
MAX_OUTPUT_LINE_CHARS = 160


class StageStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"


class StageResult(WireModel):
    name: str = Field(description="Stage name: apply, apply-check, config, interrupt, ...")
    status: StageStatus = Field(description="ok, failed or skipped (not run after a failure).")
    ok: int = Field(default=0, ge=0, description="Tasks that were ok (incl. changed).")
    changed: int = Field(default=0, ge=0, description="Tasks that changed something.")
    failed: int = Field(default=0, ge=0, description="Tasks that failed.")
    skipped: int = Field(default=0, ge=0, description="Tasks skipped by a condition.")
    unreachable: int = Field(default=0, ge=0, description="Host unreachable (connection) events.")
    duration_seconds: float = Field(default=0.0, ge=0, description="Wall time of the stage.")


class Failure(WireModel):
    stage: str = Field(description="Stage that failed.")
    task: str = Field(default="", description="Name of the failing task.")
    action: str = Field(default="", description="Module/action of the failing task.")
    message: str = Field(default="", description="Why it failed (module msg, assert msg).")


# A check run (``nwb-agent run --check``) names the tasks that would change and the ones check mode
# cannot answer for; a few names are enough for people, the counts carry the decision.
MAX_CHECK_TASKS = 8


class CheckReport(WireModel):
    """What a check-mode run (``--check --diff``) found: would the node change, and where.

    The controller decides the preflight outcome from it (``lifecycle.preflight``): nothing
    changed and nothing unsupported is ``compliant``; any unsupported task is ``unknown``; else
    ``changes``, with the interrupt the handlers that would fire ask for (``reboot_requested``
    and ``restart_services`` of the same result).
    """

    changed: int = Field(default=0, ge=0, description="Tasks (and handlers) that would change.")
    tasks: list[str] = Field(
        default_factory=list,
        description="Names of the tasks that would change, in run order (at most 8).",
    )
    unsupported: int = Field(
        default=0, ge=0, description="Tasks check mode could not answer for (skipped or errored)."
    )
    unsupported_tasks: list[str] = Field(
        default_factory=list,
        description="'<task>: <why>' for the first of those (at most 8), e.g. a shell task "
        "without check-mode support.",
    )


class AgentResult(WireModel):
    v: int = Field(default=RESULT_VERSION, description="Result format version.")
    package: str = Field(default="", description="Package name.")
    version: str = Field(default="", description="Package version.")
    stages: list[StageResult] = Field(default_factory=list, description="Stages in run order.")
    failure: Failure | None = Field(default=None, description="First failure, null on success.")
    reboot_requested: bool = Field(
        default=False,
        description="The run asked for a reboot (handler, reboot task, reboot-required file); "
        "not performed: the controller drains first.",
    )
    restart_services: list[str] = Field(
        default_factory=list,
        description="Units whose restart handlers were deferred to the controller's interrupt.",
    )
    pending_handlers: list[str] = Field(
        default_factory=list,
        description="Handlers notified but not run (the run failed first); the next run runs them.",
    )
    declared_interrupt: Interrupt | None = Field(
        default=None, description="The package manifest's interrupt (used when the CR sets none)."
    )
    request_reasons: list[str] = Field(
        default_factory=list, description="Why a reboot or restart was asked for (for people)."
    )
    check: CheckReport | None = Field(
        default=None,
        description="Set by a check-mode run (``--check``): what would change; such a run "
        "changes nothing on the host.",
    )
    output: list[str] = Field(
        default_factory=list,
        description="Last lines of the run's human log (secrets redacted), for ``nwb logs`` after "
        "the pod is gone; dropped first when the result does not fit.",
    )
    truncated: bool = Field(default=False, description="Details were dropped to fit 4 KiB.")
    stages_omitted: int = Field(default=0, ge=0, description="Stage entries dropped to fit.")
    unparseable: bool = Field(default=False, description="Set by the reader on garbage input.")
    raw: str = Field(default="", description="Excerpt of the text when unparseable.")

    @property
    def succeeded(self) -> bool:
        """True when the run ended well: parsed, no failure, no failed stage."""
        if self.unparseable or self.failure is not None:
            return False
        return all(stage.status is not StageStatus.FAILED for stage in self.stages)

    def to_termination_message(self, max_bytes: int = MAX_TERMINATION_BYTES) -> str:
        """Compact JSON of at most ``max_bytes`` UTF-8 bytes (see the module docstring)."""
        if max_bytes < MIN_TERMINATION_BYTES:
            raise ValueError(f"max_bytes must be at least {MIN_TERMINATION_BYTES}")
        text = _dump(self)
        if _size(text) <= max_bytes:
            return text
        for candidate in self._shrinking():
            text = _dump(candidate)
            if _size(text) <= max_bytes:
                return text
            if candidate.failure is not None and candidate.failure.message:
                fitted = _fit_message(candidate, max_bytes)
                if fitted is not None:
                    return fitted
        for limit in (40, 8, 0):
            text = _dump(self._minimal(limit))
            if _size(text) <= max_bytes:
                return text
        # Unit lists too long to carry: a reboot covers every restart, so nothing asked for is
        # lost, only the finer choice (real roles restart a handful of units; this is a backstop).
        minimal = self._minimal(0)
        asked = minimal.reboot_requested or bool(minimal.restart_services)
        declared = minimal.declared_interrupt
        if declared is not None and declared.services:
            asked = True
            declared = None
        escalated = minimal.model_copy(
            update={
                "reboot_requested": asked,
                "restart_services": [],
                "pending_handlers": [],
                "declared_interrupt": declared,
            }
        )
        text = _dump(escalated)
        if _size(text) <= max_bytes:
            return text
        raise AssertionError("unreachable: the escalated minimal result is ~300 bytes")

    def _shrinking(self) -> list[AgentResult]:
        """Ever smaller variants, in the order we are willing to lose information."""
        failure = self.failure
        if failure is not None:
            failure = failure.model_copy(
                update={
                    "stage": _cut(failure.stage, MAX_NAME_CHARS),
                    "task": _cut(failure.task, MAX_NAME_CHARS),
                    "action": _cut(failure.action, MAX_NAME_CHARS),
                }
            )
        base = self.model_copy(
            update={
                "failure": failure,
                "truncated": True,
                "package": _cut(self.package, MAX_NAME_CHARS),
                "version": _cut(self.version, MAX_NAME_CHARS),
                "raw": _cut(self.raw, RAW_EXCERPT_CHARS),
                "pending_handlers": _cut_names(self.pending_handlers),
                "request_reasons": _cut_names(self.request_reasons),
                "check": _cut_check(self.check, MAX_REQUEST_NAME_CHARS),
                "stages": [
                    s.model_copy(update={"name": _cut(s.name, MAX_NAME_CHARS)}) for s in self.stages
                ],
            }
        )
        failed_only = [s for s in base.stages if s.status is StageStatus.FAILED][:1]
        short = [_cut(line, MAX_OUTPUT_LINE_CHARS) for line in base.output[-SHORT_OUTPUT_LINES:]]
        base_short = base.model_copy(update={"output": short})
        base = base.model_copy(update={"output": []})
        return [
            base_short,
            base,
            base.model_copy(
                update={
                    "stages": failed_only,
                    "stages_omitted": self.stages_omitted + len(base.stages) - len(failed_only),
                }
            ),
            base.model_copy(
                update={"stages": [], "stages_omitted": self.stages_omitted + len(base.stages)}
            ),
            base.model_copy(
                update={
                    "stages": [],
                    "stages_omitted": self.stages_omitted + len(base.stages),
                    "request_reasons": [],
                }
            ),
        ]

    def _minimal(self, limit: int) -> AgentResult:
        """Only the decision-relevant facts, every string cut to ``limit`` characters."""
        failure = None
        if self.failure is not None:
            failure = Failure(
                stage=_cut(self.failure.stage, limit),
                task=_cut(self.failure.task, limit),
                action=_cut(self.failure.action, limit),
            )
        return AgentResult(
            package=_cut(self.package, limit),
            version=_cut(self.version, limit),
            failure=failure,
            reboot_requested=self.reboot_requested,
            restart_services=self.restart_services,
            pending_handlers=[_cut(n, limit) for n in self.pending_handlers[:MAX_REQUEST_ITEMS]],
            declared_interrupt=self.declared_interrupt,
            check=_cut_check(self.check, 0),
            truncated=True,
            stages_omitted=self.stages_omitted + len(self.stages),
            unparseable=self.unparseable,
        )


def parse_termination_message(text: str) -> AgentResult:
    """Read a termination message back; never raises (garbage -> ``unparseable``)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError, TypeError):
        return _unparseable(text)
    if not isinstance(data, dict) or not isinstance(data.get("v"), int) or data["v"] < 1:
        return _unparseable(text)
    try:
        return AgentResult.model_validate(data)
    except (ValidationError, RecursionError):
        return _unparseable(text)


def _unparseable(text: object) -> AgentResult:
    excerpt = text if isinstance(text, str) else repr(text)
    return AgentResult(unparseable=True, raw=_cut(excerpt, RAW_EXCERPT_CHARS))


def _dump(result: AgentResult) -> str:
    wire = result.to_wire()
    if not wire.get("output"):
        wire.pop("output", None)  # optional: the minimal result must fit in 256 bytes
    return json.dumps(wire, separators=(",", ":"), ensure_ascii=False)


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 1] + ELLIPSIS if limit > 0 else ""


def _cut_names(names: list[str]) -> list[str]:
    return [_cut(name, MAX_REQUEST_NAME_CHARS) for name in names[:MAX_REQUEST_ITEMS]]


def _cut_check(check: CheckReport | None, limit: int) -> CheckReport | None:
    """The check report with its names cut to ``limit`` (0: no names); the counts stay."""
    if check is None:
        return None
    if limit <= 0:
        return check.model_copy(update={"tasks": [], "unsupported_tasks": []})
    return check.model_copy(
        update={
            "tasks": [_cut(t, limit) for t in check.tasks[:MAX_CHECK_TASKS]],
            "unsupported_tasks": [
                _cut(t, limit) for t in check.unsupported_tasks[:MAX_CHECK_TASKS]
            ],
        }
    )


def _fit_message(result: AgentResult, max_bytes: int) -> str | None:
    """Longest prefix of the failure message that fits (binary search), or None."""
    assert result.failure is not None
    message = result.failure.message

    def dumped(keep: int) -> str:
        cut = message if keep >= len(message) else message[:keep] + ELLIPSIS
        failure = result.failure.model_copy(update={"message": cut}) if result.failure else None
        return _dump(result.model_copy(update={"failure": failure}))

    if _size(dumped(0)) > max_bytes:
        return None
    low, high = 0, len(message)
    while low < high:
        middle = (low + high + 1) // 2
        if _size(dumped(middle)) <= max_bytes:
            low = middle
        else:
            high = middle - 1
    return dumped(low)
