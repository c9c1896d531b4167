"""The plugin's own Node, as raw JSON (``dra_driver.kube.rest``): what the device-plugin guard reads.

Called by ``kubelet_plugin.monitoring.device_plugin_guard`` every ``--device-plugin-check-interval``
seconds; the chart's RBAC grants the plugin ``get`` on Nodes. Every failure is a ``KubeApiError``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from dra_driver.kube.connection import ApiConnection
from dra_driver.kube.rest import RestApi


class KubeNodeApi:
    """Reads one Node (core/v1)."""

    def __init__(self, conn: ApiConnection, *, timeout_s: float = 10.0) -> None:
        self._rest = RestApi(conn, total_timeout_s=timeout_s)

    def get_node(self, name: str) -> dict[str, Any]:
        """GET the Node ``name`` as JSON."""
        return self._rest.call("GET", f"/api/v1/nodes/{quote(name, safe='')}")
