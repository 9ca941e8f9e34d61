"""The container-runner seam of the sandbox kubelet, and the ``simulate`` runner.

The kubelet turns a pod into one ``ContainerSpec`` per container (init containers first, one at a
time; then all app containers) and hands each to a ``ContainerRunner``. What the runner returns is
polled from the kubelet's loop; nothing in a runner may block for long in ``poll`` or
``termination_message``. ``start`` and ``kill`` run on a worker thread and may take a few seconds.

What the kubelet has already done before ``start``:
- resolved the environment (``env`` + ``envFrom``, incl. ``valueFrom`` configMapKeyRef,
  secretKeyRef, fieldRef) into ``ContainerSpec.env`` - only when ``runner.materializes`` is True;
- materialized ConfigMap, Secret, emptyDir, downwardAPI and projected volumes as directories under
  the node's ``state_dir`` (``VolumeMount.source``) - only when ``runner.materializes`` is True;
- created an empty termination-message file on the host (``ContainerSpec.termination_log``) in a
  per-container scratch directory (``ContainerSpec.scratch_dir``) - only when
  ``runner.materializes`` is True (simulate mode writes nothing to disk per pod). The runner makes
  the file appear at ``termination_message_path`` inside the container and reports its content
  through ``RunningContainer.termination_message()``.

hostPath volumes are not materialized: ``VolumeMount.host_path`` keeps the node-side path as
written in the pod, and ``VolumeMount.resolve(node)`` maps it under ``node.root_dir`` (so a hostPath
``/`` is the node's own root filesystem, never the real machine's).

Runners for real execution (``exec``, ``podman``) live in their own modules and implement the same
protocols; ``simulate`` is here because the kubelet's scale path depends on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from lifecycle import durations
from lifecycle.results import AgentResult, CheckReport
from lifecycle.validating import VALIDATION_LABEL, ValidationResult
from nodewright_bridge.sandbox.kubelet.nodes import SimNode

# Pods with this label are package pods; all others are workload pods (docs/node-pod-contract.md,
# "In the sandbox").
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "nodewright-bridge"
DURATION_ANNOTATION = "sandbox.nodewright.io/duration"
EXIT_CODE_ANNOTATION = "sandbox.nodewright.io/exit-code"
MESSAGE_ANNOTATION = "sandbox.nodewright.io/message"
# On a simulated node: what its check pods report (see ``default_message``).
WOULD_CHANGE_LABEL = "sandbox.nodewright.io/would-change"
# A package pod without a duration annotation still takes a moment, like a quick real run.
DEFAULT_PACKAGE_DURATION_SECONDS = 1.0
# Exit code reported for a container that was killed (128 + SIGKILL), as a real runtime does.
KILLED_EXIT_CODE = 137


class RunnerMode(StrEnum):
    SIMULATE = "simulate"
    EXEC = "exec"
    PODMAN = "podman"


class VolumeKind(StrEnum):
    HOST_PATH = "hostPath"
    CONFIG_MAP = "configMap"
    SECRET = "secret"
    EMPTY_DIR = "emptyDir"
    DOWNWARD_API = "downwardAPI"
    PROJECTED = "projected"
    OTHER = "other"  # a volume type the sandbox does not materialize (an empty dir is given)


@dataclass(frozen=True, slots=True)
class VolumeMount:
    """One volumeMount of a container, with where its content lives on the real host."""

    name: str
    kind: VolumeKind
    mount_path: str  # inside the container
    read_only: bool = False
    sub_path: str = ""
    mount_propagation: str = ""
    # hostPath volumes: the node-side path as written in the pod (e.g. "/"); see resolve().
    host_path: str = ""
    # Every other kind: the directory the kubelet materialized on the real host (None when the
    # runner does not materialize, i.e. simulate mode).
    source: Path | None = None

    def resolve(self, node: SimNode) -> Path | None:
        """The real-host directory backing this mount on ``node`` (sub_path applied).

        hostPath volumes map under ``node.root_dir``; without a root dir they have no backing.
        """
        if self.kind is VolumeKind.HOST_PATH:
            if node.root_dir is None:
                return None
            base = node.root_dir / self.host_path.lstrip("/")
        elif self.source is None:
            return None
        else:
            base = self.source
        return base / self.sub_path if self.sub_path else base


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """Everything a runner needs to start one container of a pod on one node."""

    namespace: str
    pod_name: str
    pod_uid: str
    node_name: str
    name: str  # container name
    image: str
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    volume_mounts: tuple[VolumeMount, ...] = ()
    working_dir: str = ""
    privileged: bool = False
    host_pid: bool = False
    host_network: bool = False
    init: bool = False
    restart_policy: str = "Always"
    termination_message_path: str = "/dev/termination-log"
    # Host-side file the runner maps to termination_message_path (created empty by the kubelet).
    termination_log: Path | None = None
    # Per-container scratch directory on the real host, under the node's state_dir.
    scratch_dir: Path | None = None
    pod_labels: dict[str, str] = field(default_factory=dict)
    pod_annotations: dict[str, str] = field(default_factory=dict)
    # The pod's securityContext overlaid with the container's (the container's fields win).
    security_context: dict[str, Any] = field(default_factory=dict)

    @property
    def is_package_pod(self) -> bool:
        return is_package_pod(self.pod_labels)

    @property
    def is_validation_pod(self) -> bool:
        """A package's validation pod (``nwb-agent validate``): a package pod that only reads."""
        return self.is_package_pod and VALIDATION_LABEL in self.pod_labels


def is_package_pod(labels: Mapping[str, str] | None) -> bool:
    """Package pods run in the kubelet's package mode; all others are workload pods."""
    return (labels or {}).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE


