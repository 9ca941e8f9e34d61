"""The sandbox behaves like a small real cluster: CRDs, PDB-guarded evictions, scheduling of a
Deployment's pods onto simulated nodes, simulated package pods, deletions and reboots."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import Kube
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from waiting import wait_for

from lifecycle.results import parse_termination_message
from nodewright_bridge.sandbox import binaries, supervisor
from nodewright_bridge.sandbox.kubelet.runners import (
    DURATION_ANNOTATION,
    EXIT_CODE_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MESSAGE_ANNOTATION,
)
from nodewright_bridge.sandbox.registry import Registry

pytestmark = pytest.mark.integration


def _deployment(namespace: str, name: str, replicas: int) -> client.V1Deployment:
    labels = {"app": name}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    containers=[client.V1Container(name="app", image="registry.invalid/web:1")],
                    termination_grace_period_seconds=30,
                ),
            ),
        ),
    )


def _ready_pods(kube: Kube, namespace: str, selector: str) -> list[client.V1Pod]:
    pods = kube.core.list_namespaced_pod(namespace, label_selector=selector).items
    return [
        pod
        for pod in pods
        if pod.metadata.deletion_timestamp is None
        and pod.status.phase == "Running"
        and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    ]


def _evict(kube: Kube, namespace: str, pod: str) -> int:
    """POST an Eviction; the HTTP status (201 on success, 429 when a PDB forbids it)."""
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
    try:
        kube.core.create_namespaced_pod_eviction(pod, namespace, body)
    except ApiException as exc:
        return int(exc.status)
    return 201


def _pod(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    metadata = spec.pop("metadata", {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, **metadata},
        "spec": {"containers": [{"name": "main", "image": "registry.invalid/x:1"}], **spec},
    }


def _package_pod(
    namespace: str, name: str, node: str, notes: dict[str, str], **spec: Any
) -> dict[str, Any]:
    """A one-shot pod the simulated kubelet runs as a package pod, ending as ``notes`` say."""
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, "bridge.nodewright.io/package": "demo"}
    metadata = {"labels": labels, "annotations": notes}
    return _pod(namespace, name, nodeName=node, restartPolicy="Never", metadata=metadata, **spec)


def test_the_api_server_serves_a_crd_and_its_objects(kube: Kube) -> None:
    group = f"g{uuid.uuid4().hex[:6]}.sandbox.test"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer"}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    kube.ext.create_custom_resource_definition(crd)
    kube.defer(lambda: kube.ext.delete_custom_resource_definition(f"widgets.{group}"))

    def established() -> bool:
        found = kube.ext.read_custom_resource_definition(f"widgets.{group}")
        return any(
            c.type == "Established" and c.status == "True" for c in found.status.conditions or []
        )

    wait_for(established, what="CRD Established")
    namespace = kube.namespace("crd")
    body = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w1"}}
    body["spec"] = {"size": 3}
    kube.custom.create_namespaced_custom_object(group, "v1", namespace, "widgets", body)
    got = kube.custom.get_namespaced_custom_object(group, "v1", namespace, "widgets", "w1")
    assert got["spec"] == {"size": 3}


def test_an_eviction_is_refused_with_429_while_a_pdb_forbids_it_and_accepted_once_it_allows(
    kube: Kube,
) -> None:
    namespace = kube.namespace("pdb")
    kube.apps.create_namespaced_deployment(namespace, _deployment(namespace, "web", 2))
    ready = wait_for(lambda: len(_ready_pods(kube, namespace, "app=web")) == 2, what="2 ready")
    assert ready
    pdb = client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1PodDisruptionBudgetSpec(
            min_available=2, selector=client.V1LabelSelector(match_labels={"app": "web"})
        ),
    )
    kube.policy.create_namespaced_pod_disruption_budget(namespace, pdb)

    def budget(allowed: int) -> bool:
        got = kube.policy.read_namespaced_pod_disruption_budget("web", namespace)
        return (
            got.status is not None
            and got.status.observed_generation == got.metadata.generation
            and got.status.current_healthy == 2
            and got.status.disruptions_allowed == allowed
        )

    wait_for(lambda: budget(0), what="PDB observed with 0 disruptions allowed")
    victim = _ready_pods(kube, namespace, "app=web")[0].metadata.name
    assert _evict(kube, namespace, victim) == 429

    kube.policy.patch_namespaced_pod_disruption_budget(
        "web", namespace, {"spec": {"minAvailable": 1}}
    )
    wait_for(lambda: budget(1), what="PDB observed with 1 disruption allowed")
    assert _evict(kube, namespace, victim) == 201

    def victim_gone() -> bool:
        try:
            kube.core.read_namespaced_pod(victim, namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(victim_gone, what="the evicted pod deleted by the kubelet")


def test_a_deployment_runs_on_simulated_nodes_and_moves_after_a_cordon_and_an_eviction(
    kube: Kube,
) -> None:
    namespace = kube.namespace("deploy")
    kube.apps.create_namespaced_deployment(namespace, _deployment(namespace, "web", 3))

    def three_ready() -> list[client.V1Pod] | None:
        pods = _ready_pods(kube, namespace, "app=web")
        return pods if len(pods) == 3 else None

    pods = wait_for(three_ready, what="3 ready pods")
    served = set(kube.sandbox.kubelet.nodes) if kube.sandbox.kubelet else set()
    assert {pod.spec.node_name for pod in pods} <= served
    victim = pods[0]
    node = victim.spec.node_name
    kube.cordon(node)
    assert _evict(kube, namespace, victim.metadata.name) == 201

    def replaced() -> list[client.V1Pod] | None:
        now = _ready_pods(kube, namespace, "app=web")
        names = {pod.metadata.name for pod in now}
        if len(now) == 3 and victim.metadata.name not in names:
            return now
        return None

    after = wait_for(replaced, what="a replacement pod Ready")
    old = {pod.metadata.name for pod in pods}
    newcomer = next(pod for pod in after if pod.metadata.name not in old)
    assert newcomer.spec.node_name != node
    assert newcomer.spec.node_name in served


def test_a_simulated_reboot_changes_the_boot_id_and_fails_the_running_pods_then_the_node_is_ready(
    kube: Kube,
) -> None:
    (node,) = kube.add_nodes(1)
    namespace = kube.namespace("reboot")
    kube.core.create_namespaced_pod(namespace, _pod(namespace, "sleeper", nodeName=node.name))
    wait_for(lambda: _ready_pods(kube, namespace, ""), what="pod Running")
    before = kube.core.read_node(node.name).status.node_info.boot_id

    node.request_reboot()
    seen_not_ready = False

    def rebooted() -> bool:
        nonlocal seen_not_ready
        current = kube.core.read_node(node.name)
        ready = next(c.status for c in current.status.conditions if c.type == "Ready")
        seen_not_ready = seen_not_ready or ready == "False"
        return current.status.node_info.boot_id != before and ready == "True" and seen_not_ready

    wait_for(rebooted, what="new bootID, NotReady, then Ready")
    pod = kube.core.read_namespaced_pod("sleeper", namespace)
    assert pod.status.phase == "Failed"
    assert pod.status.reason == "NodeRebooted"
    assert pod.status.container_statuses[0].state.terminated is not None


def test_a_heartbeat_on_its_way_when_the_node_reboots_never_lands_after_the_new_boot_id(
    kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A heartbeat built before a reboot (old bootID, Ready) that reached the API after the
    reboot's NotReady put the old bootID back: the invariant checker saw two reboots 6 ms apart
    and a third once Ready came, and the controller could have read Ready with the old boot."""
    kubelet = kube.sandbox.kubelet
    assert kubelet is not None
    period = kubelet.heartbeat_seconds
    kubelet.heartbeat_seconds = 1.0  # the new node's first heartbeat comes a second after it
    try:
        (node,) = kube.add_nodes(1)
    finally:
        kubelet.heartbeat_seconds = period
    status_path = f"/api/v1/nodes/{node.name}/status"
    real_request = kubelet.api.request
    on_its_way = threading.Event()
    landed: list[tuple[int, str]] = []  # (resourceVersion, bootID) of each status the API took

    def slow_heartbeat(method: str, path: str, **kw: Any) -> Any:
        conditions = (kw.get("body") or {}).get("status", {}).get("conditions", [])
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        if path == status_path and ready and not on_its_way.is_set():
            on_its_way.set()
            time.sleep(0.5)  # built with the old bootID, still on the wire
        answer = real_request(method, path, **kw)
        if path == status_path and answer:
            version = int(answer["metadata"]["resourceVersion"])
            landed.append((version, answer["status"]["nodeInfo"]["bootID"]))
        return answer

    monkeypatch.setattr(kubelet.api, "request", slow_heartbeat)
    before = node.boot_id
    wait_for(on_its_way.is_set, what="the node's first heartbeat on its way", timeout=10)
    kubelet.reboot(node.name)

    def ready_again() -> bool:
        return any(boot != before for _, boot in landed) and len(landed) >= 3

    wait_for(ready_again, what="the heartbeat, NotReady and Ready after the reboot landed")
    boots = [boot for _, boot in sorted(landed)]
    assert boots[0] == before and boots[-1] == node.boot_id != before, boots
    first_new = boots.index(node.boot_id)
    assert before not in boots[first_new:], f"the old bootID came back after the new: {boots}"


