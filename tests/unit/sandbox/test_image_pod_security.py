"""How the sandbox turns a pod's security context into podman flags for an image pod."""

from __future__ import annotations

import pytest

from nodewright_bridge.sandbox.kubelet.image_pods import ImagePodRunner, security_args
from nodewright_bridge.sandbox.kubelet.runners import ContainerStartError

CHART_CONTEXT = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def test_the_charts_security_context_becomes_user_read_only_root_and_no_capabilities() -> None:
    assert security_args(CHART_CONTEXT, image_user="") == [
        "--user=65532:65532",
        "--read-only",
        "--read-only-tmpfs=false",
        "--security-opt=no-new-privileges",
        "--cap-drop=all",
    ]


def test_run_as_non_root_checks_the_image_user_when_the_pod_names_none() -> None:
    assert security_args({"runAsNonRoot": True}, image_user="65532:65532") == []
    with pytest.raises(ContainerStartError, match="will run as root") as refused:
        security_args({"runAsNonRoot": True}, image_user="")
    assert refused.value.reason == "CreateContainerConfigError"
    with pytest.raises(ContainerStartError, match="non-numeric user"):
        security_args({"runAsNonRoot": True}, image_user="app")


def test_only_images_of_the_given_registries_run_for_real_and_get_the_service_env() -> None:
    runner = ImagePodRunner(api_server="https://127.0.0.1:6443", registries=["127.0.0.1:5000"])
    assert runner.runs_for_real("127.0.0.1:5000/nodewright-bridge:0.1.0")
    assert not runner.runs_for_real("registry.invalid/app:1")
    assert not runner.runs_for_real("127.0.0.1:50001/x:1")
    env = runner.service_env()
    assert env["KUBERNETES_SERVICE_HOST"] == "kubernetes.default.svc"
    assert env["KUBERNETES_SERVICE_PORT"] == "6443"
