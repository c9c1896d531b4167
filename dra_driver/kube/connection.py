"""One API server connection: a urllib3 pool, TLS, and the credentials to send with each request.

Built by ``dra_driver.kube.client.load_api_client`` (from a kubeconfig, the pod's service account,
or the ``kubernetes`` package's loader for what ours does not read); used by
``dra_driver.kube.rest.RestApi``, the one transport of every adapter. Everything per connection is
decided once, when it is built: the TLS context, the proxy (``HTTPS_PROXY``/``NO_PROXY`` read
once, not on every request as the ``kubernetes`` client does), the user agent. Per request there is
only the bearer token, read through a ``TokenSource`` so that a projected service account token,
which the kubelet rotates, is re-read as client-go does (at most once a minute).
"""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import urllib3

USER_AGENT = "dra-gpu"
TOKEN_REREAD_S = 60.0
MAX_TOKEN_BYTES = 64 << 10
"""A service account token is a JWT of a few KiB; a larger file is not one."""
POOL_SIZE = 32
"""Connections kept per server: the plugin's claim lookups (16 threads), status writes and publisher."""
RETRIES = urllib3.Retry(total=3, connect=3, read=1, redirect=0, status=0, other=0, raise_on_status=False)
"""Retry what never reached the server; a read error only for idempotent methods (urllib3's rule)."""


class TokenSource:
    """A bearer token: fixed, or a file re-read at most every ``TOKEN_REREAD_S`` (rotated tokens)."""

    def __init__(self, *, token: str = "", path: Path | None = None, refresh: Callable[[], str] | None = None) -> None:
        self._token = token.strip()
        self._path = path
        self._refresh = refresh
        self._read_at = float("-inf")
        self._lock = threading.Lock()
        if path is not None:
            self._token = self._read(path)  # an unreadable token file fails at start-up, not on the first call
            self._read_at = time.monotonic()

    @staticmethod
    def _read(path: Path) -> str:
        with path.open("rb") as f:
            raw = f.read(MAX_TOKEN_BYTES + 1)
        if len(raw) > MAX_TOKEN_BYTES:
            raise ValueError(f"token file {path} is over {MAX_TOKEN_BYTES} bytes: not a token")
        return raw.decode().strip()

    def header(self) -> str | None:
        """The ``Authorization`` header's value, or None when there is no token."""
        if self._refresh is not None:  # the kubernetes package's loader (exec plugins, auth providers)
            value = self._refresh()
            return value or None
        if self._path is not None and time.monotonic() - self._read_at >= TOKEN_REREAD_S:
            with self._lock:
                if time.monotonic() - self._read_at >= TOKEN_REREAD_S:
                    # unreadable: keep the token read last; the API server says if it expired
                    with contextlib.suppress(OSError, ValueError, UnicodeDecodeError):
                        self._token = self._read(self._path)
                    self._read_at = time.monotonic()
        return f"Bearer {self._token}" if self._token else None


def _proxy_for(server: str) -> str | None:
    """The proxy the environment names for ``server`` (``HTTPS_PROXY``, ``NO_PROXY``), read once."""
    parts = urlsplit(server)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


class ApiConnection:
    """Requests to one API server over a keep-alive pool; thread safe (urllib3's pool is)."""

    def __init__(
        self,
        server: str,
        *,
        ssl_context: Any = None,
        token: TokenSource | None = None,
        tls_server_name: str = "",
        proxy: str | None = None,
        honour_proxy_env: bool = True,
    ) -> None:
        """A pool for ``server`` (``https://host:port``, maybe with a path prefix).

        ``ssl_context`` verifies the server (and carries a client certificate); ``proxy`` overrides
        the environment's; with neither, ``HTTPS_PROXY``/``NO_PROXY`` decide (unless
        ``honour_proxy_env`` is false).
        """
        parts = urlsplit(server)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"API server address {server!r} is not an http(s) URL")
        self.server = server.rstrip("/")
        self._token = token or TokenSource()
        kw: dict[str, Any] = {"maxsize": POOL_SIZE, "block": False, "retries": RETRIES}
        if parts.scheme == "https":
            kw["ssl_context"] = ssl_context
            if tls_server_name:
                kw["server_hostname"] = tls_server_name
                kw["assert_hostname"] = tls_server_name
        if proxy is None and honour_proxy_env:
            proxy = _proxy_for(self.server)
        self._pool: urllib3.PoolManager = urllib3.ProxyManager(proxy, **kw) if proxy else urllib3.PoolManager(**kw)
        self.proxy = proxy

    def request(
        self,
        method: str,
        path_and_query: str,
        *,
        body: bytes | None,
        headers: dict[str, str],
        timeout: urllib3.Timeout,
    ) -> urllib3.BaseHTTPResponse:
        """Send one request; the response is not read yet (``preload_content=False``), its status unchecked."""
        all_headers = {"User-Agent": USER_AGENT, **headers}
        auth = self._token.header()
        if auth:
            all_headers["Authorization"] = auth
        return self._pool.urlopen(
            method,
            self.server + path_and_query,
            body=body,
            headers=all_headers,
            timeout=timeout,
            preload_content=False,
            redirect=False,
            assert_same_host=False,
        )

    def close(self) -> None:
        """Close every pooled connection."""
        self._pool.clear()
