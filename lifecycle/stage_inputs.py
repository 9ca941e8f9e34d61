"""What the stage planner reads and returns: the node's facts, its pods as observed, the plan.

The controller builds ``NodeInput`` from what it observed and executes ``NodePlan``; aggregation
and validation read ``NodeFailure`` and ``NodePlan``. Callers import them from
``lifecycle.stages``; they live below its sections so each section can use them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from lifecycle import peering
from lifecycle.actions import Action
from lifecycle.nodestate import BatchRecord, CordonRecord, PackageState
from lifecycle.preflight import PreflightRecord
from lifecycle.recovery import DEFAULT_OUTSIDE_RETRY, OutsideRetry
from lifecycle.results import AgentResult
from lifecycle.spec import Interrupt, NodeWright
from lifecycle.status import Status

# A failed package pod stays this long after it ended, so ``kubectl logs`` / ``nwb logs`` can read
# it (a controller setting, ``--failed-pod-ttl``).
DEFAULT_FAILED_POD_TTL = timedelta(hours=24)


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
    # The start it carries instead of a Node write (``lifecycle.pod_records``): its entry as it
    # began and the node's batch record.
    carried: PackageState | None = None
    carried_record: BatchRecord | None = None

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
    # Keys of ``state`` whose entry comes from the pod that runs it, not from the Node
    # (``lifecycle.pod_records``): the node is not relabelled ``in_progress`` for them.
    carried: frozenset[str] = frozenset()


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
    # the node shows drift for this CR once the actions are applied (its drift label)
    drifted: bool = False
