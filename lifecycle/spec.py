"""API models for the NodeWright and DeploymentPolicy custom resources (``bridge.nodewright.io``).

These models are the single source of truth: the CRD schemas are generated from them, ``nwb plan``
validates files with them offline, and the controller parses live objects with them. Field names
follow NodeWright where the idea is the same (see docs/architecture.md, "The API in brief").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any, Self

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from lifecycle import selectors, versions
from lifecycle.dag import DependencyGraph
from lifecycle.durations import is_go_duration, parse_duration
from lifecycle.quantities import parse_quantity
from lifecycle.wire import InputModel

API_GROUP = "bridge.nodewright.io"
API_VERSION = "v1alpha1"
PREFIX = f"{API_GROUP}/"

# Validation limits. Each is also emitted into the CRD schema.
NAME_MAX = 50  # node annotation keys are "bridge.nodewright.io/state-<name>": the name part <= 63
PACKAGE_NAME_PATTERN = r"^[a-z][-a-z0-9]{0,41}[a-z]$"  # NodeWright's rule: 2-43 chars
PACKAGES_MAX = 64  # bounds the CEL cost of the dependsOn rule; far above real CRs
DIGEST_PATTERN = r"^sha256:[a-f0-9]{64}$"
DNS1123_SUBDOMAIN_PATTERN = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"  # max 253 chars
)
RESERVED_COMPARTMENT = "__default__"  # the implicit compartment of nodes no selector matches
# Ansible tag names as ansible-playbook --tags takes them: comma-separated, each stripped, so a
# tag can hold neither a comma nor surrounding blanks. The bounds keep the pod env and CEL small.
TAG_PATTERN = r"^[^,\s]([^,]*[^,\s])?$"
TAGS_MAX = 64
TAG_MAX_CHARS = 128
# A drift check is a pod per node and package; below this a fleet would do nothing but check.
MIN_DRIFT_INTERVAL_SECONDS = 10

_PACKAGE_NAME = re.compile(PACKAGE_NAME_PATTERN)
_DIGEST = re.compile(DIGEST_PATTERN)
_TAG = re.compile(TAG_PATTERN)
LABEL_NAME_PATTERN = r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
_LABEL_NAME = re.compile(LABEL_NAME_PATTERN)
_DNS1123_SUBDOMAIN = re.compile(DNS1123_SUBDOMAIN_PATTERN)
# Docker reference grammar: a path component, and an optional registry host[:port] in front.
_PATH_COMPONENT = re.compile(r"^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*$")
_REGISTRY_HOST = re.compile(
    r"^([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*"
    r"|\[[0-9a-fA-F:]+\])(:[0-9]+)?$"
)

RULE_ERROR = "nodewright_rule"


def _rule_error(problems: Iterable[tuple[str, str]]) -> PydanticCustomError:
    """One pydantic error carrying several ``(relative path, message)`` problems.

    ``lifecycle.validation`` expands them into one line each, rooted at the validator's location;
    the relative path uses camelCase wire names and may be empty.
    """
    items = tuple(problems)
    summary = "; ".join(f"{path}: {msg}" if path else msg for path, msg in items)
    return PydanticCustomError(RULE_ERROR, "{summary}", {"summary": summary, "problems": items})


def _check(problems: list[tuple[str, str]]) -> None:
    if problems:
        raise _rule_error(problems)


def _fail(message: str) -> PydanticCustomError:
    return _rule_error([("", message)])


def _exactly_one(names: dict[str, bool]) -> list[tuple[str, str]]:
    set_ = [n for n, present in names.items() if present]
    if len(set_) == 1:
        return []
    listed = " or ".join(names) if len(names) == 2 else ", ".join(names)
    if not set_:
        return [("", f"set exactly one of {listed}")]
    return [("", f"set exactly one of {listed}, not {' and '.join(set_)}")]


def _duration(value: str, *, allow_zero: bool = False) -> str:
    if not is_go_duration(value):
        raise _fail(f'"{value}" is not a Go duration (e.g. 30s, 5m, 1h30m)')
    if not allow_zero and parse_duration(value).total_seconds() <= 0:
        raise _fail(f'"{value}" must be longer than zero')
    return value


def check_image(image: str) -> str | None:
    """Why ``image`` is not a repository reference without tag, or None when it is fine."""
    if not image:
        return "must not be empty"
    if "@" in image:
        return f'"{image}" contains a digest; put "sha256:..." in digest instead'
    parts = image.split("/")
    if ":" in parts[-1]:
        return (
            f'"{image}" includes a tag; give the repository only and put the tag in version '
            "(or pin the image with digest)"
        )
    has_host = len(parts) > 1 and (
        "." in parts[0] or ":" in parts[0] or parts[0] == "localhost" or parts[0].startswith("[")
    )
    if has_host and not _REGISTRY_HOST.match(parts[0]):
        return f'"{image}" has an invalid registry host "{parts[0]}"'
    for part in parts[1:] if has_host else parts:
        if not _PATH_COMPONENT.match(part):
            return (
                f'"{image}" has an invalid path component "{part}" '
                "(lowercase letters, digits, and . _ - between them)"
            )
    return None


def check_label_key(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes label key (``[prefix/]name``), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or check_dns1123_subdomain(prefix) is not None):
        return f'label key "{key}" has an invalid prefix (must be a DNS-1123 subdomain)'
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return (
            f'label key "{key}" is invalid (at most 63 letters, digits, "-", "_" or ".", '
            "starting and ending with a letter or digit, optionally after a DNS prefix and /)"
        )
    return None


def check_label_value(value: str) -> str | None:
    """Why ``value`` is not a Kubernetes label value, or None (the empty value is valid)."""
    if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
        return (
            f'label value "{value}" is invalid (at most 63 letters, digits, "-", "_" or ".", '
            "starting and ending with a letter or digit)"
        )
    return None


def check_dns1123_subdomain(name: str, *, max_length: int = 253) -> str | None:
    """Why ``name`` is not a DNS-1123 subdomain of at most ``max_length`` chars, or None."""
    if len(name) > max_length:
        return f'"{name}" is {len(name)} characters; at most {max_length} are allowed'
    if not _DNS1123_SUBDOMAIN.match(name):
        return (
            f'"{name}" is not a DNS-1123 subdomain (lowercase letters, digits, "-" and ".", '
            "starting and ending with a letter or digit)"
        )
    return None


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

    @model_validator(mode="after")
    def _values_fit_operator(self) -> Self:
        problems = [("key", p) for p in [check_label_key(self.key)] if p]
        problems += [
            (f"values[{i}]", p) for i, v in enumerate(self.values) if (p := check_label_value(v))
        ]
        _check(problems)
        if self.operator in (SelectorOperator.IN, SelectorOperator.NOT_IN) and not self.values:
            raise _rule_error([("values", f"operator {self.operator} needs at least one value")])
        if (
            self.operator in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST)
            and self.values
        ):
            raise _rule_error([("values", f"operator {self.operator} takes no values")])
        return self


class LabelSelector(InputModel):
    """A Kubernetes LabelSelector. Empty selects everything."""

    match_labels: dict[str, str] = Field(default_factory=dict, description="Exact label matches.")
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, description="Set-based requirements, all must hold."
    )

    @model_validator(mode="after")
    def _labels_are_valid(self) -> Self:
        problems: list[tuple[str, str]] = []
        for key, value in self.match_labels.items():
            problem = check_label_key(key) or check_label_value(value)
            if problem:
                problems.append((f"matchLabels.{key}", problem))
        _check(problems)
        return self


class Toleration(InputModel):
    key: str | None = Field(default=None, description="Taint key; empty with Exists matches all.")
    operator: str = Field(default="Equal", description="Equal or Exists.")
    value: str | None = Field(default=None, description="Taint value for Equal.")
    effect: str | None = Field(
        default=None, description="NoSchedule, PreferNoSchedule or NoExecute; empty matches all."
    )
    toleration_seconds: int | None = Field(default=None, description="For NoExecute taints.")

    @model_validator(mode="after")
    def _kubernetes_rules(self) -> Self:
        problems: list[tuple[str, str]] = []
        if self.operator not in ("Equal", "Exists"):
            problems.append(("operator", f'"{self.operator}" is not Equal or Exists'))
        if self.operator == "Exists" and self.value:
            problems.append(("value", "must be empty when operator is Exists"))
        if not self.key and self.operator != "Exists":
            problems.append(("operator", "must be Exists when key is empty"))
        if self.effect and self.effect not in {e.value for e in selectors.TaintEffect}:
            problems.append(
                ("effect", f'"{self.effect}" is not NoSchedule, PreferNoSchedule or NoExecute')
            )
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            problems.append(("tolerationSeconds", "only allowed with effect NoExecute"))
        _check(problems)
        return self


class EnvVar(InputModel):
    name: str = Field(min_length=1, description="Environment variable name.")
    value: str | None = Field(default=None, description="Literal value.")
    value_from: dict[str, Any] | None = Field(
        default=None, description="Kubernetes EnvVarSource (secretKeyRef, configMapKeyRef, ...)."
    )

    @model_validator(mode="after")
    def _value_or_value_from(self) -> Self:
        if self.value is not None and self.value_from is not None:
            raise _rule_error([("valueFrom", "value and valueFrom are mutually exclusive")])
        return self


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

    @model_validator(mode="after")
    def _services_only_for_service(self) -> Self:
        if self.type == InterruptType.SERVICE:
            if not self.services:
                raise _rule_error([("services", "type service needs at least one service")])
            if any(not s for s in self.services):
                raise _rule_error([("services", "service names must not be empty")])
        elif self.services:
            raise _rule_error([("services", f"only allowed with type service, not {self.type}")])
        return self


class Resources(InputModel):
    cpu_request: str | None = Field(default=None, description="CPU request (quantity).")
    cpu_limit: str | None = Field(default=None, description="CPU limit (quantity).")
    memory_request: str | None = Field(default=None, description="Memory request (quantity).")
    memory_limit: str | None = Field(default=None, description="Memory limit (quantity).")

    @field_validator("cpu_request", "cpu_limit", "memory_request", "memory_limit", mode="before")
    @classmethod
    def _numbers_are_quantities(cls, value: Any) -> Any:
        # Like core/v1 resources, a quantity may be written as a bare number (cpuRequest: 2).
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        return value

    @model_validator(mode="after")
    def _all_or_none_and_limits(self) -> Self:
        fields = {
            "cpuRequest": self.cpu_request,
            "cpuLimit": self.cpu_limit,
            "memoryRequest": self.memory_request,
            "memoryLimit": self.memory_limit,
        }
        missing = [k for k, v in fields.items() if v is None]
        if missing and len(missing) < len(fields):
            raise _fail(
                f"set all of cpuRequest, cpuLimit, memoryRequest, memoryLimit or none "
                f"(missing {', '.join(missing)})"
            )
        if missing:
            return self
        problems: list[tuple[str, str]] = []
        parsed = {}
        for key, text in fields.items():
            assert text is not None
            try:
                parsed[key] = parse_quantity(text)
            except ValueError as exc:
                problems.append((key, str(exc)))
                continue
            if parsed[key] <= 0:
                problems.append((key, f'"{text}" must be greater than zero'))
        for kind in ("cpu", "memory"):
            req, lim = parsed.get(f"{kind}Request"), parsed.get(f"{kind}Limit")
            if req is not None and lim is not None and lim < req:
                problems.append(
                    (
                        f"{kind}Limit",
                        f'"{fields[kind + "Limit"]}" is less than {kind}Request '
                        f'"{fields[kind + "Request"]}"',
                    )
                )
        _check(problems)
        return self


class Timeouts(InputModel):
    stage: str = Field(default="30m", description="Deadline for one package pod (Go duration).")
    drain: str = Field(default="30m", description="Deadline for draining the node.")
    interrupt: str = Field(
        default="20m", description="Deadline for an interrupt incl. reboot and node Ready again."
    )

    @field_validator("stage", "drain", "interrupt")
    @classmethod
    def _go_duration(cls, value: str) -> str:
        return _duration(value)


class Uninstall(InputModel):
    enabled: bool = Field(default=False, description="The package ships uninstall tasks.")
    apply: bool = Field(
        default=False, description="Uninstall on every targeted node; set back to false to cancel."
    )

    @model_validator(mode="after")
    def _apply_needs_enabled(self) -> Self:
        if self.apply and not self.enabled:
            raise _rule_error([("apply", "uninstall.apply requires uninstall.enabled")])
        return self


class SecretVarsRef(InputModel):
    secret_name: str = Field(min_length=1, description="Secret in the controller namespace.")
    key: str | None = Field(default=None, description="One key; all keys when empty.")


class Package(InputModel):
    version: str = Field(
        max_length=128,  # an image tag is at most 128 characters
        description="Strict semver; also the image tag unless a digest is pinned.",
    )
    image: str = Field(
        max_length=255,  # the registry limit for a repository name
        description="Image repository without tag; host:port/path works.",
    )
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
    preflight: bool = Field(
        default=False,
        description="Before a node's disruptive path, run the due stages in check mode "
        "(--check --diff) in a node pod that needs no cordon: a compliant node is recorded "
        "complete and never cordoned; otherwise the interrupt is what the handlers that would "
        "fire ask for; when check mode cannot tell, the declared path.",
    )
    tags: list[str] = Field(
        default_factory=list,
        max_length=TAGS_MAX,
        description="Run only the role's tasks with one of these Ansible tags, in every stage "
        "(ansible-playbook --tags); empty = all tasks.",
    )
    skip_tags: list[str] = Field(
        default_factory=list,
        max_length=TAGS_MAX,
        description="Skip the role's tasks with one of these Ansible tags, in every stage "
        "(ansible-playbook --skip-tags).",
    )

    @field_validator("tags", "skip_tags")
    @classmethod
    def _ansible_tag_names(cls, value: list[str]) -> list[str]:
        problems: list[tuple[str, str]] = []
        for index, tag in enumerate(value):
            if len(tag) > TAG_MAX_CHARS:
                problems.append((f"[{index}]", f"is longer than {TAG_MAX_CHARS} characters"))
            elif not _TAG.match(tag):
                problems.append(
                    (
                        f"[{index}]",
                        f'"{tag}" is not a tag name: it must be non-empty, without commas and '
                        "without leading or trailing spaces (give each tag as its own list item)",
                    )
                )
        _check(problems)
        return value

    @field_validator("version")
    @classmethod
    def _strict_semver(cls, value: str) -> str:
        if not versions.is_strict_semver(value):
            raise _fail(f'"{value}" is not strict semver (MAJOR.MINOR.PATCH)')
        return value

    @field_validator("image")
    @classmethod
    def _repository_without_tag(cls, value: str) -> str:
        problem = check_image(value)
        if problem is not None:
            raise _fail(problem)
        return value

    @field_validator("digest")
    @classmethod
    def _sha256_digest(cls, value: str | None) -> str | None:
        if value is not None and not _DIGEST.match(value):
            raise _fail(f'"{value}" is not "sha256:" followed by 64 lowercase hex digits')
        return value

    @field_validator("graceful_shutdown")
    @classmethod
    def _grace_is_duration(cls, value: str | None) -> str | None:
        return None if value is None else _duration(value, allow_zero=True)

    @model_validator(mode="after")
    def _cross_field_rules(self) -> Self:
        problems: list[tuple[str, str]] = []
        if "+" in self.version and self.digest is None:
            problems.append(
                (
                    "version",
                    f'"{self.version}" has build metadata, which cannot be an image tag; '
                    "pin the image with digest",
                )
            )
        keys = sorted({*self.vars, *self.config_map})
        for pattern in self.config_interrupts:
            if not any(k == pattern or fnmatchcase(k, pattern) for k in keys):
                problems.append(
                    (f"configInterrupts.{pattern}", "matches no key of vars or configMap")
                )
        _check(problems)
        return self


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
    percent: int | None = Field(
        default=None, ge=0, le=100, description="Percent of targeted nodes (0-100)."
    )
    count: int | None = Field(default=None, ge=0, description="Number of nodes.")

    @model_validator(mode="after")
    def _one_of_percent_count(self) -> Self:
        _check(_exactly_one({"percent": self.percent is not None, "count": self.count is not None}))
        return self


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
    disable_eviction: bool = Field(
        default=False,
        description=(
            "Delete pods instead of evicting them. PodDisruptionBudgets are NOT checked: "
            "every pod to go is deleted at once."
        ),
    )
    ignore_daemon_sets: bool = Field(
        default=True,
        description="Leave DaemonSet pods in place; false: a DaemonSet pod blocks the drain.",
    )
    grace_period: int | None = Field(
        default=None,
        ge=0,
        description="Seconds each pod gets to terminate; unset: the pod's own grace period.",
    )

    @field_validator("timeout")
    @classmethod
    def _go_duration(cls, value: str) -> str:
        return _duration(value)


class DriftDetection(InputModel):
    interval: str = Field(
        default="1h",
        description="How often each package is checked in check mode on nodes where the CR is "
        "complete (Go duration, at least 10s; each node's check is jittered by up to a tenth).",
    )
    remediate: bool = Field(
        default=False,
        description="Send drifted nodes through the normal batched path (the role runs again).",
    )

    @field_validator("interval")
    @classmethod
    def _go_duration(cls, value: str) -> str:
        checked = _duration(value)
        if parse_duration(checked).total_seconds() < MIN_DRIFT_INTERVAL_SECONDS:
            raise _fail(f'"{value}" is shorter than 10s')
        return checked


class NodeWrightSpec(InputModel):
    node_selectors: LabelSelector = Field(
        default_factory=LabelSelector, description="Nodes this CR targets; empty = all nodes."
    )
    packages: dict[str, Package] = Field(
        default_factory=dict, max_length=PACKAGES_MAX, description="Name -> package."
    )
    deployment_policy: str | None = Field(
        default=None, max_length=253, description="DeploymentPolicy name."
    )
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
    drift_detection: DriftDetection | None = Field(
        default=None,
        description="Check complete nodes for drift every interval (check mode, no cordon); "
        "drifted nodes are labelled bridge.nodewright.io/drift-<cr>=true.",
    )

    @field_validator("packages", mode="before")
    @classmethod
    def _package_names(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value  # the type check reports it
        _check(
            [
                (
                    name,
                    "package name must be 2-43 characters of lowercase letters, digits and "
                    "'-', starting and ending with a letter",
                )
                for name in value
                if not isinstance(name, str) or not _PACKAGE_NAME.match(name)
            ]
        )
        return value

    @field_validator("deployment_policy")
    @classmethod
    def _policy_name(cls, value: str | None) -> str | None:
        problem = None if value is None else check_dns1123_subdomain(value)
        if problem is not None:
            raise _fail(problem)
        return value

    @model_validator(mode="after")
    def _cross_field_rules(self) -> Self:
        problems: list[tuple[str, str]] = []
        if self.deployment_policy is not None and self.interruption_budget is not None:
            problems.append(
                (
                    "interruptionBudget",
                    "deploymentPolicy and interruptionBudget are mutually exclusive; use one",
                )
            )
        if self.auto_taint_new_nodes and not self.runtime_required:
            problems.append(("autoTaintNewNodes", "requires runtimeRequired: true"))
        for name, pkg in self.packages.items():
            for dep, wanted in pkg.depends_on.items():
                path = f"packages.{name}.dependsOn.{dep}"
                other = self.packages.get(dep)
                if other is None:
                    problems.append((path, f'no package "{dep}" in this NodeWright'))
                elif other.version != wanted:
                    problems.append(
                        (
                            path,
                            f'wants version "{wanted}" but package "{dep}" has version '
                            f'"{other.version}"',
                        )
                    )
        graph = DependencyGraph(
            {n: [d for d in p.depends_on if d in self.packages] for n, p in self.packages.items()}
        )
        cycle = graph.find_cycle()
        if cycle is not None:
            problems.append(("packages", f"dependency cycle: {' -> '.join(cycle)}"))
        _check(problems)
        return self


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

    @field_validator("metadata")
    @classmethod
    def _name_fits_annotation_keys(cls, value: ObjectMeta) -> ObjectMeta:
        problem = check_dns1123_subdomain(value.name, max_length=NAME_MAX)
        if problem is not None:
            raise _rule_error([("name", problem)])
        return value


# --------------------------------------------------------------------------------------------
# DeploymentPolicy
# --------------------------------------------------------------------------------------------


class Budget(InputModel):
    percent: int | None = Field(
        default=None, ge=1, le=100, description="Percent of matched nodes (1-100)."
    )
    count: int | None = Field(default=None, ge=1, description="Number of nodes (>= 1).")

    @model_validator(mode="after")
    def _one_of_percent_count(self) -> Self:
        _check(_exactly_one({"percent": self.percent is not None, "count": self.count is not None}))
        return self


class StrategyParams(InputModel):
    initial_batch: int = Field(default=1, ge=1, description="First batch size (>= 1).")
    batch_threshold: int = Field(
        default=100, ge=1, le=100, description="Percent of a batch that must succeed (1-100)."
    )
    failure_threshold: int | None = Field(
        default=None, ge=1, description="Consecutive failed batches that stop the compartment."
    )
    safety_limit: int = Field(
        default=50,
        ge=1,
        le=100,
        description="Progress percent after which failures neither stop nor shrink.",
    )


class FixedStrategy(StrategyParams):
    pass


class LinearStrategy(StrategyParams):
    delta: int = Field(default=1, ge=1, description="Batch growth per successful batch (>= 1).")


class ExponentialStrategy(StrategyParams):
    growth_factor: int = Field(default=2, ge=2, description="Batch multiplier (>= 2).")


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

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> Self:
        _check(
            _exactly_one(
                {
                    "fixed": self.fixed is not None,
                    "linear": self.linear is not None,
                    "exponential": self.exponential is not None,
                }
            )
        )
        return self

    @property
    def kind(self) -> StrategyKind:
        """Which of the three strategies is set."""
        if self.linear is not None:
            return StrategyKind.LINEAR
        if self.exponential is not None:
            return StrategyKind.EXPONENTIAL
        return StrategyKind.FIXED


class PolicyDefault(InputModel):
    budget: Budget = Field(description="Ceiling for nodes in no compartment.")
    strategy: Strategy = Field(description="Strategy for nodes in no compartment.")


class Compartment(InputModel):
    name: str = Field(
        min_length=1, max_length=63, description="Unique name; __default__ is reserved."
    )
    selector: LabelSelector = Field(description="Nodes in this compartment.")
    budget: Budget = Field(description="Ceiling: max batch size and max nodes in progress.")
    strategy: Strategy | None = Field(default=None, description="Batch strategy; none = ceiling.")

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value == RESERVED_COMPARTMENT:
            raise _fail(f"{RESERVED_COMPARTMENT} is reserved for nodes no compartment selects")
        return value


class DeploymentPolicySpec(InputModel):
    default: PolicyDefault = Field(description="Budget and strategy for unmatched nodes.")
    compartments: list[Compartment] = Field(default_factory=list, description="Node groups.")
    reset_batch_state_on_completion: bool = Field(
        default=True, description="Reset batch state when a rollout completes."
    )

    @model_validator(mode="after")
    def _unique_compartments(self) -> Self:
        problems: list[tuple[str, str]] = []
        first_by_name: dict[str, int] = {}
        for i, comp in enumerate(self.compartments):
            if comp.name in first_by_name:
                problems.append(
                    (
                        f"compartments[{i}].name",
                        f'"{comp.name}" is also the name of '
                        f"compartments[{first_by_name[comp.name]}]",
                    )
                )
            else:
                first_by_name[comp.name] = i
            for j in range(i):
                if selectors.selectors_equal(self.compartments[j].selector, comp.selector):
                    problems.append(
                        (
                            f"compartments[{i}].selector",
                            f"selects the same nodes as compartments[{j}] "
                            f'("{self.compartments[j].name}")',
                        )
                    )
                    break
        _check(problems)
        return self


class DeploymentPolicy(InputModel):
    model_config = ConfigDict(extra="ignore")

    api_version: str = Field(default=f"{API_GROUP}/{API_VERSION}", description="apiVersion.")
    kind: str = Field(default="DeploymentPolicy", description="kind.")
    metadata: ObjectMeta = Field(description="Object metadata.")
    spec: DeploymentPolicySpec = Field(description="Desired state.")

    @field_validator("metadata")
    @classmethod
    def _name_is_dns_subdomain(cls, value: ObjectMeta) -> ObjectMeta:
        problem = check_dns1123_subdomain(value.name)
        if problem is not None:
            raise _rule_error([("name", problem)])
        return value
