"""ResourceSlices (resource.k8s.io/v1), Nodes and the server version, as raw JSON (``dra_driver.kube.rest``).

Used by the ResourceSlice publisher (``dra_driver.appkit.publisher``) and the kubelet plugin;
``explain_api`` builds on it. Every failure is a ``KubeApiError``.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from dra_driver.kube.connection import ApiConnection
from dra_driver.kube.rest import TRANSPORT_ERRORS, KubeApiError, RestApi, check_next_page, error_of, list_page, node_uid_of

MAX_WATCH_EVENT_BYTES = 64 << 20
"""One watch event (a ResourceSlice, at most etcd's 1.5 MiB object, as JSON): a longer line is no event."""

__all__ = ["RESOURCE_SLICES_PATH", "KubeApiError", "KubeSliceApi"]

RESOURCE_SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
_LIST_PAGE = 500


class KubeSliceApi:
    """ResourceSlice, Node and version calls on one ``ApiConnection``; thread safe."""

    def __init__(self, conn: ApiConnection, *, request_timeout_s: float = 30.0) -> None:
        self._rest = RestApi(conn, request_timeout_s=request_timeout_s)
        self._send = self._rest.send
        self._json = self._rest.call
        self._lock = threading.Lock()
        self._watches: set[Any] = set()

    # -- ResourceSlices ---------------------------------------------------------------------

    @staticmethod
    def _selector(driver: str, node: str) -> str:
        return f"spec.driver={driver},spec.nodeName={node}"

    def list(self, driver: str, node: str) -> tuple[list[dict[str, Any]], str]:
        """All slices of ``driver`` on ``node`` and the list's resourceVersion (to watch from)."""
        items: list[dict[str, Any]] = []
        cont, seen = "", set[str]()
        while True:
            query = [("fieldSelector", self._selector(driver, node)), ("limit", str(_LIST_PAGE))]
            if cont:
                query.append(("continue", cont))
            got, meta, cont = list_page(self._json("GET", RESOURCE_SLICES_PATH, query=query), "ResourceSlice")
            items.extend(got)
            rv = meta.get("resourceVersion") or ""
            if not isinstance(rv, str):
                raise KubeApiError(0, "InvalidResponse", "a ResourceSlice list's resourceVersion is not a string")
            if not cont:
                return items, rv
            check_next_page(cont, seen, "ResourceSlice")

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create a slice; returns the object as stored."""
        return self._json("POST", RESOURCE_SLICES_PATH, body=obj)

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace a slice; ``obj.metadata.resourceVersion`` guards against lost updates (409)."""
        name = str(obj["metadata"]["name"])
        return self._json("PUT", f"{RESOURCE_SLICES_PATH}/{quote(name, safe='')}", body=obj)

    def delete(self, name: str) -> None:
        """Delete a slice; one that is already gone is not an error."""
        try:
            self._json("DELETE", f"{RESOURCE_SLICES_PATH}/{quote(name, safe='')}")
        except KubeApiError as exc:
            if not exc.not_found:
                raise

    def watch(self, driver: str, node: str, resource_version: str, timeout_s: float) -> Iterator[tuple[str, dict[str, Any]]]:
        """Stream ``(type, object)`` events of the node's slices after ``resource_version``.

        Types are ADDED, MODIFIED, DELETED and BOOKMARK. The server ends the stream after
        ``timeout_s``; an ERROR event (e.g. 410 Gone) raises KubeApiError. ``interrupt_watches``
        ends a blocked stream from another thread.
        """
        query = [
            ("fieldSelector", self._selector(driver, node)),
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(max(1, int(timeout_s)))),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        raw = self._send("GET", RESOURCE_SLICES_PATH, query=query, read_timeout_s=timeout_s + 30.0)
        with self._lock:
            self._watches.add(raw)
        try:
            status = int(raw.status)
            if not 200 <= status <= 299:
                raise error_of(status, raw.data, str(raw.reason or "Error"))
            yield from self._events(raw)
        except TRANSPORT_ERRORS as exc:
            raise KubeApiError(0, type(exc).__name__, str(exc)) from exc
        finally:
            with self._lock:
                self._watches.discard(raw)
            raw.close()
            raw.release_conn()

    @staticmethod
    def _events(raw: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        buf = b""
        for chunk in raw.stream(65536):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    yield KubeSliceApi._event(line)
            if len(buf) > MAX_WATCH_EVENT_BYTES:
                raise KubeApiError(0, "InvalidWatchEvent", f"a watch event longer than {MAX_WATCH_EVENT_BYTES} bytes")
        if buf.strip():
            yield KubeSliceApi._event(buf)

    @staticmethod
    def _event(line: bytes) -> tuple[str, dict[str, Any]]:
        """One watch line as ``(type, object)``; anything but an event with an object is a KubeApiError."""
        try:
            event = json.loads(line)
        except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the decoder's stack
            raise KubeApiError(0, "InvalidWatchEvent", f"not JSON: {str(exc)[:200]}") from None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise KubeApiError(0, "InvalidWatchEvent", "a watch event is an object with a string type")
        kind, obj = event["type"], event.get("object")
        if not isinstance(obj, dict):
            raise KubeApiError(0, "InvalidWatchEvent", f"the {kind[:50]!r} event's object is not an object")
        if kind == "ERROR":
            code = obj.get("code")
            raise KubeApiError(
                code if isinstance(code, int) and 0 <= code <= 999 else 0,
                str(obj.get("reason") or "Error")[:200],
                str(obj.get("message"))[:1000],
            )
        return kind, obj

    def interrupt_watches(self) -> None:
        """End every watch stream now blocked in a read (used on shutdown); safe from any thread."""
        with self._lock:
            watches = list(self._watches)
        for raw in watches:
            # Already closed or released: nothing left to interrupt.
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                raw.shutdown()

    # -- Nodes and version ------------------------------------------------------------------

    def node_uid(self, node: str) -> str:
        """Return the UID of Node ``node`` (for the slices' owner reference); 404 if it does not exist."""
        return node_uid_of(self._json("GET", f"/api/v1/nodes/{quote(node, safe='')}"), node)

    def server_minor_version(self) -> int:
        """Return the API server's minor version from ``/version`` (``"36"`` and ``"36+"`` both give 36)."""
        info = self._json("GET", "/version")
        minor, git = info.get("minor"), info.get("gitVersion")
        match = re.match(r"\d{1,4}", minor) if isinstance(minor, str) else None
        if match is None:
            match = re.match(r"v?\d{1,4}\.(\d{1,4})", git) if isinstance(git, str) else None
            if match is None:
                raise KubeApiError(200, "InvalidResponse", f"cannot read a minor version from {str(info)[:300]}")
            return int(match.group(1))
        return int(match.group(0))
