"""Reads for ``dra-gpu top``: the plugin pods of a release, and each one's /metrics through the API server.

The API server's pod proxy (``/api/v1/namespaces/<ns>/pods/<pod>:<port>/proxy/metrics``) needs no
network path from the user's machine to the pods, only ``get`` on ``pods/proxy`` (which cluster
admins have). Used by ``dra_driver.cli.top``; every failure is a ``KubeApiError``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from dra_driver.kube.client import KubeConfigError, load_api_client
from dra_driver.kube.rest import decode_object, list_page
from dra_driver.kube.slices_api import KubeApiError, KubeSliceApi

__all__ = ["KubeApiError", "KubeTopApi", "connect"]

MAX_SCRAPE_BYTES = 8 << 20


class KubeTopApi(KubeSliceApi):
    """Lists pods, scrapes them through the API server's proxy."""

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """The namespace's pods matching ``selector`` (one page of at most 5,000: one per node)."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"
        got, _, _ = list_page(
            decode_object(*self._rest.fetch("GET", path, query=[("labelSelector", selector), ("limit", "5000")])), "pods"
        )
        return got

    def scrape(self, namespace: str, pod: str, port: int) -> str:
        """The pod's /metrics text (at most 8 MiB)."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}:{port}/proxy/metrics"
        _, data = self._rest.fetch("GET", path)
        if len(data) > MAX_SCRAPE_BYTES:
            raise KubeApiError(0, "TooLarge", f"/metrics of {pod} is larger than {MAX_SCRAPE_BYTES} bytes")
        return data.decode("utf-8", errors="replace")


def connect(kubeconfig: str | None) -> KubeTopApi:
    """A reader for the cluster of ``kubeconfig`` (None: the pod's service account)."""
    try:
        return KubeTopApi(load_api_client(kubeconfig))
    except (KubeConfigError, OSError) as err:
        raise KubeApiError(0, "ConfigError", str(err)) from err
