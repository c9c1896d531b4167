#!/usr/bin/env bash
# Apply the demo manifests and check each scheduled pod printed its GPU environment.
# (gpu-no-mig is left out: it asks for a GPU that cannot do MIG, and the default fake GPUs are H100s.)
source "$(dirname "$0")/common.sh"
kubectl apply -f "$ROOT/demo/namespace.yaml"
for f in gpu-h100 gpu-40gi gpu-driver-570 two-gpus shared-claim; do
  kubectl apply -f "$ROOT/demo/$f.yaml"
done
pods=(gpu-h100 gpu-40gi gpu-driver-570 two-gpus shared-1 shared-2)
for pod in "${pods[@]}"; do
  kubectl -n dra-demo wait --for=condition=Ready "pod/$pod" --timeout=3m
  echo "== $pod"; kubectl -n dra-demo logs "$pod" | grep GPU_DEVICE || { echo "no GPU env in $pod"; exit 1; }
done
kubectl get resourceclaims -n dra-demo
