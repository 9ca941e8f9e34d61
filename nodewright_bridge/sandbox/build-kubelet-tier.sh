#!/usr/bin/env bash
# Builds the kubelet tier's node binaries from Go modules into a version-keyed cache directory:
# kubelet (the same k8s.io/kubernetes module and version as the control plane, through the same
# wrapper module as build-control-plane.sh), containerd 2.x with its runc shim and ctr, and crictl.
# Also nwb-pause (kubeletnode/pause), the pod sandbox program. runc and the CNI plugins come from Debian (scripts/install-system-deps.sh with NWB_KUBELET_TIER=1).
#
# Idempotent: anything already present in the output directory is kept. Prints the directory last.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
CRICTL_VERSION="${CRICTL_VERSION:-v1.37.0}"
CACHE="${NWB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nodewright-bridge}"
OUT="$CACHE/bin/kubelet-tier-k8s-${K8S_VERSION}-containerd-${CONTAINERD_VERSION}-crictl-${CRICTL_VERSION}"
HERE="$(cd "$(dirname "$0")" && pwd)"

export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -modcacherw -buildvcs=false"
mkdir -p "$OUT"

say() { printf '[build-kubelet-tier] %s\n' "$*" >&2; }

build_kubelet() {
  [[ -x "$OUT/kubelet" ]] && return 0
  say "building kubelet ${K8S_VERSION} (shares the control plane's Go build cache when warm)"
  K8S_VERSION="$K8S_VERSION" K8S_CMDS=kubelet WITH_ETCD=0 WITH_HELM=0 NWB_BIN_OUT="$OUT" \
    bash "$HERE/build-control-plane.sh" >/dev/null
}

build_containerd() {
  local c missing=()
  for c in containerd containerd-shim-runc-v2 ctr; do [[ -x "$OUT/$c" ]] || missing+=("$c"); done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  say "building ${missing[*]} ${CONTAINERD_VERSION}"
  local w m=github.com/containerd/containerd/v2; w="$(mktemp -d)"
  ( cd "$w"
    go mod init local/nwb-containerd-bins >/dev/null 2>&1
    go get "$m@${CONTAINERD_VERSION}"
    local ldf="-s -w -X $m/version.Version=${CONTAINERD_VERSION} -X $m/version.Package=$m"
    local pkgs=(); for c in "${missing[@]}"; do pkgs+=("$m/cmd/$c"); done
    # Without cgo the btrfs, devmapper and zfs snapshotters cannot build; overlayfs and native stay.
    go build -mod=mod -trimpath -tags no_btrfs,no_devmapper,no_zfs -ldflags "$ldf" -o "$OUT/" "${pkgs[@]}" )
  rm -rf "$w"
}

build_crictl() {
  [[ -x "$OUT/crictl" ]] && return 0
  say "building crictl ${CRICTL_VERSION}"
  local w m=sigs.k8s.io/cri-tools; w="$(mktemp -d)"
  ( cd "$w"
    go mod init local/nwb-crictl-bin >/dev/null 2>&1
    go get "$m@${CRICTL_VERSION}"
    go build -mod=mod -trimpath -ldflags "-s -w -X $m/pkg/version.Version=${CRICTL_VERSION}" \
      -o "$OUT/crictl" "$m/cmd/crictl" )
  rm -rf "$w"
}

build_pause() {
  [[ -x "$OUT/nwb-pause" ]] && return 0
  say "building nwb-pause (the pod sandbox image's program)"
  ( cd "$HERE/kubeletnode/pause" && go build -trimpath -ldflags "-s -w" -o "$OUT/nwb-pause" . )
}

build_pause
build_containerd
build_crictl
build_kubelet
echo "$OUT"
