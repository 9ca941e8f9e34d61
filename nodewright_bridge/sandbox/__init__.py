"""The sandbox: a real control plane on loopback with simulated nodes.

The design is in docs/architecture.md, "The sandbox"; how node pods run here in
docs/node-pod-contract.md, "In the sandbox".

``Sandbox`` starts, in order: the control-plane binaries (built into the cache when missing), etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, optionally a local image registry, and the
simulated kubelet serving N nodes in one of three package modes (simulate, exec, podman), or, in
mode ``kubelet``, one to three real kubelet and containerd nodes (``kubeletnode``). Use it
as a context manager or call ``start()``/``stop()``. ``nwb sandbox up`` runs one in a detached
supervisor process (``nodewright_bridge.sandbox.supervisor``). ``restart_apiserver()`` restarts
the API server in place while the kubelet and every client keep running (chaos tests).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nodewright_bridge.sandbox import binaries
from nodewright_bridge.sandbox.controlplane import ControlPlane
from nodewright_bridge.sandbox.kubelet.api import RawApi
from nodewright_bridge.sandbox.kubelet.kubelet import HEARTBEAT_SECONDS, Kubelet
from nodewright_bridge.sandbox.kubelet.nodes import SimNode
from nodewright_bridge.sandbox.kubelet.runners import ContainerRunner, RunnerMode, SimulateRunner
from nodewright_bridge.sandbox.kubeletnode.netns import ConnectProxy, egress_selector_config
from nodewright_bridge.sandbox.registry import Registry

if TYPE_CHECKING:  # the tier pulls in the image tooling: imported when a tier starts
    from nodewright_bridge.sandbox.kubeletnode.tier import KubeletTier

__all__ = ["Sandbox", "default_state_dir", "make_runner"]

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
DEFAULT_NODE_PREFIX = "node-"
KUBELET_TIER_MODE = "kubelet"
# Registration is parallel; this bounds how long start() waits for every node to be served.
NODES_READY_TIMEOUT_SECONDS = 300.0


def default_state_dir() -> Path:
    """``<cache>/sandbox``: where ``nwb sandbox up`` keeps its state."""
    return binaries.cache_root() / "sandbox"


def node_names(count: int, prefix: str = DEFAULT_NODE_PREFIX, start: int = 0) -> list[str]:
    width = max(3, len(str(start + count - 1)))
    return [f"{prefix}{i:0{width}d}" for i in range(start, start + count)]


def make_runner(
    mode: RunnerMode, *, image_map: Mapping[str, Path] | None = None
) -> ContainerRunner:
    """The package-pod runner for ``mode`` (exec and podman import their modules lazily)."""
    if mode is RunnerMode.SIMULATE:
        return SimulateRunner()
    if mode is RunnerMode.EXEC:
        from nodewright_bridge.sandbox.kubelet.exec_runner import ExecRunner  # noqa: PLC0415

        return ExecRunner(dict(image_map or {}))
    from nodewright_bridge.sandbox.kubelet.podman_runner import PodmanRunner  # noqa: PLC0415

    return PodmanRunner()


class Sandbox:
    """Control plane + simulated kubelet (+ registry) rooted at ``state_dir``."""

    def __init__(
        self,
        state_dir: Path,
        *,
        nodes: int = 3,
        labels: Mapping[str, str] | None = None,
        mode: RunnerMode | str = RunnerMode.SIMULATE,  # or KUBELET_TIER_MODE
        registry: bool = False,
        node_prefix: str = DEFAULT_NODE_PREFIX,
        image_map: Mapping[str, Path] | None = None,
        runner: ContainerRunner | None = None,
        heartbeat_seconds: float | None = None,
        apiserver_args: Sequence[str] = (),
    ) -> None:
        self.state_dir = state_dir
        # Added to kube-apiserver's flags (the benchmark's ``--profiling=true``).
        self.apiserver_args = list(apiserver_args)
        self.node_count = nodes
        self.labels = dict(labels or {})
        # The kubelet tier has no package runner: real kubelets and containerd run the pods.
        self.kubelet_tier = str(mode) == KUBELET_TIER_MODE
        self.mode = RunnerMode.SIMULATE if self.kubelet_tier else RunnerMode(mode)
        self.with_registry = registry or self.kubelet_tier
        self.tier: KubeletTier | None = None
        self._egress: ConnectProxy | None = None
        self.node_prefix = node_prefix
        self.image_map = dict(image_map or {})
        self._runner = runner
        self.heartbeat_seconds = heartbeat_seconds
        self.control_plane: ControlPlane | None = None
        self.registry: Registry | None = None
        self.kubelet: Kubelet | None = None
        self.api: RawApi | None = None
        self.timings: dict[str, float] = {}

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "controlplane" / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return self.control_plane.server if self.control_plane else ""

    @property
    def nodes(self) -> list[SimNode]:
        return list(self.kubelet.nodes.values()) if self.kubelet else []

    @property
    def node_names(self) -> list[str]:
        if self.tier is not None:
            return list(self.tier.nodes)
        return [node.name for node in self.nodes]

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, progress: Progress | None = None) -> None:
        say = progress or (lambda text: log.info("%s", text))
        began = time.monotonic()
        try:
            say("locating control-plane binaries")
            found = binaries.ensure_binaries(progress=say, with_helm=False)
            cp_dir = self.state_dir / "controlplane"
            shutil.rmtree(cp_dir, ignore_errors=True)
            self.control_plane = ControlPlane(cp_dir, found)
            self.control_plane.extra_apiserver_args.extend(self.apiserver_args)
            if self.kubelet_tier:
                # The API server reaches the nodes' kubelets only through the nodes' namespaces.
                sock_dir = Path(tempfile.mkdtemp(prefix="nwb-egress-"))  # short: a socket path
                self._egress = ConnectProxy(sock_dir / "egress.sock")
                self._egress.start()
                config = cp_dir / "egress-selector.yaml"
                cp_dir.mkdir(parents=True, exist_ok=True)
                config.write_text(egress_selector_config(self._egress.path))
                self.control_plane.extra_apiserver_args.append(
                    f"--egress-selector-config-file={config}"
                )
                # Real kubelets renew Leases; this lifts their not-ready taints as on a cluster.
                self.control_plane.extra_controllers.append("node-lifecycle-controller")
            self.control_plane.start(progress=lambda text: say(f"starting {text}"))
            self.timings.update(self.control_plane.timings)
            if self.with_registry:
                say("starting docker-registry")
                self.registry = Registry(self.state_dir / "registry")
                self.registry.start()
            if self.kubelet_tier:
                self.start_kubelet_tier(progress=say)
            else:
                self.start_kubelet(progress=say)
            self.timings["sandbox"] = round(time.monotonic() - began, 2)
            say(f"sandbox ready in {self.timings['sandbox']:.1f}s")
        except BaseException:
            self.stop()
            raise

    def start_kubelet(self, progress: Progress | None = None) -> Kubelet:
        say = progress or (lambda text: None)
        began = time.monotonic()
        runner = self._runner or make_runner(self.mode, image_map=self.image_map)
        self.api = RawApi(self.kubeconfig)
        self.kubelet = Kubelet(
            self.api,
            runner,
            state_dir=self.state_dir / "kubelet",
            mode=self.mode.value,
            heartbeat_seconds=self.heartbeat_seconds or HEARTBEAT_SECONDS,
        )
        say(f"registering {self.node_count} {self.mode.value}-mode nodes")
        self.kubelet.add_nodes(node_names(self.node_count, self.node_prefix), labels=self.labels)
        self.kubelet.start()
        self.kubelet.watch_synced.wait(NODES_READY_TIMEOUT_SECONDS)
        self.timings["nodes"] = round(time.monotonic() - began, 2)
        return self.kubelet

    def start_kubelet_tier(self, progress: Progress | None = None) -> KubeletTier:
        """Real kubelet nodes (``kubeletnode.tier``) on the running control plane."""
        assert self.control_plane is not None and self.control_plane.pki is not None
        assert self.registry is not None and self._egress is not None
        from nodewright_bridge.sandbox.kubeletnode.tier import KubeletTier  # noqa: PLC0415

        self.api = RawApi(self.kubeconfig)
        self.tier = KubeletTier(
            self.state_dir / "kubelet-tier",
            api=self.api,
            pki=self.control_plane.pki,
            api_port=self.control_plane.apiserver_port,
            registry_host=self.registry.host,
            names=node_names(self.node_count, self.node_prefix),
            egress=self._egress,
            labels=self.labels,
        )
        self.tier.start(progress=progress)
        self.timings.update(self.tier.timings)
        return self.tier

    def restart_apiserver(self, *, down_seconds: float = 0.0, crash: bool = False) -> float:
        """Restart kube-apiserver in place while everything else keeps running
        (``ControlPlane.restart_apiserver``); the seconds the API was unavailable."""
        if self.control_plane is None:
            raise RuntimeError("the sandbox is not running")
        return self.control_plane.restart_apiserver(down_seconds=down_seconds, crash=crash)

    def stop(self) -> None:
        """Stop kubelet, registry and control plane (in that order); safe to call twice."""
        if self.tier is not None:
            try:
                self.tier.stop()
            except Exception:  # teardown continues with the control plane regardless
                log.exception("stopping the kubelet tier failed")
            self.tier = None
        if self.kubelet is not None:
            try:
                self.kubelet.stop()
            except Exception:  # teardown continues with the control plane regardless
                log.exception("stopping the kubelet failed")
            self.kubelet = None
        if self.api is not None:
            self.api.close()
            self.api = None
        if self.registry is not None:
            self.registry.stop()
            self.registry = None
        if self.control_plane is not None:
            self.control_plane.stop()
            self.control_plane = None
        if self._egress is not None:
            self._egress.close()
            shutil.rmtree(self._egress.path.parent, ignore_errors=True)
            self._egress = None
