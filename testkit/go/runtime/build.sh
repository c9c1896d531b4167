#!/usr/bin/env bash
# Build the real container runtime the installed-path e2e and the demo run pods on:
# containerd, its runc shim and ctr (pinned in testkit/go/runtime/go.mod, the only place the versions live: its
# `tool` lines and their require lines), the CNI plugins the local cluster's pod network uses
# (bridge, host-local, loopback, portmap; same go.mod) and the Kubernetes pause binary
# (build/pause/linux/pause.c of the k8s.io/kubernetes module testkit/go/go.mod pins, compiled static,
# and packed with buildah as the sandbox image localhost/pause:dra-gpu, bin/../pause.oci.tar),
# into
#   ${DRA_GPU_CACHE:-$HOME/.cache/dra-gpu}/runtime-<containerd version>/bin/
# runc comes from Debian's package (apt-get install runc). Binaries already there are kept,
# so reruns are cheap. Prints the bin directory as the last line of stdout.
# To bump: cd testkit/go/runtime && GOSUMDB=off go get -tool github.com/containerd/containerd/v2/cmd/containerd@vX.Y.Z && go mod tidy
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
export GOSUMDB="${GOSUMDB:-off}" CGO_ENABLED="${CGO_ENABLED:-0}"

missing=0
for tool in go gcc runc buildah; do
  if ! command -v "$tool" >/dev/null; then
    case "$tool" in
      go) echo "go is missing: install Go (https://go.dev/dl/)" >&2 ;;
      gcc) echo "gcc is missing: apt-get install -y gcc libc6-dev" >&2 ;;
      *) echo "$tool is missing: apt-get install -y $tool" >&2 ;;
    esac
    missing=1
  fi
done
(( missing == 0 )) || exit 2

ctrd=github.com/containerd/containerd/v2
cni=github.com/containernetworking/plugins
version="$(go list -mod=readonly -m -f '{{.Version}}' "$ctrd")"
bin="${DRA_GPU_CACHE:-$HOME/.cache/dra-gpu}/runtime-${version}/bin"
mkdir -p "$bin"
tmp="$bin/.build.$$.tmp"
trap 'rm -f "$tmp"' EXIT

declare -A pkg=(
  [containerd]="$ctrd/cmd/containerd"
  [ctr]="$ctrd/cmd/ctr"
  [containerd-shim-runc-v2]="$ctrd/cmd/containerd-shim-runc-v2"
  [bridge]="$cni/plugins/main/bridge"
  [host-local]="$cni/plugins/ipam/host-local"
  [loopback]="$cni/plugins/main/loopback"
  [portmap]="$cni/plugins/meta/portmap"
)
vflags="-X $ctrd/version.Version=$version -X $ctrd/version.Revision=module"
for name in containerd containerd-shim-runc-v2 ctr bridge host-local loopback portmap; do
  if [[ -x "$bin/$name" ]]; then
    echo "have  $name" >&2
    continue
  fi
  echo "build $name (${pkg[$name]}) ..." >&2
  start=$SECONDS
  ldflags="-s -w"
  [[ "${pkg[$name]}" == "$ctrd"/* ]] && ldflags+=" $vflags"
  # No btrfs/devmapper/zfs snapshotters: overlayfs (and native) is what the local cluster uses.
  go build -mod=readonly -trimpath -tags "no_btrfs no_devmapper no_zfs" -ldflags="$ldflags" -o "$tmp" "${pkg[$name]}"
  mv -f "$tmp" "$bin/$name"   # atomic: a killed build leaves no binary
  echo "built $name in $((SECONDS - start))s ($(du -h "$bin/$name" | cut -f1))" >&2
done

if [[ -x "$bin/pause" ]]; then
  echo "have  pause" >&2
else
  k8s="$(tr -d '[:space:]' < ../K8S_VERSION)"
  if ! info="$(cd .. && go mod download -json "k8s.io/kubernetes@$k8s" 2>&1)"; then
    echo "go mod download k8s.io/kubernetes@$k8s failed: $(sed -n 's/^\t"Error": "\(.*\)",*$/\1/p' <<<"$info" | head -1)" >&2
    exit 1
  fi
  src="$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$info")/build/pause/linux/pause.c"
  [[ -f "$src" ]] || { echo "pause.c not found in the k8s.io/kubernetes@$k8s module ($src)" >&2; exit 1; }
  echo "build pause ($src) ..." >&2
  gcc -Os -static -Wall -DVERSION="\"$k8s-dra-gpu\"" -o "$tmp" "$src"
  strip "$tmp"
  mv -f "$tmp" "$bin/pause"
  echo "built pause ($(du -h "$bin/pause" | cut -f1))" >&2
fi
# The pod sandbox image containerd pins (no registry here): just /pause, as an OCI archive.
archive="$bin/../pause.oci.tar"
if [[ -s "$archive" && "$archive" -nt "$bin/pause" ]]; then
  echo "have  pause image" >&2
else
  ref=localhost/pause:dra-gpu
  ctr="$(buildah from scratch)"
  trap 'rm -f "$tmp"; buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
  buildah copy "$ctr" "$bin/pause" /pause >/dev/null
  buildah config --entrypoint '["/pause"]' --user 65535:65535 "$ctr"
  buildah commit -q "$ctr" "$ref" >/dev/null
  rm -f "$tmp"
  buildah push -q "$ref" "oci-archive:$tmp:$ref" >/dev/null
  mv -f "$tmp" "$archive"
  echo "built pause image ($(du -h "$archive" | cut -f1))" >&2
fi
echo "$bin"
