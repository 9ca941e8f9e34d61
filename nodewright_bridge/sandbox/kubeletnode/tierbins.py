"""The kubelet tier's binaries: kubelet, containerd (+ runc shim, ctr), crictl and nwb-pause,
built from pinned Go modules by ``build-kubelet-tier.sh`` into a version-keyed cache directory,
plus runc and the CNI plugins from Debian (``make setup`` with ``NWB_KUBELET_TIER=1``).

The versions here and in the script must agree; ``tests/unit/test_kubelet_tier_config.py`` checks.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from nodewright_bridge.sandbox.binaries import K8S_VERSION, cache_root

CONTAINERD_VERSION = "v2.4.2"
CRICTL_VERSION = "v1.37.0"
BUILD_SCRIPT = Path(__file__).resolve().parent.parent / "build-kubelet-tier.sh"
BINARIES = ("kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "crictl", "nwb-pause")
DEBIAN_FILES = {
    "runc": Path("/usr/sbin/runc"),
    "containernetworking-plugins": Path("/usr/lib/cni/bridge"),
}


class TierUnavailableError(RuntimeError):
    """A piece of the kubelet tier is missing and could not be built."""


def tier_bin_dir(env: Mapping[str, str] | None = None) -> Path:
    name = f"kubelet-tier-k8s-{K8S_VERSION}-containerd-{CONTAINERD_VERSION}-crictl-{CRICTL_VERSION}"
    return cache_root(env) / "bin" / name


def missing_binaries(env: Mapping[str, str] | None = None) -> list[str]:
    directory = tier_bin_dir(env)
    return [n for n in BINARIES if not os.access(directory / n, os.X_OK)]


def missing_debian_packages() -> list[str]:
    return [package for package, path in DEBIAN_FILES.items() if not path.exists()]


def ensure_tier_binaries(
    *, progress: Callable[[str], None] | None = None, env: Mapping[str, str] | None = None
) -> Path:
    """The tier's binary directory, building what is missing first (minutes when the Go build
    cache is warm from the control plane, longer cold)."""
    debian = missing_debian_packages()
    if debian:
        raise TierUnavailableError(
            f"missing Debian packages {', '.join(debian)}: run NWB_KUBELET_TIER=1 make setup"
        )
    if missing_binaries(env):
        say = progress or (lambda text: None)
        say(f"building the kubelet tier ({', '.join(missing_binaries(env))}); cached afterwards")
        run_env = dict(os.environ if env is None else env)
        proc = subprocess.Popen(
            ["bash", str(BUILD_SCRIPT)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=run_env,
        )
        assert proc.stdout is not None
        last = ""
        for line in proc.stdout:
            last = line.rstrip("\n")
            if last:
                say(last)
        if proc.wait() != 0:
            raise TierUnavailableError(f"{BUILD_SCRIPT.name} failed: {last}")
    still = missing_binaries(env)
    if still:
        raise TierUnavailableError(f"missing after build: {', '.join(still)}; see {BUILD_SCRIPT}")
    return tier_bin_dir(env)
