"""The controller runtime against the real sandbox API server: informers (incl. a real 410),
leader election with two electors, conditional writes, finalizers, Events, the manager."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from conftest import CRDS, Kube, install_product_crds
from waiting import wait_for

from nodewright_bridge import errors
from nodewright_bridge.clock import SystemClock
from nodewright_bridge.k8s import resources, store
from nodewright_bridge.k8s.client import ClientSettings, load_connection, total_requests
from nodewright_bridge.k8s.events import EventRecorder, ObjectRef
from nodewright_bridge.k8s.patching import Writer
from nodewright_bridge.k8s.resources import Resource
from nodewright_bridge.k8s.rest import PatchType, Rest
from nodewright_bridge.k8s.watching import Informer, InformerSpec
from nodewright_bridge.metrics import Metrics
from nodewright_bridge.runtime.leadership import ElectionSettings, LeaderElector
from nodewright_bridge.runtime.manager import Manager, ManagerSettings, ReconcilerContext
from nodewright_bridge.runtime.reconciling import Result

pytestmark = pytest.mark.integration

# Short Lease timings keep the election tests quick; the ordering invariant is the same.
FAST_ELECTION = ElectionSettings(lease_duration=3.0, renew_deadline=2.0, retry_period=0.3)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def rest(kube: Kube, metrics: Metrics) -> Iterator[Rest]:
    rest = Rest.connect(ClientSettings(kubeconfig=str(kube.kubeconfig)), metrics=metrics)
    try:
        yield rest
    finally:
        rest.close()


class Recorder:
    """An informer handler that records what it was told."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()

    def _add(self, what: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        with self.lock:
            self.seen.append((what, meta["name"], (meta.get("labels") or {}).get("color", "")))

    def on_add(self, obj: dict[str, Any]) -> None:
        self._add("add", obj)

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self._add("update", new)

    def on_delete(self, obj: dict[str, Any]) -> None:
        self._add("delete", obj)

    def has(self, event: tuple[str, str, str]) -> bool:
        with self.lock:
            return event in self.seen


def configmap(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"test": "runtime", **labels}}, "data": {}}


def test_an_informer_sees_adds_updates_and_deletes_and_indexes_by_label(
    kube: Kube, rest: Rest
) -> None:
    ns = kube.namespace("inf")
    rest.create(resources.CONFIG_MAPS, configmap("before", color="red"), namespace=ns)
    spec = InformerSpec(
        name="cms",
        resource=resources.CONFIG_MAPS,
        namespace=ns,
        label_selector="test=runtime",
        indexers={"color": store.by_label("color")},
    )
    informer = Informer(rest, spec)
    handler = Recorder()
    informer.add_handler(handler)
    informer.start()
    try:
        assert informer.wait_for_sync(30)
        assert handler.has(("add", "before", "red"))
        rest.create(resources.CONFIG_MAPS, configmap("later", color="blue"), namespace=ns)
        wait_for(lambda: handler.has(("add", "later", "blue")), what="add event")
        rest.patch(
            resources.CONFIG_MAPS,
            "later",
            {"metadata": {"labels": {"color": "red"}}},
            patch_type=PatchType.MERGE,
            namespace=ns,
        )
        wait_for(lambda: handler.has(("update", "later", "red")), what="update event")
        reds = sorted(o["metadata"]["name"] for o in informer.store.by_index("color", "red"))
        assert reds == ["before", "later"]
        assert informer.store.by_index("color", "blue") == []
        rest.delete(resources.CONFIG_MAPS, "before", namespace=ns)
        wait_for(lambda: handler.has(("delete", "before", "red")), what="delete event")
        assert informer.store.get(f"{ns}/before") is None
        assert "managedFields" not in informer.store.get(f"{ns}/later")["metadata"]
    finally:
        informer.stop()
    assert not informer.alive()


