"""One Node, as raw JSON (``dra_driver.kube.rest``): what the plugin's guards read, and a cordon's annotation.

Called by ``dra_driver.appkit.device_plugin_guard`` every ``--device-plugin-check-interval``
seconds and ``dra_driver.appkit.local_cordon`` every ``--local-cordon-check-interval``
(the chart's RBAC grants the plugin ``get`` on Nodes), and by ``dra_driver.cli.cordon`` where
DeviceTaintRules are not served (:meth:`KubeNodeApi.set_annotation`: the platform-admin role's
``patch`` on Nodes). Every failure is a ``KubeApiError``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from dra_driver.kube.connection import ApiConnection
from dra_driver.kube.rest import RestApi

MERGE_PATCH = "application/merge-patch+json"


class KubeNodeApi:
    """Reads one Node (core/v1)."""

    def __init__(self, conn: ApiConnection, *, timeout_s: float = 10.0) -> None:
        self._rest = RestApi(conn, total_timeout_s=timeout_s)

    def get_node(self, name: str) -> dict[str, Any]:
        """GET the Node ``name`` as JSON."""
        return self._rest.call("GET", f"/api/v1/nodes/{quote(name, safe='')}")

    def set_annotation(self, name: str, key: str, value: str | None, *, resource_version: str) -> dict[str, Any]:
        """Set (None: remove) one annotation of Node ``name`` by a merge patch; the patched Node.

        Only while the Node is at ``resource_version``: a 409 conflict otherwise (read it again).
        """
        body = {"metadata": {"resourceVersion": resource_version, "annotations": {key: value}}}
        return self._rest.call("PATCH", f"/api/v1/nodes/{quote(name, safe='')}", body=body, content_type=MERGE_PATCH)
