"""What the executor does: small, typed, idempotent instructions produced by the planners.

Why values and not calls: the reconciler asks ``lifecycle`` what should happen and gets back a
tuple of these; the executor in ``nodewright_bridge`` applies them in order and stops at the first
failure. Because the planners re-derive every action from the observed state on each reconcile,
every action must be safe to apply twice (create-if-absent, set-to-value, add-to-set). Order
matters in one case that the planners rely on: ``PatchNodeState`` always comes first, so the
intent (an attempt number, the pre-reboot bootID) is on the Node before any pod that acts on it
exists. A controller that dies in between finds the record and does not act twice. The one
exception is a ``CreatePackagePod`` that ``carries`` its entry: the pod is the record
(``lifecycle.pod_records``).

Nothing here knows Kubernetes object shapes; the executor maps each action to API calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from lifecycle.nodestate import PackageState, Stage
from lifecycle.spec import Drain as DrainSpec
from lifecycle.spec import InterruptType, LabelSelector
from lifecycle.status import Status


@dataclass(frozen=True, slots=True)
class Cordon:
    """Mark ``node`` unschedulable and add ``holder`` (a CR name) to its cordon record.

    ``was_unschedulable`` is what the planner saw before it asked; the executor writes it only when
    the node has no cordon record yet (the first holder records the node's original state).
    """

    node: str
    holder: str
    was_unschedulable: bool


@dataclass(frozen=True, slots=True)
class Uncordon:
    """Remove ``holder`` from the cordon record of ``node``.

    The executor makes the node schedulable only when no holder is left and the record says the
    node was schedulable before we came; a node a human cordoned stays cordoned.
    """

    node: str
    holder: str


@dataclass(frozen=True, slots=True)
class WaitForPods:
    """Pods matching ``selector`` (the CR's podNonInterruptLabels) still run on ``node``.

    Nothing is evicted; the executor only requeues for ``deadline`` (and may emit an event).
    """

    node: str
    selector: LabelSelector
    deadline: datetime


@dataclass(frozen=True, slots=True)
class Drain:
    """Evict the pods a drain must evict from ``node`` (see ``lifecycle.draining``).

    The executor issues evictions, retries PodDisruptionBudget refusals with back-off, and waits
    for the evicted pods to be gone; it gives up at ``deadline`` (the planner then marks the
    waiting packages ``erroring``).
    """

    node: str
    cr: str
    deadline: datetime
    options: DrainSpec


@dataclass(frozen=True, slots=True)
class CreatePackagePod:
    """Create (if absent) the pod that runs ``stages`` of one package on ``node``.

    ``stages`` are consecutive non-interrupt stages and their checks, e.g.
    ``("apply", "apply-check", "config", "config-check")``. The pod name derives from cr, package,
    version, first stage, node and ``attempt``, so a retry never collides with the failed pod.
    """

    node: str
    cr: str
    package: str
    version: str
    stages: tuple[str, ...]
    resource_id: str
    node_order: int
    attempt: int
    config_hash: str
    deadline: datetime
    previous_version: str = ""
    # The entry this pod starts, carried in its annotations instead of a Node write before it
    # (``lifecycle.pod_records``); None: the node was written first.
    carries: PackageState | None = None


@dataclass(frozen=True, slots=True)
class CreateInterruptPod:
    """Create (if absent) the one interrupt pod for packages due together on ``node``.

    ``interrupt_type``/``services`` are the merged interrupt; ``package``/``version`` the owner
    whose image and agent run it; ``members`` every package the interrupt completes (owner
    included). For a reboot the agent reboots; completion is judged by a new bootID and Ready,
    not by the pod.
    """

    node: str
    cr: str
    package: str
    version: str
    stage: Stage
    interrupt_type: InterruptType
    services: tuple[str, ...]
    members: tuple[str, ...]
    resource_id: str
    node_order: int
    attempt: int
    deadline: datetime


@dataclass(frozen=True, slots=True)
class DeletePod:
    """Delete pod ``name`` (controller namespace); ``reason`` is for the log and events."""

    name: str
    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class PatchNodeState:
    """Set and remove entries of ``bridge.nodewright.io/state-<cr>`` on ``node`` (merge patch)."""

    node: str
    cr: str
    set: Mapping[str, PackageState]
    remove: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SetNodeStatus:
    """Write the label and annotation ``bridge.nodewright.io/status-<cr>`` on ``node``."""

    node: str
    cr: str
    status: Status


@dataclass(frozen=True, slots=True)
class AddTaint:
    node: str
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class RemoveTaint:
    node: str
    key: str
    effect: str


@dataclass(frozen=True, slots=True)
class VerifyReboot:
    """An interrupt rebooted (or is rebooting) ``node``: wait for a bootID other than
    ``old_boot_id`` and Ready=True until ``deadline``. The executor only requeues; the planner
    decides completion from the next snapshot."""

    node: str
    old_boot_id: str
    deadline: datetime


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True, slots=True)
class EmitEvent:
    """A Kubernetes Event on ``kind``/``name`` (``Node`` or ``NodeWright``)."""

    kind: str
    name: str
    reason: str
    message: str
    type: EventType = EventType.NORMAL


@dataclass(frozen=True, slots=True)
class ReleaseNode:
    """Let go of ``node`` for CR ``cr``: its state, status and batch keys go, its cordon hold is
    released by the cordon rule (``nodestate.release``), and with ``remove_taint`` the
    runtime-required taint goes too. Applied to the Node as it is when written (``releasing``
    says what to change), so a concurrent change by someone else is kept."""

    node: str
    cr: str
    remove_taint: bool
    why: str


@dataclass(frozen=True, slots=True)
class SetAnnotations:
    """Set (or, with None, remove) annotations of ``node``; merged into the node's next write."""

    node: str
    annotations: Mapping[str, str | None]


@dataclass(frozen=True, slots=True)
class SetLabels:
    """Set (or, with None, remove) labels of ``node``; merged into the node's next write."""

    node: str
    labels: Mapping[str, str | None]


@dataclass(frozen=True, slots=True)
class RemoveFinalizer:
    """Drop ``finalizer`` from the NodeWright ``cr``: its cleanup is done."""

    cr: str
    finalizer: str


Action = (
    Cordon
    | Uncordon
    | WaitForPods
    | Drain
    | CreatePackagePod
    | CreateInterruptPod
    | DeletePod
    | PatchNodeState
    | SetNodeStatus
    | AddTaint
    | RemoveTaint
    | VerifyReboot
    | EmitEvent
    | ReleaseNode
    | SetAnnotations
    | SetLabels
    | RemoveFinalizer
)
