"""One kubelet-tier node: containerd and the real kubelet in an isolated node root.

The node is ``isolation.run_isolated`` with the node view (the node's debootstrap overlay root as
``/``) and a network namespace of its own: its own mount, PID, UTS, IPC and network namespaces,
its own ``/proc/sys`` (the stand-in, seeded at each boot), ``/sys`` and ``/dev``. The kubelet reads
the boot id from ``/proc/sys/kernel/random/boot_id``, which is the node's own file there. What the
node shares with this machine, on purpose:
- the cgroup file systems (``/sys/fs/cgroup``; containerd and the kubelet create the node's pod
  cgroups below the node's own cgroup root, removed when the node stops);
- read-only: the tier's binaries, runc and the CNI plugins (Debian's), ``/dev/kmsg``;
- ``/var/lib/containerd``: a directory in the node's state on this machine's disk (overlayfs
  layers cannot live on the node's overlay root).

A reboot (``reboot()``, or a request the node's ``systemctl reboot`` wrote) stops the kubelet,
containerd and every container (the node's PID namespace ends), writes a new boot id (a new
boot: fresh ``/proc/sys``, ``/run``, ``/tmp``) and starts them again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from nodewright_bridge.sandbox import isolation, rootfs
from nodewright_bridge.sandbox.kubelet.nodes import REBOOT_REQUEST_PATH
from nodewright_bridge.sandbox.kubeletnode import nodeconfig
from nodewright_bridge.sandbox.kubeletnode.netns import LoopbackForward

log = logging.getLogger(__name__)

RUNC = Path("/usr/sbin/runc")
CNI_PLUGINS = Path("/usr/lib/cni")
KMSG = Path("/dev/kmsg")
# What cAdvisor reads of this machine's /sys (the CPUs, NUMA nodes, huge page sizes): read-only.
SYS_READ_ONLY = ("devices/system/cpu", "devices/system/node", "kernel/mm/hugepages")
CGROUP_BASE = Path("/sys/fs/cgroup")
# containerd and the kubelet stop in a second or two; containers get their own grace from the
# kubelet before that. After this the node's PID namespace is killed.
STOP_GRACE_SECONDS = 15.0
NETNS_TIMEOUT_SECONDS = 10.0
FORWARD_TIMEOUT_SECONDS = 10.0


class NodeStartError(RuntimeError):
    """The node's init exited before it was up; the message carries its log tail."""


def cgroup_hierarchies() -> list[Path]:
    """The cgroup file systems mounted under ``/sys/fs/cgroup`` (v1 controllers, unified)."""
    found: list[Path] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype = right.split(" ", 1)[0]
        point = Path(left.split()[4])
        if fstype in ("cgroup", "cgroup2") and CGROUP_BASE in (point, *point.parents):
            found.append(point)
    return found


