#!/usr/bin/env bash
# Installs the Debian packages the sandbox and tests need. Idempotent and quiet when all present.
set -euo pipefail
PKGS=(debootstrap podman buildah skopeo runc crun docker-registry uidmap iproute2 util-linux procps
      slirp4netns)
# The kubelet tier's nodes (NWB_KUBELET_TIER=1): Debian's runc (above) and CNI plugins.
[[ "${NWB_KUBELET_TIER:-0}" = 1 ]] && PKGS+=(containernetworking-plugins)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "[system-deps] installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# podman on these machines needs: no default ulimits (setrlimit is refused) and runc + cgroupfs.
# A drop-in (podman >= 4.0 reads /etc/containers/containers.conf.d/*.conf after containers.conf),
# so an existing containers.conf with its own [containers] table is never made invalid TOML.
mkdir -p /etc/containers/containers.conf.d
DROPIN=/etc/containers/containers.conf.d/50-nodewright-bridge.conf
WANT='# Written by nodewright-bridge scripts/install-system-deps.sh (sandbox podman settings).
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"'
if [[ "$(cat "$DROPIN" 2>/dev/null)" != "$WANT" ]]; then
  printf '%s\n' "$WANT" > "$DROPIN"
fi
