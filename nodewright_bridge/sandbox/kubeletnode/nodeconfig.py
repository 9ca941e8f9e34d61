"""The files a kubelet-tier node boots from: containerd's and the kubelet's configuration, the CNI
network, the registry's hosts file and the node's init script. Pure text from ``NodeSettings``.

Choices, each forced by this sandbox rather than taste:
- cgroupfs driver and ``failCgroupV1: false``: the nodes run no systemd, and the machines this runs
  on may have cgroup v1 controllers (a hybrid hierarchy); each node gets its own cgroup root.
- Eviction thresholds at their floor and image garbage collection off: the nodes share this
  machine's disk and memory, which other work fills; a node must not evict package pods or drop
  images because of that.
- ``restrict_oom_score_adj``: without CAP_SYS_RESOURCE (some sandboxes drop it) runc cannot
  lower a process's OOM score, and the CRI asks it to for every pod sandbox.
- Anonymous, always-allowed kubelet API: only the API server reaches it (through the node's own
  network namespace, see ``netns``), for pod logs.
- The pod network is the CNI ``bridge`` plugin inside the node's own namespace: pods get addresses
  no one outside the node can reach, and nothing is added to this machine's network.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

# Where things are inside a node (its root is a debootstrap tree).
NODE_BIN_DIR = "/opt/nwb/bin"
NODE_CNI_BIN_DIR = "/opt/cni/bin"
NODE_RUNC = "/usr/local/sbin/runc"
NODE_CONFIG_DIR = "/etc/nwb"
NODE_LOG_DIR = "/var/log/nwb"
NODE_INIT = "/etc/nwb/node-init.sh"
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
KUBELET_PORT = 10250
POD_CIDR_PREFIX = "10.88"
CLUSTER_DNS = "10.0.0.10"  # inside the sandbox's service range


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """One node's identity and the addresses it reaches the sandbox by."""

    name: str
    index: int  # 0-based; picks the node address and pod subnet
    api_port: int  # the API server's port on 127.0.0.1 (forwarded into the node)
    registry_host: str  # "127.0.0.1:<port>" (forwarded into the node)
    pause_image: str
    cgroup_root: str  # e.g. "/nwb-kubelet/node-000"
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def node_ip(self) -> str:
        """The node's address: on its own loopback device, reachable only inside the node."""
        return f"10.250.0.{self.index + 1}"

    @property
    def pod_subnet(self) -> str:
        return f"{POD_CIDR_PREFIX}.{self.index}.0/24"


def containerd_config(s: NodeSettings) -> str:
    """containerd 2.x configuration (format version 3, accepted by 2.4)."""
    return f"""version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "{CONTAINERD_SOCKET}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{s.pause_image}"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "/etc/containerd/certs.d"

[plugins."io.containerd.cri.v1.runtime"]
  # Lowering an oom_score_adj needs CAP_SYS_RESOURCE, which the sandbox may lack (then runc
  # fails every pod with "can't get final child's PID from pipe"): clamp to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{NODE_RUNC}"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{NODE_CNI_BIN_DIR}"]
    conf_dir = "/etc/cni/net.d"
"""


def registry_hosts_toml(registry_host: str) -> str:
    """``certs.d/<host>/hosts.toml``: the sandbox registry speaks plain HTTP on loopback."""
    url = f"http://{registry_host}"
    return f'server = "{url}"\n\n[host."{url}"]\n  capabilities = ["pull", "resolve"]\n'


def cni_config(s: NodeSettings) -> str:
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "nwb-pods",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "nwb-br0",
                    "isGateway": True,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": s.pod_subnet}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "loopback"},
            ],
        },
        indent=2,
    )


def kubelet_config(s: NodeSettings) -> str:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": s.node_ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "authentication": {
            "anonymous": {"enabled": True},
            "webhook": {"enabled": False},
            "x509": {},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": s.cgroup_root,
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
        "resolvConf": "",
        # A service address no one serves (pods here use no DNS); without it the kubelet warns
        # MissingClusterDNS on every pod sync.
        "clusterDNS": [CLUSTER_DNS],
        "clusterDomain": "cluster.local",
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "0%",
            "nodefs.inodesFree": "0%",
            "imagefs.available": "0%",
            "imagefs.inodesFree": "0%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "nodeStatusUpdateFrequency": "10s",
        "nodeStatusReportFrequency": "1m",
        "syncFrequency": "10s",
        "protectKernelDefaults": False,
        "enableControllerAttachDetach": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "podCIDR": s.pod_subnet,
        "maxPods": 30,
        "shutdownGracePeriod": "0s",
        "localStorageCapacityIsolation": False,
    }
    return json.dumps(config, indent=2)


def node_init_script(s: NodeSettings) -> str:
    """The node's "boot": loopback and node address, shared mount propagation (hostPath
    ``HostToContainer`` needs it), containerd, then the kubelet; SIGTERM stops both in order."""
    labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
    label_flag = f" --node-labels={labels}" if labels else ""
    return f"""#!/bin/bash
# Written by nodewright-bridge's sandbox (kubelet tier); runs as the node's first process.
set -u
export PATH={NODE_BIN_DIR}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mkdir -p {NODE_LOG_DIR} /run/containerd /var/lib/kubelet /etc/cni/net.d
exec >>{NODE_LOG_DIR}/node-init.log 2>&1
echo "boot $(cat /proc/sys/kernel/random/boot_id) at $(date -u +%FT%TZ)"
mount --make-rshared /
ip link set lo up
ip addr add {s.node_ip}/32 dev lo
containerd --config {NODE_CONFIG_DIR}/containerd.toml >>{NODE_LOG_DIR}/containerd.log 2>&1 &
runtime=$!
for _ in $(seq 200); do [ -S {CONTAINERD_SOCKET} ] && break; sleep 0.05; done
kubelet --config={NODE_CONFIG_DIR}/kubelet.json --kubeconfig={NODE_CONFIG_DIR}/kubelet.kubeconfig \\
  --hostname-override={s.name} --node-ip={s.node_ip}{label_flag} --v=2 \\
  >>{NODE_LOG_DIR}/kubelet.log 2>&1 &
agent=$!
stop() {{
  kill -TERM "$agent" 2>/dev/null; wait "$agent"
  kill -TERM "$runtime" 2>/dev/null; wait "$runtime"
  exit 0
}}
trap stop TERM INT
wait -n "$runtime" "$agent"
echo "containerd or kubelet exited ($?); stopping the node"
kill -TERM "$agent" "$runtime" 2>/dev/null
wait
exit 1
"""


# The node runs no systemd: the agent's ``nsenter -t 1 ... systemctl`` lands here (PATH order).
# ``reboot`` asks the sandbox for a node reboot; other verbs are recorded and succeed, as the
# simulated kubelet's modes do.
SYSTEMCTL_SHIM = """#!/bin/sh
# nodewright-bridge sandbox (kubelet tier): this node runs no systemd.
mkdir -p /run/nodewright-sim
case "${1:-}" in
  reboot|poweroff|kexec) date > /run/nodewright-sim/reboot-requested; exit 0 ;;
esac
echo "$*" >> /run/nodewright-sim/systemctl.log
exit 0
"""
