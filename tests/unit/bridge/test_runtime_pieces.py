"""Pure pieces of the runtime: request classification, store indexes, slimming, JSON logs, and
the controller command's refusal to run without a reconciler."""

from __future__ import annotations

import io
import json
import logging
from datetime import timedelta

import pytest
from click.testing import CliRunner

from lifecycle.recovery import OutsideRetry
from nodewright_bridge.commands import controller
from nodewright_bridge.controller.validating import ValidationSettings
from nodewright_bridge.controller.wiring import ReconcilerSettings, build_reconciler
from nodewright_bridge.k8s.client import classify_request
from nodewright_bridge.k8s.slimming import slim_node, slim_pod
from nodewright_bridge.k8s.store import Store, by_label, by_node_name, object_key
from nodewright_bridge.runtime import logformat


@pytest.mark.parametrize(
    ("method", "url", "expected"),
    [
        ("GET", "https://h/api/v1/nodes?watch=true&resourceVersion=5", ("watch", "nodes")),
        ("GET", "https://h/api/v1/nodes", ("list", "nodes")),
        ("GET", "https://h/api/v1/nodes/n1", ("get", "nodes")),
        ("PATCH", "https://h/api/v1/nodes/n1/status", ("patch", "nodes/status")),
        ("POST", "https://h/api/v1/namespaces/x/pods/p/eviction", ("create", "pods/eviction")),
        ("GET", "https://h/api/v1/namespaces/x/pods", ("list", "pods")),
        ("GET", "https://h/api/v1/namespaces/x", ("get", "namespaces")),
        ("PUT", "https://h/api/v1/namespaces/x/finalize", ("update", "namespaces/finalize")),
        ("DELETE", "https://h/api/v1/namespaces/x/pods", ("deletecollection", "pods")),
        (
            "PUT",
            "https://h/apis/coordination.k8s.io/v1/namespaces/s/leases/l",
            ("update", "leases"),
        ),
        (
            "PATCH",
            "https://h/apis/bridge.nodewright.io/v1alpha1/nodewrights/a/status",
            ("patch", "nodewrights/status"),
        ),
        ("GET", "https://h/version", ("get", "/version")),
    ],
)
def test_requests_are_classified_by_kubernetes_verb_and_resource(
    method: str, url: str, expected: tuple[str, str]
) -> None:
    assert classify_request(method, url) == expected


def pod(name: str, node: str | None, **labels: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
        "spec": {"nodeName": node} if node else {},
    }


def test_the_store_indexes_follow_updates_and_deletes() -> None:
    store = Store({"node": by_node_name, "app": by_label("app")})
    store.put("ns/a", pod("a", "n1", app="web"))
    store.put("ns/b", pod("b", "n1", app="db"))
    store.put("ns/c", pod("c", None, app="web"))
    assert sorted(o["metadata"]["name"] for o in store.by_index("node", "n1")) == ["a", "b"]
    assert sorted(o["metadata"]["name"] for o in store.by_index("app", "web")) == ["a", "c"]
    store.put("ns/a", pod("a", "n2", app="db"))
    assert [o["metadata"]["name"] for o in store.by_index("node", "n1")] == ["b"]
    assert [o["metadata"]["name"] for o in store.by_index("app", "web")] == ["c"]
    store.delete("ns/b")
    assert store.by_index("node", "n1") == []
    assert sorted(store.index_values("node")) == ["n2"]
    assert len(store) == 2


def test_an_index_serial_moves_with_every_write_under_its_value_and_only_then() -> None:
    store = Store({"node": by_node_name})
    assert store.index_serial("node", "n1") == 0
    store.put("ns/a", pod("a", "n1"))
    first = store.index_serial("node", "n1")
    store.put("ns/x", pod("x", "n2"))
    assert store.index_serial("node", "n1") == first, "a write on another node changes nothing"
    store.put("ns/a", pod("a", "n1", app="web"))
    replaced = store.index_serial("node", "n1")
    assert replaced not in (0, first), "a replaced pod shows as a change"
    store.put("ns/a", pod("a", "n2"))  # moved away: both values changed
    assert store.index_serial("node", "n1") == 0, "nothing indexed there any more"
    assert store.index_serial("node", "n2") > replaced
    store.put("ns/b", pod("b", "n1"))
    assert store.index_serial("node", "n1") not in (0, first, replaced), "never an old number"
    store.delete("ns/b")
    assert store.index_serial("node", "n1") == 0


def test_object_keys_are_namespace_slash_name_or_just_name() -> None:
    assert object_key({"metadata": {"name": "p", "namespace": "ns"}}) == "ns/p"
    assert object_key({"metadata": {"name": "node-1"}}) == "node-1"


def test_slim_nodes_keep_what_the_controller_reads_and_drop_the_bulk() -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "n1",
            "resourceVersion": "7",
            "labels": {"a": "b"},
            "annotations": {
                "bridge.nodewright.io/state-x": "{}",
                "kubectl.kubernetes.io/last-applied-configuration": "{...}",
            },
            "managedFields": [{"manager": "kubelet"}] * 10,
        },
        "spec": {
            "unschedulable": True,
            "taints": [{"key": "k", "effect": "NoSchedule"}],
            "podCIDR": "10.0.0.0/24",
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t"}],
            "nodeInfo": {"bootID": "boot-1", "kernelVersion": "6"},
            "images": [{"names": ["x"] * 5, "sizeBytes": 1}] * 50,
        },
    }
    slim = slim_node(node)
    assert slim["metadata"]["annotations"] == {"bridge.nodewright.io/state-x": "{}"}
    assert "managedFields" not in slim["metadata"]
    assert slim["spec"] == {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]}
    assert slim["status"] == {
        "conditions": [{"type": "Ready", "status": "True"}],
        "nodeInfo": {"bootID": "boot-1"},
    }
    assert len(json.dumps(slim)) < len(json.dumps(node)) / 3


