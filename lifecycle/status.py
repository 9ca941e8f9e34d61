"""Wire models for ``NodeWright.status``.

Bounded in fleet size (docs/architecture.md, "Status and conditions"): aggregates,
per-compartment counters, one validation record per package and the last 20 failures only.
Per-node truth lives on the Nodes (see ``lifecycle.nodestate``), so a 10,000-node CR stays far
below etcd's object size limit.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from lifecycle.wire import WireModel

RECENT_FAILURES_MAX = 20  # enough to see a pattern, small enough to keep status O(1) in fleet size


class Status(StrEnum):
    """Aggregate status of a CR, and the status of one node for one CR."""

    COMPLETE = "complete"
    IN_PROGRESS = "in_progress"
    ERRORING = "erroring"
    BLOCKED = "blocked"
    WAITING = "waiting"
    PAUSED = "paused"
    DISABLED = "disabled"
    UNKNOWN = "unknown"


class Condition(WireModel):
    type: str = Field(description="Ready, Progressing, Degraded, Stalled, PDBBlocked, ...")
    status: str = Field(description="True, False or Unknown.")
    reason: str = Field(description="CamelCase reason.")
    message: str = Field(default="", description="Human-readable detail.")
    observed_generation: int | None = Field(default=None, description="Generation observed.")
    last_transition_time: str | None = Field(default=None, description="RFC 3339.")


class BatchState(WireModel):
    current_batch: int = Field(default=1, description="1-based number of the running batch.")
    picked: str = Field(
        default="",
        description="When the running batch was picked; its members' batch records carry the "
        "same value (older records are history).",
    )
    consecutive_failures: int = Field(default=0, description="Failed batches in a row.")
    completed_nodes: int = Field(default=0, description="Checkpoint: nodes done OK.")
    failed_nodes: int = Field(default=0, description="Checkpoint: nodes failed.")
    should_stop: bool = Field(default=False, description="Stopped by failureThreshold.")
    last_batch_size: int = Field(default=0, description="Size of the last evaluated batch.")
    last_batch_failed: bool = Field(default=False, description="Last batch below batchThreshold.")
    reset_at: str = Field(
        default="",
        description="When bridge.nodewright.io/reset-compartment last resumed this compartment; "
        "nodes that failed in a batch picked before it are picked again.",
    )


class CheckCounts(WireModel):
    """Nodes of a compartment by what check mode (``preflight``) found for their current cycle."""

    compliant: int = Field(default=0, description="Nothing would change: never disrupted.")
    changing: int = Field(default=0, description="Would change: the paced path.")
    unknown: int = Field(default=0, description="Check mode could not tell: the declared path.")


class CompartmentStatus(WireModel):
    matched: int = Field(default=0, description="Nodes assigned to this compartment.")
    ceiling: int = Field(default=0, description="Budget ceiling.")
    in_progress: int = Field(default=0, description="Nodes in progress.")
    completed: int = Field(default=0, description="Nodes complete.")
    failed: int = Field(default=0, description="Nodes erroring.")
    progress_percent: int = Field(default=0, description="completed*100/matched.")
    strategy: str = Field(default="", description="fixed, linear, exponential or empty.")
    batch_state: BatchState | None = Field(default=None, description="Batch bookkeeping.")
    checks: CheckCounts | None = Field(
        default=None, description="Check-mode outcomes of the nodes (packages with preflight)."
    )


class RecentFailure(WireModel):
    node: str = Field(description="Node name.")
    package: str = Field(description="Package name.")
    version: str = Field(description="Package version.")
    stage: str = Field(description="Stage that failed.")
    task: str = Field(default="", description="Ansible task that failed.")
    message: str = Field(default="", description="Failure message (truncated).")
    time: str = Field(description="RFC 3339.")


class ValidationState(StrEnum):
    """Outcome of a package spec's validation (``lifecycle.validating``)."""

    PASSED = "passed"
    FAILED = "failed"


class PackageValidation(WireModel):
    """The last validation of one package's spec: one small record per package, so a restarted
    controller does not validate again and the gate stays closed on a spec that failed."""

    key: str = Field(description="Identity of the spec validated (version, image, vars, ...).")
    version: str = Field(default="", description="Package version validated.")
    image: str = Field(default="", description="Image reference validated.")
    state: ValidationState = Field(description="passed or failed.")
    reason: str = Field(default="", description="Why it failed: ArgumentSpecViolation, ...")
    message: str = Field(default="", description="The problems, with their field paths.")
    time: str = Field(default="", description="When it was decided (RFC 3339).")
    attempts: int = Field(default=0, ge=0, description="Validation pods run for this spec.")
    retry_at: str = Field(
        default="", description="A failure with an outside cause is tried again then (RFC 3339)."
    )


class NodeWrightStatus(WireModel):
    observed_generation: int | None = Field(default=None, description="Last generation acted on.")
    status: Status = Field(default=Status.UNKNOWN, description="Aggregate status.")
    conditions: list[Condition] = Field(default_factory=list, description="Conditions.")
    compartments: dict[str, CompartmentStatus] = Field(
        default_factory=dict, description="Per-compartment progress and batch state."
    )
    nodes_in_progress: int = Field(default=0, description="Nodes in progress or erroring.")
    complete_nodes: str = Field(default="0/0", description='"complete/targeted".')
    package_list: str = Field(default="", description="Sorted name:version list.")
    recent_failures: list[RecentFailure] = Field(
        default_factory=list, description="Last 20 failures, newest last."
    )
    node_order_offset: int = Field(default=0, description="Nodes that left the batch order.")
    policy: str = Field(default="", description="Deployment policy in use (printer column).")
    checks: str = Field(
        default="",
        description='Check-mode outcomes over all nodes, e.g. "3 compliant, 2 changing" '
        "(printer column; empty without preflight).",
    )
    validations: dict[str, PackageValidation] = Field(
        default_factory=dict,
        description="Per package: the last validation of its spec (checked before any node).",
    )
