"""The controller image: it starts as its non-root user on a read-only root filesystem, finds the
API server the way a pod does (ServiceAccount token and CA at the usual path,
``KUBERNETES_SERVICE_HOST``/``PORT``) and answers ``/readyz``; ``nwb --version`` in the image names
the version and revision its OCI labels carry."""

from __future__ import annotations

import os
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from chart_support import TOKEN_AUDIENCE, ensure_crds
from conftest import Kube
from controller_image import controller_image, engine, image_labels
from kubernetes import client
from waiting import wait_for

from nodewright_bridge.images.python_base import NONROOT_UID
from nodewright_bridge.sandbox import Sandbox
from nodewright_bridge.sandbox.processes import free_port

pytestmark = [pytest.mark.integration, pytest.mark.podman]

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def test_nwb_version_in_the_image_names_the_version_and_revision_of_its_labels() -> None:
    image = controller_image()
    labels = image_labels(image.image)
    assert labels["org.opencontainers.image.version"] == image.version
    assert labels["org.opencontainers.image.revision"] == image.revision
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.source"].startswith("https://")
    shown = engine().run(["run", "--rm", "--network=none", image.image, "--version"])
    assert shown.stdout.strip() == f"nwb {image.version} (revision {image.revision})"


@pytest.fixture
def service_account_dir(kube: Kube, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A namespace and a ServiceAccount allowed everything; its token, CA and namespace written
    as a kubelet mounts them for a pod."""
    ensure_crds(kube.api)
    namespace = kube.namespace("img")
    account = "controller"
    kube.core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=account))
    )
    rbac = client.RbacAuthorizationV1Api(kube.api)
    binding = f"nwb-image-test-{uuid.uuid4().hex[:6]}"
    rbac.create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=binding),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
            ),
            subjects=[
                client.RbacV1Subject(kind="ServiceAccount", name=account, namespace=namespace)
            ],
        )
    )
    kube.defer(lambda: rbac.delete_cluster_role_binding(binding))
    token = kube.core.create_namespaced_service_account_token(
        account,
        namespace,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[TOKEN_AUDIENCE], expiration_seconds=3600)
        ),
    ).status.token
    ca = wait_for(
        lambda: (
            kube.core.read_namespaced_config_map("kube-root-ca.crt", namespace).data or {}
        ).get("ca.crt", ""),
        timeout=30,
        what="kube-root-ca.crt published",
    )
    secrets = tmp_path / "serviceaccount"
    secrets.mkdir()
    for name, text in (("token", token), ("ca.crt", ca), ("namespace", namespace)):
        (secrets / name).write_text(text)
        (secrets / name).chmod(0o644)
    yield namespace, secrets


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def test_the_controller_starts_non_root_on_a_read_only_root_and_answers_readyz(
    sandbox: Sandbox, service_account_dir: tuple[str, Path]
) -> None:
    namespace, secrets = service_account_dir
    image = controller_image()
    api = urlsplit(sandbox.server)
    port = free_port()
    name = f"nwb-image-test-{uuid.uuid4().hex[:6]}"
    podman = engine()
    podman.run(
        [
            "run",
            "--detach",
            f"--name={name}",
            # As the chart's security context asks: no --user (the image's own), read-only root
            # without podman's extra tmpfs, no capabilities, no privilege escalation.
            "--read-only",
            "--read-only-tmpfs=false",
            "--cap-drop=all",
            "--security-opt=no-new-privileges",
            "--network=host",
            f"--env=KUBERNETES_SERVICE_HOST={api.hostname}",
            f"--env=KUBERNETES_SERVICE_PORT={api.port}",
            "--env=POD_NAME=image-test",
            f"--volume={secrets}:{SA_DIR}:ro",
            image.image,
            "controller",
            f"--namespace={namespace}",
            f"--metrics-addr=127.0.0.1:{port}",
            "--no-leader-elect",
        ]
    )
    try:
        try:
            wait_for(
                lambda: _ready(f"http://127.0.0.1:{port}/readyz"),
                timeout=90,
                what="/readyz of the controller container",
            )
        except AssertionError as exc:
            shown = podman.run(["logs", name], check=False)
            raise AssertionError(f"{exc}\n--- its log:\n{shown.stdout[-3000:]}") from exc
        pid = podman.run(["inspect", "--format", "{{.State.Pid}}", name]).stdout.strip()
        status = Path(f"/proc/{pid}/status").read_text()
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        assert uid_line.split()[1:] == [str(NONROOT_UID)] * 4, uid_line
        assert os.stat(f"/proc/{pid}").st_uid == NONROOT_UID
        # The root really is read-only for the running controller.
        wrote = podman.run(
            ["exec", name, "python3", "-c", "open('/opt/nwb/probe', 'w')"], check=False
        )
        assert wrote.returncode != 0 and "Read-only file system" in wrote.stderr, wrote.stderr
    finally:
        subprocess.run(
            [*podman.argv, "rm", "--force", "--time=5", name], capture_output=True, check=False
        )
