#!/usr/bin/env bash
# Debian packages the local clusters need beyond the base machine, installed when missing:
#   runc        runs the containers of the installed-path e2e and `make demo` (containerd's runtime)
#   mmdebstrap  makes the Debian base rootfs of the images (deploy/container/build-local.sh)
#   buildah     builds deploy/container/Dockerfile without a container engine
#   iptables    kube-proxy's Service rules; iproute2 (ip): the nodes' bridges and addresses
#   gcc, libc6-dev  compile the pause binary (testkit/go/runtime/build.sh)
# As root with apt-get: installs what is missing (quietly). Otherwise: one line per missing
# package naming it, and exit 2. Called by `make k8s`.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

missing=()
for pair in runc:runc mmdebstrap:mmdebstrap buildah:buildah iptables:iptables ip:iproute2 gcc:gcc; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
[[ -e /usr/include/stdio.h ]] || missing+=(libc6-dev)
(( ${#missing[@]} )) || exit 0

if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} (apt-get) ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q "${missing[@]}" >/tmp/dra-gpu-host-tools.log 2>&1; then
    apt-get update -q >>/tmp/dra-gpu-host-tools.log 2>&1 || true
    apt-get install -y -q "${missing[@]}" >>/tmp/dra-gpu-host-tools.log 2>&1 \
      || { echo "apt-get install ${missing[*]} failed; see /tmp/dra-gpu-host-tools.log" >&2; exit 2; }
  fi
  exit 0
fi
for pkg in "${missing[@]}"; do
  echo "the Debian package $pkg is missing: install it (apt-get install -y $pkg, as root)" >&2
done
exit 2
