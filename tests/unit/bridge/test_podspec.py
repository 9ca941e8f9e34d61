"""The node pod: bound, privileged, inputs as files, deterministic names."""

from __future__ import annotations

import json

from lifecycle.spec import NodeWright
from nodewright_bridge.controller import podspec


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
