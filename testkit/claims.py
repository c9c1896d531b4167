"""Creating allocated ResourceClaims in the real API server (it validates every field)."""

from __future__ import annotations

from typing import Any

from testkit.claimdata import allocated_claim
from testkit.cluster import LocalCluster


def create_allocated_claim(cluster: LocalCluster, **kwargs: Any) -> tuple[str, str, str]:
    """Create a claim, then write its allocation through the status subresource; return (ns, uid, name)."""
    obj = allocated_claim(**kwargs)
    ns = obj["metadata"]["namespace"]
    status = obj.pop("status")
    obj["metadata"].pop("uid")
    created = cluster.api("POST", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", obj)
    created["status"] = status
    stored = cluster.api(
        "PUT", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{created['metadata']['name']}/status", created
    )
    return ns, stored["metadata"]["uid"], stored["metadata"]["name"]
