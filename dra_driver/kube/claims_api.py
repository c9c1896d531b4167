"""ResourceClaim reads and node Events for the kubelet plugin, as raw JSON.

The kubelet plugin calls ``get_claim`` for every claim of a NodePrepareResources call and
``node_event`` to tell operators about checkpoint recovery. Raw JSON (``_preload_content=False``)
so no client model drops fields newer than the client.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException


class ClaimLookupError(Exception):
    """The claim could not be read; ``not_found`` tells a missing claim from an API failure."""

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found


class KubeClaimApi:
    """Reads ResourceClaims (resource.k8s.io/v1) and writes core/v1 Events."""

    def __init__(self, api_client: client.ApiClient, *, timeout_s: float = 10.0) -> None:
        self._resource = client.ResourceV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._timeout = timeout_s
        self._node_uids: dict[str, str] = {}

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """GET one ResourceClaim as JSON; raise ClaimLookupError."""
        try:
            resp = self._resource.read_namespaced_resource_claim(
                name, namespace, _preload_content=False, _request_timeout=self._timeout
            )
        except ApiException as err:
            if err.status == 404:
                raise ClaimLookupError(f"claim {namespace}/{name} not found", not_found=True) from None
            raise ClaimLookupError(f"reading claim {namespace}/{name}: {err.status} {err.reason}") from None
        except Exception as err:  # noqa: BLE001 - network errors of every kind become one error
            raise ClaimLookupError(f"reading claim {namespace}/{name}: {err}") from None
        data: dict[str, Any] = json.loads(cast(Any, resp).data)  # raw urllib3 response (no model)
        return data

    def _node_uid(self, node_name: str) -> str:
        if node_name not in self._node_uids:
            resp = self._core.read_node(node_name, _preload_content=False, _request_timeout=self._timeout)
            self._node_uids[node_name] = str(json.loads(cast(Any, resp).data)["metadata"]["uid"])
        return self._node_uids[node_name]

    def node_event(self, *, node_name: str, reason: str, message: str, warning: bool, component: str) -> None:
        """Record an Event on the Node (in namespace default, as node events are)."""
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
        self._core.create_namespaced_event("default", cast(Any, body), _request_timeout=self._timeout)  # dict body: no model