@pytest.fixture
def widgets(rest: Rest) -> Iterator[Resource]:
    """A throwaway cluster-scoped CRD: its watch cache starts now, so an old rv gets a real 410."""
    plural = f"widgets{uuid.uuid4().hex[:6]}"
    group = "runtime.test.nodewright.io"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Cluster",
            "names": {"plural": plural, "singular": plural[:-1], "kind": f"W{plural}"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    rest.create(CRDS, crd)
    resource = Resource(group, "v1", plural, f"W{plural}", namespaced=False)

    def served() -> bool:
        try:
            rest.list(resource)
        except errors.NotFoundError:
            return False
        return True

    wait_for(served, what="CRD served")
    try:
        yield resource
    finally:
        rest.delete(CRDS, f"{plural}.{group}")


def widget(resource: Resource, name: str) -> dict[str, Any]:
    return {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": {"name": name}}


def test_an_informer_relists_after_a_410_and_keeps_following_changes(
    rest: Rest, widgets: Resource, metrics: Metrics
) -> None:
    rest.create(widgets, widget(widgets, "a"))
    informer = Informer(rest, InformerSpec(name="widgets", resource=widgets), metrics=metrics)
    handler = Recorder()
    informer.add_handler(handler)
    informer.start()
    try:
        assert informer.wait_for_sync(30)
        assert informer.relists == 1
        # The API server has no history from before this CRD existed: "1" is too old -> 410.
        with pytest.raises(errors.ExpiredError):
            for _ in rest.watch(widgets, resource_version="1", timeout_seconds=1):
                pass
        informer.restart_watch("1")
        wait_for(lambda: informer.relists == 2, what="relist after 410")
        expired = metrics.registry.get_sample_value(
            "nwb_informer_relists_total", {"informer": "widgets", "reason": "expired"}
        )
        assert expired == 1
        rest.create(widgets, widget(widgets, "b"))
        wait_for(lambda: handler.has(("add", "b", "")), what="add after relist")
        rest.delete(widgets, "a")
        wait_for(lambda: handler.has(("delete", "a", "")), what="delete after relist")
        assert sorted(informer.store.keys()) == ["b"]
    finally:
        informer.stop()


def test_two_electors_never_both_lead_and_hand_over_on_release_and_on_expiry(
    kube: Kube, rest: Rest
) -> None:
    ns = kube.namespace("lease")
    clock = SystemClock()
    lease = f"lease-{uuid.uuid4().hex[:6]}"

    def elector(identity: str) -> LeaderElector:
        return LeaderElector(
            rest,
            namespace=ns,
            name=lease,
            identity=identity,
            clock=clock,
            settings=FAST_ELECTION,
        )

    electors = {name: elector(name) for name in ("a", "b")}
    violations: list[list[str]] = []
    samples = 0
    done = threading.Event()

    def check() -> None:
        nonlocal samples
        while not done.is_set():
            leading = [n for n, e in list(electors.items()) if e.is_leader()]
            samples += 1
            if len(leading) > 1:
                violations.append(leading)
            time.sleep(0.002)

    checker = threading.Thread(target=check, daemon=True)
    checker.start()
    try:
        for e in list(electors.values()):
            e.start()

        def leaders() -> list[str]:
            return [n for n, e in list(electors.items()) if e.is_leader()]

        first = wait_for(lambda: leaders() if len(leaders()) == 1 else None, what="one leader")[0]
        other = "b" if first == "a" else "a"
        # Graceful hand-over: the leader releases, the other acquires without waiting out the
        # lease duration.
        electors[first].stop(release=True)
        assert not electors[first].is_leader()
        wait_for(electors[other].is_leader, what="take-over after release")
        lease_obj = rest.get(resources.LEASES, lease, namespace=ns)
        assert lease_obj["spec"]["holderIdentity"] == other
        assert lease_obj["spec"]["leaseTransitions"] >= 1
        # Crash-like loss: the leader stops without releasing; a newcomer must wait for expiry.
        electors["c"] = elector("c")
        electors["c"].start()
        time.sleep(1.0)
        assert not electors["c"].is_leader()  # the lease is held and renewed
        electors[other].stop(release=False)
        wait_for(electors["c"].is_leader, what="take-over after expiry")
    finally:
        done.set()
        checker.join()
        for e in electors.values():
            e.stop(release=True)
    assert samples > 100
    assert violations == []


def test_a_conditional_patch_conflicts_and_modify_re_reads_and_retries(
    kube: Kube, rest: Rest
) -> None:
    ns = kube.namespace("patch")
    created = rest.create(resources.CONFIG_MAPS, configmap("cm"), namespace=ns)
    writer = Writer(rest)
    stale = created["metadata"]["resourceVersion"]
    writer.merge_patch(resources.CONFIG_MAPS, "cm", {"data": {"x": "1"}}, namespace=ns)
    with pytest.raises(errors.ConflictError):
        writer.merge_patch(
            resources.CONFIG_MAPS, "cm", {"data": {"y": "1"}}, namespace=ns, resource_version=stale
        )
    with pytest.raises(errors.ConflictError):
        writer.json_patch(
            resources.CONFIG_MAPS,
            "cm",
            [{"op": "add", "path": "/data/y", "value": "1"}],
            namespace=ns,
            resource_version=stale,
        )

    calls = 0

    def decide(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
        nonlocal calls
        calls += 1
        if calls == 1:  # someone else writes between our read and our write
            rest.patch(
                resources.CONFIG_MAPS,
                "cm",
                {"data": {"other": "writer"}},
                patch_type=PatchType.MERGE,
                namespace=ns,
            )
        count = int(obj["data"].get("count", "0"))
        return [{"op": "add", "path": "/data/count", "value": str(count + 1)}]

    result = writer.modify(resources.CONFIG_MAPS, "cm", decide, namespace=ns)
    assert calls == 2
    assert result is not None
    assert result["data"] == {"x": "1", "other": "writer", "count": "1"}
    assert writer.modify(resources.CONFIG_MAPS, "missing", decide, namespace=ns) is None


def test_finalizers_are_added_once_and_removed_without_touching_others(
    kube: Kube, rest: Rest
) -> None:
    ns = kube.namespace("fin")
    rest.create(resources.CONFIG_MAPS, configmap("cm"), namespace=ns)
    writer = Writer(rest)
    assert writer.add_finalizer(resources.CONFIG_MAPS, "cm", "example.com/other", namespace=ns)
    assert writer.add_finalizer(resources.CONFIG_MAPS, "cm", "bridge.nodewright.io/x", namespace=ns)
    assert not writer.add_finalizer(
        resources.CONFIG_MAPS, "cm", "bridge.nodewright.io/x", namespace=ns
    )
    obj = rest.get(resources.CONFIG_MAPS, "cm", namespace=ns)
    assert obj["metadata"]["finalizers"] == ["example.com/other", "bridge.nodewright.io/x"]
    assert writer.remove_finalizer(
        resources.CONFIG_MAPS, "cm", "bridge.nodewright.io/x", namespace=ns
    )
    assert not writer.remove_finalizer(
        resources.CONFIG_MAPS, "cm", "bridge.nodewright.io/x", namespace=ns
    )
    obj = rest.get(resources.CONFIG_MAPS, "cm", namespace=ns)
    assert obj["metadata"]["finalizers"] == ["example.com/other"]
    writer.remove_finalizer(resources.CONFIG_MAPS, "cm", "example.com/other", namespace=ns)


def test_a_writer_whose_guard_says_not_leader_refuses_to_write(kube: Kube, rest: Rest) -> None:
    ns = kube.namespace("guard")
    rest.create(resources.CONFIG_MAPS, configmap("cm"), namespace=ns)
    writer = Writer(rest, guard=lambda: False)
    with pytest.raises(errors.LeadershipLostError):
        writer.merge_patch(resources.CONFIG_MAPS, "cm", {"data": {"x": "1"}}, namespace=ns)
    assert not rest.get(resources.CONFIG_MAPS, "cm", namespace=ns).get("data")


def event_subject(kube: Kube, rest: Rest, prefix: str) -> tuple[str, ObjectRef]:
    """A fresh namespace and a ConfigMap in it for Events to be about."""
    ns = kube.namespace(prefix)
    cm = rest.create(resources.CONFIG_MAPS, configmap("cm"), namespace=ns)
    cm.setdefault("apiVersion", "v1")
    cm.setdefault("kind", "ConfigMap")
    return ns, ObjectRef.of(cm)


def test_repeated_events_are_aggregated_into_one_event_with_a_count(
    kube: Kube, rest: Rest, metrics: Metrics
) -> None:
    ns, ref = event_subject(kube, rest, "ev")
    recorder = EventRecorder(rest, clock=SystemClock(), instance="test", metrics=metrics)
    for _ in range(3):
        recorder.warning(ref, "PDBBlocked", "PodDisruptionBudget web blocks the drain")
    recorder.normal(ref, "Cordoned", "node cordoned")
    events = rest.list(resources.EVENTS, namespace=ns)["items"]
    by_reason = {e["reason"]: e for e in events}
    assert sorted(by_reason) == ["Cordoned", "PDBBlocked"]
    blocked = by_reason["PDBBlocked"]
    assert blocked["series"]["count"] == 3
    assert blocked["regarding"]["name"] == "cm"
    assert blocked["type"] == "Warning"
    assert "series" not in by_reason["Cordoned"]
    sample = metrics.registry.get_sample_value
    assert sample("nwb_events_total", {"type": "Warning", "outcome": "repeat"}) == 2


def test_background_events_are_posted_in_order_off_the_caller_and_flushed_at_close(
    kube: Kube, rest: Rest, metrics: Metrics
) -> None:
    ns, ref = event_subject(kube, rest, "evbg")
    recorder = EventRecorder(
        rest, clock=SystemClock(), instance="test", metrics=metrics, background=True
    )
    for index in range(20):
        recorder.normal(ref, "Step", f"step {index:02d}")
    recorder.close(30.0)
    assert recorder.pending() == 0
    events = rest.list(resources.EVENTS, namespace=ns)["items"]
    notes = sorted((e["eventTime"], e["note"]) for e in events)
    assert [n for _, n in notes] == [f"step {i:02d}" for i in range(20)]
    # closed: later Events are dropped and counted, never posted
    recorder.normal(ref, "Late", "after close")
    assert {e["reason"] for e in rest.list(resources.EVENTS, namespace=ns)["items"]} == {"Step"}
    sample = metrics.registry.get_sample_value
    assert sample("nwb_events_total", {"type": "Normal", "outcome": "dropped"}) == 1


class KeyRecorder:
    """A test reconciler: maps every object to its name and records reconciles."""

    def __init__(self) -> None:
        self.reconciled: list[str] = []

    def reconcile(self, key: str) -> Result:
        self.reconciled.append(key)
        return Result()

    def keys_for(self, informer: str, obj: Mapping[str, Any]) -> Iterable[str]:
        return [obj["metadata"]["name"]]


def test_the_manager_serves_probes_and_metrics_reconciles_and_releases_its_lease(
    kube: Kube, rest: Rest, metrics: Metrics
) -> None:
    ns = kube.namespace("mgr")
    rest.create(resources.CONFIG_MAPS, configmap("alpha"), namespace=ns)
    reconciler = KeyRecorder()

    def factory(context: ReconcilerContext) -> KeyRecorder:
        assert context.namespace == ns
        return reconciler

    settings = ManagerSettings(
        identity=f"test_{uuid.uuid4().hex[:6]}",
        namespace=ns,
        metrics_addr="127.0.0.1:0",
        election=FAST_ELECTION,
    )
    specs = [
        InformerSpec(
            name="cms", resource=resources.CONFIG_MAPS, namespace=ns, label_selector="test"
        )
    ]
    manager = Manager(rest, factory, settings, clock=SystemClock(), metrics=metrics, specs=specs)
    exit_code: list[int] = []
    runner = threading.Thread(target=lambda: exit_code.append(manager.run()), daemon=True)
    runner.start()
    base = f"http://127.0.0.1:{manager.server.port}"

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(base + path, timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    try:
        wait_for(lambda: "alpha" in reconciler.reconciled, what="reconcile of alpha")
        status, body = wait_for(lambda: (s := get("/readyz"))[0] == 200 and s, what="ready")
        assert body.strip() == "leader"
        assert get("/healthz")[0] == 200
        status, text = get("/metrics")
        assert status == 200
        assert 'nwb_api_requests_total{code="200",resource="configmaps",verb="list"}' in text
        assert "nwb_leader 1.0" in text
        rest.create(resources.CONFIG_MAPS, configmap("beta"), namespace=ns)
        wait_for(lambda: "beta" in reconciler.reconciled, what="reconcile of beta")
        assert total_requests(metrics) > 0
    finally:
        manager.stop()
        runner.join(30)
    assert exit_code == [0]
    lease = rest.get(resources.LEASES, "nodewright-bridge-controller", namespace=ns)
    assert not lease["spec"].get("holderIdentity")


def test_the_request_counter_reports_requests_by_verb_and_resource(
    kube: Kube, rest: Rest, metrics: Metrics
) -> None:
    ns = kube.namespace("count")
    before = total_requests(metrics)
    rest.create(resources.CONFIG_MAPS, configmap("cm"), namespace=ns)
    rest.get(resources.CONFIG_MAPS, "cm", namespace=ns)
    with pytest.raises(errors.NotFoundError):
        rest.get(resources.CONFIG_MAPS, "nope", namespace=ns)
    assert total_requests(metrics) - before == 3
    sample = metrics.registry.get_sample_value
    labels = {"verb": "get", "resource": "configmaps", "code": "404"}
    assert sample("nwb_api_requests_total", labels) == 1
    assert json.loads(json.dumps(labels))  # labels are plain strings


def test_writes_that_only_need_metadata_get_only_metadata_back(kube: Kube, rest: Rest) -> None:
    ns = kube.namespace("meta")
    body = {**configmap("cm"), "data": {"k": "v"}}
    created = rest.create(resources.CONFIG_MAPS, body, namespace=ns, metadata_only=True)
    assert created["kind"] == "PartialObjectMetadata"
    assert "data" not in created
    patch = {"metadata": {"labels": {"a": "b"}}}
    patched = rest.patch(
        resources.CONFIG_MAPS,
        "cm",
        patch,
        patch_type=PatchType.MERGE,
        namespace=ns,
        metadata_only=True,
    )
    assert patched["metadata"]["labels"] == {"test": "runtime", "a": "b"}
    assert int(patched["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert "data" not in patched
    full = rest.patch(resources.CONFIG_MAPS, "cm", patch, patch_type=PatchType.MERGE, namespace=ns)
    assert full["kind"] == "ConfigMap"
    assert "data" in full


def test_requests_verify_the_api_server_certificate_also_by_tls_server_name(kube: Kube) -> None:
    connection = load_connection(ClientSettings(kubeconfig=str(kube.kubeconfig)))
    # a name the certificate carries
    rest = Rest(dataclasses.replace(connection, tls_server_name="kubernetes.default.svc"))
    assert rest.list(resources.NODES, limit=1)["kind"] == "NodeList"
    rest = Rest(dataclasses.replace(connection, tls_server_name="not-the-api-server.example"))
    with pytest.raises(errors.UnreachableError, match="certificate verify failed"):
        rest.list(resources.NODES, limit=1)


def test_nwb_controller_runs_and_releases_its_lease_on_sigterm(kube: Kube, rest: Rest) -> None:
    install_product_crds(rest)
    ns = kube.namespace("cmd")
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).parent),
        "POD_NAME": "controller-test",
    }
    argv = [
        sys.executable,
        str(Path(__file__).parent / "logging_reconciler.py"),
        "--kubeconfig",
        str(kube.kubeconfig),
        "--namespace",
        ns,
        "--metrics-addr",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")))
    reader.start()

    def messages() -> list[str]:
        return [json.loads(line)["msg"] for line in list(lines) if line.startswith("{")]

    def holder() -> str:
        try:
            lease = rest.get(resources.LEASES, "nodewright-bridge-controller", namespace=ns)
        except errors.NotFoundError:
            return ""
        return str(lease["spec"].get("holderIdentity") or "")

    try:
        wait_for(lambda: holder().startswith("controller-test_"), what="lease acquired")
        # keys from the nodes informer reach the (logging) reconciler once we lead
        wait_for(lambda: "reconciled" in messages(), what="a reconcile")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(10)
    assert proc.returncode == 0, "".join(lines)
    assert holder() == ""
    assert "became leader" in messages()
    assert "leader lease released" in messages()