def test_simulated_package_pods_end_as_their_annotations_say(kube: Kube) -> None:
    namespace = kube.namespace("pkg")
    node = next(iter(kube.sandbox.kubelet.nodes)) if kube.sandbox.kubelet else ""
    ok = _package_pod(namespace, "ok", node, {DURATION_ANNOTATION: "200ms"})
    bad_notes = {DURATION_ANNOTATION: "0s", EXIT_CODE_ANNOTATION: "3", MESSAGE_ANNOTATION: "boom"}
    first = [{"name": "first", "image": "registry.invalid/x:1"}]
    bad = _package_pod(namespace, "bad", node, bad_notes, initContainers=first)
    kube.core.create_namespaced_pod(namespace, ok)
    kube.core.create_namespaced_pod(namespace, bad)

    def phase(name: str) -> str:
        return str(kube.core.read_namespaced_pod(name, namespace).status.phase)

    wait_for(lambda: phase("ok") == "Succeeded", what="ok Succeeded")
    wait_for(lambda: phase("bad") == "Failed", what="bad Failed")
    done = kube.core.read_namespaced_pod("ok", namespace).status.container_statuses[0]
    result = parse_termination_message(done.state.terminated.message)
    assert result.succeeded and result.package == "demo"
    failed = kube.core.read_namespaced_pod("bad", namespace).status
    terminated = failed.init_container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.message) == (3, "boom")


