"""``podman`` mode: run a pod's real image with podman, the node's root at the hostPath mount.

Why: exec mode proves the agent and the roles; podman mode also proves the package image (its
agent install, bundled roles and collections, entry point) exactly as a cluster would pull it.

The container is privileged with the host network, like the node pod; hostPath ``/`` is the
simulated node's root (never the machine's). Isolation is done inside the container, because a
privileged container's procfs writes real sysctls: podman runs an entry wrapper first (mounted
read-only at ``/.nwb/enter.sh``) that, in the container's own mount namespace, gives every mounted
node root a fresh procfs with the node's ``/proc/sys`` stand-in bound over ``sys`` (the
container's own ``/proc/sys`` too), the node's ``/sys``, a private ``/dev``, and the node's ``/run``
and ``/tmp`` bound onto themselves (mount points, as in ``isolation``); then it executes the pod's
command. The stand-ins, ``/run`` and ``/tmp`` are the node's per-boot tmpfs (podman's volumes are
recursive binds, so the node root brings its ``/run`` and ``/tmp``), and the ``/proc`` masks bind
the container's own ``/dev/null`` (a node on its private ``/dev``): a remount without ``bind``
inside reconfigures only a file system of the node's or the container's own. Settings this
machine needs (runc, cgroupfs, no default ulimits) are passed on the command line and in
``scripts/install-system-deps.sh``.
"""

from __future__ import annotations

import json
import logging
import shlex
import shutil
import subprocess
import threading
from pathlib import Path
from typing import IO

from nodewright_bridge.sandbox import isolation
from nodewright_bridge.sandbox.kubelet.exec_runner import read_message
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
    VolumeKind,
)

logger = logging.getLogger(__name__)

# crun cannot run here (setrlimit refused, hybrid cgroups); runc with cgroupfs can.
PODMAN_GLOBAL = ("--runtime", "runc", "--cgroup-manager", "cgroupfs")
# Inside the container: the wrapper and the node's per-boot state.
NWB_DIR = "/.nwb"
# How long `podman kill` / `podman pull` may take before we give up on them.
PODMAN_TIMEOUT_SECONDS = 120


def pull_image(image: str, *, tls_verify: bool) -> None:
    """Pull ``image``; a failure is the kubelet's ``ErrImagePull`` (the container waits)."""
    tls = f"--tls-verify={str(tls_verify).lower()}"
    pulled = subprocess.run(
        ["podman", *PODMAN_GLOBAL, "pull", "--quiet", tls, image],
        capture_output=True,
        text=True,
        timeout=PODMAN_TIMEOUT_SECONDS,
        check=False,
    )
    if pulled.returncode != 0:
        raise ContainerStartError(f"pull {image}: {pulled.stderr.strip()}", reason="ErrImagePull")


ENTER_SCRIPT = r"""#!/bin/sh
# nodewright-bridge sandbox: isolate each mounted node root, then run the pod's command.
set -e
mount --bind /.nwb/proc-sys /proc/sys
for R in $NWB_NODE_ROOTS; do
  mkdir -p "$R/proc" "$R/sys" "$R/dev"
  mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
  for p in bus fs irq sysrq-trigger; do
    if [ -e "$R/proc/$p" ]; then
      mount --bind "$R/proc/$p" "$R/proc/$p"; mount -o remount,bind,ro "$R/proc/$p"
    fi
  done
  for p in kcore keys latency_stats timer_list timer_stats sched_debug; do
    if [ -f "$R/proc/$p" ]; then mount --bind /dev/null "$R/proc/$p"; fi
  done
  mount --bind /.nwb/proc-sys "$R/proc/sys"
  mount --bind /.nwb/sys "$R/sys"
  mount -t tmpfs -o nosuid,mode=755,size=65536k tmpfs "$R/dev"
  for d in null zero full random urandom tty; do
    touch "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"
  done
  mkdir -p "$R/dev/pts" "$R/dev/shm" "$R/dev/mqueue"
  mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$R/dev/pts"
  mount -t tmpfs -o nosuid,nodev,mode=1777 shm "$R/dev/shm"
  ln -s pts/ptmx "$R/dev/ptmx"; ln -s /proc/self/fd "$R/dev/fd"
  ln -s /proc/self/fd/0 "$R/dev/stdin"; ln -s /proc/self/fd/1 "$R/dev/stdout"
  ln -s /proc/self/fd/2 "$R/dev/stderr"
  for d in run tmp; do
    mkdir -p "$R/$d"; mount --bind "$R/$d" "$R/$d"; mount -o remount,bind,nosuid,nodev "$R/$d"
  done
done
unset NWB_NODE_ROOTS
exec "$@"
"""


def container_name(spec: ContainerSpec) -> str:
    return f"nwb-{spec.pod_uid[:13]}-{spec.name}"[:63]


