#!/usr/bin/env bash
# Build the dra-gpu image from deploy/container/Dockerfile, the one recipe Docker users build
# too, on a machine with no container engine: root, mmdebstrap and buildah (Debian/Ubuntu).
#   deploy/container/build-local.sh [TAG]
# builds
#   localhost/dra-gpu:<TAG>             the product (default TAG: dev-<12 hex of a sha256 over the
#                                       recipe, .dockerignore, this script and every file the
#                                       Dockerfile's COPY lines take), so an unchanged tree reuses it
#   localhost/dra-gpu-shell:bookworm    the bare Debian bookworm minbase rootfs (sh, cat, ls, env,
#                                       stat...): the small image the demo's pods run
# and writes them as OCI archives into ${DRA_GPU_CACHE:-$HOME/.cache/dra-gpu}/images/:
#   dra-gpu-<TAG>.oci.tar, dra-gpu-shell-bookworm.oci.tar
# (each archive's ref name is the full image name, so `ctr -n k8s.io images import <archive>`
# names it as above; dev-* archives unused for a week go when a new one is built). Prints the
# two archive paths as the last two lines of stdout, dra-gpu first; progress goes to stderr. If
# the archive for TAG is already there, nothing is built.
#
# How: mmdebstrap makes a Debian bookworm minbase rootfs (bookworm, bookworm-updates and
# bookworm-security, documentation excluded as in debian:bookworm-slim), cached as a tarball and
# imported into buildah as localhost/debian:bookworm-minbase; then `buildah bud` builds the
# Dockerfile on it (--build-arg BASE_IMAGE, chroot isolation, host network for apt and pip).
# buildah keeps its own store under the cache (overlay, or vfs where overlay cannot mount), not
# the system's. To refresh the base (Debian security updates), delete
# debian-bookworm-minbase.tar and the buildah/ directory under the cache (the tag covers the
# recipe and the copied files, not the base, so also delete the dra-gpu-*.oci.tar archives).
#
# pip inside the build trusts the host's CA bundle (/etc/ssl/certs/ca-certificates.crt, or
# $DRA_GPU_CA_BUNDLE) and uses $PIP_INDEX_URL when set, so TLS-intercepting proxies and mirrors
# work; both are mounted for the build only (a pip.conf in the build's $HOME) and are not in
# the image.
set -euo pipefail

# Tools first, one line each for what is missing.
missing=0
for tool in mmdebstrap buildah; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "build-local.sh: '$tool' not found; install it: apt-get install -y $tool" >&2
    missing=1
  fi
done
(( missing == 0 )) || exit 2

