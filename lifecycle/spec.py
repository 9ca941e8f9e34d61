"""API models for the NodeWright and DeploymentPolicy custom resources (``bridge.nodewright.io``).

These models are the single source of truth: the CRD schemas are generated from them, ``nwb plan``
validates files with them offline, and the controller parses live objects with them. Field names
follow NodeWright where the idea is the same (see ARCHITECTURE.md §4).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import ConfigDict, Field

from lifecycle.wire import InputModel

API_GROUP = "bridge.nodewright.io"
API_VERSION = "v1alpha1"
PREFIX = f"{API_GROUP}/"


# --------------------------------------------------------------------------------------------
# Kubernetes shapes we share with core types
# --------------------------------------------------------------------------------------------


class SelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(InputModel):
    key: str = Field(description="Label key the requirement applies to.")
    operator: SelectorOperator = Field(description="In, NotIn, Exists or DoesNotExist.")
    values: list[str] = Field(default_factory=list, description="Values for In/NotIn.")


class LabelSelector(InputModel):
    """A Kubernetes LabelSelector. Empty selects everything."""

    match_labels: dict[str, str] = Field(default_factory=dict, description="Exact label matches.")
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, description="Set-based requirements, all must hold."
    )


class Toleration(InputModel):
    key: str | None = Field(default=None, description="Taint key; empty with Exists matches all.")
    operator: str = Field(default="Equal", description="Equal or Exists.")
    value: str | None = Field(default=None, description="Taint value for Equal.")
    effect: str | None = Field(
        default=None, description="NoSchedule, PreferNoSchedule or NoExecute; empty matches all."
    )
    toleration_seconds: int | None = Field(default=None, description="For NoExecute taints.")


class EnvVar(InputModel):
    name: str = Field(description="Environment variable name.")
    value: str | None = Field(default=None, description="Literal value.")
    value_from: dict[str, Any] | None = Field(
        default=None, description="Kubernetes EnvVarSource (secretKeyRef, configMapKeyRef, ...)."
    )


# --------------------------------------------------------------------------------------------
# Package
# --------------------------------------------------------------------------------------------


class InterruptType(StrEnum):
    REBOOT = "reboot"
    SERVICE = "service"
    RESTART_ALL_SERVICES = "restartAllServices"
    NOOP = "noop"


class Interrupt(InputModel):
    type: InterruptType = Field(description="reboot, service, restartAllServices or noop.")
    services: list[str] = Field(
        default_factory=list, description="systemd units to restart for type service."
    )


class Resources(InputModel):
    cpu_request: str | None = Field(default=None, description="CPU request (quantity).")
    cpu_limit: str | None = Field(default=None, description="CPU limit (quantity).")
    memory_request: str | None = Field(default=None, description="Memory request (quantity).")
    memory_limit: str | None = Field(default=None, description="Memory limit (quantity).")


class Timeouts(InputModel):
    stage: str = Field(default="30m", description="Deadline for one package pod (Go duration).")
    drain: str = Field(default="30m", description="Deadline for draining the node.")
    interrupt: str = Field(
        default="20m", description="Deadline for an interrupt incl. reboot and node Ready again."
    )


class Uninstall(InputModel):
    enabled: bool = Field(default=False, description="The package ships uninstall tasks.")
    apply: bool = Field(
        default=False, description="Uninstall on every targeted node; set back to false to cancel."
    )


class SecretVarsRef(InputModel):
    secret_name: str = Field(description="Secret in the controller namespace.")
    key: str | None = Field(default=None, description="One key; all keys when empty.")


class Package(InputModel):
    version: str = Field(description="Strict semver; also the image tag unless a digest is pinned.")
    image: str = Field(description="Image repository without tag; host:port/path works.")
    digest: str | None = Field(default=None, description="Optional sha256: pin of the image.")
    interrupt: Interrupt | None = Field(default=None, description="Disruptive action after config.")
    config_interrupts: dict[str, Interrupt] = Field(
        default_factory=dict,
        description="Var name or configMap key (glob) -> interrupt when that value changes.",
    )
    depends_on: dict[str, str] = Field(
        default_factory=dict, description="Package name -> exact version in this CR."
    )
    vars: dict[str, Any] = Field(default_factory=dict, description="Ansible extra vars (any JSON).")
    secret_vars: list[SecretVarsRef] = Field(
        default_factory=list, description="Secrets mounted as var files, never logged."
    )
    config_map: dict[str, str] = Field(
        default_factory=dict, description="Files handed to the package (NodeWright parity)."
    )
    env: list[EnvVar] = Field(default_factory=list, description="Extra environment for the agent.")
    resources: Resources | None = Field(default=None, description="All four or none.")
    timeouts: Timeouts = Field(default_factory=Timeouts, description="Deadlines for this package.")
    max_attempts: int = Field(default=3, ge=1, description="Attempts per stage before erroring.")
    uninstall: Uninstall = Field(default_factory=Uninstall, description="Explicit uninstall.")
    graceful_shutdown: str | None = Field(
        default=None, description="Pod terminationGracePeriod (Go duration)."
    )


# --------------------------------------------------------------------------------------------
# NodeWright
# --------------------------------------------------------------------------------------------


class Sequencing(StrEnum):
    NODE = "node"
    ALL = "all"


class HostConnection(StrEnum):
    CHROOT = "chroot"
    NSENTER = "nsenter"


class InterruptionBudget(InputModel):
    percent: int | None = Field(default=None, description="Percent of targeted nodes (0-100).")
    count: int | None = Field(default=None, description="Number of nodes.")


class DeploymentPolicyOptions(InputModel):
    reset_batch_state_on_completion: bool | None = Field(
        default=None, description="Overrides the policy's resetBatchStateOnCompletion."
    )


class Drain(InputModel):
    timeout: str = Field(default="30m", description="Drain deadline (Go duration).")
    delete_empty_dir_data: bool = Field(default=True, description="Evict pods with emptyDir.")
    force: bool = Field(default=False, description="Delete unmanaged pods (no controller).")
    pod_selector: LabelSelector | None = Field(
        default=None, description="Only evict pods matching this selector."
    )


class NodeWrightSpec(InputModel):
    node_selectors: LabelSelector = Field(
        default_factory=LabelSelector, description="Nodes this CR targets; empty = all nodes."
    )
    packages: dict[str, Package] = Field(default_factory=dict, description="Name -> package.")
    deployment_policy: str | None = Field(default=None, description="DeploymentPolicy name.")
    interruption_budget: InterruptionBudget | None = Field(
        default=None, description="Legacy batch size; exclusive with deploymentPolicy."
    )
    deployment_policy_options: DeploymentPolicyOptions | None = Field(
        default=None, description="Per-CR overrides of policy behaviour."
    )
    pod_non_interrupt_labels: LabelSelector | None = Field(
        default=None, description="Pods matching this must finish before the node is drained."
    )
    additional_tolerations: list[Toleration] = Field(
        default_factory=list, description="Added to package pods and used by the taint check."
    )
    priority: int = Field(default=200, ge=1, description="Lower runs first; ties by name.")
    sequencing: Sequencing = Field(default=Sequencing.NODE, description="node or all.")
    runtime_required: bool = Field(
        default=False, description="Node keeps the runtime-required taint until complete."
    )
    auto_taint_new_nodes: bool = Field(
        default=False, description="Taint new nodes (needs runtimeRequired)."
    )
    drain: Drain = Field(default_factory=Drain, description="How nodes are drained.")
    host_connection: HostConnection = Field(
        default=HostConnection.NSENTER, description="chroot or nsenter into the host."
    )


class ObjectMeta(InputModel):
    """The part of metadata the planner needs."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(description="Object name.")
    generation: int = Field(default=1, description="metadata.generation.")
    uid: str = Field(default="", description="metadata.uid.")
    labels: dict[str, str] = Field(default_factory=dict, description="Labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations.")
    creation_timestamp: str | None = Field(default=None, description="RFC 3339.")
    deletion_timestamp: str | None = Field(default=None, description="RFC 3339 when deleting.")


