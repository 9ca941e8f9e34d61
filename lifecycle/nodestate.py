"""Per-node bookkeeping stored on the Node object (the source of truth; survives restarts).

Keys (docs/architecture.md, "Node bookkeeping"):
- annotation ``bridge.nodewright.io/state-<cr>``: ``{"<pkg>|<ver>": PackageState}`` compact JSON
- label + annotation ``bridge.nodewright.io/status-<cr>``: node status for that CR
- annotation ``bridge.nodewright.io/cordon``: ``{"holders": [...], "wasUnschedulable": bool}``
- annotation ``bridge.nodewright.io/batch-<cr>``: batch membership and node order
- annotation ``bridge.nodewright.io/preflight-<cr>``: check-mode outcomes waiting for their cycle,
  and the last drift check of each package (``lifecycle.preflight``)
- label ``bridge.nodewright.io/drift-<cr>=true``: a drift check found the node changed

The cordon rule lives here too (``hold``/``release``): every CR that cordons a node is a holder;
the node becomes schedulable again only when the last holder lets go and it was schedulable before
the first one came, so a node a human cordoned stays cordoned.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pydantic import Field

from lifecycle.spec import PREFIX, Interrupt
from lifecycle.wire import WireModel

CORDON_ANNOTATION = f"{PREFIX}cordon"
IGNORE_LABEL = f"{PREFIX}ignore"
RUNTIME_REQUIRED_TAINT_KEY = f"{PREFIX}runtime-required"
PAUSE_ANNOTATION = f"{PREFIX}pause"
DISABLE_ANNOTATION = f"{PREFIX}disable"
# On a NodeWright: compartment name(s), comma-separated, or "*": resume those Stalled compartments
# once (``lifecycle.batching.reset_targets``); the controller removes it when handled.
RESET_COMPARTMENT_ANNOTATION = f"{PREFIX}reset-compartment"


def state_annotation(cr: str) -> str:
    return f"{PREFIX}state-{cr}"


def status_key(cr: str) -> str:
    return f"{PREFIX}status-{cr}"


def batch_annotation(cr: str) -> str:
    return f"{PREFIX}batch-{cr}"


def preflight_annotation(cr: str) -> str:
    return f"{PREFIX}preflight-{cr}"


def drift_label(cr: str) -> str:
    return f"{PREFIX}drift-{cr}"


class Stage(StrEnum):
    UNINSTALL = "uninstall"
    UPGRADE = "upgrade"
    APPLY = "apply"
    CONFIG = "config"
    INTERRUPT = "interrupt"
    POST_INTERRUPT = "post-interrupt"
    UNINSTALL_INTERRUPT = "uninstall-interrupt"


class StageState(StrEnum):
    IN_PROGRESS = "in_progress"
    COMPLETE = "complete"
    ERRORING = "erroring"
    SKIPPED = "skipped"
    UNKNOWN = "unknown"


class PackageState(WireModel):
    stage: Stage = Field(description="Current stage.")
    state: StageState = Field(description="State of that stage.")
    attempts: int = Field(default=0, description="Attempts made at this stage.")
    resource_id: str = Field(default="", description="Identity of the change (guards interrupts).")
    boot_id: str | None = Field(default=None, description="bootID seen when a reboot started.")
    updated: str = Field(default="", description="RFC 3339 of the last change.")
    config_hash: str = Field(default="", description="Hash of vars/configMap applied.")
    config_keys: dict[str, str] = Field(
        default_factory=dict, description="Var name / configMap key -> short digest applied."
    )
    changed_keys: list[str] = Field(
        default_factory=list,
        description="Keys whose change opened this config cycle; empty for install/upgrade.",
    )
    started: str = Field(default="", description="RFC 3339 when this step (attempt) began.")
    retry_at: str = Field(
        default="", description="RFC 3339 after which the failed attempt may be retried."
    )
    message: str = Field(default="", description="Why the last attempt failed (truncated).")
    interrupt: str = Field(
        default="", description="Interrupt type this entry's interrupt pod runs (owner only)."
    )
    declared: Interrupt | None = Field(
        default=None, description="The package's own interrupt (manifest), as its pods report."
    )
    requested: Interrupt | None = Field(
        default=None,
        description="What this cycle's runs asked for (reboot, service restarts); overridden "
        "when the CR sets the package's interrupt.",
    )
    content: str = Field(
        default="",
        description="Image digest applied ('-' when none was pinned; empty: not recorded).",
    )
    pending_handlers: list[str] = Field(
        default_factory=list, description="Handlers a failed attempt left owed (run next time)."
    )
    merged_with: list[str] = Field(
        default_factory=list,
        description="Other CRs whose due interrupts this entry's interrupt pod also performs "
        "(owner only): one disruption for every rollout due on the node.",
    )
    interrupt_by: str = Field(
        default="",
        description="The CR whose interrupt pod performs this entry's interrupt (merged into "
        "an earlier rollout's interrupt on the node).",
    )
    # Recovery bookkeeping (``lifecycle.recovery``): what the entry ran (and so failed) with, and
    # for an erroring entry the outside cause and its back-off.
    spec: str = Field(
        default="",
        description="Fingerprint of the package spec the last attempt ran with; a different spec "
        "restarts an erroring entry (empty: recorded before this existed).",
    )
    cause: str = Field(
        default="",
        description="Outside cause of the failure: drain, drain-expired, protected-pods, "
        "image-pull or not-ready (empty: the package itself).",
    )
    reattempt_at: str = Field(
        default="",
        description="RFC 3339 of the re-attempt after an outside cause (sooner when it clears).",
    )
    reattempts: int = Field(
        default=0, description="Re-attempts after outside causes in this cycle (back-off doubles)."
    )
    preflight: str = Field(
        default="",
        description="What the check-mode preflight found for this cycle: compliant (recorded "
        "complete, no pod ran), changes, unknown (the declared path), or drifted (a drift "
        "check found changes and this cycle remediates them); empty: no preflight.",
    )
    preflight_tasks: list[str] = Field(
        default_factory=list,
        description="The first tasks the preflight found would change, or why check mode "
        "could not tell (at most 5).",
    )
    rerun: bool = Field(
        default=False,
        description="Someone asked for the package to run again on the node (``nwb rerun``): a "
        "complete entry opens a fresh cycle, an erroring one is re-attempted, once the rollout "
        "picks the node (the planner clears it then).",
    )


def package_key(name: str, version: str) -> str:
    return f"{name}|{version}"


class CordonRecord(WireModel):
    holders: list[str] = Field(default_factory=list, description="CRs holding the cordon.")
    was_unschedulable: bool = Field(default=False, description="Cordoned before we came.")


# ---- the cordon rule: who holds a node, and when letting go makes it schedulable -------------


def hold(record: CordonRecord | None, holder: str, *, unschedulable: bool) -> CordonRecord:
    """``record`` with ``holder`` added. The first holder remembers whether the node was already
    unschedulable (a human's cordon), which is what a last release restores."""
    base = record or CordonRecord(holders=[], was_unschedulable=unschedulable)
    return base.model_copy(update={"holders": sorted({*base.holders, holder})})


@dataclass(frozen=True, slots=True)
class Release:
    """What releasing one hold leaves: the remaining record (None: no holder left) and whether
    the node becomes schedulable (only when no holder is left and it was schedulable before)."""

    record: CordonRecord | None
    uncordon: bool


def release(record: CordonRecord | None, holder: str) -> Release | None:
    """Release ``holder``'s hold; None when it holds none (nothing to change)."""
    if record is None or holder not in record.holders:
        return None
    holders = [h for h in record.holders if h != holder]
    if holders:
        return Release(record.model_copy(update={"holders": holders}), uncordon=False)
    return Release(None, uncordon=not record.was_unschedulable)


class BatchRecord(WireModel):
    compartment: str = Field(description="Compartment the node was batched in.")
    batch: int = Field(description="Batch number the node was picked in.")
    order: int = Field(description="Stable node order within the rollout (NW_NODE_ORDER).")
    picked: str = Field(default="", description="RFC 3339 when picked.")
