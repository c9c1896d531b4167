"""The one HTTP/1.1 server of every dra-gpu listener, bounded in connections, time, memory and threads.

Used by ``dra_driver.obs.metrics.serve_metrics`` (the /metrics of the kubelet plugin, the
controller and the webhook) and ``webhook.server`` (the admission webhook's HTTPS). One event
loop thread per server (asyncio) holds every connection; h11 parses the HTTP framing (request
line, headers, Content-Length and chunked bodies); a handler's work runs in a small thread pool
(``Limits.workers``), never a thread per connection. What a client can hold:

* Connections: at most ``Limits.max_connections``. A new connection beyond it takes the place of
  the one that has made the least progress (idle between requests first, then the oldest still
  in its TLS handshake or still sending its request); when every connection is being answered,
  the new one is closed at once. Slow or idle clients thus cannot lock out a real one, and the
  process never holds more descriptors or memory for connections than the cap allows.
* Time: the TLS handshake has ``handshake_timeout_s``; a request, headers and body together, has
  ``request_timeout_s`` from its first byte (a new connection's first request: from the
  connection's start), however slowly it trickles in; a kept-alive connection waits
  ``idle_timeout_s`` for its next request; an answer must be taken within ``write_timeout_s``.
* Memory: a request line and headers of at most ``max_header_bytes`` (431 beyond); a body of at
  most ``max_body_bytes``, refused with 413 from its Content-Length before any of it is read, or
  as soon as a chunked body passes it; never more than that is buffered. A body larger than
  ``large_body_bytes`` is read only while it holds one of ``large_body_slots`` (until its answer
  is sent), so only that many large bodies are in memory at once. Optionally each request has a
  ``cost`` (the webhook: the memory its JSON takes to parse), and requests run only while their
  costs add up to at most ``work_budget``; one costing more alone is refused with 413.
* Before a body is read: ``authorize(headers)`` (401 when it says no, run in the pool) and the
  handler's ``check`` (a refusal such as 404, 405 or 415). A refused body is never read; its
  connection is closed.

The descriptor rule (why a metrics flood cannot take the descriptors that matter): the daemons
raise their soft ``RLIMIT_NOFILE`` to the hard limit at start (``dra_driver.appkit.daemon``).
``FD_RESERVE`` descriptors are kept for the work that matters (the DRA and registration
sockets and their gRPC connections, the health port, the API server's connections, the
checkpoint and CDI files, NVML's device files, MPS pipes, logs). What is left is shared by at
most ``LISTENERS_PER_PROCESS`` listeners (the webhook has two: HTTPS and metrics); each uses at
most its connection cap plus ``ACCEPT_BACKLOG`` sockets accepted and not yet closed plus
``LOOP_FDS`` of its own. ``fd_bounded_connections`` lowers a wanted cap to fit:
``cap <= (soft - FD_RESERVE) // LISTENERS_PER_PROCESS - ACCEPT_BACKLOG - LOOP_FDS``. With the
containerd default of 1,024 that is 316 per listener, above every default cap, so the caps
below are what bind; a lower limit lowers them.

The request and answer types and ``Limits`` are in ``dra_driver.obs.http_types``; one
connection's requests are served by ``dra_driver.obs.http_session``.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final, TypeVar

import structlog

from dra_driver.core.hostnames import socket_host
from dra_driver.obs.http_session import EVICTABLE, Conn, Phase, Session
from dra_driver.obs.http_types import Authorize, Handler, Limits, Request, TlsSource

log = structlog.get_logger(__name__)
_T = TypeVar("_T")

FD_RESERVE: Final = 256
"""Descriptors no listener may use: what the daemon's real work needs, with room to spare."""
LISTENERS_PER_PROCESS: Final = 2
"""The most HTTP listeners one daemon runs (the webhook: HTTPS and metrics)."""
ACCEPT_BACKLOG: Final = 64
"""The listen backlog, and so the most sockets one accept round holds before they are admitted or closed."""
LOOP_FDS: Final = 4
"""A listener's own descriptors: its socket, the event loop's epoll and its wake-up pair."""
DEFAULT_LIMITS: Final = Limits()
"""The bounds of a server given none."""
WARN_EVERY_S: Final = 30.0
"""A full server logs ``http_connections_full`` at most this often (with counts), not once per connection."""


