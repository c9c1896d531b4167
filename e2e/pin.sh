#!/usr/bin/env bash
# Regenerate e2e/go.mod + go.sum for the Kubernetes release in e2e/K8S_VERSION.
#
# k8s.io/kubernetes requires its staging modules (k8s.io/api, client-go, ...)
# at v0.0.0 and replaces them with ./staging paths, which do not exist for a
# consumer.  We add one replace per such module pointing at the published
# v0.<minor>.<patch> tag, pin etcd's server to the version kubernetes pins, and
# record the binaries build.sh builds from upstream as `tool` directives so
# `go mod tidy` keeps them.  Our own programs (e2e/cmd/*, e.g. fakecri) are
# packages of this module, so tidy keeps their imports too.
# Run only when bumping K8S_VERSION; build.sh never rewrites go.mod.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$PATH:/usr/local/go/bin" GOFLAGS=-mod=mod
export GOSUMDB="${GOSUMDB:-off}"   # sum.golang.org is unreachable here

version="$(tr -d '[:space:]' < K8S_VERSION)"
staging="v0.${version#v1.}"

kmod="$(go mod download -json "k8s.io/kubernetes@${version}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
etcd="$(go mod edit -json "$kmod" | python3 -c '
import json, sys
reqs = json.load(sys.stdin)["Require"]
print(next(r["Version"] for r in reqs if r["Path"] == "go.etcd.io/etcd/server/v3"))')"
mods="$(go mod edit -json "$kmod" | python3 -c '
import json, sys
for r in json.load(sys.stdin)["Require"]:
    if r["Path"].startswith("k8s.io/") and r["Version"] == "v0.0.0":
        print(r["Path"])')"

rm -f go.mod go.sum
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
echo "pinned k8s ${version} (staging ${staging}), etcd ${etcd}"