class NodeWright(InputModel):
    """A NodeWright object (cluster-scoped). ``status`` lives in ``lifecycle.status``."""

    model_config = ConfigDict(extra="ignore")

    api_version: str = Field(default=f"{API_GROUP}/{API_VERSION}", description="apiVersion.")
    kind: str = Field(default="NodeWright", description="kind.")
    metadata: ObjectMeta = Field(description="Object metadata.")
    spec: NodeWrightSpec = Field(description="Desired state.")


# --------------------------------------------------------------------------------------------
# DeploymentPolicy
# --------------------------------------------------------------------------------------------


class Budget(InputModel):
    percent: int | None = Field(default=None, description="Percent of matched nodes (1-100).")
    count: int | None = Field(default=None, description="Number of nodes (>= 1).")


class StrategyParams(InputModel):
    initial_batch: int = Field(default=1, description="First batch size (>= 1).")
    batch_threshold: int = Field(
        default=100, description="Percent of a batch that must succeed (1-100)."
    )
    failure_threshold: int | None = Field(
        default=None, description="Consecutive failed batches that stop the compartment."
    )
    safety_limit: int = Field(
        default=50, description="Progress percent after which failures neither stop nor shrink."
    )


class FixedStrategy(StrategyParams):
    pass


class LinearStrategy(StrategyParams):
    delta: int = Field(default=1, description="Batch growth per successful batch (>= 1).")


class ExponentialStrategy(StrategyParams):
    growth_factor: int = Field(default=2, description="Batch multiplier (>= 2).")


class StrategyKind(StrEnum):
    FIXED = "fixed"
    LINEAR = "linear"
    EXPONENTIAL = "exponential"


class Strategy(InputModel):
    """Exactly one of fixed, linear, exponential."""

    fixed: FixedStrategy | None = Field(default=None, description="Constant batch size.")
    linear: LinearStrategy | None = Field(default=None, description="Batch grows by delta.")
    exponential: ExponentialStrategy | None = Field(
        default=None, description="Batch grows by growthFactor."
    )


class PolicyDefault(InputModel):
    budget: Budget = Field(description="Ceiling for nodes in no compartment.")
    strategy: Strategy = Field(description="Strategy for nodes in no compartment.")


class Compartment(InputModel):
    name: str = Field(description="Unique name; __default__ is reserved.")
    selector: LabelSelector = Field(description="Nodes in this compartment.")
    budget: Budget = Field(description="Ceiling: max batch size and max nodes in progress.")
    strategy: Strategy | None = Field(default=None, description="Batch strategy; none = ceiling.")


class DeploymentPolicySpec(InputModel):
    default: PolicyDefault = Field(description="Budget and strategy for unmatched nodes.")
    compartments: list[Compartment] = Field(default_factory=list, description="Node groups.")
    reset_batch_state_on_completion: bool = Field(
        default=True, description="Reset batch state when a rollout completes."
    )


class DeploymentPolicy(InputModel):
    model_config = ConfigDict(extra="ignore")

    api_version: str = Field(default=f"{API_GROUP}/{API_VERSION}", description="apiVersion.")
    kind: str = Field(default="DeploymentPolicy", description="kind.")
    metadata: ObjectMeta = Field(description="Object metadata.")
    spec: DeploymentPolicySpec = Field(description="Desired state.")