def test_the_kubelet_tells_each_pods_end_once_when_the_api_answered_its_report(kube: Kube) -> None:
    kubelet = kube.sandbox.kubelet
    assert kubelet is not None
    namespace = kube.namespace("ends")
    node = next(iter(kubelet.nodes))
    told: list[tuple[str, str]] = []
    kubelet.on_ended_report = lambda uid, phase: told.append((uid, phase))
    try:
        ok = kube.core.create_namespaced_pod(
            namespace, _package_pod(namespace, "ok", node, {DURATION_ANNOTATION: "100ms"})
        )
        notes = {DURATION_ANNOTATION: "0s", EXIT_CODE_ANNOTATION: "2"}
        bad = kube.core.create_namespaced_pod(
            namespace, _package_pod(namespace, "bad", node, notes)
        )
        mine = {ok.metadata.uid, bad.metadata.uid}
        wait_for(lambda: len([t for t in told if t[0] in mine]) >= 2, what="both ends told")
        for name in ("ok", "bad"):  # told only once the API shows it
            assert kube.core.read_namespaced_pod(name, namespace).status.phase in (
                "Succeeded",
                "Failed",
            )
        time.sleep(0.5)  # a later sync of an ended pod tells nothing more
    finally:
        kubelet.on_ended_report = None
    assert sorted(t for t in told if t[0] in mine) == sorted(
        [(ok.metadata.uid, "Succeeded"), (bad.metadata.uid, "Failed")]
    )


def test_the_kubelets_status_diffs_add_up_to_the_whole_status_it_reports(kube: Kube) -> None:
    """The simulated kubelet patches only what changed (``status_patch``); the stored status
    must still be exactly the one it computed, with the Running report's fields it left out."""
    assert kube.sandbox.kubelet is not None
    namespace = kube.namespace("diff")
    node = next(iter(kube.sandbox.kubelet.nodes))
    pod = _package_pod(namespace, "diffed", node, {DURATION_ANNOTATION: "300ms"})
    uid = kube.core.create_namespaced_pod(namespace, pod).metadata.uid

    def stored() -> dict[str, Any]:
        raw = kube.core.read_namespaced_pod("diffed", namespace, _preload_content=False)
        return dict(json.loads(raw.data)["status"])

    wait_for(lambda: stored().get("phase") == "Succeeded", what="diffed Succeeded")
    sent = kube.sandbox.kubelet.pods[uid].sent
    assert sent is not None and sent["phase"] == "Succeeded"
    status = stored()
    # the API server writes an unset lastProbeTime as null; the kubelet leaves it out
    status["conditions"] = [
        {k: v for k, v in cond.items() if v is not None} for cond in status["conditions"]
    ]
    assert {key: status.get(key) for key in sent} == sent
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PodCompleted")
    assert status["hostIP"] and status["podIPs"]  # sent only with the first report


