#!/usr/bin/env bash
# Builds the sandbox control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, and optionally helm) from Go modules into a version-keyed cache directory.
#
# Why a wrapper module: k8s.io/kubernetes requires its staging modules at v0.0.0 and maps them with
# local replace lines, which `go install pkg@version` refuses. A throwaway module that requires
# k8s.io/kubernetes and replaces every staging module with its published v0.Y.Z tag builds the same
# dependency set upstream ships.
#
# Idempotent: anything already present in the output directory is kept. Prints the directory last.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
HELM_VERSION="${HELM_VERSION:-v4.3.1}"
WITH_HELM="${WITH_HELM:-1}"
K8S_CMDS="${K8S_CMDS:-kube-apiserver kube-controller-manager kube-scheduler kubectl}"
WITH_ETCD="${WITH_ETCD:-1}"
CACHE="${NWB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nodewright-bridge}"
OUT="${NWB_BIN_OUT:-$CACHE/bin/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}}"  # the kubelet tier reuses this

export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -modcacherw -buildvcs=false"
mkdir -p "$OUT"
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
staging="v0.${K8S_VERSION#v1.}"

say() { printf '[build-control-plane] %s\n' "$*" >&2; }

build_k8s() {
  local c missing=()
  for c in $K8S_CMDS; do [[ -x "$OUT/$c" ]] || missing+=("$c"); done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  say "building ${missing[*]} ${K8S_VERSION} (cold: ~20-40 min on 2 cores; cached afterwards)"
  local w; w="$(mktemp -d)"
  (
    cd "$w"
    go mod init local/nwb-k8s-bins >/dev/null 2>&1
    say "fetching k8s.io/kubernetes@${K8S_VERSION} go.mod"
    go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" > k8s.json
    python3 - "$staging" > edits.sh <<'PY'
import json, re, shlex, sys
staging = sys.argv[1]
meta = json.load(open("k8s.json"))
text = open(meta["GoMod"]).read()
cmds = ["go mod edit -go=" + re.search(r"^go\s+(\S+)", text, re.M).group(1)]
godebug = re.findall(r"^godebug\s+(\S+=\S+)\s*$", text, re.M)
for block in re.findall(r"^godebug\s*\((.*?)^\)", text, re.M | re.S):
    godebug += re.findall(r"^\s*(\S+=\S+)\s*$", block, re.M)
cmds += ["echo %s >> go.mod" % shlex.quote("godebug " + kv) for kv in godebug]
count = 0
for raw in text.splitlines():
    line = raw.split("//")[0].strip()
    if line.startswith("replace "):
        line = line[len("replace "):].strip()
    if "=>" not in line:
        continue
    left, right = (part.split() for part in line.split("=>", 1))
    if right[0].startswith("./staging/"):
        cmds.append("go mod edit -replace=%s=%s@%s" % (left[0], left[0], staging))
        count += 1
    elif right[0].startswith((".", "/")):
        sys.exit("unexpected local replace upstream: " + raw)
    else:
        src = left[0] + ("@" + left[1] if len(left) > 1 else "")
        cmds.append("go mod edit -replace=%s=%s@%s" % (src, right[0], right[1]))
if count == 0:
    sys.exit("no staging replace lines found upstream")
print("\n".join(cmds))
PY
    bash -eu edits.sh
    commit="$(python3 -c 'import json;print((json.load(open("k8s.json")).get("Origin") or {}).get("Hash",""))')"
    go mod edit -require="k8s.io/kubernetes@${K8S_VERSION}"
    pkgs=(); for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
    say "resolving modules"
    go get -tags selinux,notest,grpcnotrace "${pkgs[@]/%/@${K8S_VERSION}}"
    ts="$(date -u +%Y-%m-%dT%H:%M:%SZ)"; ldf="-s -w"
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldf+=" -X $p.gitVersion=${K8S_VERSION} -X $p.gitMajor=1 -X $p.gitMinor=${minor}"
      ldf+=" -X $p.gitTreeState=clean -X $p.buildDate=${ts}"
      [[ -n "$commit" ]] && ldf+=" -X $p.gitCommit=${commit}"
    done
    say "compiling (this is the long part)"
    go build -mod=mod -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ldf" -o "$OUT/" "${pkgs[@]}"
    cp go.mod "$OUT/k8s-wrapper.go.mod"
  )
  rm -rf "$w"
}

build_etcd() {
  [[ -x "$OUT/etcd" ]] && return 0
  say "building etcd ${ETCD_VERSION}"
  local w; w="$(mktemp -d)"
  ( cd "$w"
    go mod init local/nwb-etcd-bin >/dev/null 2>&1
    go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
    go build -mod=mod -trimpath -ldflags "-s -w" -o "$OUT/etcd" go.etcd.io/etcd/server/v3 )
  rm -rf "$w"
}

build_helm() {
  [[ -x "$OUT/helm" ]] && return 0
  say "building helm ${HELM_VERSION}"
  GOBIN="$OUT" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
    "helm.sh/helm/v4/cmd/helm@${HELM_VERSION}"
}

[[ "$WITH_ETCD" = 1 ]] && build_etcd
build_k8s
[[ "$WITH_HELM" = 1 ]] && build_helm
echo "$OUT"
