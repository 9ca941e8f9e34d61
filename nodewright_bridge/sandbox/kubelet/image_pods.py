"""Workload pods that run their real image with podman, as an unprivileged pod would.

Why: the chart's controller Deployment must run from the controller image under the chart's
ServiceAccount, RBAC and security context, not as a local process. This runner gives such a pod
what a real kubelet gives every container:
- the ServiceAccount volume the API server's admission adds (``kube-api-access-*``: a
  TokenRequest token bound to the pod, ``ca.crt`` from ``kube-root-ca.crt``, the namespace),
  materialized by the kubelet and mounted at ``/var/run/secrets/kubernetes.io/serviceaccount``;
- ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT`` naming the API server;
- the security context: ``runAsUser``/``runAsGroup`` (``--user``), ``runAsNonRoot`` (refused
  with ``CreateContainerConfigError`` when the image would run as root), ``readOnlyRootFilesystem``
  (``--read-only`` without podman's extra tmpfs mounts), ``capabilities``,
  ``allowPrivilegeEscalation: false`` (``no-new-privileges``) and the seccomp profile;
- a network namespace of its own (slirp4netns), so two replicas can listen on the same port;
- on deletion SIGTERM, then SIGKILL after a grace period.
  The API server listens on the machine's loopback; the pod reaches it as
  ``kubernetes.default.svc`` (a name its serving certificate carries), which resolves to the
  machine's loopback through slirp4netns (``allow_host_loopback``).

Only images under one of ``registries`` run for real; every other workload pod is simulated,
as before. Caveats: no probes (a running container counts as ready), no token rotation (the
token lasts an hour), the pod cannot be reached from outside its namespace.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from nodewright_bridge.sandbox.kubelet.nodes import SimNode
from nodewright_bridge.sandbox.kubelet.podman_runner import (
    PODMAN_GLOBAL,
    PODMAN_TIMEOUT_SECONDS,
    PodmanContainer,
    container_name,
    pull_image,
)
from nodewright_bridge.sandbox.kubelet.runners import (
    ContainerSpec,
    ContainerStartError,
    RunningContainer,
    SimulateRunner,
    VolumeKind,
)

logger = logging.getLogger(__name__)

API_HOST_NAME = "kubernetes.default.svc"
# How long a stopped container gets between SIGTERM and SIGKILL (a kubelet uses the pod's
# terminationGracePeriodSeconds, 30 s by default; shorter here to keep tests quick).
STOP_GRACE_SECONDS = 10
# slirp4netns maps this address to the machine's loopback when allow_host_loopback is set.
SLIRP_HOST_LOOPBACK = "10.0.2.2"
CONFIG_ERROR = "CreateContainerConfigError"


def security_args(security: Mapping[str, Any], image_user: str) -> list[str]:
    """podman flags for an effective (pod merged with container) security context."""
    args: list[str] = []
    uid = security.get("runAsUser")
    gid = security.get("runAsGroup")
    if uid is not None:
        args.append(f"--user={uid}:{gid if gid is not None else uid}")
    elif gid is not None:
        args.append(f"--group-add={gid}")
    if security.get("runAsNonRoot"):
        effective = uid if uid is not None else _image_uid(image_user)
        if effective is None:
            raise ContainerStartError(
                f"container has runAsNonRoot and image has non-numeric user ({image_user}), "
                "cannot verify user is non-root",
                reason=CONFIG_ERROR,
            )
        if effective == 0:
            raise ContainerStartError(
                "container has runAsNonRoot and image will run as root", reason=CONFIG_ERROR
            )
    if security.get("readOnlyRootFilesystem"):
        args += ["--read-only", "--read-only-tmpfs=false"]
    if security.get("allowPrivilegeEscalation") is False:
        args.append("--security-opt=no-new-privileges")
    capabilities = security.get("capabilities") or {}
    args += [f"--cap-drop={c.lower()}" for c in capabilities.get("drop") or []]
    args += [f"--cap-add={c.lower()}" for c in capabilities.get("add") or []]
    seccomp = (security.get("seccompProfile") or {}).get("type", "RuntimeDefault")
    if seccomp == "Unconfined":
        args.append("--security-opt=seccomp=unconfined")
    return args


def _image_uid(user: str) -> int | None:
    name = user.split(":", 1)[0]
    if not name or name == "root":
        return 0
    return int(name) if name.isdigit() else None


class GracefulContainer(PodmanContainer):
    """An image pod's container: stopping it sends SIGTERM first, as a kubelet does, so the
    process can shut down cleanly (a controller hands its Lease over)."""

    def kill(self) -> None:
        subprocess.run(
            ["podman", *PODMAN_GLOBAL, "stop", f"--time={STOP_GRACE_SECONDS}", self.name],
            capture_output=True,
            timeout=PODMAN_TIMEOUT_SECONDS,
            check=False,
        )
        super().kill()


class ImagePodRunner:
    """Runs workload pods whose image is under ``registries`` with podman; simulates the rest."""

    materializes = True
    starts_at_once = False

    def __init__(
        self, *, api_server: str, registries: Iterable[str], tls_verify: bool = False
    ) -> None:
        """Args:
        api_server: the API server URL (``https://127.0.0.1:<port>``) pods are pointed at.
        registries: image prefixes (``127.0.0.1:5000``) whose pods run for real.
        tls_verify: verify registry TLS (the sandbox's registry is plain HTTP).
        """
        missing = [tool for tool in ("podman", "slirp4netns") if shutil.which(tool) is None]
        if missing:
            raise ContainerStartError(
                f"{' and '.join(missing)} not installed (run: make system-deps)"
            )
        parts = urlsplit(api_server)
        self.api_port = parts.port or 443
        self.registries = tuple(r.rstrip("/") + "/" for r in registries)
        self.tls_verify = tls_verify
        self.simulated = SimulateRunner()
        # (namespace, pod, container) -> the output file / podman container of its newest run.
        self.outputs: dict[tuple[str, str, str], Path] = {}
        self.containers: dict[tuple[str, str, str], str] = {}

    def runs_for_real(self, image: str) -> bool:
        return image.startswith(self.registries)

    def prepare_node(self, node: SimNode) -> None:
        return None

    def release_node(self, node: SimNode) -> None:
        return None

    def close(self) -> None:
        return None

    def service_env(self) -> dict[str, str]:
        """What a kubelet puts in every container for the ``kubernetes`` Service."""
        port = str(self.api_port)
        return {
            "KUBERNETES_SERVICE_HOST": API_HOST_NAME,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://{API_HOST_NAME}:{port}",
        }

    def _pull(self, image: str) -> str:
        """Pull ``image`` and return its configured user (``ErrImagePull`` when it fails)."""
        pull_image(image, tls_verify=self.tls_verify)
        shown = subprocess.run(
            ["podman", "image", "inspect", "--format", "{{json .Config}}", image],
            capture_output=True,
            text=True,
            check=False,
        )
        config = json.loads(shown.stdout or "{}") or {}
        return str(config.get("User") or "")

    def _volume_args(self, node: SimNode, spec: ContainerSpec) -> list[str]:
        args = []
        for mount in spec.volume_mounts:
            source = mount.resolve(node)
            if source is None:
                raise ContainerStartError(
                    f"volume {mount.name} ({mount.kind.value}) has no source on {node.name}",
                    reason=CONFIG_ERROR,
                )
            if mount.kind is not VolumeKind.HOST_PATH:
                source.mkdir(parents=True, exist_ok=True)
            args.append(f"--volume={source}:{mount.mount_path}{':ro' if mount.read_only else ''}")
        if spec.termination_log is not None:
            args.append(f"--volume={spec.termination_log}:{spec.termination_message_path}")
        return args

    def start(self, node: SimNode, spec: ContainerSpec) -> RunningContainer:
        if not self.runs_for_real(spec.image):
            return self.simulated.start(node, spec)
        if spec.scratch_dir is None:
            raise ContainerStartError("no scratch directory for the container")
        image_user = self._pull(spec.image)
        env = {**self.service_env(), **spec.env}
        env_file = spec.scratch_dir / "env"
        env_file.touch(mode=0o600)
        env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items() if "\n" not in v))
        name = container_name(spec)
        cmd = [
            "podman",
            *PODMAN_GLOBAL,
            "run",
            "--rm",
            "--replace",
            f"--name={name}",
            "--pull=never",
            "--network=slirp4netns:allow_host_loopback=true",
            f"--add-host={API_HOST_NAME}:{SLIRP_HOST_LOOPBACK}",
            f"--hostname={spec.pod_name[:63]}",
            f"--env-file={env_file}",
            *(f"--env={k}={v}" for k, v in env.items() if "\n" in v),
            *security_args(spec.security_context, image_user),
            *self._volume_args(node, spec),
            *([f"--workdir={spec.working_dir}"] if spec.working_dir else []),
        ]
        if spec.command:
            cmd.append(f"--entrypoint={json.dumps(list(spec.command))}")
        cmd += [spec.image, *spec.args]
        output_path = spec.scratch_dir / "output.log"
        output: IO[bytes] = output_path.open("ab")
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT
            )
        except OSError as exc:
            raise ContainerStartError(f"podman: {exc}") from exc
        finally:
            output.close()
        key = (spec.namespace, spec.pod_name, spec.name)
        self.outputs[key] = output_path
        self.containers[key] = name
        logger.debug("image pod started", extra={"node": node.name, "pod": spec.pod_name})
        return GracefulContainer(proc, name, spec.termination_log)
