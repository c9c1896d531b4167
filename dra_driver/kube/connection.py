"""One API server connection: a keep-alive pool of ``http.client`` connections, TLS, and the credentials.

Built by ``dra_driver.kube.client.load_api_client`` (from a kubeconfig, the pod's service account,
or the ``kubernetes`` package's loader for what ours does not read); used by
``dra_driver.kube.rest.RestApi``, the one transport of every adapter. Everything per connection is
decided once, when it is built: the TLS context, the proxy (``HTTPS_PROXY``/``NO_PROXY`` read
once, not on every request as the ``kubernetes`` client does), the user agent. Per request there is
only the bearer token, read through a ``TokenSource`` so that a projected service account token,
which the kubelet rotates, is re-read as client-go does (at most once a minute).

The standard library's ``http.client`` does the HTTP (chunked bodies, proxy tunnels); this module
adds the pool: idle connections are reused (a claim lookup on a warm connection costs a quarter of
a millisecond of CPU, about half of what urllib3 costs, and no import of it), a request that meets
a connection the server closed while it sat idle is sent again on a fresh one when it is safe to
(it is idempotent, or it never left), and a connection that failed to connect is tried
``CONNECT_ATTEMPTS`` times. Responses are read by the caller (``Response``); watches stream them.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import select
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dra_driver.core.hostnames import socket_host

USER_AGENT = "dra-gpu"
TOKEN_REREAD_S = 60.0
MAX_TOKEN_BYTES = 64 << 10
"""A service account token is a JWT of a few KiB; a larger file is not one."""
POOL_SIZE = 32
"""Idle connections kept per server: the plugin's claim lookups (16 threads), status writes and publisher."""
CONNECT_ATTEMPTS = 3
MAX_BODY_BYTES = 512 << 20
"""The largest answer read whole: far above a page of any list the driver reads, below what would exhaust a node."""
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
"""Methods sent again when a reused connection turns out closed after the request left (HTTP's rule)."""
TRANSPORT_ERRORS = (OSError, http.client.HTTPException, ValueError)
"""What a request or reading its response may raise (socket errors and timeouts, bad HTTP, bad TLS)."""


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


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds to connect, and to wait for each read (the server's answer, each part of a stream)."""

    connect: float
    read: float


def _proxy_for(server: str) -> str | None:
    """The proxy the environment names for ``server`` (``HTTPS_PROXY``, ``NO_PROXY``), read once.

    ``urllib.request`` (about 2 MiB of a plugin's memory, with what it imports) loads only when the
    environment names a proxy at all: the variables it reads are the ones ending in ``_proxy``.
    """
    if not any(name.lower().endswith("_proxy") for name in os.environ):
        return None
    import urllib.request

    parts = urlsplit(server)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


class _HttpsConnection(http.client.HTTPSConnection):
    """``HTTPSConnection`` whose TLS name may differ from the address it dials (``tls-server-name``)."""

    def __init__(self, host: str, port: int | None, *, context: ssl.SSLContext, timeout: float, server_name: str) -> None:
        super().__init__(host, port, context=context, timeout=timeout)
        self._tls = context  # the base class keeps it too, as a private attribute typeshed does not declare
        self._server_name = server_name
        self._create_connection = _dial  # the base class's hook for dialling (socket.create_connection)

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # TCP, and the proxy's CONNECT tunnel if any
        name = self._server_name or getattr(self, "_tunnel_host", None) or self.host
        self.sock = self._tls.wrap_socket(self.sock, server_hostname=socket_host(name))


def _dial(address: tuple[str, int], *args: Any) -> socket.socket:
    """``socket.create_connection`` with an ASCII host as bytes (``dra_driver.core.hostnames``: no IDNA codec)."""
    return socket.create_connection((socket_host(address[0]), address[1]), *args)  # type: ignore[arg-type]  # typeshed says str; the socket layer takes ASCII bytes too


class Response:
    """A response being read; ``release_conn`` hands its connection back to the pool (or closes it)."""

    def __init__(self, pool: ApiConnection, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._pool = pool
        self._conn = conn
        self._resp = resp
        self._sock = conn.sock
        self.status = resp.status
        self.reason = resp.reason
        self._released = False

    @property
    def data(self) -> bytes:
        """The whole body; a ``ValueError`` past ``MAX_BODY_BYTES`` (the connection is then closed, not reused)."""
        body = self._resp.read(MAX_BODY_BYTES + 1)
        if len(body) > MAX_BODY_BYTES:
            self.close()
            raise ValueError(f"answer from the API server {self._pool.server} is larger than {MAX_BODY_BYTES} bytes")
        return body

    def stream(self, amt: int) -> Iterator[bytes]:
        """The body as it arrives, in pieces of at most ``amt`` bytes (chunked or not; identity encoding is asked for)."""
        while True:
            piece = self._resp.read1(amt)
            if not piece:
                return
            yield piece

    def shutdown(self) -> None:
        """End a read blocked in another thread now (the connection is then closed, never reused)."""
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop reading: the connection is closed, not reused."""
        self._resp.close()
        self._conn.close()

    def release_conn(self) -> None:
        """Back to the pool when the body was read to its end and the server keeps the connection; else closed."""
        if self._released:
            return
        self._released = True
        if self._resp.isclosed() and not self._resp.will_close and self._conn.sock is not None:
            self._pool._put(self._conn)
        else:
            self._resp.close()
            self._conn.close()


class ApiConnection:
    """Requests to one API server over a keep-alive pool; thread safe."""

    def __init__(
        self,
        server: str,
        *,
        ssl_context: ssl.SSLContext | None = None,
        token: TokenSource | None = None,
        tls_server_name: str = "",
        proxy: str | None = None,
        honour_proxy_env: bool = True,
    ) -> None:
        """A pool for ``server`` (``https://host:port``, maybe with a path prefix).

        ``ssl_context`` verifies the server (and carries a client certificate); ``proxy`` overrides
        the environment's; with neither, ``HTTPS_PROXY``/``NO_PROXY`` decide (unless
        ``honour_proxy_env`` is false). An https server is reached through a proxy by a CONNECT
        tunnel, an http one by absolute URLs.
        """
        parts = urlsplit(server)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"API server address {server!r} is not an http(s) URL")
        self.server = server.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._ctx = ssl_context or (ssl.create_default_context() if self._https else None)
        self._server_name = tls_server_name
        self._token = token or TokenSource()
        if proxy is None and honour_proxy_env:
            proxy = _proxy_for(self.server)
        self.proxy = proxy
        self._proxy = urlsplit(proxy if "://" in (proxy or "") else f"http://{proxy}") if proxy else None
        if self._proxy is not None and (self._proxy.scheme != "http" or not self._proxy.hostname):
            raise ValueError(f"proxy {proxy!r} is not supported: only http:// proxies are (CONNECT tunnels for https)")
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        weakref.finalize(self, _close_all, self._idle)  # a pool dropped unclosed leaves no open socket

    def _new(self, timeout: float) -> http.client.HTTPConnection:
        host, port = self._host, self._port
        if self._proxy is not None:
            host, port = self._proxy.hostname or "", self._proxy.port or 80
        if self._ctx is not None:  # https
            conn: http.client.HTTPConnection = _HttpsConnection(
                host, port, context=self._ctx, timeout=timeout, server_name=self._server_name
            )
            if self._proxy is not None:
                conn.set_tunnel(self._host, self._port)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        return conn

    def _get(self) -> http.client.HTTPConnection | None:
        """An idle connection the server has not closed meanwhile (as urllib3 checks), or None."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None or not _dropped(conn):
                return conn
            conn.close()

    def _put(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < POOL_SIZE:
                self._idle.append(conn)
                return
        conn.close()

    def request(
        self, method: str, path_and_query: str, *, body: bytes | None, headers: dict[str, str], timeout: Timeouts
    ) -> Response:
        """Send one request; the response's headers are read, its body not yet, its status unchecked.

        Raises one of ``TRANSPORT_ERRORS`` (a read timeout is a ``TimeoutError`` naming the server).
        """
        all_headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **headers}
        auth = self._token.header()
        if auth:
            all_headers["Authorization"] = auth
        target = self._prefix + path_and_query
        if self._proxy is not None and not self._https:
            target = self.server + path_and_query
        connects = 0
        while True:
            conn = self._get()
            reused = conn is not None
            if conn is None:
                conn = self._new(timeout.connect)
                try:
                    conn.connect()
                except TRANSPORT_ERRORS as err:
                    conn.close()
                    connects += 1
                    if isinstance(err, ssl.SSLError) or connects >= CONNECT_ATTEMPTS:  # a refused certificate stays refused
                        raise self._connect_error(err, timeout.connect, connects) from err
                    time.sleep(0.05 * connects)
                    continue
            sent = False
            try:
                if conn.sock is not None:
                    conn.sock.settimeout(timeout.read)
                conn.request(method, target, body=body, headers=all_headers)
                sent = True
                resp = conn.getresponse()
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine) as err:
                conn.close()
                if reused and (not sent or method in IDEMPOTENT):
                    continue  # the server closed it while it sat idle
                raise ConnectionError(f"{self.server}: {str(err) or type(err).__name__}") from err
            except TimeoutError as err:
                conn.close()
                raise TimeoutError(f"no answer from the API server at {self.server} within {timeout.read:g}s") from err
            except BaseException:
                conn.close()
                raise
            return Response(self, conn, resp)

    def _connect_error(self, err: BaseException, connect_s: float, tries: int) -> Exception:
        """``err`` from the last of ``tries`` to connect, as an error of its kind that names the server."""
        if isinstance(err, TimeoutError):
            each = f"{tries} tries of {connect_s:g}s" if tries > 1 else f"{connect_s:g}s"
            return TimeoutError(f"could not connect to the API server at {self.server} within {each}")
        what = str(err) or type(err).__name__
        if isinstance(err, ssl.SSLError):
            return ssl.SSLError(f"TLS with the API server at {self.server} failed: {what}")
        if isinstance(err, OSError):
            return ConnectionError(f"could not connect to the API server at {self.server}: {what}")
        return ValueError(f"could not connect to the API server at {self.server}: {what}")

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            _close_all(self._idle)


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """The idle connection is closed, or the server closed (or wrote to) it while it sat idle."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))  # readable while idle: end of stream, a TLS close, or stray bytes
    except (OSError, ValueError):
        return True


def _close_all(conns: list[http.client.HTTPConnection]) -> None:
    while conns:
        conns.pop().close()
