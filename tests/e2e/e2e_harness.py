"""End-to-end harness (the fixtures in conftest.py use it): sandbox, nodes, the real agent,
our controller.

- ``e2e`` (session): a Sandbox whose kubelet runs package pods by image repository: images under
  ``EXEC_REGISTRY`` run the real ``nwb-agent`` (exec mode) on the node's copy-on-write rootfs
  with an assembled example role; images under ``MISSING_REGISTRY`` cannot be pulled (the pod
  stays Pending, waiting in ErrImagePull / ImagePullBackOff); anything else is simulated (a pod
  that succeeds after 1 s; a package's ``env`` ``E2E_SIM_DURATION`` / ``E2E_SIM_EXIT_CODE``
  change that), for tests where real Ansible adds nothing. CRDs from the chart and the controller
  namespace exist.
- ``world`` (per test): unique node labels, helpers to add nodes, apply CRs/policies, read node
  state, run the controller in-process (``start_controller``) or as ``nwb controller``
  subprocesses (``spawn_controller``, for kill and leader-election tests); everything is undone
  afterwards.
- ``invariants`` (autouse for every test that uses ``world``): ``world.invariants``, an
  ``invariants.Invariants`` created with the World, watches Nodes, Pods, PodDisruptionBudgets,
  Namespaces and NodeWright CRs for the whole test and replays them in resourceVersion order
  afterwards. The test fails if a budget was ever violated, an interrupt pod ran or a node rebooted
  while it was schedulable or still had a workload pod a drain would evict, a node rebooted more
  than once (per incarnation) or twice for one interrupt, a human's cordon was lifted, or (once
  the body has passed) a node the controller held ends still cordoned, listed as held or with the
  runtime-required taint. A test whose intended end state differs says so:
  ``world.invariants.allow_reboots(node, 2, why)``, ``world.invariants.expect_held(node, why)``,
  ``world.invariants.allow_uncordon(node, revision)``. ``test_invariants.py`` provokes each
  violation without the controller and checks that it is reported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import waiting
from invariants import Invariants
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lifecycle.recovery import DEFAULT_OUTSIDE_RETRY, OutsideRetry
from lifecycle.validating import VALIDATION_LABEL
from nodewright_bridge.clock import SystemClock
from nodewright_bridge.controller.wiring import ReconcilerSettings, reconciler_factory
from nodewright_bridge.k8s.client import ClientSettings
from nodewright_bridge.k8s.rest import Rest
from nodewright_bridge.metrics import Metrics
from nodewright_bridge.runtime.manager import Manager, ManagerSettings
from nodewright_bridge.sandbox import Sandbox
from nodewright_bridge.sandbox.kubelet.exec_runner import ExecRunner
from nodewright_bridge.sandbox.kubelet.nodes import SimNode
from nodewright_bridge.sandbox.kubelet.runners import (
    DURATION_ANNOTATION,
    EXIT_CODE_ANNOTATION,
    ContainerSpec,
    ContainerStartError,
    RunningContainer,
    SimulateRunner,
)
from playbook_adapter.imaging import assemble_package
from playbook_adapter.introspection import introspect_role

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "charts" / "nodewright-bridge" / "crds"
EXAMPLE_ROLES = ROOT / "examples" / "roles"
TEST_ROLES = Path(__file__).resolve().parent / "roles"
EXEC_REGISTRY = "registry.e2e.local:5000/nwb"
SIM_REGISTRY = "sim.e2e.local/nwb"
MISSING_REGISTRY = "missing.e2e.local/nwb"
# Images under FLAKY_REGISTRY are simulated packages whose pull fails on the nodes named in
# ``DispatchRunner.failing_pulls`` (a node that cannot reach the registry; the validation pod
# on another node pulls them fine).
FLAKY_REGISTRY = "flaky.e2e.local/nwb"
# Package env read by the simulated runner (the controller passes a package's env to its pods).
SIM_DURATION_ENV = "E2E_SIM_DURATION"
SIM_EXIT_CODE_ENV = "E2E_SIM_EXIT_CODE"
NAMESPACE = "nodewright-system"
GROUP, VERSION = "bridge.nodewright.io", "v1alpha1"
TEST_LABEL = "e2e.nodewright.io/test"
WAIT_SECONDS = 120.0
# Per-test limit (pytest-timeout) of the slowest e2e tests, which mark themselves
# @pytest.mark.timeout(SLOW_TEST_SECONDS): 30-60 s alone, up to 2-3 min on a loaded 2-core CI
# box, too close to the suite's default (`timeout` in pyproject.toml, 240 s).
SLOW_TEST_SECONDS = 600

# The suite's one wait_for, with the e2e defaults: 120 s, polling every 0.2 s.
wait_for = functools.partial(waiting.wait_for, timeout=WAIT_SECONDS, interval=0.2)


class DispatchRunner:
    """Exec mode for images of ``EXEC_REGISTRY``, simulate mode for the rest."""

    materializes = True
    starts_at_once = False

    def __init__(self, image_map: dict[str, Path]) -> None:
        self.exec = ExecRunner(image_map)
        self.sim = SimulateRunner()
        self._prepared: set[str] = set()
        self._lock = threading.Lock()
        self.failing_pulls: set[str] = set()

    def prepare_node(self, node: SimNode) -> None:
        return None

    def start(self, node: SimNode, spec: ContainerSpec) -> RunningContainer:
        if spec.is_package_pod and self.exec.package_dir(spec.image) is not None:
            with self._lock:
                if node.name not in self._prepared:
                    self.exec.prepare_node(node)
                    self._prepared.add(node.name)
            return self.exec.start(node, spec)
        flaky = spec.image.startswith(FLAKY_REGISTRY + "/") and node.name in self.failing_pulls
        if spec.is_package_pod and (spec.image.startswith(MISSING_REGISTRY + "/") or flaky):
            raise ContainerStartError(
                f"pull {spec.image}: manifest unknown", reason="ErrImagePull", exit_code=0
            )
        if spec.is_package_pod:
            knobs = {
                DURATION_ANNOTATION: spec.env.get(SIM_DURATION_ENV),
                EXIT_CODE_ANNOTATION: spec.env.get(SIM_EXIT_CODE_ENV),
            }
            extra = {k: v for k, v in knobs.items() if v is not None}
            if extra:
                notes = {**spec.pod_annotations, **extra}
                spec = dataclasses.replace(spec, pod_annotations=notes)
        return self.sim.start(node, spec)

    def release_node(self, node: SimNode) -> None:
        with self._lock:
            prepared = node.name in self._prepared
            self._prepared.discard(node.name)
        if prepared:
            self.exec.release_node(node)

    def close(self) -> None:
        self.exec.close()


def _package_dirs(dest: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for base in (EXAMPLE_ROLES, TEST_ROLES):
        for role in sorted(p for p in base.iterdir() if p.is_dir()):
            target = dest / role.name
            manifest = introspect_role(role, fallback_version="1.0.0")
            assemble_package(role, manifest, target)
            out[f"{EXEC_REGISTRY}/{role.name}"] = target
    return out


class E2E:
    def __init__(
        self, box: Sandbox, api: client.ApiClient, runner: DispatchRunner | None = None
    ) -> None:
        self.box = box
        self.runner = runner
        self.api = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.coordination = client.CoordinationV1Api(api)
        self.kubeconfig = box.kubeconfig


class InProcessController:
    """The real manager + reconciler in threads of the test process."""

    def __init__(
        self,
        kubeconfig: Path,
        *,
        identity: str,
        leader_elect: bool,
        outside_retry: OutsideRetry = DEFAULT_OUTSIDE_RETRY,
    ) -> None:
        self.metrics = Metrics()
        rest = Rest.connect(ClientSettings(kubeconfig=str(kubeconfig)), metrics=self.metrics)
        settings = ManagerSettings(
            identity=identity,
            namespace=NAMESPACE,
            metrics_addr="127.0.0.1:0",
            leader_elect=leader_elect,
        )
        self.manager = Manager(
            rest,
            reconciler_factory(ReconcilerSettings(outside_retry=outside_retry)),
            settings,
            clock=SystemClock(),
            metrics=self.metrics,
        )
        self.exit_code: int | None = None
        self.thread = threading.Thread(target=self._run, name=f"controller-{identity}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.exit_code = self.manager.run()

    def stop(self) -> None:
        self.manager.stop()
        self.thread.join(60)


class World:
    """One test's nodes, objects and controllers; all undone in ``cleanup``."""

    def __init__(self, env: E2E) -> None:
        self.env = env
        self.core = env.core
        self.custom = env.custom
        self.id = uuid.uuid4().hex[:6]
        self.labels = {TEST_LABEL: self.id}
        self.nodes: list[str] = []
        self.crs: list[str] = []
        self.policies: list[str] = []
        self.namespaces: list[str] = []
        self.controllers: list[InProcessController] = []
        self.processes: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        self.invariants = Invariants(env.kubeconfig, node_prefix=f"e{self.id}-")

    # -- nodes -------------------------------------------------------------------------------

    def add_nodes(
        self, count: int, labels: dict[str, str] | None = None, prefix: str = "n"
    ) -> list[str]:
        kubelet = self.env.box.kubelet
        assert kubelet is not None
        names = [f"e{self.id}-{prefix}{i}" for i in range(count)]
        kubelet.add_nodes(names, labels={**self.labels, **(labels or {})})
        self.nodes += names
        self.invariants.track(names)
        for name in names:
            wait_for(lambda n=name: self.node_ready(n), what=f"node {name} Ready")
        return names

    def node(self, name: str) -> Any:
        return self.core.read_node(name)

    def node_ready(self, name: str) -> bool:
        try:
            node = self.core.read_node(name)
        except ApiException:
            return False
        return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

    def annotations(self, name: str) -> dict[str, str]:
        return dict(self.core.read_node(name).metadata.annotations or {})

    def state(self, cr: str, node: str) -> dict[str, Any]:
        text = self.annotations(node).get(f"bridge.nodewright.io/state-{cr}")
        return json.loads(text) if text else {}

    def node_status(self, cr: str, node: str) -> str | None:
        return (self.core.read_node(node).metadata.labels or {}).get(
            f"bridge.nodewright.io/status-{cr}"
        )

    def boot_id(self, node: str) -> str:
        return str(self.core.read_node(node).status.node_info.boot_id)

    # -- objects -----------------------------------------------------------------------------

    def cr_name(self, base: str) -> str:
        return f"{base}-{self.id}"

    def apply_cr(
        self, name: str, spec: dict[str, Any], annotations: dict[str, str] | None = None
    ) -> dict[str, Any]:
        # chroot: the sandbox isolates each pod in its own PID namespace; nsenter would enter the
        # pod's own view instead of the node root (docs/node-pod-contract.md, "In the sandbox").
        spec = {
            "nodeSelectors": {"matchLabels": dict(self.labels)},
            "hostConnection": "chroot",
            **spec,
        }
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeWright",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": spec,
        }
        created = self.custom.create_cluster_custom_object(GROUP, VERSION, "nodewrights", body)
        self.crs.append(name)
        return dict(created)

    def patch_cr(self, name: str, patch: dict[str, Any]) -> None:
        self.custom.patch_cluster_custom_object(GROUP, VERSION, "nodewrights", name, patch)

    def get_cr(self, name: str) -> dict[str, Any]:
        return dict(self.custom.get_cluster_custom_object(GROUP, VERSION, "nodewrights", name))

    def cr_gone(self, name: str) -> bool:
        try:
            self.get_cr(name)
        except ApiException as exc:
            return exc.status == 404
        return False

    def apply_policy(self, name: str, spec: dict[str, Any]) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "DeploymentPolicy",
            "metadata": {"name": name},
            "spec": spec,
        }
        self.custom.create_cluster_custom_object(GROUP, VERSION, "deploymentpolicies", body)
        self.policies.append(name)

    def condition(self, cr: str, kind: str) -> dict[str, Any] | None:
        for cond in (self.get_cr(cr).get("status") or {}).get("conditions") or []:
            if cond.get("type") == kind:
                return dict(cond)
        return None

    def await_condition(
        self, cr: str, kind: str, holds: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any]:
        """A condition is written with the CR status, a pass after the node state that caused
        it: a test that saw the node state waits for the condition rather than reading it once."""

        def matching() -> dict[str, Any] | None:
            cond = self.condition(cr, kind)
            return cond if cond is not None and holds(cond) else None

        try:
            return wait_for(matching, what=f"the {kind} condition")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last {kind}: {self.condition(cr, kind)}") from exc

    def cr_status(self, cr: str) -> dict[str, Any]:
        return dict(self.get_cr(cr).get("status") or {})

    def namespace(self) -> str:
        name = f"w-{self.id}-{len(self.namespaces)}"
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        self.namespaces.append(name)
        wait_for(
            lambda: _exists(lambda: self.core.read_namespaced_service_account("default", name)),
            what="default service account",
        )
        return name

    def pdb(self, namespace: str, name: str, *, min_available: int, labels: dict[str, str]) -> None:
        """A PodDisruptionBudget over the pods with ``labels`` in ``namespace``."""
        self.env.policy.create_namespaced_pod_disruption_budget(
            namespace,
            client.V1PodDisruptionBudget(
                metadata=client.V1ObjectMeta(name=name),
                spec=client.V1PodDisruptionBudgetSpec(
                    min_available=min_available,
                    selector=client.V1LabelSelector(match_labels=labels),
                ),
            ),
        )

    def package_pods(self, cr: str) -> list[Any]:
        """The CR's node pods (package and interrupt pods; not its validation pods)."""
        return list(
            self.core.list_namespaced_pod(
                NAMESPACE, label_selector=f"bridge.nodewright.io/cr={cr},!{VALIDATION_LABEL}"
            ).items
        )

    def validation_pods(self, cr: str) -> list[Any]:
        """The CR's validation pods (one per package spec, before any node works)."""
        return list(
            self.core.list_namespaced_pod(
                NAMESPACE, label_selector=f"bridge.nodewright.io/cr={cr},{VALIDATION_LABEL}"
            ).items
        )

    # -- controllers -------------------------------------------------------------------------

    def start_controller(
        self,
        *,
        identity: str = "",
        leader_elect: bool = False,
        outside_retry: OutsideRetry = DEFAULT_OUTSIDE_RETRY,
    ) -> InProcessController:
        """The controller in this process; ``outside_retry``: its recovery settings (back-off,
        pull deadline), as ``nwb controller`` options would set them."""
        ctl = InProcessController(
            self.env.kubeconfig,
            identity=identity or f"ctl-{self.id}",
            leader_elect=leader_elect,
            outside_retry=outside_retry,
        )
        self.controllers.append(ctl)
        return ctl

    def spawn_controller(self, identity: str, extra: Sequence[str] = ()) -> subprocess.Popen[bytes]:
        """``nwb controller`` as a process (``extra``: more of its options)."""
        log = Path(f"/tmp/nwb-e2e-{self.id}-{identity}.log")
        self.logs.append(log)
        env = {**os.environ, "POD_NAME": identity}
        proc = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "nwb"),
                "controller",
                "--kubeconfig",
                str(self.env.kubeconfig),
                "--metrics-addr",
                "127.0.0.1:0",
                "--log-format",
                "json",
                *extra,
            ],
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
        self.processes.append(proc)
        return proc

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        self.invariants.stop()
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        for ctl in self.controllers:
            ctl.stop()
        for name in self.crs:
            with contextlib.suppress(ApiException):
                self.custom.patch_cluster_custom_object(
                    GROUP, VERSION, "nodewrights", name, {"metadata": {"finalizers": None}}
                )
            with contextlib.suppress(ApiException):
                self.custom.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", name)
        for name in self.policies:
            with contextlib.suppress(ApiException):
                self.custom.delete_cluster_custom_object(GROUP, VERSION, "deploymentpolicies", name)
        for name in self.namespaces:
            with contextlib.suppress(ApiException):
                self.core.delete_namespace(name)
        with contextlib.suppress(ApiException):
            for pod in self.core.list_namespaced_pod(NAMESPACE).items:
                if (pod.spec.node_name or "").startswith(f"e{self.id}-"):
                    self.core.delete_namespaced_pod(
                        pod.metadata.name, NAMESPACE, grace_period_seconds=0
                    )
        kubelet = self.env.box.kubelet
        if self.nodes and kubelet is not None:
            with contextlib.suppress(Exception):
                kubelet.remove_nodes(self.nodes)


def _exists(read: Callable[[], Any]) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True
