"""Check-mode preflight and drift: would this node change at all, and which disruption follows?

Why: a GPU node drained for nothing stops a training job for nothing. Ansible can answer the
question before any disruption: the due stages run with ``--check --diff`` in a node pod that
needs no cordon (``nwb-agent run --check``), and the handlers that would fire say whether a
reboot or a restart is needed. This module turns such a run into one of three outcomes and keeps
the record of it on the Node (annotation ``bridge.nodewright.io/preflight-<cr>``, one record per
package), so a restarted controller never checks twice:

- ``compliant``: nothing would change. The cycle is recorded complete without a pod; the node is
  never cordoned and takes no batch slot.
- ``changes``: the cycle runs through the batches as usual; its interrupt is what the handlers
  that would fire ask for (a CR that sets ``interrupt`` still owns it), so a change that only
  rewrites a sysctl file does not reboot.
- ``unknown``: check mode cannot tell (a task it cannot check, an error in check mode, a pod that
  failed or timed out): the declared path, with the reason recorded. The safe default.

A record answers for one cycle only: its ``basis`` is a digest of the package spec and of what
the node had when the check ran, so any change of either makes it stale and the node is checked
again. Drift checks (``spec.driftDetection``) write the same records for complete entries, with
``drift`` set, every interval after the last check, jittered per node and package.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import Field, ValidationError

from lifecycle import interrupts
from lifecycle.nodestate import PackageState
from lifecycle.results import AgentResult
from lifecycle.spec import Interrupt
from lifecycle.wire import WireModel

# Node state and the records name this many tasks; the counts carry the decision.
MAX_TASKS = 5
REASON_MAX = 200
BASIS_CHARS = 12
# The first stage of a preflight pod (then the stages it checks): tells it from a package pod.
PREFLIGHT_STAGE = "preflight"
# Drift checks of a fleet spread over this share of the interval, so they never all start at once.
JITTER_SHARE = 0.1
DEFAULT_CONCURRENCY = 10


class Outcome(StrEnum):
    COMPLIANT = "compliant"
    CHANGES = "changes"
    UNKNOWN = "unknown"


class PreflightRecord(WireModel):
    """One package's last check-mode outcome on one node (see the module docstring)."""

    basis: str = Field(description="Digest of the spec and node state the check was made for.")
    outcome: Outcome = Field(description="compliant, changes or unknown.")
    tasks: list[str] = Field(
        default_factory=list,
        description="Tasks that would change (changes), or why check mode cannot tell (unknown).",
    )
    interrupt: Interrupt | None = Field(
        default=None, description="What the handlers that would fire ask for (changes)."
    )
    declared: Interrupt | None = Field(
        default=None, description="The package's declared interrupt, as the check pod reported."
    )
    at: str = Field(default="", description="RFC 3339 of the check.")
    drift: bool = Field(default=False, description="A drift check of a complete entry.")


def judge(result: AgentResult | None, *, pod_failure: str = "") -> PreflightRecord:
    """The outcome of one check-mode pod (``basis`` and ``at`` are filled in by the caller).

    ``pod_failure`` says why there is no usable result (a pod that failed to start or ran out of
    time); anything but a clean check report is ``unknown``: the declared path is the safe one.
    """
    if result is None or result.unparseable:
        why = pod_failure or (f"no result: {result.raw}" if result else "no result")
        return _unknown(f"check mode could not tell: {why}")
    declared = result.declared_interrupt
    report = result.check
    if report is None:
        return _unknown("check mode could not tell: the pod reported no check", declared)
    if report.unsupported:
        named = report.unsupported_tasks or [f"{report.unsupported} task(s)"]
        return _unknown("check mode cannot tell: " + "; ".join(named[:MAX_TASKS]), declared)
    if result.failure is not None:
        where = " / ".join(p for p in (result.failure.stage, result.failure.task) if p)
        message = result.failure.message or "failed"
        return _unknown(f"check mode failed at {where}: {message}", declared)
    asked = interrupts.requested_interrupt(
        None, reboot=result.reboot_requested, services=result.restart_services
    )
    owed = bool(result.pending_handlers)
    if report.changed == 0 and asked is None and not owed:
        return PreflightRecord(basis="", outcome=Outcome.COMPLIANT, declared=declared)
    tasks = list(report.tasks) or [f"{report.changed} task(s)"]
    return PreflightRecord(
        basis="",
        outcome=Outcome.CHANGES,
        tasks=[_cut(t) for t in tasks[:MAX_TASKS]],
        interrupt=asked,
        declared=declared,
    )


