#!/usr/bin/env bash
# Build etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubelet and kube-proxy
# from the Go modules pinned for one Kubernetes release, and our fake CRI runtime
# (testkit/go/cmd/fakecri) and the DRA differential oracle (testkit/go/cmd/celdiff), into
#   ${DRA_GPU_CACHE:-$HOME/.cache/dra-gpu}/k8s-<version>/bin/
# The release is testkit/go/K8S_VERSION (module testkit/go/go.mod) unless DRA_GPU_K8S_VERSION names one of
# testkit/go/K8S_MATRIX (module testkit/go/gomod/<version>.mod, used with go build -modfile).  Our programs
# get the build tag k8s1_<minor>, for the few lines that differ between releases.
# Upstream binaries already there are kept, so reruns are cheap; ours are rebuilt
# when a file under testkit/go/cmd/<name>/ or go.mod/go.sum is newer.  Usage:
#   testkit/go/build.sh                 # all
#   testkit/go/build.sh etcd kube-apiserver
# Prints the bin directory as the last line of stdout.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$PATH:/usr/local/go/bin"
export GOSUMDB="${GOSUMDB:-off}" CGO_ENABLED="${CGO_ENABLED:-0}"

default="$(tr -d '[:space:]' < K8S_VERSION)"
version="${DRA_GPU_K8S_VERSION:-$default}"
modfile=go.mod; modflag=()
if [[ "$version" != "$default" ]]; then
  grep -qx -- "$version" K8S_MATRIX || { echo "$version is neither testkit/go/K8S_VERSION nor in testkit/go/K8S_MATRIX" >&2; exit 2; }
  modfile="gomod/${version}.mod"; modflag=(-modfile="$modfile")
  [[ -f "$modfile" ]] || { echo "no $modfile: run testkit/go/pin.sh $version" >&2; exit 1; }
fi
pinned="$(go list "${modflag[@]}" -m -f '{{.Version}}' k8s.io/kubernetes)"
if [[ "$pinned" != "$version" ]]; then
  echo "$modfile pins k8s.io/kubernetes $pinned, not $version; run testkit/go/pin.sh $version" >&2
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
  [[ -n "$(find "${pkg[$1]}" "$modfile" "${modfile%.mod}.sum" -newer "$bin/$1" -print -quit)" ]]
}

for name in "${names[@]}"; do
  [[ -n "${pkg[$name]:-}" ]] || { echo "unknown binary: $name" >&2; exit 2; }
  if [[ -x "$bin/$name" ]] && ! stale "$name"; then
    echo "have  $name" >&2
    continue
  fi
  echo "build $name (${pkg[$name]}) ..." >&2
  start=$SECONDS
  go build "${modflag[@]}" -tags "k8s1_${minor}" -trimpath -ldflags="$ldflags" -o "$bin/.$name.$$.tmp" "${pkg[$name]}"
  mv -f "$bin/.$name.$$.tmp" "$bin/$name"   # atomic: a killed build leaves no binary
  echo "built $name in $((SECONDS - start))s ($(du -h "$bin/$name" | cut -f1))" >&2
done
echo "$bin"
