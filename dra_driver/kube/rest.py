"""One transport for every Kubernetes API call the apps make: raw JSON over the client's ``ApiClient``.

Used by ``dra_driver.kube.slices_api`` (ResourceSlices, Nodes, version), ``claims_api``
(ResourceClaims, Events) and ``explain_api``. Requests and answers are plain JSON (dicts): nothing
goes through the client's generated models or API classes, so fields this client does not know
(newer servers, alpha features) are neither dropped on read nor stripped on write, and the
plugin never loads the client's per-group API modules (``CoreV1Api`` alone is ~20 MiB and over a
second of start-up). Every failure, HTTP or transport, surfaces as one exception type,
``KubeApiError``, so callers never see ``kubernetes`` or ``urllib3`` exception classes.
"""

from __future__ import annotations

import json
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_driver.core.api_errors import ApiError

JSON = "application/json"
CONNECT_TIMEOUT_S = 5.0
TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, OSError, ValueError, ApiException)


class KubeApiError(ApiError):
    """An API call through the Kubernetes client failed (``dra_driver.core.api_errors.ApiError``)."""


def error_of(status: int, body: bytes, fallback_reason: str) -> KubeApiError:
    """Turn an error answer (normally a ``Status`` object) into a KubeApiError."""
    reason, message = fallback_reason, body.decode("utf-8", "replace")[:1000]
    try:
        obj = json.loads(body)
    except ValueError:
        return KubeApiError(status, reason, message)
    if isinstance(obj, dict):
        reason = str(obj.get("reason") or reason)
        message = str(obj.get("message") or message)
    return KubeApiError(status, reason, message)


class RestApi:
    """Raw-JSON requests on one ``ApiClient``; thread safe (the client's pool is)."""

    def __init__(
        self, api_client: client.ApiClient, *, request_timeout_s: float = 30.0, total_timeout_s: float | None = None
    ) -> None:
        """Raw requests on ``api_client``.

        They time out after ``CONNECT_TIMEOUT_S`` to connect and ``request_timeout_s`` to read, or,
        with ``total_timeout_s``, after that many seconds for connect and read together (the
        client's own retries may repeat a request).
        """
        self._client = api_client
        self._timeout: float | tuple[float, float] = (
            total_timeout_s if total_timeout_s is not None else (CONNECT_TIMEOUT_S, request_timeout_s)
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
        """Send one request; return the raw urllib3 response (not yet read), status unchecked.

        ``content_type`` names the body's kind (a PATCH's: ``application/apply-patch+yaml`` for
        server-side apply); the body is sent as JSON either way (JSON is YAML).
        """
        headers: dict[str, str] = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            _, url, header_params, _, _ = self._client.param_serialize(
                method=method,
                resource_path=path,
                query_params=query or [],
                header_params=headers,
                auth_settings=["BearerToken"],
            )
            timeout = self._timeout if read_timeout_s is None else (CONNECT_TIMEOUT_S, read_timeout_s)
            # Body goes straight to the REST layer as a dict (json.dumps), never through a model.
            response = self._client.call_api(method, url, header_params=header_params, body=body, _request_timeout=timeout)
        except TRANSPORT_ERRORS as exc:
            raise KubeApiError(0, type(exc).__name__, str(exc)) from exc
        return response.response

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
        try:
            obj = json.loads(data)
        except ValueError as exc:
            raise KubeApiError(status, "InvalidResponse", f"answer is not JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise KubeApiError(status, "InvalidResponse", "answer is not a JSON object")
        return obj
