"""The kubelet tier's pure parts: pinned versions agree with the build script, and each node's
files say what the nodes need on this kind of machine (cgroup v1, no CAP_SYS_RESOURCE, own
network namespace)."""

from __future__ import annotations

import json
import re
import tomllib

from nodewright_bridge.sandbox.binaries import K8S_VERSION
from nodewright_bridge.sandbox.kubeletnode import nodeconfig, tierbins
from nodewright_bridge.sandbox.kubeletnode.netns import egress_selector_config

SETTINGS = nodeconfig.NodeSettings(
    name="node-001",
    index=1,
    api_port=6443,
    registry_host="127.0.0.1:5000",
    pause_image="127.0.0.1:5000/nwb/pause:v2.4.2",
    cgroup_root="/nwb-kubelet/node-001",
    labels={"b": "2", "a": "1"},
)


def test_the_pinned_versions_are_the_build_scripts_defaults() -> None:
    script = tierbins.BUILD_SCRIPT.read_text()
    pins = dict(re.findall(r'^(\w+_VERSION)="\$\{\w+:-(v[^}]+)\}"', script, re.M))
    assert pins == {
        "K8S_VERSION": K8S_VERSION,
        "CONTAINERD_VERSION": tierbins.CONTAINERD_VERSION,
        "CRICTL_VERSION": tierbins.CRICTL_VERSION,
    }
    assert tierbins.tier_bin_dir({"NWB_CACHE_DIR": "/c"}).as_posix() == (
        f"/c/bin/kubelet-tier-k8s-{K8S_VERSION}-containerd-{tierbins.CONTAINERD_VERSION}"
        f"-crictl-{tierbins.CRICTL_VERSION}"
    )


def test_containerd_uses_cgroupfs_the_sandbox_pause_image_and_clamped_oom_scores() -> None:
    config = tomllib.loads(nodeconfig.containerd_config(SETTINGS))
    images = config["plugins"]["io.containerd.cri.v1.images"]
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert images["pinned_images"]["sandbox"] == SETTINGS.pause_image
    assert runtime["restrict_oom_score_adj"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["options"] == {"BinaryName": nodeconfig.NODE_RUNC, "SystemdCgroup": False}
    assert runtime["cni"]["bin_dirs"] == [nodeconfig.NODE_CNI_BIN_DIR]


def test_the_registry_is_plain_http_and_pods_get_the_nodes_own_subnet() -> None:
    hosts = tomllib.loads(nodeconfig.registry_hosts_toml(SETTINGS.registry_host))
    assert hosts["server"] == "http://127.0.0.1:5000"
    cni = json.loads(nodeconfig.cni_config(SETTINGS))
    bridge = cni["plugins"][0]
    assert bridge["ipMasq"] is False  # nothing is NATed onto this machine's network
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.88.1.0/24"}]]


def test_the_kubelet_accepts_cgroup_v1_and_never_evicts_for_the_shared_disk() -> None:
    config = json.loads(nodeconfig.kubelet_config(SETTINGS))
    assert config["failCgroupV1"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == "/nwb-kubelet/node-001"
    assert config["address"] == SETTINGS.node_ip == "10.250.0.2"
    assert config["evictionHard"]["nodefs.available"] == "0%"
    assert config["imageGCHighThresholdPercent"] == 100


def test_the_init_script_starts_containerd_before_the_kubelet_with_the_node_identity() -> None:
    script = nodeconfig.node_init_script(SETTINGS)
    assert script.index("containerd --config") < script.index("kubelet --config")
    assert "--hostname-override=node-001 --node-ip=10.250.0.2 --node-labels=a=1,b=2" in script
    assert "mount --make-rshared /" in script  # HostToContainer needs a shared root
    assert "ip addr add 10.250.0.2/32 dev lo" in script


def test_the_api_servers_cluster_egress_goes_through_the_proxy_socket() -> None:
    text = egress_selector_config(tierbins.BUILD_SCRIPT.parent / "egress.sock")
    assert "name: cluster" in text and "proxyProtocol: HTTPConnect" in text
    assert f"udsName: {tierbins.BUILD_SCRIPT.parent / 'egress.sock'}" in text
