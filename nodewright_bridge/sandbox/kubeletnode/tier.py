"""The kubelet tier: one to three real nodes (containerd + kubelet) on the sandbox control plane.

``KubeletTier.start()`` needs the control plane and the registry running. It binds the
``system:node`` ClusterRole to the ``system:nodes`` group (the sandbox API server authorizes with
RBAC only, without the Node authorizer), pushes the pod sandbox image, starts every node and waits
until each is Ready. A watcher thread turns a node's reboot request (its ``systemctl reboot``)
into ``RealNode.reboot()``. ``stop()`` powers the nodes off and deletes their Node objects.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from nodewright_bridge.sandbox import pki as pki_mod
from nodewright_bridge.sandbox import rootfs
from nodewright_bridge.sandbox.kubelet.api import ApiError, RawApi
from nodewright_bridge.sandbox.kubeletnode import nodeconfig, tierbins
from nodewright_bridge.sandbox.kubeletnode.netns import ConnectProxy
from nodewright_bridge.sandbox.kubeletnode.realnode import (
    RealNode,
    own_cgroup_path,
    remove_empty_dirs,
)
from playbook_adapter import imaging

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
MAX_NODES = 3
NODE_BINDING = "nodewright-sandbox:nodes"
PAUSE_REPOSITORY = "nwb/pause"
# Registration plus the first PLEG/CNI round on a busy 2-core machine.
READY_TIMEOUT_SECONDS = 180.0
REBOOT_POLL_SECONDS = 0.5


def _ready(node: Mapping[str, object]) -> bool:
    status = node.get("status") or {}
    assert isinstance(status, dict)
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


class KubeletTier:
    """Real nodes named ``names`` under ``state_dir``; ``egress`` routes API server -> kubelet."""

    def __init__(
        self,
        state_dir: Path,
        *,
        api: RawApi,
        pki: pki_mod.Pki,
        api_port: int,
        registry_host: str,
        names: Sequence[str],
        egress: ConnectProxy,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        if not 1 <= len(names) <= MAX_NODES:
            raise ValueError(
                f"--nodes: the kubelet tier runs 1 to {MAX_NODES} nodes, got {len(names)}"
            )
        self.state_dir = state_dir
        self.api = api
        self.pki = pki
        self.api_port = api_port
        self.registry_host = registry_host
        self.names = list(names)
        self.egress = egress
        self.labels = dict(labels or {})
        self.nodes: dict[str, RealNode] = {}
        self.timings: dict[str, float] = {}
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._watcher: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def pause_image(self) -> str:
        return f"{self.registry_host}/{PAUSE_REPOSITORY}:{tierbins.CONTAINERD_VERSION}"

    def start(self, progress: Progress | None = None) -> None:
        say = progress or (lambda text: None)
        began = time.monotonic()
        say("locating kubelet-tier binaries (kubelet, containerd, crictl)")
        bin_dir = tierbins.ensure_tier_binaries(progress=say)
        self._bind_node_role()
        say("pushing the pod sandbox image")
        self._push_pause(bin_dir)
        base = rootfs.ensure_base_rootfs(say)
        prefix = own_cgroup_path()
        for index, name in enumerate(self.names):
            settings = nodeconfig.NodeSettings(
                name=name,
                index=index,
                api_port=self.api_port,
                registry_host=self.registry_host,
                pause_image=self.pause_image,
                cgroup_root=f"{prefix}/nwb-kubelet/{name}",
                labels=self.labels,
            )
            cert = pki_mod.issue_client_cert(self.pki, f"system:node:{name}", ["system:nodes"])
            kubeconfig = pki_mod.kubeconfig_text(
                f"https://127.0.0.1:{self.api_port}", self.pki.ca_cert, cert
            )
            node = RealNode(settings, self.state_dir / name, base, bin_dir, kubeconfig)
            self.nodes[name] = node
            say(f"starting kubelet node {name}")
            node.start()
            self._route(node)
        self._wait_ready(say)
        self._watcher = threading.Thread(
            target=self._watch_reboots, name="nwb-reboots", daemon=True
        )
        self._watcher.start()
        self.timings["kubelet-nodes"] = round(time.monotonic() - began, 2)

    def _bind_node_role(self) -> None:
        body = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": NODE_BINDING},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:node",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}
            ],
        }
        try:
            self.api.request(
                "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", body=body
            )
        except ApiError as exc:
            if exc.status != 409:
                raise

    def _push_pause(self, bin_dir: Path) -> None:
        engine = imaging.detect_engine("podman")
        with tempfile.TemporaryDirectory(prefix="nwb-pause-") as tmp:
            context = Path(tmp)
            (context / "pause").write_bytes((bin_dir / "nwb-pause").read_bytes())
            (context / "pause").chmod(0o755)
            (context / "Containerfile").write_text(
                'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n'
            )
            engine.run(["build", "--quiet", "-t", self.pause_image, str(context)])
        imaging.push_image(engine, self.pause_image, tls_verify=False)

    def _wait_ready(self, say: Progress) -> None:
        say(f"waiting for {len(self.nodes)} kubelet node(s) to be Ready")
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        pending = set(self.nodes)
        while pending:
            for name in sorted(pending):
                self.nodes[name]._check_alive()
                node = self.api.get(f"/api/v1/nodes/{name}", ok_missing=True)
                if node is not None and _ready(node):
                    pending.discard(name)
            if not pending:
                return
            if time.monotonic() > deadline:
                tails = "\n".join(self.nodes[n].log_tail() for n in sorted(pending))
                raise TimeoutError(f"kubelet nodes not Ready: {sorted(pending)}\n{tails}")
            time.sleep(1.0)

    def _watch_reboots(self) -> None:
        """Reboot nodes that asked for it. A node this thread rebooted dies with this thread
        (``die_with_parent``), so it ends only after ``stop()`` has stopped every node."""
        try:
            self._reboot_requested_nodes()
        finally:
            self._stopped.wait()

    def _reboot_requested_nodes(self) -> None:
        while not self._stop.wait(REBOOT_POLL_SECONDS):
            for node in list(self.nodes.values()):
                with self._lock:
                    if self._stop.is_set() or not node.reboot_requested():
                        continue
                    try:
                        node.reboot()
                        self._route(node)
                    except Exception:  # the node stays down; its NotReady status tells
                        log.exception("reboot of %s failed", node.name)

    def _route(self, node: RealNode) -> None:
        # The API server dials a kubelet by the node's first address: its Hostname (the node
        # name), else its InternalIP. Both lead to the node address inside the node's namespace.
        route = (node.netns, node.settings.node_ip)
        self.egress.routes[node.settings.node_ip] = route
        self.egress.routes[node.name] = route

    def reboot(self, name: str) -> str:
        """Reboot node ``name`` now; returns its new boot id."""
        with self._lock:
            node = self.nodes[name]
            boot_id = node.reboot()
            self._route(node)
            return boot_id

    def stop(self, *, delete_nodes: bool = True) -> None:
        self._stop.set()
        try:
            self._stop_nodes(delete_nodes=delete_nodes)
        finally:
            self._stopped.set()
            if self._watcher is not None:
                self._watcher.join(10)

    def _stop_nodes(self, *, delete_nodes: bool) -> None:
        shared: list[Path] = []
        with self._lock:
            for node in self.nodes.values():
                try:
                    shared += node.stop()
                except Exception:  # the other nodes still stop
                    log.exception("stopping %s failed", node.name)
                if delete_nodes:
                    try:
                        self.api.request("DELETE", f"/api/v1/nodes/{node.name}", ok_missing=True)
                    except Exception:  # the control plane may be gone already
                        log.debug("deleting node %s failed", node.name, exc_info=True)
            self.nodes.clear()
        remove_empty_dirs(shared)  # the cgroup parents the nodes shared, now that all are gone