def _unknown(reason: str, declared: Interrupt | None = None) -> PreflightRecord:
    return PreflightRecord(
        basis="", outcome=Outcome.UNKNOWN, tasks=[_cut(reason)], declared=declared
    )


def _cut(text: str) -> str:
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "…"


def basis(fingerprint: str, kind: str, had: str) -> str:
    """What a record answers for: the package spec (its fingerprint), the kind of cycle and what
    the node had (``had``: a summary of the recorded entry, or ``-``)."""
    text = "/".join((fingerprint, kind, had))
    return hashlib.sha256(text.encode()).hexdigest()[:BASIS_CHARS]


def drift_due(last: datetime, interval: timedelta, node: str, package: str) -> datetime:
    """When the next drift check of ``package`` on ``node`` is due: ``interval`` after the last
    one plus a stable jitter of up to a tenth of it (the same node always gets the same)."""
    digest = hashlib.sha256(f"{node}/{package}".encode()).digest()
    share = int.from_bytes(digest[:4], "big") / 0xFFFFFFFF
    return last + interval + interval * (JITTER_SHARE * share)


def grant(wanting: Iterable[str], running: int, limit: int) -> frozenset[str]:
    """The nodes (in the given order) that may start a check pod now: ``limit`` minus the check
    pods already running; check pods are read-only work outside the disruption budget."""
    free = max(limit - running, 0)
    chosen: list[str] = []
    for name in wanting:
        if len(chosen) >= free:
            break
        chosen.append(name)
    return frozenset(chosen)


def parse_records(text: str | None) -> dict[str, PreflightRecord]:
    """The annotation's records by package; garbage is dropped (the nodes are checked again)."""
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    out: dict[str, PreflightRecord] = {}
    for name, value in data.items():
        try:
            out[str(name)] = PreflightRecord.model_validate(value)
        except ValidationError:
            continue
    return out


def dump_records(records: Mapping[str, PreflightRecord]) -> str | None:
    """Compact JSON of ``records`` (None: no record left, the annotation goes)."""
    if not records:
        return None
    wire = {name: records[name].to_wire() for name in sorted(records)}
    return json.dumps(wire, separators=(",", ":"), sort_keys=True)


# ---- reporting: bounded counts for the CR status ---------------------------------------------

CHANGING = "changing"
_BY_ENTRY = {
    Outcome.COMPLIANT.value: Outcome.COMPLIANT,
    Outcome.CHANGES.value: Outcome.CHANGES,
    "drifted": Outcome.CHANGES,
    Outcome.UNKNOWN.value: Outcome.UNKNOWN,
}


def node_check(
    versions: Mapping[str, str],
    state: Mapping[str, PackageState],
    records: Mapping[str, PreflightRecord],
) -> str:
    """What check mode says of one node's current cycle (``versions``: package -> version of
    the CR): ``unknown`` if any package's check could not tell, else ``changing`` if any would
    change, else ``compliant``; empty when no check decided anything there."""
    found: set[Outcome] = set()
    for name, version in versions.items():
        record = records.get(name)
        if record is not None and not record.drift:
            found.add(record.outcome)  # checked, waiting for its cycle to open
            continue
        entry = state.get(f"{name}|{version}")
        if entry is not None and entry.preflight in _BY_ENTRY:
            found.add(_BY_ENTRY[entry.preflight])
    if Outcome.UNKNOWN in found:
        return Outcome.UNKNOWN.value
    if Outcome.CHANGES in found:
        return CHANGING
    return Outcome.COMPLIANT.value if found else ""


def drift_found(records: Mapping[str, PreflightRecord]) -> tuple[str, tuple[str, ...]] | None:
    """The first package (by name) a drift check found changed, with the tasks it named."""
    for name in sorted(records):
        record = records[name]
        if record.drift and record.outcome is Outcome.CHANGES:
            return name, tuple(record.tasks)
    return None
