"""A node's pods for the kubelet plugin's waiting-pods prompter: list them, annotate one (raw JSON).

Called by ``kubelet_plugin.waiting_pods.RetryPrompter`` on its own thread, through the plugin's API
connection (``dra_driver.kube.rest``). The list is field-selected to the node server-side.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from dra_driver.kube.rest import RestApi, list_page

MERGE_PATCH = "application/merge-patch+json"


class KubePodApi:
    """``PodApi`` over the plugin's API connection (raw JSON, ``dra_driver.kube.rest``)."""

    def __init__(self, conn: Any, get_claim: Callable[[str, str], dict[str, Any]]) -> None:
        self._rest = RestApi(conn, total_timeout_s=10.0)
        self._get_claim = get_claim

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The plugin's own claim reader (``kubelet_plugin.api_link.ApiLink.get_claim``)."""
        return self._get_claim(namespace, name)

    def pending_pods(self, node: str) -> list[dict[str, Any]]:
        """``GET /api/v1/pods`` with a field selector: this node's, neither Succeeded nor Failed (the objects of the list)."""
        query = [("fieldSelector", f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed")]
        return list_page(self._rest.call("GET", "/api/v1/pods", query=query), "Pod")[0]  # KubeApiError if no list

    def annotate(self, namespace: str, name: str, key: str, value: str) -> None:
        """A JSON merge patch of the pod's annotations: one key."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
        self._rest.call("PATCH", path, body={"metadata": {"annotations": {key: value}}}, content_type=MERGE_PATCH)
