"""A tiny in-memory node + executor for driving the pure stage planner in unit tests.

It applies the planner's actions the way the real executor would (idempotently) and lets a test
decide how pods end: succeed, fail, hang, or reboot the node.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from lifecycle import actions as act
from lifecycle import nodestate, pod_records, preflight
from lifecycle.nodestate import PackageState
from lifecycle.preflight import PreflightRecord
from lifecycle.recovery import DEFAULT_OUTSIDE_RETRY, OutsideRetry
from lifecycle.results import AgentResult, CheckReport, Failure, StageResult, StageStatus
from lifecycle.spec import Interrupt, NodeWright
from lifecycle.stages import NodeFacts, NodeInput, NodePlan, PodObservation, PodPhase, plan_node
from lifecycle.status import Status

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def make_cr(packages: dict[str, dict[str, Any]], **spec: Any) -> NodeWright:
    full = {}
    for name, pkg in packages.items():
        full[name] = {"image": f"registry.local:5000/{name}", **pkg}
    return NodeWright.model_validate(
        {
            "metadata": {"name": "tune", "uid": "uid-1", "generation": spec.pop("generation", 1)},
            "spec": {"packages": full, **spec},
        }
    )


def ok_result(stages: tuple[str, ...]) -> AgentResult:
    return AgentResult(stages=[StageResult(name=s, status=StageStatus.OK) for s in stages])


def failed_result(stage: str, task: str = "Set sysctl", message: str = "boom") -> AgentResult:
    return AgentResult(
        stages=[StageResult(name=stage, status=StageStatus.FAILED, failed=1)],
        failure=Failure(stage=stage, task=task, message=message),
    )


def check_result(
    changed: int = 0,
    *,
    tasks: tuple[str, ...] = (),
    reboot: bool = False,
    unsupported: tuple[str, ...] = (),
    declared: Interrupt | None = None,
) -> AgentResult:
    """What a check-mode pod reports (``nwb-agent run --check``)."""
    return AgentResult(
        reboot_requested=reboot,
        declared_interrupt=declared,
        check=CheckReport(
            changed=changed,
            tasks=list(tasks),
            unsupported=len(unsupported),
            unsupported_tasks=list(unsupported),
        ),
    )


CHECK_STAGES = ("preflight", "drift")


@dataclass
class World:
    cr: NodeWright
    node: NodeFacts = field(default_factory=lambda: NodeFacts(name="n1", boot_id="boot-0"))
    state: dict[str, PackageState] = field(default_factory=dict)
    pods: dict[str, PodObservation] = field(default_factory=dict)
    now: datetime = T0
    allowed: bool = True
    status: Status | None = None
    paused: bool = False
    disabled: bool = False
    interrupt_kinds: dict[str, str] = field(default_factory=dict)
    log: list[act.Action] = field(default_factory=list)
    created: list[act.CreatePackagePod | act.CreateInterruptPod] = field(default_factory=list)
    boots: int = 0
    # What the next successful package pod of a package reports (default: a plain success).
    results: dict[str, AgentResult] = field(default_factory=dict)
    # Package key -> interrupt declared by the package, as other nodes reported it.
    declared: dict[str, Interrupt] = field(default_factory=dict)
    # Package name -> digest of its secretVars' data, as the controller reads it.
    secret_data: dict[str, str] = field(default_factory=dict)
    # The rollout picked the node into a new batch (for the next plan only: see ``step``).
    new_slot: bool = False
    outside_retry: OutsideRetry = DEFAULT_OUTSIDE_RETRY
    # Failed pods are deleted at once unless a test keeps them (the controller's default is 24h).
    failed_pod_ttl: timedelta = timedelta(0)
    # Check mode: the node's records, whether the planning step grants a check pod, the drift
    # label, and what each package's check pods report (default: nothing would change).
    preflight: dict[str, PreflightRecord] = field(default_factory=dict)
    may_check: bool = True
    drift_labelled: bool = False
    checks: dict[str, AgentResult] = field(default_factory=dict)

    def input(self) -> NodeInput:
        # What the controller's snapshot does: entries that pods carry count (pod_records).
        pods = tuple(self.pods[name] for name in sorted(self.pods))
        carried = pod_records.overlay(self.state, None, pods, self.status)
        return NodeInput(
            cr=self.cr,
            node=self.node,
            state=dict(carried.state),
            carried=carried.keys,
            now=self.now,
            allowed_to_start=self.allowed,
            pods=pods,
            previous_status=self.status,
            paused=self.paused,
            disabled=self.disabled,
            declared=self.declared,
            secret_data=self.secret_data,
            new_slot=self.new_slot,
            outside_retry=self.outside_retry,
            failed_pod_ttl=self.failed_pod_ttl,
            preflight=dict(self.preflight),
            may_check=self.may_check,
            drift_labelled=self.drift_labelled,
        )

    def plan(self) -> NodePlan:
        return plan_node(self.input())

    def step(self) -> NodePlan:
        plan = self.plan()
        self.apply(plan)
        self.new_slot = False  # a pick gives one new slot, not one per plan
        return plan

    # ---- the executor --------------------------------------------------------------------
    def apply(self, plan: NodePlan) -> None:
        for action in plan.actions:
            self.log.append(action)
            self._apply(action)

    def _apply(self, a: act.Action) -> None:
        node = self.node
        if isinstance(a, act.PatchNodeState):
            self.state.update(a.set)
            for key in a.remove:
                self.state.pop(key, None)
        elif isinstance(a, act.SetNodeStatus):
            self.status = a.status
        elif isinstance(a, act.Cordon):
            record = nodestate.hold(node.cordon, a.holder, unschedulable=a.was_unschedulable)
            self.node = replace(node, unschedulable=True, cordon=record)
        elif isinstance(a, act.Uncordon):
            released = nodestate.release(node.cordon, a.holder)
            if released is not None:
                unschedulable = node.unschedulable and not released.uncordon
                self.node = replace(node, cordon=released.record, unschedulable=unschedulable)
        elif isinstance(a, act.Drain):
            self.node = replace(node, pods_to_evict=0)
        elif isinstance(a, act.CreatePackagePod):
            name = f"{a.package}-{a.version}-{a.stages[0]}-a{a.attempt}"
            if name not in self.pods:
                self.created.append(a)
                self.pods[name] = PodObservation(
                    name,
                    a.package,
                    a.version,
                    a.stages,
                    a.attempt,
                    PodPhase.PENDING,
                    resource_id=a.resource_id,
                    created=self.now,
                    carried=a.carries,
                )
        elif isinstance(a, act.CreateInterruptPod):
            name = f"{a.package}-{a.version}-{a.stage.value}-a{a.attempt}"
            if name not in self.pods:
                self.created.append(a)
                self.interrupt_kinds[name] = a.interrupt_type.value
                self.pods[name] = PodObservation(
                    name,
                    a.package,
                    a.version,
                    (a.stage.value,),
                    a.attempt,
                    PodPhase.PENDING,
                    interrupt=True,
                )
        elif isinstance(a, act.DeletePod):
            self.pods.pop(a.name, None)
        elif isinstance(a, act.SetAnnotations):
            key = nodestate.preflight_annotation(self.cr.metadata.name)
            if key in a.annotations:
                self.preflight = preflight.parse_records(a.annotations[key])
        elif isinstance(a, act.SetLabels):
            key = nodestate.drift_label(self.cr.metadata.name)
            if key in a.labels:
                self.drift_labelled = a.labels[key] == "true"

    # ---- pods and time -------------------------------------------------------------------
    def finish_pods(self, *, fail: str | None = None, reboot: bool = True) -> None:
        """End every live pod: success (a reboot interrupt reboots the node) or ``fail``."""
        for name, pod in list(self.pods.items()):
            if not pod.live:
                continue
            if pod.stages[0] in CHECK_STAGES:
                result = self.checks.get(pod.package, check_result())
                self.pods[name] = replace(pod, phase=PodPhase.SUCCEEDED, result=result)
                continue
            if fail is not None and fail in (pod.package, "*"):
                result = failed_result(pod.stages[0])
                if not pod.interrupt and pod.package in self.results:
                    asked = self.results.pop(pod.package)
                    result = result.model_copy(
                        update={
                            "reboot_requested": asked.reboot_requested,
                            "restart_services": asked.restart_services,
                            "pending_handlers": asked.pending_handlers,
                            "declared_interrupt": asked.declared_interrupt,
                        }
                    )
                self.pods[name] = replace(
                    pod, phase=PodPhase.FAILED, result=result, finished=self.now
                )
            elif pod.interrupt and self.interrupt_kinds.get(name) == "reboot" and reboot:
                self.reboot()
                del self.pods[name]  # killed by the reboot
            else:
                result = ok_result(pod.stages)
                if not pod.interrupt and pod.package in self.results:
                    result = self.results.pop(pod.package).model_copy(
                        update={"stages": result.stages}
                    )
                self.pods[name] = replace(pod, phase=PodPhase.SUCCEEDED, result=result)

    def reboot(self) -> None:
        self.boots += 1
        self.node = replace(self.node, boot_id=f"boot-{self.boots}", ready=True)

    def tick(self, delta: timedelta = timedelta(minutes=1)) -> None:
        self.now += delta

    def converge(self, *, limit: int = 60) -> int:
        """Plan, apply, succeed every pod, advance time, until the node is complete."""
        for steps in range(1, limit + 1):
            plan = self.step()
            if plan.status is Status.COMPLETE and not self.pods:
                return steps
            self.finish_pods()
            self.tick()
        raise AssertionError(f"not complete after {limit} steps: {self.state}")

    def events(self, reason: str) -> list[act.EmitEvent]:
        return [a for a in self.log if isinstance(a, act.EmitEvent) and a.reason == reason]

    def cordons(self) -> int:
        return sum(1 for a in self.log if isinstance(a, act.Cordon))

    def created_stages(self) -> list[tuple[str, tuple[str, ...]]]:
        return [
            (c.package, c.stages if isinstance(c, act.CreatePackagePod) else (c.stage.value,))
            for c in self.created
        ]