def nofile_limit() -> int:
    """The soft limit of open files of this process."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def fd_bounded_connections(wanted: int, soft_limit: int | None = None) -> int:
    """``wanted`` lowered so that every listener at its cap leaves ``FD_RESERVE`` descriptors free (at least 1)."""
    soft = nofile_limit() if soft_limit is None else soft_limit
    if soft == resource.RLIM_INFINITY:
        return wanted
    share = (soft - FD_RESERVE) // LISTENERS_PER_PROCESS - ACCEPT_BACKLOG - LOOP_FDS
    return max(1, min(wanted, share))


@dataclass(slots=True)
class ServerStats:
    """Counts since the server started (read from any thread)."""

    open: int = 0
    peak_open: int = 0
    accepted: int = 0
    evicted: int = 0
    refused: int = 0
    timed_out: int = 0
    requests: int = 0


class _Budget:
    """Cost units handed out while they add up to at most ``total`` (asyncio, one loop)."""

    def __init__(self, total: int) -> None:
        self.total, self.used = total, 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    async def acquire(self, cost: int) -> None:
        if self.used + cost <= self.total and not self._waiters:
            self.used += cost
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (cost, fut)
        self._waiters.append(entry)
        try:
            await fut
        except BaseException:
            if entry in self._waiters:
                self._waiters.remove(entry)
            elif fut.done() and not fut.cancelled():
                self.release(cost)  # granted as it was given up
            raise

    def release(self, cost: int) -> None:
        self.used -= cost
        for entry in list(self._waiters):
            need, fut = entry
            if self.used + need <= self.total:
                self._waiters.remove(entry)
                self.used += need
                fut.set_result(None)


class HttpServer:
    """One listener: bound at construction (OSError if it cannot be), serving from ``start`` until ``stop``."""

    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        handler: Handler,
        limits: Limits = DEFAULT_LIMITS,
        *,
        tls: TlsSource | None = None,
        authorize: Authorize | None = None,
        cost: Callable[[Request], int] | None = None,
        challenge: str = "Bearer",
    ) -> None:
        """Bind ``host:port`` (0: any free port); ``tls``: serve HTTPS; ``challenge``: the 401's WWW-Authenticate scheme."""
        self.name = name
        self.handler = handler
        self.limits = limits
        self.max_connections = fd_bounded_connections(limits.max_connections)
        self.stats = ServerStats()
        self._tls = tls
        self.authorize = authorize
        self.cost = cost
        self.challenge = challenge
        self.large_slots = asyncio.Semaphore(limits.large_body_slots)
        self.budget = _Budget(limits.work_budget)
        self._sock = _bind(host, port)
        self.port = int(self._sock.getsockname()[1])
        self._loop = asyncio.new_event_loop()
        self._pool = ThreadPoolExecutor(max_workers=limits.workers, thread_name_prefix=f"{name}-work")
        self._conns: set[Conn] = set()
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._ready = threading.Event()
        self._state_lock = threading.Lock()
        self._state = "new"
        self._warned = 0.0
        self._unwarned = (0, 0)

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> HttpServer:
        """Serve from a daemon thread named after the server; returns self."""
        self._thread = threading.Thread(target=self.serve_forever, name=f"{self.name}-http", daemon=True)
        self._thread.start()
        self._ready.wait(10.0)
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until ``stop`` (at once if ``stop`` came first)."""
        with self._state_lock:
            if self._state != "new":
                return
            self._state = "serving"
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._open())
            self._ready.set()
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()
            self._ready.set()
            self._stopped.set()

    async def _open(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, sock=self._sock, backlog=ACCEPT_BACKLOG, limit=self.limits.max_header_bytes
        )

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, let answers being worked on finish (up to ``grace_s``), close everything; waits."""
        with self._state_lock:
            state, self._state = self._state, "stopped"
        if state == "new":  # never served
            self._sock.close()
            self._pool.shutdown(wait=False)
            self._loop.close()
            self._stopped.set()
            return
        if state == "serving":
            self._ready.wait(10.0)
            with contextlib.suppress(RuntimeError):  # the loop ended meanwhile
                asyncio.run_coroutine_threadsafe(self._drain(grace_s), self._loop)
        self._stopped.wait(grace_s + 5.0)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    async def _drain(self, grace_s: float) -> None:
        if self._server is not None:
            self._server.close()
        self._sock.close()
        for conn in list(self._conns):
            if conn.phase in EVICTABLE:
                conn.writer.transport.abort()
        deadline = time.monotonic() + grace_s
        while self._conns and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self._conns):
            conn.writer.transport.abort()
        await asyncio.sleep(0)
        self._loop.stop()

    # -- admission ----------------------------------------------------------------------------

    def _admit(self, new: Conn) -> bool:
        """Make room for ``new`` (evicting the least advanced connection) or say no."""
        self.stats.accepted += 1
        if len(self._conns) >= self.max_connections:
            victim = min(
                (c for c in self._conns if c.phase in EVICTABLE),
                key=lambda c: (EVICTABLE.index(c.phase) > 0, c.since),
                default=None,
            )
            if victim is None:
                self.stats.refused += 1
                self._note_full()
                return False
            self._conns.discard(victim)
            victim.writer.transport.abort()
            self.stats.evicted += 1
            self._note_full()
        self._conns.add(new)
        self.stats.open = len(self._conns)
        self.stats.peak_open = max(self.stats.peak_open, self.stats.open)
        return True

    def _note_full(self) -> None:
        now = time.monotonic()
        if now - self._warned >= WARN_EVERY_S:
            evicted, refused = self.stats.evicted - self._unwarned[0], self.stats.refused - self._unwarned[1]
            log.warning(
                "http_connections_full",
                server=self.name,
                max_connections=self.max_connections,
                evicted=evicted,
                refused=refused,
                effect="the least advanced connection is closed for each new one",
            )
            self._warned, self._unwarned = now, (self.stats.evicted, self.stats.refused)

    # -- one connection -----------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        conn = Conn(writer, Phase.HANDSHAKE if self._tls is not None else Phase.READING, time.monotonic())
        if not self._admit(conn):
            writer.transport.abort()
            return
        try:
            if self._tls is not None:
                context = self._tls if isinstance(self._tls, ssl.SSLContext) else self._tls()
                await writer.start_tls(context, ssl_handshake_timeout=self.limits.handshake_timeout_s)
                conn.enter(Phase.READING)
            await Session(self, conn, reader, client).run()
        except (OSError, ssl.SSLError, EOFError, asyncio.IncompleteReadError) as err:
            log.debug("http_connection_ended", server=self.name, client=client, error=f"{type(err).__name__}: {err}")
        except TimeoutError:
            self.stats.timed_out += 1
            log.debug("http_connection_timed_out", server=self.name, client=client, phase=conn.phase.name.lower())
        except Exception:
            log.exception("http_connection_failed", server=self.name, client=client)
        finally:
            self._conns.discard(conn)
            self.stats.open = len(self._conns)
            writer.transport.abort()

    async def run(self, fn: Callable[..., _T], *args: object) -> _T:
        """``fn(*args)`` in the worker pool."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)


def _bind(host: str, port: int) -> socket.socket:
    """A listening-ready socket on ``host:port`` (``::`` is every address, IPv4 too); OSError if it cannot be."""
    infos = socket.getaddrinfo(socket_host(host), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.listen(ACCEPT_BACKLOG)  # connections queue from now on, before the loop runs
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock
