"""ResourceClaim ``status.devices`` writes for the kubelet plugin, by server-side apply (``dra_driver.kube.rest``).

``kubelet_plugin.monitoring.device_status`` calls ``apply_status`` with a body built by
``dra_driver.core.device_status.apply_configuration``: one PATCH of
``/apis/resource.k8s.io/v1/namespaces/<ns>/resourceclaims/<name>/status`` with content type
``application/apply-patch+yaml``, field manager = the driver name, ``force=true``. Server-side
apply merges ``status.devices`` per entry (the API declares it a map keyed by driver, device,
pool and shareID), so the scheduler's allocation and other drivers' entries are never
overwritten, and nothing is read first: there is no read-modify-replace to lose a concurrent
write. ``force`` takes over our own entries should another manager have touched them (we are
the authority on our devices).

Authorization (what the chart's ClusterRole grants, ``deploy/helm/dra-gpu/templates/rbac.yaml``):
``patch`` on ``resourceclaims/status``; from Kubernetes 1.36 on (gate
``DRAResourceClaimGranularStatusAuthorization``, beta, on) also ``associated-node:patch`` on the
synthetic ``resourceclaims/driver`` with ``resourceNames: [<driver>]``, which the API server
checks for a ServiceAccount whose token names the node the claim is allocated to
(``pkg/registry/resource/utils.go`` ``AuthorizedForDeviceStatus``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from dra_driver.kube.connection import ApiConnection
from dra_driver.kube.rest import RestApi

APPLY_PATCH = "application/apply-patch+yaml"


class KubeClaimStatusApi:
    """Applies one driver's ``status.devices`` entries of ResourceClaims (resource.k8s.io/v1)."""

    def __init__(self, conn: ApiConnection, *, field_manager: str, timeout_s: float = 5.0) -> None:
        self._rest = RestApi(conn, total_timeout_s=timeout_s)
        self._field_manager = field_manager

    def apply_status(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply ``body`` to the claim's status; the stored claim, or KubeApiError."""
        path = f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace, safe='')}/resourceclaims/{quote(name, safe='')}/status"
        query = [("fieldManager", self._field_manager), ("force", "true")]
        return self._rest.call("PATCH", path, query=query, body=body, content_type=APPLY_PATCH)
