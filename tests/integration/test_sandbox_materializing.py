"""What a materializing runner (exec, podman) receives from the kubelet: resolved env, ConfigMap,
Secret and projected volumes as files, hostPath mounts mapped to the node, and a termination-log
file whose content becomes the container's terminated.message. A second kubelet with a recording
runner serves one extra node next to the session sandbox's kubelet."""

from __future__ import annotations

import base64
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import Kube
from waiting import wait_for

from nodewright_bridge.sandbox import Sandbox
from nodewright_bridge.sandbox.kubelet.api import RawApi
from nodewright_bridge.sandbox.kubelet.kubelet import Kubelet
from nodewright_bridge.sandbox.kubelet.nodes import SimNode
from nodewright_bridge.sandbox.kubelet.runners import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    ContainerSpec,
    VolumeKind,
)

pytestmark = pytest.mark.integration


@dataclass
class Finished:
    """A container that has already ended, having written its termination log."""

    log: Path | None

    def poll(self) -> int | None:
        return 0

    def kill(self) -> None:
        return None

    def termination_message(self) -> str:
        return self.log.read_text() if self.log else ""


@dataclass
class RecordingRunner:
    materializes: bool = True
    starts_at_once: bool = False
    specs: list[ContainerSpec] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def prepare_node(self, node: SimNode) -> None:
        node.root_dir = node.state_dir / "root"
        node.root_dir.mkdir(parents=True, exist_ok=True)

    def release_node(self, node: SimNode) -> None:
        return None

    def close(self) -> None:
        return None

    def start(self, node: SimNode, spec: ContainerSpec) -> Finished:
        with self.lock:
            self.specs.append(spec)
            for mount in spec.volume_mounts:
                source = mount.resolve(node)
                if source is not None and source.is_dir():
                    for path in sorted(source.rglob("*")):
                        if path.is_file():
                            self.files[f"{mount.mount_path}/{path.relative_to(source)}"] = (
                                path.read_text()
                            )
        if spec.termination_log is not None:
            spec.termination_log.write_text(f"done on {node.name}")
        return Finished(spec.termination_log)


@pytest.fixture
def recording(sandbox: Sandbox, tmp_path: Path) -> Iterator[tuple[Kubelet, RecordingRunner]]:
    runner = RecordingRunner()
    api = RawApi(sandbox.kubeconfig)
    kubelet = Kubelet(api, runner, state_dir=tmp_path / "kubelet", mode="recording")
    kubelet.add_nodes([f"rec-{uuid.uuid4().hex[:6]}"], labels={"sandbox.nodewright.io/pool": "rec"})
    kubelet.start()
    try:
        yield kubelet, runner
    finally:
        kubelet.stop(delete_nodes=True)
        api.close()


def test_a_materializing_runner_gets_resolved_env_volume_files_and_its_message_back(
    kube: Kube, recording: tuple[Kubelet, RecordingRunner]
) -> None:
    kubelet, runner = recording
    node = next(iter(kubelet.nodes))
    namespace = kube.namespace("mat")
    kube.core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "vars"}, "data": {"vars.json": '{"a": 1}', "k": "v"}}
    )
    secret = base64.b64encode(b"s3cret").decode()
    kube.core.create_namespaced_secret(
        namespace, {"metadata": {"name": "creds"}, "data": {"password": secret}}
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pkg", "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "agent",
                    "image": "127.0.0.1:5000/pkgs/demo:1.0.0",
                    "command": ["nwb-agent"],
                    "args": ["run", "--node", "$(NW_NODE)"],
                    "env": [
                        {
                            "name": "NW_NODE",
                            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                        },
                        {
                            "name": "FROM_CM",
                            "valueFrom": {"configMapKeyRef": {"name": "vars", "key": "k"}},
                        },
                        {
                            "name": "PW",
                            "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}},
                        },
                        {"name": "LITERAL", "value": "x-$(FROM_CM)"},
                    ],
                    "volumeMounts": [
                        {"name": "host", "mountPath": "/host"},
                        {"name": "vars", "mountPath": "/etc/nodewright/vars"},
                        {"name": "creds", "mountPath": "/etc/nodewright/secrets/creds"},
                    ],
                    "securityContext": {"privileged": True},
                }
            ],
            "volumes": [
                {"name": "host", "hostPath": {"path": "/"}},
                {
                    "name": "vars",
                    "configMap": {
                        "name": "vars",
                        "items": [{"key": "vars.json", "path": "vars.json"}],
                    },
                },
                {"name": "creds", "secret": {"secretName": "creds"}},
            ],
        },
    }
    kube.core.create_namespaced_pod(namespace, pod)

    def succeeded() -> bool:
        return kube.core.read_namespaced_pod("pkg", namespace).status.phase == "Succeeded"

    wait_for(succeeded, what="pod Succeeded")
    (spec,) = runner.specs
    assert spec.env["NW_NODE"] == node
    assert (spec.env["FROM_CM"], spec.env["PW"], spec.env["LITERAL"]) == ("v", "s3cret", "x-v")
    assert spec.args == ("run", "--node", node)
    assert spec.privileged and spec.is_package_pod
    host = next(m for m in spec.volume_mounts if m.name == "host")
    assert (host.kind, host.host_path) == (VolumeKind.HOST_PATH, "/")
    assert runner.files["/etc/nodewright/vars/vars.json"] == '{"a": 1}'
    assert runner.files["/etc/nodewright/secrets/creds/password"] == "s3cret"
    # The ServiceAccount admission plugin adds the API-access volume; its token is a real JWT.
    (access,) = [m for m in spec.volume_mounts if m.kind is VolumeKind.PROJECTED]
    assert runner.files[f"{access.mount_path}/token"].count(".") == 2
    assert runner.files[f"{access.mount_path}/namespace"] == namespace
    assert "BEGIN CERTIFICATE" in runner.files[f"{access.mount_path}/ca.crt"]
    status = kube.core.read_namespaced_pod("pkg", namespace).status.container_statuses[0]
    assert status.state.terminated.message == f"done on {node}"
