"""REST calls to the bench's API server over kept-alive HTTPS connections, a watch stream, and /metrics.

Used by every other module of ``bench.cluster_scale`` (nodes, pods, classes, bindings, write counts).
``testkit.cluster.LocalCluster.api`` opens a new TLS connection per call; creating 1,000 pods from
several threads that way would make the bench's own handshakes a cost the scheduler competes with,
so each thread keeps one connection here. Errors are ``testkit.cluster.ApiError`` as there.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from testkit.cluster import ApiError

JSON = "application/json"


class Api:
    """The cluster admin's REST calls; thread safe (one connection per calling thread)."""

    def __init__(self, server: str, token: str, ca_file: Path, timeout_s: float = 60.0) -> None:
        url = urlsplit(server)
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or 443
        self._token = token
        self._timeout_s = timeout_s
        self._ssl = ssl.create_default_context(cafile=str(ca_file))
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self._host, self._port, context=self._ssl, timeout=self._timeout_s)
            self._local.conn = conn
        return conn

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self._token}", "Accept": JSON}
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def raw(self, method: str, path: str, body: Mapping[str, Any] | None = None, content_type: str = JSON) -> tuple[int, bytes]:
        """One request; (status, body). A connection the server closed is opened again once."""
        data = None if body is None else json.dumps(body).encode()
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, path, body=data, headers=self._headers(content_type if data else None))
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (http.client.RemoteDisconnected, http.client.CannotSendRequest, BrokenPipeError, ConnectionResetError):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def call(self, method: str, path: str, body: Mapping[str, Any] | None = None, content_type: str = JSON) -> dict[str, Any]:
        """One JSON request; ApiError on an HTTP error."""
        status, raw = self.raw(method, path, body, content_type)
        try:
            doc = json.loads(raw or b"{}")
        except ValueError:
            doc = {"message": raw.decode(errors="replace")[:500]}
        if status >= 300:
            raise ApiError(status, doc if isinstance(doc, dict) else {"message": str(doc)})
        out: dict[str, Any] = doc
        return out

    def text(self, path: str) -> str:
        """A text answer (``/metrics``); ApiError on an HTTP error."""
        status, raw = self.raw("GET", path)
        if status >= 300:
            raise ApiError(status, {"message": raw.decode(errors="replace")[:500]})
        return raw.decode()

    def watch(self, path: str, resource_version: str) -> Watch:
        """A watch of a collection after ``resource_version``, on a connection of its own."""
        conn = http.client.HTTPSConnection(self._host, self._port, context=self._ssl, timeout=None)
        sep = "&" if "?" in path else "?"
        query = f"{sep}watch=1&allowWatchBookmarks=true&timeoutSeconds=3600&resourceVersion={resource_version}"
        conn.request("GET", path + query, headers=self._headers(None))
        resp = conn.getresponse()
        if resp.status >= 300:
            body = resp.read().decode(errors="replace")[:500]
            conn.close()
            raise ApiError(resp.status, {"message": body})
        return Watch(conn, resp)

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


class Watch:
    """One watch stream: ``events()`` yields ``(type, object)`` until the server ends it or ``close()``."""

    def __init__(self, conn: http.client.HTTPSConnection, resp: http.client.HTTPResponse) -> None:
        self._conn = conn
        self._resp = resp

    def events(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The stream's events; ends quietly when the stream is closed."""
        while True:
            try:
                line = self._resp.readline()
            except (OSError, ValueError, AttributeError, http.client.HTTPException):  # AttributeError: closed meanwhile
                return
            if not line:
                return
            event = json.loads(line)
            yield str(event.get("type", "")), event.get("object") or {}

    def close(self) -> None:
        """End the stream from any thread (a blocked ``events()`` returns)."""
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._conn.close()