class PodmanContainer:
    """A pod container run by ``podman run`` (attached; the container is removed at exit)."""

    def __init__(
        self, proc: subprocess.Popen[bytes], name: str, termination_log: Path | None
    ) -> None:
        self._proc = proc
        self.name = name
        self._termination_log = termination_log
        self._killed = False
        self._lock = threading.Lock()

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
        if self._killed:
            subprocess.run(
                ["podman", *PODMAN_GLOBAL, "kill", "--signal", "KILL", self.name],
                capture_output=True,
                timeout=PODMAN_TIMEOUT_SECONDS,
                check=False,
            )
            try:
                self._proc.wait(PODMAN_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._proc.wait()

    def termination_message(self) -> str:
        return read_message(self._termination_log)


class PodmanRunner:
    """Runs pods' real images with podman on the simulated nodes' roots."""

    materializes = True
    starts_at_once = False

    def __init__(
        self, *, roots: NodeRoots | None = None, tls_verify: bool = False, pull: str = "always"
    ) -> None:
        """Args:
        roots: node roots (default: the cached base rootfs, built on first use).
        tls_verify: verify registry TLS (the sandbox's local registry is plain HTTP).
        pull: podman's pull policy (``always`` as the node pod's digests/tags expect;
            ``missing``/``never`` for images that exist only in local storage).
        """
        if shutil.which("podman") is None:
            raise ContainerStartError("podman is not installed (run: make system-deps)")
        self.roots = roots or NodeRoots()
        self.tls_verify = tls_verify
        self.pull = pull

    def prepare_node(self, node: SimNode) -> None:
        self.roots.prepare(node)

    def release_node(self, node: SimNode) -> None:
        self.roots.release(node)

    def close(self) -> None:
        return None

    def _pull(self, image: str) -> None:
        pull_image(image, tls_verify=self.tls_verify)

    def _image_command(self, image: str) -> list[str]:
        """The image's entrypoint + cmd, for pods that give no command (pulls the image)."""
        self._pull(image)
        shown = subprocess.run(
            ["podman", "image", "inspect", "--format", "{{json .Config}}", image],
            capture_output=True,
            text=True,
            check=False,
        )
        config = json.loads(shown.stdout or "{}") or {}
        return [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]

    def start(self, node: SimNode, spec: ContainerSpec) -> PodmanContainer:
        pull = self.pull
        if pull == "always" and spec.command:
            # As a kubelet does: an image that cannot be pulled leaves the container waiting in
            # ErrImagePull (then ImagePullBackOff) instead of a run that exits at once.
            self._pull(spec.image)
            pull = "missing"
        root, state = self.roots.boot(node)
        scratch = spec.scratch_dir or (state / "containers" / container_name(spec))
        scratch.mkdir(parents=True, exist_ok=True)
        enter = scratch / "enter.sh"
        enter.write_text(ENTER_SCRIPT)
        name = container_name(spec)
        volumes: list[str] = [
            f"{enter}:{NWB_DIR}/enter.sh:ro",
            f"{state / isolation.PROC_SYS_DIR}:{NWB_DIR}/proc-sys",
            f"{state / isolation.SYS_DIR}:{NWB_DIR}/sys",
        ]
        node_roots: list[str] = []
        for mount in spec.volume_mounts:
            source = volume_source(root, node, mount)
            if mount.kind is VolumeKind.HOST_PATH and source == Path(root).resolve():
                node_roots.append(mount.mount_path)
            volumes.append(f"{source}:{mount.mount_path}{':ro' if mount.read_only else ''}")
        if spec.termination_log is not None:
            volumes.append(f"{spec.termination_log}:{spec.termination_message_path}")
        env = {**simulation_hooks(spec.volume_mounts), **spec.env}
        env["NWB_NODE_ROOTS"] = " ".join(node_roots)
        env_file = scratch / "env"
        env_file.touch(mode=0o600)
        env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items() if "\n" not in v))
        multiline = [f"--env={k}={v}" for k, v in env.items() if "\n" in v]
        argv = [*spec.command, *spec.args] if spec.command else []
        if not argv:
            argv = [*self._image_command(spec.image), *spec.args]
        if not argv:
            raise ContainerStartError(f"image {spec.image} has no command", reason="StartError")
        cmd = [
            "podman",
            *PODMAN_GLOBAL,
            "run",
            "--rm",
            "--replace",
            f"--name={name}",
            "--privileged",
            "--network=host",
            f"--hostname={node.name}",
            f"--pull={pull}",
            f"--tls-verify={str(self.tls_verify).lower()}",
            f"--env-file={env_file}",
            *multiline,
            *(f"--volume={v}" for v in volumes),
            f"--entrypoint={json.dumps(['/bin/sh', f'{NWB_DIR}/enter.sh'])}",
            *([f"--workdir={spec.working_dir}"] if spec.working_dir else []),
            spec.image,
            *argv,
        ]
        output: IO[bytes] = (scratch / "output.log").open("ab")
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT
            )
        except OSError as exc:
            raise ContainerStartError(f"podman: {exc}") from exc
        finally:
            output.close()
        logger.debug(
            "podman container started", extra={"node": node.name, "command": shlex.join(cmd)}
        )
        return PodmanContainer(proc, name, spec.termination_log)
