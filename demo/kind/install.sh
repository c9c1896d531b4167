#!/usr/bin/env bash
# Install the chart with fake GPUs on every worker.
source "$(dirname "$0")/common.sh"
helm upgrade --install dra-gpu "$ROOT/deploy/helm/dra-gpu" --namespace "$NAMESPACE" --create-namespace \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
  --set gpus.fake.profile="$FAKE_GPUS" --wait --timeout 3m
kubectl get resourceslices -o wide