usage() { echo "usage: deploy/container/build-local.sh [TAG]" >&2; exit 2; }
(( $# <= 1 )) || usage
tag="${1:-}"
case "$tag" in -*) usage ;; esac
if [[ -n "$tag" && ! "$tag" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]]; then
  echo "build-local.sh: invalid image tag '$tag'" >&2
  exit 2
fi
if (( EUID != 0 )); then
  echo "build-local.sh: run as root (mmdebstrap's root mode, buildah's chroot isolation)" >&2
  exit 2
fi

self="deploy/container/build-local.sh"
recipe="deploy/container/Dockerfile"
cd "$(dirname "$0")/../.."

# What the image copies, read from the recipe itself (every COPY source), so the tag follows it.
mapfile -t copied < <(awk '/^COPY[ \t]/ { for (i = 2; i < NF; i++) if ($i !~ /^--/) print $i }' "$recipe")
(( ${#copied[@]} )) || { echo "build-local.sh: no COPY lines in $recipe" >&2; exit 1; }

if [[ -z "$tag" ]]; then
  # Paths and contents; the same files .dockerignore leaves out of the context are left out here.
  digest="$(
    { printf '%s\n' "$recipe" .dockerignore "$self"
      find "${copied[@]%/}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*'
    } | LC_ALL=C sort -u | tr '\n' '\0' | xargs -0 sha256sum | sha256sum
  )"
  tag="dev-${digest:0:12}"
fi

cache="${DRA_GPU_CACHE:-$HOME/.cache/dra-gpu}"
out="$cache/images"
mkdir -p "$out"
case "$out" in *:*) echo "build-local.sh: the cache path must not contain ':' ($out)" >&2; exit 2 ;; esac

base_img=localhost/debian:bookworm-minbase
shell_img=localhost/dra-gpu-shell:bookworm
app_img="localhost/dra-gpu:$tag"
base_tar="$out/debian-bookworm-minbase.tar"
shell_tar="$out/dra-gpu-shell-bookworm.oci.tar"
app_tar="$out/dra-gpu-$tag.oci.tar"

if [[ -f "$app_tar" && -f "$shell_tar" ]]; then
  touch "$app_tar" "$shell_tar"   # last used, for the pruning below
  echo "have  $app_img, $shell_img (archives in $out)" >&2
  printf '%s\n' "$app_tar" "$shell_tar"
  exit 0
fi

# Everything half-made goes on any exit that did not finish: temp files, the base's working
# container (`buildah bud --force-rm` removes its own, also when a step fails).
tmp_files=()
containers=()
done_ok=0
cleanup() {
  local c
  if (( ${#containers[@]} )); then
    for c in "${containers[@]}"; do bah rm "$c" >/dev/null 2>&1 || true; done
  fi
  if (( ${#tmp_files[@]} )); then rm -rf -- "${tmp_files[@]}"; fi
  (( done_ok )) || echo "build-local.sh: failed; partial files removed" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# buildah's own store, one per storage driver: overlay where it mounts, else vfs. Its run
# state (locks, mount counts) goes under /run, like the system store's, one per store.
store="$cache/buildah"
runroot="/run/dra-gpu-buildah/$(printf '%s' "$store" | sha256sum | cut -c1-12)"
mkdir -p "$store"
bah() { buildah --root "$store/$driver" --runroot "$runroot/$driver" --storage-driver "$driver" "$@"; }
if [[ -n "${DRA_GPU_STORAGE_DRIVER:-}" ]]; then
  driver="$DRA_GPU_STORAGE_DRIVER"
elif [[ -s "$store/driver" ]]; then
  driver="$(<"$store/driver")"
else
  driver=overlay
  probe_ok=0
  if probe="$(bah from scratch 2>/dev/null)"; then
    bah mount "$probe" >/dev/null 2>&1 && probe_ok=1
    bah rm "$probe" >/dev/null 2>&1 || true
  fi
  if (( ! probe_ok )); then
    echo "buildah: overlay storage does not work here; using vfs (slower, larger)" >&2
    driver=vfs
  fi
  echo "$driver" > "$store/driver"
fi
echo "buildah storage: $driver under $store/$driver" >&2

size_of() { bah images --noheading --format '{{.Size}}' "$1" | head -n1; }

# The base: Debian bookworm minbase, as debian:bookworm-slim is made (three suites, no docs).
base_new=0
if ! bah inspect --type image "$base_img" >/dev/null 2>&1; then
  if [[ ! -s "$base_tar" ]]; then
    echo "mmdebstrap bookworm minbase -> $base_tar ..." >&2
    start=$SECONDS
    tmp="$out/.debian-bookworm-minbase.$$.tar"
    tmp_files+=("$tmp")
    mirror=http://deb.debian.org/debian
    # merged-usr hook: /bin, /lib... as symlinks the way debootstrap makes them, rather than
    # through the usrmerge package (which would pull perl into the image). This host's
    # resolv.conf and hostname (mmdebstrap copies them in) and device nodes stay out: the
    # container runtime provides all three.
    # shellcheck disable=SC2016 # $1 is for mmdebstrap's hook shell: the chroot directory
    mmdebstrap --variant=minbase --mode=root --format=tar \
      --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
      --customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname"' \
      --aptopt='Acquire::Languages "none"' \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
      --dpkgopt='path-exclude=/usr/share/groff/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      bookworm - \
      "deb $mirror bookworm main" \
      "deb $mirror bookworm-updates main" \
      "deb http://deb.debian.org/debian-security bookworm-security main" \
      2>"$out/mmdebstrap.log" | tar --delete --wildcards './dev/?*' > "$tmp" \
      || { echo "mmdebstrap failed; the last lines of $out/mmdebstrap.log:" >&2; tail -n 40 "$out/mmdebstrap.log" >&2; exit 1; }
    mv -f "$tmp" "$base_tar"
    echo "made base rootfs in $((SECONDS - start))s ($(du -m "$base_tar" | cut -f1) MiB)" >&2
  fi
  start=$SECONDS
  ctr="$(bah from --name "dra-gpu-base-$$" scratch)"
  containers+=("$ctr")
  bah add --quiet "$ctr" "$base_tar" / >&2
  bah config --os linux --arch "$(dpkg --print-architecture 2>/dev/null || echo amd64)" \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd bash "$ctr"
  bah commit --quiet --rm "$ctr" "$base_img" >/dev/null
  containers=()
  base_new=1
  echo "imported $base_img in $((SECONDS - start))s ($(size_of "$base_img"))" >&2
else
  echo "have  $base_img" >&2
fi

# The product, from the recipe Docker users build.
if [[ ! -f "$app_tar" ]]; then
  echo "buildah bud $recipe -> $app_img ..." >&2
  start=$SECONDS
  # pip's TLS trust (and index) for the build only: a directory mounted over /root, the build's
  # $HOME, which the base already has, so buildah leaves no mount point behind in the image.
  build_home="$(mktemp -d)"
  tmp_files+=("$build_home")
  mkdir -p "$build_home/.config/pip"
  cp "${DRA_GPU_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}" "$build_home/.config/pip/ca-certificates.crt"
  { echo "[global]"
    echo "cert = /root/.config/pip/ca-certificates.crt"
    if [[ -n "${PIP_INDEX_URL:-}" ]]; then echo "index-url = $PIP_INDEX_URL"; fi
  } > "$build_home/.config/pip/pip.conf"
  iidfile="$(mktemp)"
  tmp_files+=("$iidfile")
  # The build's own output (apt, pip, buildah) goes to a log; its tail is shown if it fails.
  build_log="$out/build-local.log"
  if ! bah bud --isolation chroot --network host --layers=false --pull=never --force-rm \
    --build-arg BASE_IMAGE="$base_img" --volume "$build_home:/root:ro" --iidfile "$iidfile" \
    -f "$recipe" -t "$app_img" . >"$build_log" 2>&1; then
    echo "buildah bud failed; the last lines of $build_log:" >&2
    tail -n 40 "$build_log" >&2
    exit 1
  fi
  # By image id from here on: a concurrent run building the same tag moves the name, not the id.
  iid="$(<"$iidfile")"
  tmp="$out/.dra-gpu-$tag.$$.oci.tar"
  tmp_files+=("$tmp")
  bah push --quiet "$iid" "oci-archive:$tmp:$app_img" >&2
  image_size="$(size_of "$iid")"
  # The archive is the cache: the store keeps only the base.
  bah rmi "$iid" >/dev/null
  mv -f "$tmp" "$app_tar"
  echo "built dra-gpu image in $((SECONDS - start))s ($(du -m "$app_tar" | cut -f1) MiB archive, $image_size unpacked)" >&2
  # Automatic (dev-*) archives of older trees, unused for a week (a rerun touches its archive).
  find "$out" -maxdepth 1 -name 'dra-gpu-dev-*.oci.tar' -mtime +7 -print -delete | sed 's/^/removed unused /' >&2
fi

if (( base_new )) || [[ ! -f "$shell_tar" ]]; then
  tmp="$out/.dra-gpu-shell-bookworm.$$.oci.tar"
  tmp_files+=("$tmp")
  bah tag "$base_img" "$shell_img"
  bah push --quiet "$shell_img" "oci-archive:$tmp:$shell_img" >&2
  mv -f "$tmp" "$shell_tar"
  echo "wrote $shell_img ($(du -m "$shell_tar" | cut -f1) MiB archive, $(size_of "$shell_img") unpacked)" >&2
fi

done_ok=1
printf '%s\n' "$app_tar" "$shell_tar"
