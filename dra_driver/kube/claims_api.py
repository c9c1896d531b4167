"""ResourceClaim reads and node Events for the kubelet plugin, as raw JSON (``dra_driver.kube.rest``).

The kubelet plugin calls ``get_claim`` for every claim of a NodePrepareResources call and
``node_event`` to tell operators about checkpoint recovery. Raw JSON, so no client model drops
fields newer than the client, and no per-group API class is loaded.
"""

from __future__ import annotations

import datetime
from typing import Any
from urllib.parse import quote

from dra_driver.kube.connection import ApiConnection
from dra_driver.kube.rest import KubeApiError, RestApi, node_uid_of


class ClaimLookupError(Exception):
    """The claim could not be read; ``not_found`` tells a missing claim from an API failure."""

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found


class KubeClaimApi:
    """Reads ResourceClaims (resource.k8s.io/v1) and writes core/v1 Events."""

    def __init__(self, conn: ApiConnection, *, timeout_s: float = 10.0) -> None:
        self._rest = RestApi(conn, total_timeout_s=timeout_s)
        self._node_uids: dict[str, str] = {}

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """GET one ResourceClaim as JSON; raise ClaimLookupError."""
        path = f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace, safe='')}/resourceclaims/{quote(name, safe='')}"
        try:
            return self._rest.call("GET", path)
        except KubeApiError as err:
            if err.not_found:
                raise ClaimLookupError(f"claim {namespace}/{name} not found", not_found=True) from None
            if err.status:
                raise ClaimLookupError(f"reading claim {namespace}/{name}: {err.status} {err.reason}") from None
            raise ClaimLookupError(err.message) from None  # the caller names the claim

    def _node_uid(self, node_name: str) -> str:
        if node_name not in self._node_uids:
            node = self._rest.call("GET", f"/api/v1/nodes/{quote(node_name, safe='')}")
            self._node_uids[node_name] = node_uid_of(node, node_name)
        return self._node_uids[node_name]

    def node_event(self, *, node_name: str, reason: str, message: str, warning: bool, component: str) -> None:
        """Record an Event on the Node (in namespace default, as node events are); KubeApiError on failure."""
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{node_name}.dra-gpu.", "namespace": "default"},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": self._node_uid(node_name)},
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": component, "host": node_name},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._rest.call("POST", "/api/v1/namespaces/default/events", body=body)
