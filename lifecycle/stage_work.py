"""The scratch state of one planning call (``Work``) and the helpers every section reads.

``Work`` collects the actions, failures, wake-ups and notes of one ``lifecycle.stages.plan_node``
call and never escapes it. The helpers answer questions over the spec and the node's entries:
the config hash with the package's Secret data, its timeouts, the version a cycle replaces,
whether the package converged, the basis a check runs for. They sit below the sections
(``lifecycle.stage_pods`` ... ``lifecycle.stage_checks``) so each imports them without a cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from lifecycle import cycles, durations, preflight, recovery, versions
from lifecycle.actions import Action
from lifecycle.errors import InvalidVersionError
from lifecycle.nodestate import PackageState, Stage, StageState, package_key
from lifecycle.preflight import Outcome, PreflightRecord
from lifecycle.spec import Package
from lifecycle.stage_identities import (
    config_digests,
    config_hash,
    content_id,
    resource_id,
    rfc3339,
    stable_json,
)
from lifecycle.stage_inputs import NodeFailure, NodeInput, PodObservation
from lifecycle.status import Status


@dataclass(slots=True)
class Work:
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
    drifted: bool = False  # the node shows drift once this plan's writes are applied

    @property
    def now(self) -> datetime:
        return self.inp.now

    def put(self, key: str, entry: PackageState, **changes: object) -> PackageState:
        """Store ``entry`` with ``changes``; ``updated`` moves only when something changed.
        (One copy, not two: every new cycle of a batch start passes here.)"""
        fields = entry.__dict__
        unchanged = all(k in fields and fields[k] == v for k, v in changes.items())
        if unchanged and self.state.get(key) == entry:
            return entry
        updated = entry.model_copy(update={**changes, "updated": rfc3339(self.now)})
        self.state[key] = updated
        return updated


def config_hash_of(work: Work, name: str, pkg: Package) -> str:
    return config_hash(pkg, work.inp.secret_data.get(name, ""))


def fresh_cycle(work: Work, name: str, pkg: Package) -> dict[str, object]:
    """The fields a new cycle of ``name`` starts from: no attempt, no interrupt bookkeeping, no
    outside cause, a new change identity (``resource_id``)."""
    return {
        "state": StageState.IN_PROGRESS,
        "attempts": 0,
        "retry_at": "",
        "message": "",
        "started": rfc3339(work.now),
        "resource_id": resource_id(work.inp.cr, name, pkg.version, config_hash_of(work, name, pkg)),
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


def fingerprint(work: Work, name: str, pkg: Package) -> str:
    return recovery.fingerprint(pkg, work.inp.secret_data.get(name, ""))


def config_digests_of(work: Work, name: str, pkg: Package) -> dict[str, str]:
    return config_digests(pkg, work.inp.secret_data.get(name, ""))


def spec_package(work: Work, key: str) -> tuple[str, Package] | None:
    name, _, version = key.partition("|")
    pkg = work.inp.cr.spec.packages.get(name)
    if pkg is None or pkg.version != version:
        return None
    return name, pkg


def converged(work: Work, name: str, pkg: Package) -> bool:
    entry = work.state.get(package_key(name, pkg.version))
    if cycles.uninstall_requested(pkg):
        return entry is None
    return (
        entry is not None
        and not entry.rerun
        and cycles.is_terminal(pkg, entry)
        and entry.config_hash == config_hash_of(work, name, pkg)
        and not content_changed(entry, pkg)
        and not remediating(work, name, pkg, entry)
    )


def content_changed(entry: PackageState, pkg: Package) -> bool:
    """The image moved from one pinned digest to another (a tag or a first pin is no change)."""
    wanted = content_id(pkg)
    return entry.content not in ("", "-", wanted) and wanted != "-"


def duration(text: str, fallback: timedelta) -> timedelta:
    try:
        return durations.parse_duration(text)
    except ValueError:
        return fallback


def stage_timeout(pkg: Package) -> timedelta:
    return duration(pkg.timeouts.stage, timedelta(minutes=30))


def interrupt_timeout(pkg: Package) -> timedelta:
    return duration(pkg.timeouts.interrupt, timedelta(minutes=20))


def drain_timeout(work: Work, pkg: Package) -> timedelta:
    own = duration(pkg.timeouts.drain, timedelta(minutes=30))
    return min(own, duration(work.inp.cr.spec.drain.timeout, own))


def wake(work: Work, moment: datetime) -> None:
    work.wakeups.append(moment)


def fmt_duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def pod_failure_text(pod: PodObservation) -> str:
    if pod.result is not None and pod.result.unparseable:
        return f"pod failed without a readable result: {pod.result.raw}"
    return "pod failed without a result"


def spec_items(work: Work) -> list[tuple[str, Package, str]]:
    if work.spec_items is None:
        work.spec_items = [
            (name, pkg, package_key(name, pkg.version))
            for name, pkg in sorted(work.inp.cr.spec.packages.items())
        ]
    return work.spec_items


def node_erroring(work: Work) -> bool:
    return any(
        (e := work.state.get(key)) is not None and e.state is StageState.ERRORING
        for _, _, key in spec_items(work)
    )


def previous_version(work: Work, name: str, version: str) -> tuple[Stage, str]:
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


def node_started(work: Work) -> bool:
    return work.inp.previous_status is Status.IN_PROGRESS or entries_in_flight(work)


def entries_in_flight(work: Work) -> bool:
    return any(
        (e := work.state.get(key)) is not None
        and e.state in (StageState.IN_PROGRESS, StageState.SKIPPED)
        for _, _, key in spec_items(work)
    )


def drift_record(work: Work, name: str) -> PreflightRecord | None:
    record = work.preflight.get(name)
    return record if record is not None and record.drift else None


def _had(work: Work, name: str) -> str:
    """What the node records of ``name`` (every version): part of a check's basis."""
    rows = sorted(
        (k, e.stage.value, e.state.value, e.config_hash, e.content)
        for k, e in work.state.items()
        if k.partition("|")[0] == name
    )
    return stable_json(rows) if rows else "-"


def check_basis(work: Work, name: str, pkg: Package, kind: str) -> str:
    return preflight.basis(fingerprint(work, name, pkg), kind, _had(work, name))


def drift_found(work: Work, name: str, pkg: Package, entry: PackageState) -> bool:
    """A drift check found this complete entry's node changed (and nothing moved since)."""
    record = drift_record(work, name)
    if record is None or record.outcome is not Outcome.CHANGES:
        return False
    return entry.state is StageState.COMPLETE and record.basis == check_basis(
        work, name, pkg, "reapply"
    )


def remediating(work: Work, name: str, pkg: Package, entry: PackageState) -> bool:
    """A drift check found this complete entry's node changed and the CR remediates drift."""
    detection = work.inp.cr.spec.drift_detection
    if detection is None or not detection.remediate:
        return False
    return drift_found(work, name, pkg, entry)
