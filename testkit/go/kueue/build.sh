#!/usr/bin/env bash
# Build Kueue's manager (sigs.k8s.io/kueue/cmd/kueue) from its Go module at the release pinned in
# testkit/go/kueue/go.mod (the only place the version lives: `tool sigs.k8s.io/kueue/cmd/kueue` + its
# require line), and copy what the tests install with it from the module source, into
#   ${DRA_GPU_CACHE:-$HOME/.cache/dra-gpu}/kueue-<version>/
#     kueue                  the manager (CGO off, stripped)
#     crds/*.yaml            config/components/crd/bases (the CustomResourceDefinitions)
#     webhook/manifests.yaml config/components/webhook (the webhook configurations)
# A build already there is kept, so reruns are cheap. Its own Go module, like testkit/go/helm: Kueue
# pins its own k8s.io/* release (v0.17.0: k8s.io/* v0.35), which need not agree with testkit/go/go.mod.
# Used by testkit/kueue.py (e2e/test_kueue_quotas.py, e2e/test_doc_examples.py for demo/kueue/).
# To bump: cd testkit/go/kueue && GOSUMDB=off go get -tool sigs.k8s.io/kueue/cmd/kueue@vX.Y.Z && go mod tidy
# Prints the directory as the last line of stdout.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$PATH:/usr/local/go/bin"
export GOSUMDB="${GOSUMDB:-off}" CGO_ENABLED="${CGO_ENABLED:-0}"

module=sigs.k8s.io/kueue
version="$(go list -mod=readonly -m -f '{{.Version}}' "$module")"
dir="${DRA_GPU_CACHE:-$HOME/.cache/dra-gpu}/kueue-${version}"
mkdir -p "$dir"

if [[ -x "$dir/kueue" && -s "$dir/webhook/manifests.yaml" ]]; then
  echo "have  kueue $version" >&2
else
  echo "build kueue $version ($module/cmd/kueue) ..." >&2
  start=$SECONDS
  src="$(go list -mod=readonly -m -f '{{.Dir}}' "$module")"
  [[ -n "$src" ]] || { go mod download "$module"; src="$(go list -mod=readonly -m -f '{{.Dir}}' "$module")"; }
  ldflags="-s -w -X $module/pkg/version.GitVersion=$version -X $module/pkg/version.GitCommit=module"
  ldflags+=" -X $module/pkg/version.BuildDate=1970-01-01"
  tmp="$dir/.kueue.$$.tmp"
  trap 'rm -rf "$tmp" "$dir/.crds.$$" "$dir/.webhook.$$"' EXIT
  go build -mod=readonly -trimpath -ldflags="$ldflags" -o "$tmp" "$module/cmd/kueue"
  mkdir -p "$dir/.crds.$$" "$dir/.webhook.$$"
  cp "$src"/config/components/crd/bases/*.yaml "$dir/.crds.$$/"
  cp "$src/config/components/webhook/manifests.yaml" "$dir/.webhook.$$/"
  chmod -R u+w "$dir/.crds.$$" "$dir/.webhook.$$"   # the module cache is read-only
  rm -rf "$dir/crds" "$dir/webhook"
  mv "$dir/.crds.$$" "$dir/crds"
  mv "$dir/.webhook.$$" "$dir/webhook"
  mv -f "$tmp" "$dir/kueue"   # last and atomic: a killed build leaves no binary
  echo "built kueue $version in $((SECONDS - start))s ($(du -h "$dir/kueue" | cut -f1))" >&2
fi
echo "$dir"
