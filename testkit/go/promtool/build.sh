#!/usr/bin/env bash
# Build Prometheus' promtool from source at the release pinned in testkit/go/promtool/go.mod (the only
# place the version lives: `tool github.com/prometheus/prometheus/cmd/promtool` + its require
# line; Prometheus 3.x is published as module version v0.3XX.Y) into
#   ${DRA_GPU_CACHE:-$HOME/.cache/dra-gpu}/promtool-<version>/promtool
# A binary already there is kept, so reruns are cheap. Its own Go module, like testkit/go/helm, so
# Prometheus' dependencies never have to agree with the Kubernetes release testkit/go/go.mod pins.
# Used by tests/chart/test_prometheus_rules.py (`promtool test rules` on the chart's PrometheusRule).
# To bump: cd testkit/go/promtool && GOSUMDB=off go get -tool github.com/prometheus/prometheus/cmd/promtool@vX.Y.Z && go mod tidy
# Prints the binary's path as the last line of stdout.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$PATH:/usr/local/go/bin"
export GOSUMDB="${GOSUMDB:-off}" CGO_ENABLED="${CGO_ENABLED:-0}"

module=github.com/prometheus/prometheus
version="$(go list -mod=readonly -m -f '{{.Version}}' "$module")"
dir="${DRA_GPU_CACHE:-$HOME/.cache/dra-gpu}/promtool-${version}"
mkdir -p "$dir"

if [[ -x "$dir/promtool" ]]; then
  echo "have  promtool $version" >&2
else
  echo "build promtool $version ($module/cmd/promtool) ..." >&2
  start=$SECONDS
  vpkg="github.com/prometheus/common/version"
  ldflags="-s -w -X $vpkg.Version=$version -X $vpkg.Branch=release -X $vpkg.Revision=module"
  tmp="$dir/.promtool.$$.tmp"
  trap 'rm -f "$tmp"' EXIT
  go build -mod=readonly -trimpath -ldflags="$ldflags" -o "$tmp" "$module/cmd/promtool"
  mv -f "$tmp" "$dir/promtool"   # atomic: a killed build leaves no binary
  echo "built promtool $version in $((SECONDS - start))s ($(du -h "$dir/promtool" | cut -f1))" >&2
fi
echo "$dir/promtool"
