"""One simulated node: its identity, its directories and its boot identity.

A ``SimNode`` is plain data plus two hooks into the kubelet that serves it. The kubelet owns the
Node object in the API; runners (simulate, exec, podman) only read a node's fields and may ask for a
reboot.

Directories:
- ``state_dir``: the kubelet's private per-node directory on the real host (pod volumes it
  materializes, termination-message files, runner scratch space). Always set.
- ``root_dir``: the node's root filesystem, i.e. what a hostPath ``/`` means on this node. ``None``
  until a runner's ``prepare_node`` provides one (the exec/podman runners give each node a
  copy-on-write rootfs); simulate mode leaves it ``None``.

Reboots: the agent's reboot hook writes ``<root_dir>/run/nodewright-sim/reboot-requested``
(``REBOOT_REQUEST_PATH``); the kubelet polls that file, deletes it and performs the simulated
reboot. A runner that learns about a reboot some other way calls ``request_reboot()`` instead.
Both are asynchronous: the reboot happens on the kubelet's loop shortly after.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# Inside the node's root: the file the agent's NW_REBOOT_COMMAND creates; the kubelet then
# reboots the node (docs/node-pod-contract.md, "In the sandbox").
REBOOT_REQUEST_PATH = "run/nodewright-sim/reboot-requested"


def new_boot_id() -> str:
    """A fresh boot id, formatted like the kernel's /proc/sys/kernel/random/boot_id."""
    return str(uuid.uuid4())


@dataclass(eq=False)
class SimNode:
    """A simulated node served by the sandbox kubelet."""

    name: str
    labels: dict[str, str]
    state_dir: Path
    index: int = 0
    root_dir: Path | None = None
    boot_id: str = field(default_factory=new_boot_id)
    # Set by the kubelet: schedules a simulated reboot of this node on its loop.
    on_reboot_request: Callable[[SimNode], None] | None = field(default=None, repr=False)
    # Held across a bootID change and across each heartbeat (the registration's report goes
    # out before the node is served): the API never sees a report built with the old bootID
    # after one with the new.
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def reboot_request_file(self) -> Path | None:
        """Where the agent's reboot hook writes its request, or None without a root dir."""
        if self.root_dir is None:
            return None
        return self.root_dir / REBOOT_REQUEST_PATH

    @property
    def internal_ip(self) -> str:
        """A stable, unique fake address for the Node's InternalIP and pods' hostIP."""
        return f"172.{16 + (self.index >> 16) % 16}.{(self.index >> 8) % 256}.{self.index % 256}"

    def request_reboot(self) -> None:
        """Ask the kubelet to reboot this node soon: new bootID, pods killed, NotReady, Ready."""
        if self.on_reboot_request is not None:
            self.on_reboot_request(self)

    def reboot(self) -> None:
        """Alias of ``request_reboot``: the reboot itself always runs on the kubelet's loop."""
        self.request_reboot()