class RunningContainer(Protocol):
    """A started container. All methods are safe to call from any thread, repeatedly."""

    def poll(self) -> int | None:
        """The exit code once the container has ended, else None. Must not block."""
        ...

    def kill(self) -> None:
        """Stop the container now (SIGKILL semantics); poll() then returns an exit code."""
        ...

    def termination_message(self) -> str:
        """The termination message (at most 4096 bytes is kept by the kubelet); "" if none."""
        ...


class ContainerRunner(Protocol):
    """Runs containers for the kubelet; one instance serves all nodes of a kubelet."""

    # True: the kubelet resolves env, materializes volumes and makes the container's scratch dir
    # and termination-log file before start(). Simulate mode skips that work (its API reads and
    # its disk writes) so a thousand nodes stay cheap.
    materializes: bool
    # True: start() returns at once (no process, no image). The kubelet then writes the pod's
    # first status after the start (Running), not before it as well (Pending): like a kubelet's
    # status manager, which writes only the newest status when it changes faster than it syncs.
    # One pod status patch less per pod is a third of a scale run's kubelet writes.
    starts_at_once: bool

    def prepare_node(self, node: SimNode) -> None:
        """Called once per node before its first pod (may set ``node.root_dir``)."""
        ...

    def start(self, node: SimNode, spec: ContainerSpec) -> RunningContainer:
        """Start one container; raise ``ContainerStartError`` if it cannot start."""
        ...

    def release_node(self, node: SimNode) -> None:
        """Called once per node when the kubelet stops (unmount, clean up)."""
        ...

    def close(self) -> None:
        """Called once when the kubelet stops, after every node was released."""
        ...


class ContainerStartError(Exception):
    """A container could not start; the kubelet reports it as terminated with this reason."""

    def __init__(self, message: str, *, reason: str = "StartError", exit_code: int = 128) -> None:
        super().__init__(message)
        self.reason = reason
        self.exit_code = exit_code


@dataclass
class SimulatedContainer:
    """A container that 'runs' until a deadline (or forever) and then exits with a fixed outcome."""

    deadline: float | None  # time.monotonic() value; None = runs until killed
    exit_code: int
    message: str
    _killed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def poll(self) -> int | None:
        with self._lock:
            return self._exit_code()

    def kill(self) -> None:
        with self._lock:
            if self._exit_code() is None:
                self._killed = True

    def _exit_code(self) -> int | None:
        if self._killed:
            return KILLED_EXIT_CODE
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return self.exit_code
        return None

    def termination_message(self) -> str:
        with self._lock:
            if self._killed or self._exit_code() is None:
                return ""
        return self.message


def _seconds(text: str, default: float) -> float:
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        return durations.parse_duration(text).total_seconds()


class SimulateRunner:
    """``simulate`` mode: no process at all; the outcome comes from pod annotations.

    - Package pods (label ``app.kubernetes.io/managed-by=nodewright-bridge``) end after
      ``sandbox.nodewright.io/duration`` (default 1s) with ``.../exit-code`` (default 0) and
      ``.../message`` (default: a successful AgentResult for the pod's package and version; for
      a validation pod a passed ValidationResult).
    - Other pods run until deleted, except restartPolicy Never pods with a duration annotation,
      which end after it like a Job's pod.
    """

    materializes = False
    starts_at_once = True

    def prepare_node(self, node: SimNode) -> None:
        return None

    def release_node(self, node: SimNode) -> None:
        return None

    def close(self) -> None:
        return None

    def start(self, node: SimNode, spec: ContainerSpec) -> SimulatedContainer:
        notes = spec.pod_annotations
        finite = (
            spec.is_package_pod
            or spec.init
            or (spec.restart_policy != "Always" and DURATION_ANNOTATION in notes)
        )
        if not finite:
            return SimulatedContainer(deadline=None, exit_code=0, message="")
        default_duration = DEFAULT_PACKAGE_DURATION_SECONDS if spec.is_package_pod else 0.0
        try:
            duration = _seconds(notes.get(DURATION_ANNOTATION, ""), default_duration)
            exit_code = int(notes.get(EXIT_CODE_ANNOTATION, "0"))
        except ValueError as exc:
            raise ContainerStartError(f"bad sandbox annotation: {exc}") from exc
        message = notes.get(MESSAGE_ANNOTATION)
        if message is None:
            message = default_message(spec, node) if spec.is_package_pod else ""
        return SimulatedContainer(
            deadline=time.monotonic() + duration, exit_code=exit_code, message=message
        )


def default_message(spec: ContainerSpec, node: SimNode | None = None) -> str:
    """A successful agent result for a package pod, as the real agent would write.

    A check pod (``run --check``) reports nothing to change, unless its node carries the label
    ``sandbox.nodewright.io/would-change`` (``true``: one task would change; ``reboot``: and
    the reboot handler would fire), so scale runs can mix compliant and changing nodes.
    """
    if spec.is_validation_pod:
        passed = ValidationResult(
            package=spec.pod_labels.get(VALIDATION_LABEL, ""),
            version=spec.env.get("NW_VERSION", ""),
            passed=True,
        )
        return passed.to_termination_message()
    result = AgentResult(
        package=spec.pod_labels.get("bridge.nodewright.io/package", ""),
        version=spec.pod_labels.get("bridge.nodewright.io/version", ""),
    )
    if "--check" in spec.args:
        would = (node.labels if node is not None else {}).get(WOULD_CHANGE_LABEL, "")
        changed = 1 if would in ("true", "reboot") else 0
        result = result.model_copy(
            update={
                "check": CheckReport(changed=changed, tasks=["simulated change"][:changed]),
                "reboot_requested": would == "reboot",
            }
        )
    return result.to_termination_message()
