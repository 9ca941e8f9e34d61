"""The node pod: bound, privileged, inputs as files, deterministic names."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from lifecycle import validating
from lifecycle.spec import NodeWright
from nodewright_bridge.controller import podspec

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def make_cr(**package: object) -> NodeWright:
    pkg: dict[str, object] = {
        "version": "1.2.3",
        "image": "127.0.0.1:5000/pkgs/sysctl-tuning",
        "vars": {"swappiness": 10},
    }
    pkg.update(package)
    return NodeWright.model_validate(
        {
            "metadata": {"name": "gpu-tuning", "uid": "u-1"},
            "spec": {"packages": {"sysctl-tuning": pkg}, "hostConnection": "chroot"},
        }
    )


def request(cr: NodeWright, **kw: object) -> podspec.PodRequest:
    base: dict[str, object] = {
        "cr": cr,
        "package_name": "sysctl-tuning",
        "node": "gpu-node-001.example.internal",
        "stages": ("apply", "apply-check", "config", "config-check"),
        "resource_id": "rid",
        "node_order": 3,
    }
    base.update(kw)
    return podspec.PodRequest(**base)  # type: ignore[arg-type]


def test_pod_names_are_deterministic_valid_labels_within_63_chars() -> None:
    cr = make_cr()
    a, b = podspec.pod_name(request(cr)), podspec.pod_name(request(cr))
    assert a == b
    assert len(a) <= 63
    assert a == a.lower() and "." not in a
    assert podspec.pod_name(request(cr, attempt=2)) != a


def test_the_pod_is_bound_privileged_and_never_restarted_by_the_kubelet() -> None:
    pod = podspec.build_pod(request(make_cr()))
    spec = pod["spec"]
    assert spec["nodeName"] == "gpu-node-001.example.internal"
    assert spec["restartPolicy"] == "Never"
    assert spec["hostPID"] is True
    (container,) = spec["containers"]
    assert container["securityContext"] == {"privileged": True}
    assert container["args"] == ["run", "--stages", "apply,apply-check,config,config-check"]
    assert container["image"] == "127.0.0.1:5000/pkgs/sysctl-tuning:1.2.3"
    host = next(m for m in container["volumeMounts"] if m["name"] == "host")
    assert host == {"name": "host", "mountPath": "/host", "mountPropagation": "HostToContainer"}
    keys = {t.get("key") for t in spec["tolerations"]}
    assert "node.kubernetes.io/unschedulable" in keys


def test_vars_never_appear_in_env_or_args_only_in_the_mounted_configmap() -> None:
    cr = make_cr(vars={"api_token_hint": "s3cr3t-value"})
    pod = podspec.build_pod(request(cr))
    assert "s3cr3t-value" not in json.dumps(pod)
    cm = podspec.build_vars_configmap(cr, cr.spec.packages["sysctl-tuning"])
    assert json.loads(cm["data"]["vars.json"]) == {"api_token_hint": "s3cr3t-value"}
    vol = next(v for v in pod["spec"]["volumes"] if v["name"] == "vars")
    assert vol["configMap"]["name"] == cm["metadata"]["name"]


def test_env_carries_the_contract_variables() -> None:
    pod = podspec.build_pod(request(make_cr(), previous_version="1.2.2"))
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["NW_CR"] == "gpu-tuning"
    assert env["NW_PACKAGE"] == "sysctl-tuning"
    assert env["NW_VERSION"] == "1.2.3"
    assert env["NW_PREVIOUS_VERSION"] == "1.2.2"
    assert env["NW_NODE_ORDER"] == "3"
    assert env["NW_HOST_ROOT"] == "/host"
    assert env["NW_HOST_CONNECTION"] == "chroot"


def test_tags_and_skip_tags_reach_the_agent_comma_joined_only_when_set() -> None:
    pod = podspec.build_pod(request(make_cr(tags=["sysctl", "grub"], skipTags=["slow"])))
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert (env["NW_TAGS"], env["NW_SKIP_TAGS"]) == ("sysctl,grub", "slow")
    only_tags = podspec.build_pod(request(make_cr(tags=["sysctl"])))
    names = [e["name"] for e in only_tags["spec"]["containers"][0]["env"]]
    assert "NW_TAGS" in names and "NW_SKIP_TAGS" not in names
    untagged = podspec.build_pod(request(make_cr()))
    names = [e["name"] for e in untagged["spec"]["containers"][0]["env"]]
    assert not {"NW_TAGS", "NW_SKIP_TAGS"} & set(names)
    interrupt = podspec.build_pod(
        request(make_cr(tags=["sysctl"]), stages=(), interrupt_type="reboot")
    )
    names = [e["name"] for e in interrupt["spec"]["containers"][0]["env"]]
    assert "NW_TAGS" not in names, "an interrupt runs no role task to filter"


def test_a_digest_pin_wins_over_the_version_tag() -> None:
    digest = "sha256:" + "a" * 64
    pod = podspec.build_pod(request(make_cr(digest=digest)))
    assert pod["spec"]["containers"][0]["image"].endswith("@" + digest)


def test_interrupt_pods_carry_the_merged_interrupt() -> None:
    pod = podspec.build_pod(
        request(make_cr(), stages=(), interrupt_type="service", interrupt_services=("a", "b"))
    )
    assert pod["spec"]["containers"][0]["args"] == [
        "interrupt",
        "--type",
        "service",
        "--services",
        "a,b",
    ]
    assert pod["metadata"]["labels"]["bridge.nodewright.io/stage"] == "interrupt"


def test_a_changed_var_gives_a_new_configmap_name() -> None:
    a = make_cr(vars={"x": 1})
    b = make_cr(vars={"x": 2})
    name = lambda cr: podspec.build_vars_configmap(  # noqa: E731
        cr, cr.spec.packages["sysctl-tuning"]
    )["metadata"]["name"]
    assert name(a) != name(b)


# ---- the validation pod ----------------------------------------------------------------------


def validation_pod(cr: NodeWright, attempt: int = 1) -> dict[str, object]:
    start = validating.PodToStart(
        package="sysctl-tuning",
        key="0123456789abcdef",
        node="gpu-node-001.example.internal",
        attempt=attempt,
        started=T0,
        deadline=T0 + timedelta(minutes=30),
    )
    return podspec.build_validation_pod(cr, start)


def test_the_validation_pod_reads_the_package_with_a_node_pods_inputs_and_nothing_of_the_host() -> (
    None
):
    cr = make_cr(secretVars=[{"secretName": "creds", "key": "token"}], configMap={"a.conf": "x"})
    pod: Any = validation_pod(cr)
    node_pod = podspec.build_pod(request(cr))
    spec = pod["spec"]
    assert spec["nodeName"] == "gpu-node-001.example.internal"
    assert spec["restartPolicy"] == "Never" and "hostPID" not in spec
    assert spec["activeDeadlineSeconds"] == 1800
    assert not [v for v in spec["volumes"] if "hostPath" in v]
    assert spec["volumes"] == [v for v in node_pod["spec"]["volumes"] if "hostPath" not in v]
    assert spec["tolerations"] == node_pod["spec"]["tolerations"]
    (container,) = spec["containers"]
    assert container["command"] == ["nwb-agent"] and container["args"] == ["validate"]
    assert container["image"] == "127.0.0.1:5000/pkgs/sysctl-tuning:1.2.3"
    assert container["securityContext"]["privileged"] is False
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    node_mounts = node_pod["spec"]["containers"][0]["volumeMounts"]
    assert container["volumeMounts"] == [m for m in node_mounts if m["name"] != "host"]
    assert "swappiness" not in json.dumps(container), "vars come only as files"


def test_the_validation_pod_is_labelled_apart_from_package_pods_and_named_per_attempt() -> None:
    cr = make_cr()
    pod: Any = validation_pod(cr)
    labels = pod["metadata"]["labels"]
    assert labels[validating.VALIDATION_LABEL] == "sysctl-tuning"
    assert labels[podspec.LABEL_CR] == "gpu-tuning"
    assert podspec.LABEL_PACKAGE not in labels and podspec.LABEL_VERSION not in labels
    assert pod["metadata"]["annotations"][podspec.ANNOTATION_VALIDATION_KEY] == "0123456789abcdef"
    name = pod["metadata"]["name"]
    assert len(name) <= 63 and name == validation_pod(cr)["metadata"]["name"]  # type: ignore[index]
    assert name != validation_pod(cr, attempt=2)["metadata"]["name"]  # type: ignore[index]
