#!/usr/bin/env bash
# Remove the kind cluster.
source "$(dirname "$0")/common.sh"
kind delete cluster --name "$CLUSTER"
