"""Reads for ``dra-gpu top``: the plugin pods of a release, each one's /metrics through the API server, and the claims.

The API server's pod proxy (``/api/v1/namespaces/<ns>/pods/[https:]<pod>:<port>/proxy/metrics``)
needs no network path from the user's machine to the pods, only ``get`` on ``pods/proxy`` (which
cluster admins have). It passes no credentials on: the API server keeps the ``Authorization``
header for itself and presents no client certificate, so a plugin whose /metrics wants a token or
a client certificate cannot be read this way. The claims (``claims_by_uid``: ``list`` on
resourceclaims in every namespace) name the claims the plugin's series know by UID only. Used by
``dra_driver.cli.top``; every failure is a ``KubeApiError``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from dra_driver.kube.client import KubeConfigError, load_api_client
from dra_driver.kube.rest import check_next_page, decode_object, list_page
from dra_driver.kube.slices_api import KubeApiError, KubeSliceApi

__all__ = ["KubeApiError", "KubeTopApi", "connect"]

MAX_SCRAPE_BYTES = 8 << 20
RESOURCE_CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"
_CLAIMS_PAGE = 500


class KubeTopApi(KubeSliceApi):
    """Lists pods, scrapes them through the API server's proxy."""

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """The namespace's pods matching ``selector`` (one page of at most 5,000: one per node)."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"
        got, _, _ = list_page(
            decode_object(*self._rest.fetch("GET", path, query=[("labelSelector", selector), ("limit", "5000")])), "pods"
        )
        return got

    def scrape(self, namespace: str, pod: str, port: int, scheme: str = "http") -> str:
        """The pod's /metrics text (at most 8 MiB); ``scheme`` https: the API server speaks TLS to the pod."""
        target = f"{'https:' if scheme == 'https' else ''}{quote(pod, safe='')}:{port}"
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{target}/proxy/metrics"
        _, data = self._rest.fetch("GET", path)
        if len(data) > MAX_SCRAPE_BYTES:
            raise KubeApiError(0, "TooLarge", f"/metrics of {pod} is larger than {MAX_SCRAPE_BYTES} bytes")
        return data.decode("utf-8", errors="replace")

    def claims_by_uid(self, uids: set[str]) -> dict[str, tuple[str, str, tuple[str, ...]]]:
        """Of the ResourceClaims in every namespace, those of ``uids``: UID -> (namespace, name, pods of reservedFor)."""
        found: dict[str, tuple[str, str, tuple[str, ...]]] = {}
        cont, seen = "", set[str]()
        while uids - found.keys():
            query = [("limit", str(_CLAIMS_PAGE))] + ([("continue", cont)] if cont else [])
            got, _, cont = list_page(decode_object(*self._rest.fetch("GET", RESOURCE_CLAIMS_PATH, query=query)), "ResourceClaim")
            for claim in got:
                meta, status = claim.get("metadata") or {}, claim.get("status") or {}
                uid = meta.get("uid") if isinstance(meta, dict) else None
                if uid not in uids or not isinstance(meta, dict):
                    continue
                reserved = status.get("reservedFor") if isinstance(status, dict) else None
                pods = sorted(
                    str(r.get("name", ""))
                    for r in (reserved if isinstance(reserved, list) else ())
                    if isinstance(r, dict) and r.get("resource") == "pods" and r.get("name")
                )
                found[str(uid)] = (str(meta.get("namespace", "")), str(meta.get("name", "")), tuple(pods))
            if not cont:
                break
            check_next_page(cont, seen, "ResourceClaim")
        return found


def connect(kubeconfig: str | None) -> KubeTopApi:
    """A reader for the cluster of ``kubeconfig`` (None: the pod's service account)."""
    try:
        return KubeTopApi(load_api_client(kubeconfig))
    except (KubeConfigError, OSError) as err:
        raise KubeApiError(0, "ConfigError", str(err)) from err