def own_cgroup_path() -> str:
    """This process's memory cgroup ("" at the root): node cgroups nest below it, so the limits
    that hold for this sandbox hold for the node's pods too."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path.rstrip("/")
    return ""


def remove_empty_dirs(directories: list[Path]) -> list[Path]:
    """rmdir each of ``directories`` deepest first; the ones still in use (not empty)."""
    left = []
    for directory in sorted(directories, key=lambda p: -len(p.parts)):
        try:
            directory.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            left.append(directory)
    return left


@dataclass
class RealNode:
    """A node's files, state and (while running) its isolated init process."""

    settings: nodeconfig.NodeSettings
    state_dir: Path
    base: Path  # the cached debootstrap base
    bin_dir: Path  # the tier's binaries
    kubeconfig_text: str
    boot_id: str = ""
    root: rootfs.NodeRoot | None = None
    process: subprocess.Popen[bytes] | None = None
    forwards: list[LoopbackForward] = field(default_factory=list)
    created_cgroups: list[Path] = field(default_factory=list)
    boots: int = 0

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def root_dir(self) -> Path:
        assert self.root is not None, "node not prepared"
        return self.root.path

    @property
    def isolation_state(self) -> Path:
        return self.state_dir / "isolation"

    @property
    def log_dir(self) -> Path:
        return self.root_dir / nodeconfig.NODE_LOG_DIR.lstrip("/")

    @property
    def netns(self) -> Path:
        assert self.process is not None
        return Path(f"/proc/{self.process.pid}/ns/net")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # --- files -------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Mount the node's root and write its configuration (idempotent)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.root is None:
            self.root = rootfs.mount_node_root(self.base, self.state_dir / "rootfs")
        s = self.settings
        root = self.root_dir
        files = {
            f"{nodeconfig.NODE_CONFIG_DIR}/containerd.toml": nodeconfig.containerd_config(s),
            f"{nodeconfig.NODE_CONFIG_DIR}/kubelet.json": nodeconfig.kubelet_config(s),
            f"{nodeconfig.NODE_CONFIG_DIR}/kubelet.kubeconfig": self.kubeconfig_text,
            nodeconfig.NODE_INIT: nodeconfig.node_init_script(s),
            "/etc/cni/net.d/10-nwb.conflist": nodeconfig.cni_config(s),
            f"/etc/containerd/certs.d/{s.registry_host}/hosts.toml": (
                nodeconfig.registry_hosts_toml(s.registry_host)
            ),
            "/usr/local/sbin/systemctl": nodeconfig.SYSTEMCTL_SHIM,
            "/etc/hostname": s.name + "\n",
            "/etc/hosts": f"127.0.0.1 localhost\n{s.node_ip} {s.name}\n",
        }
        for rel, text in files.items():
            path = root / rel.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            if rel.endswith(".sh") or rel.endswith("systemctl"):
                path.chmod(0o755)
        (self.state_dir / "containerd").mkdir(exist_ok=True)

    def _binds(self) -> list[isolation.Bind]:
        binds = [
            isolation.Bind(self.bin_dir, nodeconfig.NODE_BIN_DIR, read_only=True),
            isolation.Bind(CNI_PLUGINS, nodeconfig.NODE_CNI_BIN_DIR, read_only=True),
            isolation.Bind(RUNC, nodeconfig.NODE_RUNC, read_only=True),
            isolation.Bind(self.state_dir / "containerd", "/var/lib/containerd"),
            isolation.Bind(CGROUP_BASE, str(CGROUP_BASE)),
        ]
        for rel in SYS_READ_ONLY:
            if Path("/sys", rel).is_dir():
                binds.append(isolation.Bind(Path("/sys", rel), f"/sys/{rel}", read_only=True))
        if KMSG.exists():
            binds.append(isolation.Bind(KMSG, str(KMSG), read_only=True))
        return binds

    def _make_cgroups(self) -> None:
        for hierarchy in cgroup_hierarchies():
            path = hierarchy / self.settings.cgroup_root.lstrip("/")
            missing = [p for p in (path, *path.parents) if not p.exists()]
            for directory in reversed(missing):
                directory.mkdir()
                self.created_cgroups.append(directory)

    def _remove_cgroups(self) -> list[Path]:
        """Remove the node's cgroups deepest first (all empty once the node's processes ended);
        returns the parents it created that another node still uses (the tier removes them)."""
        for hierarchy in cgroup_hierarchies():
            top = hierarchy / self.settings.cgroup_root.lstrip("/")
            if not top.is_dir():
                continue
            for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
                with contextlib.suppress(OSError):
                    Path(dirpath).rmdir()
        left = remove_empty_dirs(self.created_cgroups)
        self.created_cgroups.clear()
        return left

    # --- life cycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Boot the node: a fresh boot id unless one is set, then containerd and the kubelet."""
        self.prepare()
        self._make_cgroups()
        self.boot_id = self.boot_id or str(uuid.uuid4())
        request = self.root_dir / REBOOT_REQUEST_PATH
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"}
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.process = isolation.run_isolated(
            self.root_dir,
            self.isolation_state,
            ["/bin/bash", nodeconfig.NODE_INIT],
            env=env,
            binds=self._binds(),
            view=isolation.View.NODE,
            network=isolation.Network.NONE,
            hostname=self.name,
            boot_id=self.boot_id,
            stdout=subprocess.DEVNULL,
            stderr=(self.state_dir / "isolation.log").open("ab"),
            die_with_parent=True,
        )
        request.unlink(missing_ok=True)  # the new boot's /run is empty anyway
        self.boots += 1
        self._wait_netns()
        ports = [self.settings.api_port, int(self.settings.registry_host.rsplit(":", 1)[1])]
        self.forwards = [self._forward(port) for port in ports]
        log.info("node started", extra={"node": self.name, "boot_id": self.boot_id})

    def _wait_netns(self) -> None:
        ours = os.stat("/proc/self/ns/net").st_ino
        deadline = time.monotonic() + NETNS_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            self._check_alive()
            with contextlib.suppress(OSError):
                if os.stat(self.netns).st_ino != ours:
                    return
            time.sleep(0.02)
        raise NodeStartError(f"{self.name}: no network namespace after {NETNS_TIMEOUT_SECONDS}s")

    def _forward(self, port: int) -> LoopbackForward:
        """Listen in the node once its init has brought loopback up (bind fails until then)."""
        deadline = time.monotonic() + FORWARD_TIMEOUT_SECONDS
        while True:
            self._check_alive()
            try:
                forward = LoopbackForward(self.netns, port)
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
                continue
            forward.start()
            return forward

    def _check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise NodeStartError(
                f"{self.name}: node init exited {self.process.returncode}:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 20) -> str:
        parts = []
        for name in ("isolation.log",):
            with contextlib.suppress(OSError):
                text = (self.state_dir / name).read_text(errors="replace")
                parts.append("\n".join(text.splitlines()[-lines:]))
        if self.root is not None:
            for name in ("node-init.log", "containerd.log", "kubelet.log"):
                with contextlib.suppress(OSError):
                    text = (self.log_dir / name).read_text(errors="replace")
                    parts.append(f"--- {name}\n" + "\n".join(text.splitlines()[-lines:]))
        return "\n".join(parts)

    def stop_processes(self) -> None:
        """Stop the kubelet and containerd (SIGTERM, in that order), then end the node's PID
        namespace: every container and shim with it."""
        for forward in self.forwards:
            forward.close()
        self.forwards = []
        if self.process is not None:
            isolation.stop_isolated(self.process, grace=STOP_GRACE_SECONDS)
            self.process = None

    def reboot_requested(self) -> bool:
        return self.root is not None and (self.root_dir / REBOOT_REQUEST_PATH).exists()

    def reboot(self) -> str:
        """Stop everything on the node, then boot it with a new boot id; returns the new id."""
        log.info("node rebooting", extra={"node": self.name, "boot_id": self.boot_id})
        self.stop_processes()
        self.boot_id = str(uuid.uuid4())
        self.start()
        return self.boot_id

    def stop(self) -> list[Path]:
        """Power the node off: processes, per-boot file systems, cgroups, the root's mount;
        returns the cgroup parents it made that are still in use (see ``_remove_cgroups``)."""
        self.stop_processes()
        if self.root is not None:
            isolation.release_node(self.root_dir, self.isolation_state)
            rootfs.unmount_node_root(self.root)
            self.root = None
        return self._remove_cgroups()
