#!/usr/bin/env bash
# Regenerate the Go module file for one Kubernetes release:
#   testkit/go/pin.sh            # the default release (testkit/go/K8S_VERSION): testkit/go/go.mod + go.sum
#   testkit/go/pin.sh v1.35.4    # a matrix release (testkit/go/K8S_MATRIX): testkit/go/gomod/v1.35.4.mod + .sum
# build.sh builds a matrix release with `go build -modfile=gomod/<version>.mod`, so every
# release compiles the same testkit/go/cmd/* sources against its own Kubernetes packages.
#
# k8s.io/kubernetes requires its staging modules (k8s.io/api, client-go, ...)
# at v0.0.0 and replaces them with ./staging paths, which do not exist for a
# consumer.  We add one replace per such module pointing at the published
# v0.<minor>.<patch> tag, pin etcd's server to the version kubernetes pins, and
# record the binaries build.sh builds from upstream as `tool` directives so
# `go mod tidy` keeps them.  Our own programs (testkit/go/cmd/*, e.g. fakecri) are
# packages of this module, so tidy keeps their imports too.
# Run only when bumping a release; build.sh never rewrites a module file.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$PATH:/usr/local/go/bin" GOFLAGS=-mod=mod
export GOSUMDB="${GOSUMDB:-off}"   # sum.golang.org is unreachable here

default="$(tr -d '[:space:]' < K8S_VERSION)"
version="${1:-$default}"
[[ "$version" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || { echo "not a release: $version (want v1.<minor>.<patch>)" >&2; exit 2; }
staging="v0.${version#v1.}"
here="$PWD"
if [[ "$version" == "$default" ]]; then dest="go.mod"; else dest="gomod/${version}.mod"; fi

# Tidy in a scratch copy so an interrupted run never leaves a half-written module file.
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cp -r cmd "$work/"
cd "$work"

kmod="$(go mod download -json "k8s.io/kubernetes@${version}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
[[ -n "$kmod" ]] || { echo "k8s.io/kubernetes@${version} is not on the module proxy" >&2; exit 1; }
etcd="$(go mod edit -json "$kmod" | python3 -c '
import json, sys
reqs = json.load(sys.stdin)["Require"]
print(next(r["Version"] for r in reqs if r["Path"] == "go.etcd.io/etcd/server/v3"))')"
mods="$(go mod edit -json "$kmod" | python3 -c '
import json, sys
for r in json.load(sys.stdin)["Require"]:
    if r["Path"].startswith("k8s.io/") and r["Version"] == "v0.0.0":
        print(r["Path"])')"

go mod init github.com/dra-gpu/dra-gpu/e2e
go mod edit -go=1.26.0 -godebug=default=go1.26
for m in $mods; do go mod edit -replace="${m}=${m}@${staging}"; done
go mod edit -require="k8s.io/kubernetes@${version}" -require="go.etcd.io/etcd/server/v3@${etcd}"
for t in k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
         k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy \
         go.etcd.io/etcd/server/v3; do
  go mod edit -tool="$t"
done
go mod tidy
mkdir -p "$here/gomod"
cp go.mod "$here/$dest.tmp"; cp go.sum "$here/${dest%.mod}.sum.tmp"
mv -f "$here/$dest.tmp" "$here/$dest"; mv -f "$here/${dest%.mod}.sum.tmp" "$here/${dest%.mod}.sum"
echo "pinned k8s ${version} (staging ${staging}), etcd ${etcd} in testkit/go/${dest}"
