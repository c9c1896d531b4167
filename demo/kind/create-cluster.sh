#!/usr/bin/env bash
# Create a kind cluster with the DRA gates and CDI enabled (needs Docker and kind).
source "$(dirname "$0")/common.sh"
kind create cluster --name "$CLUSTER" --image "$KIND_IMAGE" --config "$ROOT/demo/kind/kind-cluster.yaml" --wait 2m
