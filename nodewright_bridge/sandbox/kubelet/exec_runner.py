"""``exec`` mode: run a package pod's command as a local process, isolated on its simulated node.

Why: it runs the real agent and real Ansible against a real root filesystem without building or
pulling images - the quickest faithful way to run package pods in tests and the demo.

How a pod maps onto the machine (docs/node-pod-contract.md, "In the sandbox"):
- the command runs from this repo's venv (its ``bin`` first on PATH, so ``nwb-agent`` resolves)
  in ``isolation.View.CONTAINER``: ``/`` is a throw-away overlay over the real ``/`` (so mount
  points can exist without touching the machine, and stray writes vanish), in the node's own
  mount, PID, UTS and IPC namespaces;
- hostPath volumes are directories of the node's root (hostPath ``/`` = the whole node root, with
  its private ``/proc`` + ``/proc/sys`` stand-in, ``/sys``, ``/dev``, ``/dev/shm``, ``/run`` and
  ``/tmp``, each a mount point there as on a node);
- ConfigMap/Secret/... volumes are the kubelet's materialized directories, bound at their paths;
- the image is resolved through the image map (repository -> local package directory), which is
  bound at ``/nodewright/package`` (the image layout) and passed as ``NW_PACKAGE_DIR``;
- the termination-message file is bound at ``terminationMessagePath`` and read back;
- ``NW_REBOOT_COMMAND`` writes the node's reboot-request file (the kubelet reboots the node).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from nodewright_bridge.sandbox import isolation
from nodewright_bridge.sandbox.kubelet.noderoots import (
    NodeRoots,
    simulation_hooks,
    volume_source,
)
from nodewright_bridge.sandbox.kubelet.nodes import SimNode
from nodewright_bridge.sandbox.kubelet.runners import (
    KILLED_EXIT_CODE,
    ContainerSpec,
    ContainerStartError,
)

logger = logging.getLogger(__name__)

# Where a package image keeps its package (docs/node-pod-contract.md, "Package image").
PACKAGE_MOUNT = "/nodewright/package"
DEFAULT_PACKAGE_COMMAND = ("nwb-agent",)
# The kubelet keeps at most this much of a termination message (as Kubernetes does).
MAX_MESSAGE_BYTES = 4096
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def image_repository(image: str) -> str:
    """``registry/name:tag`` or ``registry/name@digest`` -> ``registry/name``."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def read_message(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        with path.open("rb") as handle:
            return handle.read(MAX_MESSAGE_BYTES).decode(errors="replace")
    except OSError:
        return ""


class ExecContainer:
    """A pod container running as an isolated local process."""

    def __init__(self, proc: subprocess.Popen[bytes], termination_log: Path | None) -> None:
        self._proc = proc
        self._termination_log = termination_log
        self._killed = False
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def poll(self) -> int | None:
        code = self._proc.poll()
        if code is None:
            return None
        with self._lock:
            return KILLED_EXIT_CODE if self._killed else code

    def kill(self) -> None:
        with self._lock:
            if self._proc.poll() is None:
                self._killed = True
        isolation.kill_isolated(self._proc)  # returns once its PID namespace is empty

    def termination_message(self) -> str:
        return read_message(self._termination_log)


class ExecRunner:
    """Runs package pods' commands from this repo's venv on isolated node roots."""

    materializes = True
    starts_at_once = False

    def __init__(
        self,
        image_map: Mapping[str, Path],
        *,
        roots: NodeRoots | None = None,
        venv_bin: Path | None = None,
        network: isolation.Network = isolation.Network.HOST,
    ) -> None:
        """Args:
        image_map: image repository (``registry/name``, no tag) -> local package directory.
        roots: node roots (default: the cached base rootfs, built on first use).
        venv_bin: put first on PATH (default: this interpreter's ``bin``).
        network: the pods' network namespace (pods are hostNetwork; ``NONE`` cuts them off).
        """
        self.image_map = {image_repository(k): Path(v) for k, v in image_map.items()}
        self.roots = roots or NodeRoots()
        self.venv_bin = venv_bin or Path(sys.executable).parent
        self.network = network
        # The container view mounts a fresh /tmp; a checkout or venv living under /tmp (CI clones)
        # would vanish from it, so the code the agent runs from is bound in read-only.
        code = {Path(sys.prefix).resolve(), Path(__file__).resolve().parents[3]}
        self.code_binds = [isolation.Bind(d, str(d), read_only=True) for d in sorted(code)]

    def prepare_node(self, node: SimNode) -> None:
        self.roots.prepare(node)

    def release_node(self, node: SimNode) -> None:
        self.roots.release(node)

    def close(self) -> None:
        return None

    def package_dir(self, image: str) -> Path | None:
        return self.image_map.get(image_repository(image))

    def start(self, node: SimNode, spec: ContainerSpec) -> ExecContainer:
        root, state = self.roots.boot(node)
        binds: list[isolation.Bind] = list(self.code_binds)
        env = {"PATH": f"{self.venv_bin}:{SYSTEM_PATH}", "HOME": "/root", "LANG": "C.UTF-8"}
        package = self.package_dir(spec.image)
        if package is not None:
            binds.append(isolation.Bind(package, PACKAGE_MOUNT, read_only=True))
            env["NW_PACKAGE_DIR"] = PACKAGE_MOUNT
        elif spec.is_package_pod:
            raise ContainerStartError(
                f"image {spec.image} is not in the exec runner's image map",
                reason="ErrImagePull",
            )
        for mount in spec.volume_mounts:
            source = volume_source(root, node, mount)
            binds.append(isolation.Bind(source, mount.mount_path, read_only=mount.read_only))
        if spec.termination_log is not None:
            binds.append(isolation.Bind(spec.termination_log, spec.termination_message_path))
        env.update(simulation_hooks(spec.volume_mounts))
        env.update(spec.env)
        argv = [*(spec.command or (DEFAULT_PACKAGE_COMMAND if package else ())), *spec.args]
        if not argv:
            raise ContainerStartError(
                f"container {spec.name}: exec mode needs a command", reason="CreateContainerError"
            )
        output: IO[bytes] | int = subprocess.DEVNULL
        if spec.scratch_dir is not None:
            spec.scratch_dir.mkdir(parents=True, exist_ok=True)
            output = (spec.scratch_dir / "output.log").open("ab")
        try:
            proc = isolation.run_isolated(
                root,
                state,
                argv,
                env=env,
                binds=binds,
                view=isolation.View.CONTAINER,
                host_root_at="",
                network=self.network,
                hostname=node.name,
                cwd=spec.working_dir,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        except (OSError, isolation.IsolationError) as exc:
            raise ContainerStartError(str(exc), reason="StartError") from exc
        finally:
            if not isinstance(output, int):
                output.close()
        logger.debug("exec container started", extra={"node": node.name, "pod": spec.pod_name})
        return ExecContainer(proc, spec.termination_log)
