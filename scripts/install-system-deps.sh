#!/usr/bin/env bash
# Installs the Debian packages the sandbox and tests need. Idempotent and quiet when all present.
set -euo pipefail
PKGS=(debootstrap podman buildah skopeo runc crun docker-registry uidmap iproute2 util-linux procps)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "[system-deps] installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# podman on these machines needs: no default ulimits (setrlimit is refused) and runc + cgroupfs.
mkdir -p /etc/containers
if ! grep -q '^default_ulimits = \[\]' /etc/containers/containers.conf 2>/dev/null; then
  cat >> /etc/containers/containers.conf <<'CONF'
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
fi