def test_a_resync_whose_list_lags_the_watch_keeps_the_pod_the_watch_showed(
    kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resync (``add_nodes`` lists every pod while the watch goes on) must not take a pod away
    that was created after its list was read: the kubelet would forget it, stop its containers,
    and, seeing it again, report a second pod IP that the API refuses on every report after."""
    kubelet = kube.sandbox.kubelet
    assert kubelet is not None
    namespace = kube.namespace("resync")
    node = next(iter(kubelet.nodes))
    real_get = kubelet.api.get
    created: list[str] = []

    def lagging(path: str, **kw: Any) -> Any:
        """The list is read, and then the watch shows a pod created after it."""
        listed = real_get(path, **kw)
        if path == "/api/v1/pods" and not created:
            pod = _package_pod(namespace, "late", node, {DURATION_ANNOTATION: "2s"})
            uid = kube.core.create_namespaced_pod(namespace, pod).metadata.uid
            created.append(uid)
            wait_for(lambda: uid in kubelet.pods and kubelet.pods[uid].sent, what="reported")
        return listed

    monkeypatch.setattr(kubelet.api, "get", lagging)
    kubelet.add_nodes([])  # registers nothing, then resyncs from the list
    monkeypatch.undo()
    assert created and created[0] in kubelet.pods, "a list older than the watch took the pod"

    def status() -> Any:
        return kube.core.read_namespaced_pod("late", namespace).status

    wait_for(lambda: status().phase == "Succeeded", what="the pod Succeeded")
    assert len(status().pod_ips) == 1


def test_a_workload_pod_with_a_grace_period_is_deleted_by_the_kubelet(kube: Kube) -> None:
    namespace = kube.namespace("del")
    kube.core.create_namespaced_pod(
        namespace, _pod(namespace, "p", terminationGracePeriodSeconds=300)
    )
    wait_for(lambda: _ready_pods(kube, namespace, ""), what="pod Running")
    kube.core.delete_namespaced_pod("p", namespace)

    def gone() -> bool:
        return not kube.core.list_namespaced_pod(namespace).items

    wait_for(gone, timeout=20, what="pod deleted well before its 300s grace period")


def _nwb(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    nwb = Path(sys.executable).parent / "nwb"
    return subprocess.run(
        [str(nwb), *args], capture_output=True, text=True, timeout=300, env=env, check=False
    )


def test_nwb_sandbox_up_status_env_down_round_trip(tmp_path: Path) -> None:
    state = tmp_path / "sb"
    flags = ["--state-dir", str(state)]
    up = _nwb("sandbox", "up", "--nodes", "2", "--labels", "zone=a,tier=x", *flags)
    try:
        assert up.returncode == 0, up.stderr + up.stdout
        kubeconfig = state / "controlplane" / "admin.kubeconfig"
        assert f"export KUBECONFIG={kubeconfig}" in up.stdout
        status = _nwb("sandbox", "status", *flags)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "nodes: 2/2 Ready" in status.stdout
        env = _nwb("sandbox", "env", *flags)
        assert env.stdout.strip().splitlines()[0] == f"export KUBECONFIG={kubeconfig}"
        kubectl = _kubectl(kubeconfig, "get", "nodes", "-l", "zone=a,tier=x", "-o", "json")
        assert len(json.loads(kubectl)["items"]) == 2
        pid = json.loads((state / "state.json").read_text())["pid"]
    finally:
        down = _nwb("sandbox", "down", *flags)
    assert down.returncode == 0 and "sandbox stopped" in down.stdout
    assert not (state / "state.json").exists()
    assert not supervisor.pid_alive(pid)
    assert _nwb("sandbox", "status", *flags).returncode == 1


def _kubectl(kubeconfig: Path, *args: str) -> str:
    found = binaries.find("kubectl")
    assert found is not None
    deadline = time.monotonic() + 30
    while True:
        done = subprocess.run(
            [str(found.path), "--kubeconfig", str(kubeconfig), *args],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0 or time.monotonic() > deadline:
            assert done.returncode == 0, done.stderr
            return done.stdout
        time.sleep(0.5)


def test_the_local_registry_serves_the_registry_api_on_loopback(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "registry", storage=tmp_path / "storage")
    registry.start()
    try:
        assert registry.host.startswith("127.0.0.1:")
        url = f"http://{registry.host}/v2/_catalog"
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert json.load(resp) == {"repositories": []}
    finally:
        registry.stop()
    assert registry.process is None
