#!/usr/bin/env bash
# Build the Helm CLI from source at the release pinned in testkit/go/helm/go.mod (the only
# place the version lives: `tool helm.sh/helm/v4/cmd/helm` + its require line) into
#   ${DRA_GPU_CACHE:-$HOME/.cache/dra-gpu}/helm-<version>/bin/helm
# A binary already there is kept, so reruns are cheap.  This is its own Go module so
# Helm's client-go never has to agree with the Kubernetes release that testkit/go/go.mod pins.
# To bump: cd testkit/go/helm && GOSUMDB=off go get -tool helm.sh/helm/v4/cmd/helm@vX.Y.Z && go mod tidy
# Prints the binary's path as the last line of stdout.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$PATH:/usr/local/go/bin"
export GOSUMDB="${GOSUMDB:-off}" CGO_ENABLED="${CGO_ENABLED:-0}"

module=helm.sh/helm/v4
version="$(go list -mod=readonly -m -f '{{.Version}}' "$module")"
bin="${DRA_GPU_CACHE:-$HOME/.cache/dra-gpu}/helm-${version}/bin"
mkdir -p "$bin"

if [[ -x "$bin/helm" ]]; then
  echo "have  helm $version" >&2
else
  echo "build helm $version ($module/cmd/helm) ..." >&2
  start=$SECONDS
  vpkg="$module/internal/version"
  ldflags="-s -w -X $vpkg.version=$version -X $vpkg.metadata= -X $vpkg.gitTreeState=clean"
  tmp="$bin/.helm.$$.tmp"
  trap 'rm -f "$tmp"' EXIT
  go build -mod=readonly -trimpath -ldflags="$ldflags" -o "$tmp" "$module/cmd/helm"
  mv -f "$tmp" "$bin/helm"   # atomic: a killed build leaves no binary
  echo "built helm $version in $((SECONDS - start))s ($(du -h "$bin/helm" | cut -f1))" >&2
fi
echo "$bin/helm"
