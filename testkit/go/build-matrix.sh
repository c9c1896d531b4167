#!/usr/bin/env bash
# Build what the version matrix (e2e/test_version_matrix.py) needs for every release of
# testkit/go/K8S_MATRIX: kube-apiserver, kube-scheduler, kube-controller-manager, kubelet and our
# fakecri and celdiff, with testkit/go/build.sh (etcd comes from the default release). Cached like
# build.sh's: a release whose binaries exist costs nothing.
#   testkit/go/build-matrix.sh               # in the foreground
#   testkit/go/build-matrix.sh --background  # detached, at low priority; returns at once
# `make test` starts it in the background before pytest, so the builds overlap the tests that
# come first; the matrix tests wait for it. While it runs it holds an exclusive flock on
#   ${DRA_GPU_CACHE:-$HOME/.cache/dra-gpu}/matrix-build.lock
# and writes its output to matrix-build.log next to it; the last line says how it ended.
set -euo pipefail
cd "$(dirname "$0")"
cache="${DRA_GPU_CACHE:-$HOME/.cache/dra-gpu}"
mkdir -p "$cache"
lock="$cache/matrix-build.lock" log="$cache/matrix-build.log"
if [[ "${1:-}" == "--background" ]]; then
  # The child takes the lock itself; wait until it has, so a test started right after sees it held.
  : > "$log"
  nohup nice -n 10 "$PWD/$(basename "$0")" --locked >>"$log" 2>&1 </dev/null &
  for _ in $(seq 100); do grep -q '^matrix build started' "$log" 2>/dev/null && exit 0; sleep 0.1; done
  echo "the background matrix build did not start; see $log" >&2
  exit 1
fi
exec 9>"$lock"
flock 9
echo "matrix build started (pid $$)"
start=$SECONDS
for v in $(grep -v '^#' K8S_MATRIX); do
  if ! DRA_GPU_K8S_VERSION="$v" ./build.sh fakecri celdiff kube-apiserver kube-scheduler kube-controller-manager kubelet >/dev/null; then
    echo "matrix build FAILED for $v after $((SECONDS - start))s"
    exit 1
  fi
done
echo "matrix build done in $((SECONDS - start))s"
