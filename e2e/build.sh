#!/usr/bin/env bash
# Build etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubelet and kube-proxy
# from the Go modules pinned in e2e/go.mod (release in e2e/K8S_VERSION), and our
# fake CRI runtime (e2e/cmd/fakecri) and the DRA differential oracle (e2e/cmd/celdiff), into
#   ${DRA_GPU_CACHE:-$HOME/.cache/dra-gpu}/k8s-<version>/bin/
# Upstream binaries already there are kept, so reruns are cheap; ours are rebuilt
# when a file under e2e/cmd/<name>/ or go.mod/go.sum is newer.  Usage:
#   e2e/build.sh                 # all
#   e2e/build.sh etcd kube-apiserver
# Prints the bin directory as the last line of stdout.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$PATH:/usr/local/go/bin"
export GOSUMDB="${GOSUMDB:-off}" CGO_ENABLED="${CGO_ENABLED:-0}"

version="$(tr -d '[:space:]' < K8S_VERSION)"
pinned="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
if [[ "$pinned" != "$version" ]]; then
  echo "go.mod pins k8s.io/kubernetes $pinned but K8S_VERSION is $version; run e2e/pin.sh" >&2
  exit 1
fi

bin="${DRA_GPU_CACHE:-$HOME/.cache/dra-gpu}/k8s-${version}/bin"
mkdir -p "$bin"

minor="${version#v1.}"; minor="${minor%%.*}"
vpkg=k8s.io/component-base/version
ldflags="-s -w -X ${vpkg}.gitVersion=${version} -X ${vpkg}.gitMajor=1"
ldflags+=" -X ${vpkg}.gitMinor=${minor} -X ${vpkg}.gitTreeState=clean"
ldflags+=" -X ${vpkg}.buildDate=1970-01-01T00:00:00Z"

declare -A pkg=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
  [kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
  [fakecri]=./cmd/fakecri
  [celdiff]=./cmd/celdiff
)
# etcd and the apiserver first: every test needs them, the rest only some.
names=("$@")
(( ${#names[@]} )) || names=(etcd kube-apiserver kube-scheduler kube-controller-manager kubelet kube-proxy fakecri celdiff)

# Our own programs change with the repo: stale if any of their inputs is newer.
stale() {
  [[ "${pkg[$1]}" == ./* ]] || return 1
  [[ -n "$(find "${pkg[$1]}" go.mod go.sum -newer "$bin/$1" -print -quit)" ]]
}

for name in "${names[@]}"; do
  [[ -n "${pkg[$name]:-}" ]] || { echo "unknown binary: $name" >&2; exit 2; }
  if [[ -x "$bin/$name" ]] && ! stale "$name"; then
    echo "have  $name" >&2
    continue
  fi
  echo "build $name (${pkg[$name]}) ..." >&2
  start=$SECONDS
  go build -trimpath -ldflags="$ldflags" -o "$bin/.$name.$$.tmp" "${pkg[$name]}"
  mv -f "$bin/.$name.$$.tmp" "$bin/$name"   # atomic: a killed build leaves no binary
  echo "built $name in $((SECONDS - start))s ($(du -h "$bin/$name" | cut -f1))" >&2
done
echo "$bin"
