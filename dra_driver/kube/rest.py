"""One transport for every Kubernetes API call the apps make: raw JSON over an ``ApiConnection``.

Used by ``dra_driver.kube.slices_api`` (ResourceSlices, Nodes, version), ``claims_api``
(ResourceClaims, Events), ``claim_status_api`` and ``explain_api``. Requests and answers are plain
JSON (dicts): nothing goes through a client's generated models, so fields a client does not know
(newer servers, alpha features) are neither dropped on read nor stripped on write. The connection
(``dra_driver.kube.connection``) is a pool of ``http.client`` connections with the credentials
``dra_driver.kube.client`` loaded. Every failure, HTTP or transport, surfaces as one exception
type, ``KubeApiError``, so callers never see socket or ``http.client`` exception classes.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from dra_driver.core.api_errors import ApiError
from dra_driver.kube.connection import TRANSPORT_ERRORS, ApiConnection, Timeouts

__all__ = [
    "CONNECT_TIMEOUT_S",
    "JSON",
    "TRANSPORT_ERRORS",
    "KubeApiError",
    "RestApi",
    "check_next_page",
    "decode_object",
    "error_of",
    "list_page",
    "node_uid_of",
]

JSON = "application/json"
CONNECT_TIMEOUT_S = 5.0


class KubeApiError(ApiError):
    """An API call through the Kubernetes client failed (``dra_driver.core.api_errors.ApiError``)."""


def error_of(status: int, body: bytes, fallback_reason: str) -> KubeApiError:
    """Turn an error answer (normally a ``Status`` object) into a KubeApiError."""
    reason, message = fallback_reason, body.decode("utf-8", "replace")[:1000]
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the decoder's stack
        return KubeApiError(status, reason, message)
    if isinstance(obj, dict):
        reason = str(obj.get("reason") or reason)
        message = str(obj.get("message") or message)
    return KubeApiError(status, reason, message)


class RestApi:
    """Raw-JSON requests on one ``ApiConnection``; thread safe (the connection's pool is)."""

    def __init__(self, conn: ApiConnection, *, request_timeout_s: float = 30.0, total_timeout_s: float | None = None) -> None:
        """Raw requests on ``conn``.

        They time out after ``CONNECT_TIMEOUT_S`` to connect and ``request_timeout_s`` to read, or,
        with ``total_timeout_s``, after that many seconds to connect and that many to read (each
        attempt to connect counts on its own).
        """
        self._conn = conn
        self._timeout = (
            Timeouts(connect=min(CONNECT_TIMEOUT_S, total_timeout_s), read=total_timeout_s)
            if total_timeout_s is not None
            else Timeouts(connect=CONNECT_TIMEOUT_S, read=request_timeout_s)
        )

    def send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: dict[str, Any] | None = None,
        read_timeout_s: float | None = None,
        content_type: str = JSON,
    ) -> Any:
        """Send one request; return the ``connection.Response`` (body not yet read), status unchecked.

        ``content_type`` names the body's kind (a PATCH's: ``application/apply-patch+yaml`` for
        server-side apply); the body is sent as JSON either way (JSON is YAML).
        """
        headers: dict[str, str] = {"Accept": JSON}
        data: bytes | None = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body, separators=(",", ":")).encode()
        target = path + ("?" + urlencode(query) if query else "")
        timeout = self._timeout if read_timeout_s is None else Timeouts(connect=CONNECT_TIMEOUT_S, read=read_timeout_s)
        try:
            return self._conn.request(method, target, body=data, headers=headers, timeout=timeout)
        except TRANSPORT_ERRORS as exc:
            raise KubeApiError(0, type(exc).__name__, str(exc)) from exc

    def fetch(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: dict[str, Any] | None = None,
        content_type: str = JSON,
    ) -> tuple[int, bytes]:
        """One request whose answer is 2xx: its status and body, not yet decoded; anything else raises KubeApiError."""
        raw = self.send(method, path, query=query, body=body, content_type=content_type)
        try:
            data: bytes = raw.data
        except TRANSPORT_ERRORS as exc:
            raise KubeApiError(0, type(exc).__name__, str(exc)) from exc
        finally:
            raw.release_conn()
        status = int(raw.status)
        if not 200 <= status <= 299:
            raise error_of(status, data, str(raw.reason or "Error"))
        return status, data

    def call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: dict[str, Any] | None = None,
        content_type: str = JSON,
    ) -> dict[str, Any]:
        """One request whose 2xx answer is a JSON object; anything else raises KubeApiError."""
        return decode_object(*self.fetch(method, path, query=query, body=body, content_type=content_type))


def decode_object(status: int, data: bytes) -> dict[str, Any]:
    """A 2xx answer's body as the JSON object it must be; KubeApiError naming what it is otherwise."""
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the decoder's stack
        raise KubeApiError(status, "InvalidResponse", f"answer is not JSON: {str(exc)[:200]}") from None
    if not isinstance(obj, dict):
        raise KubeApiError(status, "InvalidResponse", "answer is not a JSON object")
    return obj


MAX_LIST_PAGES = 10_000
"""A list that goes on past this many pages (or repeats a page's token) is refused: bounded work
whatever the server answers (10,000 pages of 500 are 5 million objects)."""


def check_next_page(cont: str, seen: set[str], what: str) -> None:
    """Record ``cont`` as the next page's token; KubeApiError when it was seen before or the list is too long."""
    if cont in seen or len(seen) >= MAX_LIST_PAGES:
        raise KubeApiError(0, "InvalidResponse", f"the {what} list did not end after {len(seen) + 1} pages")
    seen.add(cont)


def list_page(page: dict[str, Any], what: str) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    """A list answer's items (objects only), metadata and continue token; KubeApiError when it is no list."""
    items, meta = page.get("items") or [], page.get("metadata") or {}
    if not isinstance(items, list) or not isinstance(meta, dict):
        raise KubeApiError(0, "InvalidResponse", f"a {what} list answer without an items list and metadata")
    cont = meta.get("continue") or ""
    if not isinstance(cont, str):
        raise KubeApiError(0, "InvalidResponse", f"a {what} list's continue token is not a string")
    return [i for i in items if isinstance(i, dict)], meta, cont


def node_uid_of(obj: dict[str, Any], node: str) -> str:
    """A Node object's ``metadata.uid`` as the API answered it; KubeApiError when it has none (any shape tolerated)."""
    meta = obj.get("metadata")
    uid = meta.get("uid") if isinstance(meta, dict) else None
    if not isinstance(uid, str) or not uid or len(uid) > 128:
        raise KubeApiError(200, "InvalidResponse", f"node {node!r} has no metadata.uid")
    return uid
