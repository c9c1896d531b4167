#!/usr/bin/env bash
# Build the driver image and load it into every kind node.
source "$(dirname "$0")/common.sh"
docker build -f "$ROOT/deploy/container/Dockerfile" -t "$IMAGE" "$ROOT"
# `kind load` can break on containerd config versions; importing with ctr works everywhere.
for node in $(kind get nodes --name "$CLUSTER"); do
  docker save "$IMAGE" | docker exec -i "$node" ctr --namespace=k8s.io images import -
done
