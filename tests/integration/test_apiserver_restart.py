"""The sandbox's API server restarts in place (same port, etcd and certificates) while the
simulated kubelet keeps running: what happened on the nodes meanwhile is reported once it is back.
"""

from __future__ import annotations

import threading

import pytest
from conftest import Kube
from waiting import wait_for

from nodewright_bridge.sandbox.kubelet.runners import (
    DURATION_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
)

pytestmark = pytest.mark.integration

DOWN_SECONDS = 4.0


def test_a_crashed_api_server_comes_back_in_place_and_the_kubelet_reports_what_happened(
    kube: Kube,
) -> None:
    busy, rebooted = kube.add_nodes(2)
    namespace = kube.namespace("restart")
    package = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, "bridge.nodewright.io/package": "demo"}

    def pod(name: str, seconds: float) -> dict[str, object]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": package,
                "annotations": {DURATION_ANNOTATION: f"{seconds}s"},
            },
            "spec": {
                "nodeName": busy.name,
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.invalid/x:1"}],
            },
        }

    def phase(name: str) -> str:
        return str(kube.core.read_namespaced_pod(name, namespace).status.phase)

    # Ends while the API server is down: only a kubelet that tries again can report it.
    kube.core.create_namespaced_pod(namespace, pod("ends-meanwhile", DOWN_SECONDS / 2))
    wait_for(lambda: phase("ends-meanwhile") == "Running", what="pod Running")
    boot_before = kube.core.read_node(rebooted.name).status.node_info.boot_id
    server = kube.sandbox.server
    reboot = threading.Timer(1.0, rebooted.request_reboot)  # a reboot nobody can hear of yet
    reboot.start()
    try:
        down = kube.sandbox.restart_apiserver(down_seconds=DOWN_SECONDS, crash=True)
    finally:
        reboot.join()
    assert down >= DOWN_SECONDS
    assert kube.sandbox.server == server  # the same port: every kubeconfig still works
    assert kube.core.read_namespace(namespace).metadata.name == namespace  # etcd kept it all

    wait_for(lambda: phase("ends-meanwhile") == "Succeeded", what="the ended pod reported")

    def back_with_new_boot() -> bool:
        node = kube.core.read_node(rebooted.name)
        ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
        return ready and node.status.node_info.boot_id != boot_before

    wait_for(back_with_new_boot, what="the reboot during the outage reported, node Ready")
    # The kubelet's pod watch resumed: a new pod bound to the node runs.
    kube.core.create_namespaced_pod(namespace, pod("after", 0.2))
    wait_for(lambda: phase("after") == "Succeeded", what="a pod created after the restart ran")
