"""Node root filesystems and per-boot node state for the runners that execute real code.

Why a separate piece: both the ``exec`` and the ``podman`` runner give every simulated node the
same things - a copy-on-write root over the cached base rootfs (what hostPath ``/`` means there),
an isolation state directory (``/proc/sys`` stand-in, ``/sys``), and a boot that matches the node's
``boot_id`` (a simulated reboot gives the node fresh per-boot file systems: ``/run`` and ``/tmp``
empty, kernel settings reset, before the next pod). Releasing a node unmounts all of it.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from nodewright_bridge.sandbox import isolation, rootfs
from nodewright_bridge.sandbox.kubelet.nodes import REBOOT_REQUEST_PATH, SimNode
from nodewright_bridge.sandbox.kubelet.runners import ContainerStartError, VolumeKind, VolumeMount

logger = logging.getLogger(__name__)

# Under each node's state_dir.
ROOTFS_SUBDIR = "rootfs"
ISOLATION_SUBDIR = "isolation"


def reboot_command(host_root: str) -> str:
    """``NW_REBOOT_COMMAND`` for a pod that sees the node root at ``host_root``: it writes the
    node's reboot-request file (docs/node-pod-contract.md, "In the sandbox")."""
    request = f"{host_root.rstrip('/')}/{REBOOT_REQUEST_PATH}"
    return f"sh -c 'mkdir -p \"$(dirname {request})\" && date > {request}'"


SYSTEMCTL_LOG_PATH = "run/nodewright-sim/systemctl.log"


def systemctl_command(host_root: str) -> str:
    """``NW_SYSTEMCTL_COMMAND`` for a sandbox pod: node roots run no systemd, so each call
    (``daemon-reload``, ``restart <unit>``) is recorded in the node's run dir and succeeds."""
    log = f"{host_root.rstrip('/')}/{SYSTEMCTL_LOG_PATH}"
    return f'sh -c \'mkdir -p "$(dirname {log})" && echo "$*" >> {log}\' systemctl'


def host_root_mount(mounts: tuple[VolumeMount, ...]) -> str:
    """Where the pod mounts the node's ``/`` (hostPath ``/``), or "" if it does not."""
    for mount in mounts:
        if (
            mount.kind is VolumeKind.HOST_PATH
            and mount.host_path.strip("/") == ""
            and not (mount.sub_path)
        ):
            return mount.mount_path
    return ""


def simulation_hooks(mounts: tuple[VolumeMount, ...]) -> dict[str, str]:
    """Env that routes a pod's reboot and systemctl calls to the simulation (empty when the pod
    does not mount the node's ``/``); the pod's own env is laid over it."""
    host_root = host_root_mount(mounts)
    if not host_root:
        return {}
    return {
        "NW_REBOOT_COMMAND": reboot_command(host_root),
        "NW_SYSTEMCTL_COMMAND": systemctl_command(host_root),
    }


def volume_source(root: Path, node: SimNode, mount: VolumeMount) -> Path:
    """The host-side directory behind a pod's volume mount: a hostPath resolves inside the node's
    root (created, as DirectoryOrCreate would); other volumes are the kubelet's materialized dir."""
    if mount.kind is VolumeKind.HOST_PATH:
        path = f"{mount.host_path}/{mount.sub_path}" if mount.sub_path else mount.host_path
        source = resolve_in_root(root, path)
        source.mkdir(parents=True, exist_ok=True)
        return source
    resolved = mount.resolve(node)
    if resolved is None:
        raise ContainerStartError(
            f"volume {mount.name} was not materialized", reason="CreateContainerError"
        )
    return resolved


def resolve_in_root(root: Path, host_path: str) -> Path:
    """A hostPath on the node as a real directory, refusing symlinks that leave the node root."""
    real_root = Path(os.path.realpath(root))
    path = Path(os.path.realpath(real_root / host_path.lstrip("/")))
    if path != real_root and real_root not in path.parents:
        raise ContainerStartError(
            f"hostPath {host_path} leaves the node root", reason="CreateContainerError"
        )
    return path


class NodeRoots:
    """Mounts node roots on first use and keeps each node's boot state in step with its bootID."""

    def __init__(self, base: Path | None = None, progress: rootfs.Progress | None = None) -> None:
        self._base = base
        self._progress = progress
        self._roots: dict[str, rootfs.NodeRoot] = {}
        self._lock = threading.Lock()

    def base(self) -> Path:
        with self._lock:
            if self._base is None:
                if self._progress is None:
                    self._base = rootfs.ensure_base_rootfs()
                else:
                    self._base = rootfs.ensure_base_rootfs(self._progress)
            return self._base

    def prepare(self, node: SimNode) -> Path:
        """Mount the node's root (if not yet) and set ``node.root_dir``; returns the root."""
        base = self.base()
        with self._lock:
            known = self._roots.get(node.name)
            if known is None:
                known = rootfs.mount_node_root(base, node.state_dir / ROOTFS_SUBDIR)
                self._roots[node.name] = known
            node.root_dir = known.path
            return known.path

    @staticmethod
    def isolation_state(node: SimNode) -> Path:
        return node.state_dir / ISOLATION_SUBDIR

    def boot(self, node: SimNode) -> tuple[Path, Path]:
        """The node's (root, isolation state), reset first if the node rebooted since last use."""
        root = self.prepare(node)
        state = self.isolation_state(node)
        if isolation.prepare_node(root, state, node.boot_id):
            logger.info("node boot prepared", extra={"node": node.name, "boot_id": node.boot_id})
        return root, state

    def release(self, node: SimNode) -> None:
        """Unmount the node's per-boot file systems and its root (the node is powered off)."""
        with self._lock:
            known = self._roots.pop(node.name, None)
        if known is not None:
            isolation.release_node(known.path, self.isolation_state(node))
            rootfs.unmount_node_root(known)
