"""Applying YAML manifests (the demo/ files) to a LocalCluster through its REST API.

Used by the e2e tests and the demo, so the demo manifests are exercised on every run. Knows
the few kinds the demos use; an unknown kind is an error, not a silent skip.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dra_driver.core.config import API_VERSION
from testkit.cluster import LocalCluster

_PLURALS: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Namespace"): ("/api/v1/namespaces", False),
    ("v1", "Pod"): ("/api/v1/namespaces/{ns}/pods", True),
    ("v1", "ResourceQuota"): ("/api/v1/namespaces/{ns}/resourcequotas", True),
    ("apps/v1", "Deployment"): ("/apis/apps/v1/namespaces/{ns}/deployments", True),
    ("resource.k8s.io/v1", "DeviceClass"): ("/apis/resource.k8s.io/v1/deviceclasses", False),
    ("resource.k8s.io/v1", "ResourceClaim"): ("/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", True),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): ("/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates", True),
    # demo/kueue/ (Kueue's CRDs: testkit.kueue.install_crds)
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"): ("/apis/kueue.x-k8s.io/v1beta2/resourceflavors", False),
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"): ("/apis/kueue.x-k8s.io/v1beta2/clusterqueues", False),
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"): ("/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/localqueues", True),
}


def load(path: Path) -> list[dict[str, Any]]:
    """The YAML documents of a file, skipping empty ones."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def collection_path(obj: dict[str, Any]) -> str:
    """The REST collection an object is created in."""
    key = (obj["apiVersion"], obj["kind"])
    if key not in _PLURALS:
        raise ValueError(f"manifests.py does not know {key}; add it to _PLURALS")
    template, namespaced = _PLURALS[key]
    return template.format(ns=obj["metadata"].get("namespace", "default")) if namespaced else template


def apply(cluster: LocalCluster, objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Create every object in order; return what the API server stored."""
    return [cluster.api("POST", collection_path(o), o) for o in objs]


def apply_file(cluster: LocalCluster, path: Path) -> list[dict[str, Any]]:
    """Create every object of one manifest file."""
    return apply(cluster, load(path))


def bad_config_claim(namespace: str, driver: str) -> dict[str, Any]:
    """A ResourceClaim named bad-config whose GpuConfig names an unknown sharing strategy (Magic):
    the chart's admission webhook must deny it at create time."""
    parameters = {"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "Magic"}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "bad-config", "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": driver}}],
                "config": [{"opaque": {"driver": driver, "parameters": parameters}}],
            }
        },
    }
