"""``nwb reset`` on the sandbox API: a failed pod kept for its log that carried its start
(``lifecycle.pod_records``) is deleted with the node's state, so the forgotten entry cannot come
back from it; a pod that carried nothing is left for its log."""

from __future__ import annotations

import json
import uuid
from typing import Any

from click.testing import CliRunner
from conftest import Kube
from kubernetes import client
from waiting import wait_for

from lifecycle import pod_records
from lifecycle.nodestate import state_annotation, status_key
from nodewright_bridge.cli import main
from nodewright_bridge.commands.demo import CONTROLLER_NAMESPACE, ensure_namespace
from nodewright_bridge.controller import podspec
from nodewright_bridge.k8s.client import ClientSettings
from nodewright_bridge.k8s.rest import Rest

ENTRY = json.dumps({"stage": "apply", "state": "in_progress", "attempts": 1})


def failed_pod(name: str, node: str, cr: str, *, carries: bool) -> client.V1Pod:
    """A package pod the simulated kubelet ends with exit code 1 (no controller runs here)."""
    notes = {"sandbox.nodewright.io/duration": "0s", "sandbox.nodewright.io/exit-code": "1"}
    if carries:
        notes[pod_records.ENTRY_ANNOTATION] = ENTRY
    labels: dict[str, Any] = {**podspec.MANAGED_BY, podspec.LABEL_CR: cr}
    labels[podspec.LABEL_PACKAGE], labels[podspec.LABEL_VERSION] = "tune", "1.0.0"
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels, annotations=notes),
        spec=client.V1PodSpec(
            node_name=node,
            restart_policy="Never",
            containers=[client.V1Container(name="agent", image="sim.local/nwb/tune:1.0.0")],
        ),
    )


def test_reset_deletes_a_kept_pod_that_carried_its_start_and_keeps_the_others(
    kube: Kube,
) -> None:
    (node,) = (n.name for n in kube.add_nodes(1))
    cr = f"reset-{uuid.uuid4().hex[:6]}"
    core = kube.core
    rest = Rest.connect(ClientSettings(kubeconfig=str(kube.kubeconfig)), metrics=None)
    ensure_namespace(rest, CONTROLLER_NAMESPACE)
    entry = {"tune|1.0.0": {"stage": "apply", "state": "erroring", "attempts": 3}}
    core.patch_node(
        node,
        {
            "metadata": {
                "labels": {status_key(cr): "erroring"},
                "annotations": {state_annotation(cr): json.dumps(entry)},
            }
        },
    )
    carrying, plain = f"{cr}-carried", f"{cr}-plain"
    for name, carries in ((carrying, True), (plain, False)):
        core.create_namespaced_pod(
            CONTROLLER_NAMESPACE, failed_pod(name, node, cr, carries=carries)
        )
        kube.defer(lambda n=name: core.delete_namespaced_pod(n, CONTROLLER_NAMESPACE))

    def ended() -> bool:
        pods = core.list_namespaced_pod(
            CONTROLLER_NAMESPACE, label_selector=f"{podspec.LABEL_CR}={cr}"
        )
        return len(pods.items) == 2 and all(p.status.phase == "Failed" for p in pods.items)

    wait_for(ended, what="both pods failed")
    args = ["reset", cr, "--node", node, "--yes", "--kubeconfig", str(kube.kubeconfig)]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    assert f"node/{node}: deleted kept pod {carrying} (it recorded the start)" in out.output
    assert state_annotation(cr) not in (core.read_node(node).metadata.annotations or {})
    left = core.list_namespaced_pod(CONTROLLER_NAMESPACE, label_selector=f"{podspec.LABEL_CR}={cr}")
    names = {p.metadata.name for p in left.items if not p.metadata.deletion_timestamp}
    assert names == {plain}
    rest.close()
