"""Raw-JSON reads for ``dra-gpu explain`` in live mode: what the scheduler would look at.

Used by ``dra_driver.cli.explain``. Lists every ResourceSlice, DeviceClass and ResourceClaim
(resource.k8s.io/v1), DeviceTaintRule (whichever version is served) and Node, gets one Pod,
ResourceClaim or ResourceClaimTemplate, all as plain dicts through the same transport as
``KubeSliceApi`` (so unknown fields survive and every failure is a ``KubeApiError``), and the
server's minor release (whose scheduler rules explain follows).
Reads only: explain never writes. A list is read a page at a time, the next page fetched while
the last one is decoded (:meth:`KubeExplainApi.list_all`).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

from dra_driver.kube.client import KubeConfigError, load_api_client
from dra_driver.kube.rest import check_next_page, decode_object, list_page
from dra_driver.kube.slices_api import RESOURCE_SLICES_PATH, KubeApiError
from dra_driver.kube.taint_rules_api import KubeTaintRuleApi

__all__ = ["Decode", "KubeApiError", "KubeExplainApi", "connect"]

_RESOURCE = "/apis/resource.k8s.io/v1"
# A page's body -> its JSON value (as json.loads gives it), or None where this decoder does not read it.
Decode = Callable[[bytes], Any]
_PAGE = 500


class KubeExplainApi(KubeTaintRuleApi):
    """Cluster-wide reads of the objects allocation depends on (DeviceTaintRules too, through ``KubeTaintRuleApi``)."""

    def list_all(self, path: str, decode: Decode | None = None) -> list[dict[str, Any]]:
        """Every item of a collection, following ``continue`` tokens, a page at a time.

        ``decode``: decodes each page's body, None where it does not read it (then the page is
        decoded the usual way); the CLI passes one that shares equal parts across pages
        (ResourceSlices: ``dra_driver.schedsim.shared_json``), so this adapter needs no JSON library of its own.

        The next page is asked for while this one is decoded: its ``continue`` token is read from
        the head of the page's body (the list's ``metadata`` comes before its items) and a
        background thread fetches the next page, waiting on the socket without the GIL, while the
        JSON is decoded here. The token the decoded page gives is the one that counts: where the
        head did not give it (another layout), or gave another, the page fetched ahead is dropped
        and the right one asked for.
        """
        items: list[dict[str, Any]] = []
        seen: set[str] = set()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="explain-list") as pool:
            pending = pool.submit(self._page, path, "")
            while True:
                status, data = pending.result()
                guess = continue_token(data)
                ahead = pool.submit(self._page, path, guess) if guess and guess not in seen else None
                got, _, cont = list_page(_decode(decode, status, data), path.rsplit("/", 1)[-1])
                items.extend(got)
                if ahead is not None and guess != cont:
                    _drop(ahead)
                    ahead = None
                if not cont:
                    return items
                check_next_page(cont, seen, path.rsplit("/", 1)[-1])
                pending = ahead if ahead is not None else pool.submit(self._page, path, cont)

    def _page(self, path: str, cont: str) -> tuple[int, bytes]:
        """One page of a list: (status, body as received); KubeApiError for a failure or an answer that is not 2xx."""
        query = [("limit", str(_PAGE))]
        if cont:
            query.append(("continue", cont))
        return self._rest.fetch("GET", path, query=query)

    def resource_slices(self, decode: Decode | None = None) -> list[dict[str, Any]]:
        """All ResourceSlices (every driver, every node), each page read by ``decode`` where it can (see :meth:`list_all`)."""
        return self.list_all(RESOURCE_SLICES_PATH, decode)

    def device_classes(self) -> list[dict[str, Any]]:
        """All DeviceClasses."""
        return self.list_all(f"{_RESOURCE}/deviceclasses")

    def resource_claims(self) -> list[dict[str, Any]]:
        """All ResourceClaims in all namespaces (allocated or not)."""
        return self.list_all(f"{_RESOURCE}/resourceclaims")

    def node_labels(self) -> dict[str, dict[str, str]]:
        """Each Node's labels, by name (for slices that select nodes by label)."""
        return {name: dict(meta.get("labels") or {}) for name, meta in self.node_metadata().items()}

    def node_metadata(self) -> dict[str, dict[str, Any]]:
        """Each Node's metadata (labels, annotations), by name."""
        return {
            str((n.get("metadata") or {}).get("name", "")): dict(n.get("metadata") or {}) for n in self.list_all("/api/v1/nodes")
        }

    def device_taint_rules(self) -> tuple[str | None, list[dict[str, Any]]]:
        """(the served DeviceTaintRule version, every rule); (None, []) where the server serves none."""
        version = self.served_version()
        return version, ([] if version is None else self.rules(version))

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


_HEAD = re.compile(rb'\s*\{(?:\s*"(?:kind|apiVersion)"\s*:\s*"[^"\\]*"\s*,)*\s*"metadata"\s*:\s*')
_HEAD_BYTES = 64 << 10  # a list's metadata (resource version, continue token, count) is far shorter


def continue_token(data: bytes) -> str:
    """The ``metadata.continue`` of a list's JSON body read from its head ("" where the head does not say).

    Only a guess to fetch ahead with (see :meth:`KubeExplainApi.list_all`): the decoded page decides.
    """
    found = _HEAD.match(data)
    if found is None:
        return ""
    text = data[found.end() : found.end() + _HEAD_BYTES].decode("utf-8", "replace")
    try:
        meta, _ = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):
        return ""
    token = meta.get("continue") if isinstance(meta, dict) else None
    return token if isinstance(token, str) else ""


def _decode(decode: Decode | None, status: int, data: bytes) -> dict[str, Any]:
    """A page's JSON object: by ``decode`` where it reads it (the same value as ``json.loads``), else :func:`decode_object`."""
    if decode is not None:
        shared = decode(data)
        if isinstance(shared, dict):
            return shared
    return decode_object(status, data)


def _drop(ahead: Future[tuple[int, bytes]]) -> None:
    """Wait for a page fetched ahead that is not wanted (its connection goes back to the pool); its failure does not matter."""
    with contextlib.suppress(KubeApiError):
        ahead.result()


def connect(kubeconfig: str | None) -> KubeExplainApi:
    """A reader for the cluster of ``kubeconfig`` (None: the pod's service account).

    A configuration that cannot be loaded is a ``KubeApiError`` too, so callers handle one type.
    """
    try:
        return KubeExplainApi(load_api_client(kubeconfig))
    except (KubeConfigError, OSError) as err:
        raise KubeApiError(0, "ConfigError", str(err)) from err