def test_slim_pods_keep_owner_volume_types_and_termination_messages() -> None:
    pod_obj = {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "ownerReferences": [{"kind": "DaemonSet", "name": "ds"}],
            "managedFields": [{}],
        },
        "spec": {
            "nodeName": "n1",
            "restartPolicy": "Never",
            "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}],
            "containers": [{"name": "c", "image": "i", "env": [{"name": "X", "value": "y"}]}],
        },
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "c",
                    "state": {"terminated": {"exitCode": 2, "message": '{"v":1}'}},
                    "imageID": "sha",
                }
            ],
        },
    }
    slim = slim_pod(pod_obj)
    assert slim["metadata"]["ownerReferences"] == [{"kind": "DaemonSet", "name": "ds"}]
    assert slim["spec"]["volumes"] == [{"name": "scratch", "emptyDir": {}}]
    assert slim["spec"]["containers"] == [{"name": "c", "image": "i"}]
    terminated = slim["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated == {"exitCode": 2, "message": '{"v":1}'}


def test_json_logs_put_extra_values_at_the_top_level() -> None:
    stream = io.StringIO()
    logformat.configure(logformat.LogFormat.JSON, stream=stream)
    try:
        logging.getLogger("nodewright_bridge.test").info(
            "became leader", extra={"identity": "a_1", "lease": "l"}
        )
    finally:
        logging.getLogger().handlers.clear()
    entry = json.loads(stream.getvalue())
    assert entry["msg"] == "became leader"
    assert entry["level"] == "info"
    assert entry["identity"] == "a_1"
    assert entry["lease"] == "l"


def test_text_logs_append_extra_values_as_key_value_pairs() -> None:
    stream = io.StringIO()
    logformat.configure(logformat.LogFormat.TEXT, stream=stream)
    try:
        logging.getLogger("nodewright_bridge.test").warning("x", extra={"key": "cr-1"})
    finally:
        logging.getLogger().handlers.clear()
    assert stream.getvalue().rstrip().endswith("x key=cr-1")


def test_the_controller_command_is_built_around_the_reconciler_factory_it_is_given() -> None:
    seen: list[str] = []

    def factory(context: object) -> object:
        seen.append("built")
        raise SystemExit(0)

    result = CliRunner().invoke(
        controller.make_command(factory),  # type: ignore[arg-type]  # a stand-in factory
        ["--metrics-addr", "nonsense"],
    )
    assert result.exit_code == 2, "options are checked before anything starts"
    assert "--metrics-addr: expected host:port" in result.output
    assert seen == []
    help_text = CliRunner().invoke(controller.command, ["--help"]).output
    for option in ("--kubeconfig", "--context", "--namespace", "--workers", "--log-level"):
        assert option in help_text
    logging.getLogger().handlers.clear()


def test_the_outside_retry_settings_are_checked_and_reach_the_reconciler_factory() -> None:
    settings: list[object] = []

    def configure(chosen: object) -> object:
        settings.append(chosen)
        raise SystemExit(0)  # stop before anything starts

    command = controller.make_command(build_reconciler, configure=configure)  # type: ignore[arg-type]
    bad = CliRunner().invoke(command, ["--outside-retry", "5x"])
    assert bad.exit_code == 2 and "not a Go duration" in bad.output
    inverted = CliRunner().invoke(command, ["--outside-retry", "2h", "--outside-retry-max", "1h"])
    assert inverted.exit_code == 2 and "--outside-retry-max" in inverted.output
    assert settings == []
    CliRunner().invoke(
        command,
        ["--outside-retry", "30s", "--outside-retry-max", "10m", "--image-pull-deadline", "90s"],
    )
    assert settings == [
        ReconcilerSettings(
            outside_retry=OutsideRetry(
                base=timedelta(seconds=30),
                cap=timedelta(minutes=10),
                pull_deadline=timedelta(seconds=90),
            ),
            validation=ValidationSettings(pull_deadline=timedelta(seconds=90)),
            failed_pod_ttl=timedelta(hours=24),
        )
    ]
    CliRunner().invoke(command, ["--failed-pod-ttl", "0"])
    assert settings[-1].failed_pod_ttl == timedelta(0)  # type: ignore[attr-defined]
    assert "--outside-retry" in CliRunner().invoke(controller.command, ["--help"]).output
    assert (
        "--outside-retry"
        not in CliRunner().invoke(controller.make_command(build_reconciler), ["--help"]).output
    )


@pytest.mark.parametrize("value", ["soon", "0s"])
def test_a_bad_image_pull_deadline_is_refused_before_anything_starts(value: str) -> None:
    result = CliRunner().invoke(controller.command, ["--image-pull-deadline", value])
    assert result.exit_code == 2
    assert "--image-pull-deadline" in result.output
