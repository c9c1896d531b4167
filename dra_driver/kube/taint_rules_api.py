"""DeviceTaintRules (resource.k8s.io v1, v1beta2 or v1alpha3, whichever the server serves) and a node's slices, as raw JSON.

Used by ``dra_driver.cli.cordon`` (``dra-gpu cordon`` / ``uncordon``; with ``nodes``, the
``dra_driver.kube.node_api`` reader on the same connection, for local withholding) and
``dra_driver.cli.top`` (the cordoned devices). The API version is found by discovery, newest first: v1 (Kubernetes
1.37, GA), v1beta2 (1.36, the ``DRADeviceTaintRules`` gate, off by default) or v1alpha3 (1.33 to
1.35, alpha gate plus ``--runtime-config``); ``served_version`` is None when none is. Every
failure is a ``KubeApiError``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from dra_driver.kube.client import KubeConfigError, load_api_client
from dra_driver.kube.connection import ApiConnection
from dra_driver.kube.node_api import KubeNodeApi
from dra_driver.kube.rest import KubeApiError, check_next_page, list_page
from dra_driver.kube.slices_api import KubeSliceApi

__all__ = ["TAINT_RULE_VERSIONS", "KubeApiError", "KubeTaintRuleApi", "connect"]

GROUP = "resource.k8s.io"
TAINT_RULE_VERSIONS = ("v1", "v1beta2", "v1alpha3")
RESOURCE = "devicetaintrules"
_PAGE = 500


class KubeTaintRuleApi(KubeSliceApi):
    """Reads a node's slices; lists, creates, replaces and deletes DeviceTaintRules in the served version.

    ``nodes`` reads a Node and patches its annotations (local withholding, where no rule is served).
    """

    def __init__(self, conn: ApiConnection, *, request_timeout_s: float = 30.0) -> None:
        super().__init__(conn, request_timeout_s=request_timeout_s)
        self.nodes = KubeNodeApi(conn, timeout_s=request_timeout_s)

    def served_version(self) -> str | None:
        """The newest of ``TAINT_RULE_VERSIONS`` whose discovery lists devicetaintrules; None when none does."""
        for version in TAINT_RULE_VERSIONS:
            try:
                doc = self._json("GET", f"/apis/{GROUP}/{version}")
            except KubeApiError as exc:
                if exc.not_found or exc.status == 503:
                    continue
                raise
            resources = doc.get("resources")
            if isinstance(resources, list) and any(isinstance(r, dict) and r.get("name") == RESOURCE for r in resources):
                return version
        return None

    def server_version_text(self) -> str:
        """The server's ``gitVersion`` (e.g. v1.36.3), or ``unknown``."""
        try:
            text = self._json("GET", "/version").get("gitVersion")
        except KubeApiError:
            return "unknown"
        return text if isinstance(text, str) and 0 < len(text) <= 64 and text.isprintable() else "unknown"

    def node_exists(self, node: str) -> bool | None:
        """Whether Node ``node`` exists; None when the caller may not read Nodes (the platform-admin role may not)."""
        try:
            self._json("GET", f"/api/v1/nodes/{quote(node, safe='')}")
        except KubeApiError as exc:
            if exc.not_found:
                return False
            if exc.status == 403:
                return None
            raise
        return True

    def node_slices(self, driver: str, node: str) -> list[dict[str, Any]]:
        """The ResourceSlices of ``driver`` on ``node``."""
        return self.list(driver, node)[0]

    @staticmethod
    def _path(version: str, name: str | None = None) -> str:
        base = f"/apis/{GROUP}/{version}/{RESOURCE}"
        return base if name is None else f"{base}/{quote(name, safe='')}"

    def rules(self, version: str) -> list[dict[str, Any]]:
        """Every DeviceTaintRule (cluster-scoped; few: one per cordoned or hand-tainted device)."""
        items: list[dict[str, Any]] = []
        cont, seen = "", set[str]()
        while True:
            query = [("limit", str(_PAGE))] + ([("continue", cont)] if cont else [])
            got, _, cont = list_page(self._json("GET", self._path(version), query=query), "DeviceTaintRule")
            items.extend(got)
            if not cont:
                return items
            check_next_page(cont, seen, "DeviceTaintRule")

    def get_rule(self, version: str, name: str) -> dict[str, Any] | None:
        """The rule ``name``, or None when there is none."""
        try:
            return self._json("GET", self._path(version, name))
        except KubeApiError as exc:
            if exc.not_found:
                return None
            raise

    def create_rule(self, version: str, rule: dict[str, Any]) -> dict[str, Any]:
        """Create ``rule`` (its apiVersion set to ``version``)."""
        return self._json("POST", self._path(version), body={**rule, "apiVersion": f"{GROUP}/{version}"})

    def replace_rule(self, version: str, rule: dict[str, Any]) -> dict[str, Any]:
        """Replace ``rule``; its ``metadata.resourceVersion`` guards against lost updates (409)."""
        name = str(rule["metadata"]["name"])
        return self._json("PUT", self._path(version, name), body={**rule, "apiVersion": f"{GROUP}/{version}"})

    def delete_rule(self, version: str, name: str) -> bool:
        """Delete the rule ``name``; False when it was already gone."""
        try:
            self._json("DELETE", self._path(version, name))
        except KubeApiError as exc:
            if exc.not_found:
                return False
            raise
        return True


def connect(kubeconfig: str | None) -> KubeTaintRuleApi:
    """A client for the cluster of ``kubeconfig`` (None: the pod's service account)."""
    try:
        return KubeTaintRuleApi(load_api_client(kubeconfig))
    except (KubeConfigError, OSError) as err:
        raise KubeApiError(0, "ConfigError", str(err)) from err
