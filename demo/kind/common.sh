# Shared settings for the kind scripts (sourced, not run).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
K8S_VERSION="$(tr -d '[:space:]' < "$ROOT/testkit/go/K8S_VERSION")"
CLUSTER="${CLUSTER:-dra-gpu}"
KIND_IMAGE="${KIND_IMAGE:-kindest/node:${K8S_VERSION}}"
IMAGE="${IMAGE:-dra-gpu:dev}"
NAMESPACE="${NAMESPACE:-dra-gpu}"
FAKE_GPUS="${FAKE_GPUS:-h100x8}"
