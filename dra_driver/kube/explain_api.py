"""Raw-JSON reads for ``dra-gpu explain`` in live mode: what the scheduler would look at.

Used by ``dra_driver.cli.explain``. Lists every ResourceSlice, DeviceClass and ResourceClaim
(resource.k8s.io/v1) and Node, gets one Pod, ResourceClaim or ResourceClaimTemplate, all as
plain dicts through the same transport as ``KubeSliceApi`` (so unknown fields survive and every
failure is a ``KubeApiError``), and the server's minor release (whose scheduler rules explain follows).
Reads only: explain never writes.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from dra_driver.kube.client import KubeConfigError, load_api_client
from dra_driver.kube.slices_api import RESOURCE_SLICES_PATH, KubeApiError, KubeSliceApi

__all__ = ["KubeApiError", "KubeExplainApi", "connect"]

_RESOURCE = "/apis/resource.k8s.io/v1"
_PAGE = 500


class KubeExplainApi(KubeSliceApi):
    """Cluster-wide reads of the objects allocation depends on."""

    def list_all(self, path: str) -> list[dict[str, Any]]:
        """Every item of a collection, following ``continue`` tokens."""
        items: list[dict[str, Any]] = []
        cont = ""
        while True:
            query = [("limit", str(_PAGE))]
            if cont:
                query.append(("continue", cont))
            page = self._json("GET", path, query=query)
            items.extend(i for i in page.get("items") or [] if isinstance(i, dict))
            cont = str((page.get("metadata") or {}).get("continue") or "")
            if not cont:
                return items

    def resource_slices(self) -> list[dict[str, Any]]:
        """All ResourceSlices (every driver, every node)."""
        return self.list_all(RESOURCE_SLICES_PATH)

    def device_classes(self) -> list[dict[str, Any]]:
        """All DeviceClasses."""
        return self.list_all(f"{_RESOURCE}/deviceclasses")

    def resource_claims(self) -> list[dict[str, Any]]:
        """All ResourceClaims in all namespaces (allocated or not)."""
        return self.list_all(f"{_RESOURCE}/resourceclaims")

    def node_labels(self) -> dict[str, dict[str, str]]:
        """Each Node's labels, by name (for slices that select nodes by label)."""
        return {
            str((n.get("metadata") or {}).get("name", "")): dict((n.get("metadata") or {}).get("labels") or {})
            for n in self.list_all("/api/v1/nodes")
        }

    def server_minor(self) -> int | None:
        """The API server's Kubernetes minor release (``/version``: 37 for v1.37.2); None if it does not say."""
        try:
            info = self._json("GET", "/version")
        except KubeApiError:
            return None
        found = re.match(r"v?1\.(\d+)", str(info.get("gitVersion") or "")) or re.match(r"(\d+)", str(info.get("minor") or ""))
        return int(found.group(1)) if found else None

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """One Pod, ResourceClaim or ResourceClaimTemplate; KubeApiError (404) if it does not exist."""
        paths = {
            "pod": f"/api/v1/namespaces/{quote(namespace, safe='')}/pods",
            "resourceclaim": f"{_RESOURCE}/namespaces/{quote(namespace, safe='')}/resourceclaims",
            "resourceclaimtemplate": f"{_RESOURCE}/namespaces/{quote(namespace, safe='')}/resourceclaimtemplates",
        }
        obj = self._json("GET", f"{paths[kind]}/{quote(name, safe='')}")
        obj.setdefault("kind", {"pod": "Pod", "resourceclaim": "ResourceClaim"}.get(kind, "ResourceClaimTemplate"))
        return obj


def connect(kubeconfig: str | None) -> KubeExplainApi:
    """A reader for the cluster of ``kubeconfig`` (None: the pod's service account).

    A configuration that cannot be loaded is a ``KubeApiError`` too, so callers handle one type.
    """
    try:
        return KubeExplainApi(load_api_client(kubeconfig))
    except (KubeConfigError, OSError) as err:
        raise KubeApiError(0, "ConfigError", str(err)) from err
