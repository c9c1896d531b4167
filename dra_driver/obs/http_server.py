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
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import resource
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from http import HTTPStatus
from typing import Final, Protocol, TypeVar

import h11
import structlog

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
READ_SIZE: Final = 64 * 1024
LINGER_S: Final = 2.0
LINGER_BYTES: Final = 1 << 20
"""After a refusal, what the server still reads and drops so that the client can read the answer."""
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


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds of one listener (see the module docstring)."""

    max_connections: int = 64
    request_timeout_s: float = 10.0
    handshake_timeout_s: float = 5.0
    idle_timeout_s: float = 30.0
    write_timeout_s: float = 10.0
    max_header_bytes: int = 16 * 1024
    max_body_bytes: int = 0
    large_body_bytes: int = 64 * 1024
    large_body_slots: int = 1
    workers: int = 2
    work_budget: int = 0
    """With a ``cost`` hook: the most cost of requests being worked on at once."""


class Headers(Mapping[str, str]):
    """A request's headers: names case-insensitive, repeated fields joined with ``, ``."""

    __slots__ = ("_fields",)

    def __init__(self, fields: Mapping[str, str]) -> None:
        self._fields = {k.lower(): v for k, v in fields.items()}

    @classmethod
    def from_h11(cls, raw: list[tuple[bytes, bytes]]) -> Headers:
        """From h11's (lower-case name, value) pairs."""
        fields: dict[str, str] = {}
        for name, value in raw:
            key, text = name.decode("latin-1"), value.decode("latin-1")
            fields[key] = f"{fields[key]}, {text}" if key in fields else text
        return cls(fields)

    def __getitem__(self, name: str) -> str:
        return self._fields[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


@dataclass(frozen=True, slots=True)
class RequestHead:
    """What is known of a request before its body is read."""

    method: str
    target: str
    headers: Headers
    client: str

    @property
    def path(self) -> str:
        """The target without its query."""
        return self.target.split("?", 1)[0]

    @property
    def query(self) -> str:
        """The query string (after ``?``), or ""."""
        return self.target.partition("?")[2]


@dataclass(frozen=True, slots=True)
class Request:
    """A whole request: its head and its body."""

    head: RequestHead
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Response:
    """An answer; ``close`` ends the connection after it."""

    status: int
    body: bytes = b""
    content_type: str | None = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()
    close: bool = False


def text(status: int, message: str, *, close: bool = False, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    """A plain-text answer of one line."""
    return Response(status, (message + "\n").encode(), headers=headers, close=close)


class Handler(Protocol):
    """What a server serves."""

    def check(self, head: RequestHead) -> Response | None:
        """A refusal before the body is read (run on the event loop: quick, no I/O), or None to read it and ``handle``."""
        ...

    def handle(self, request: Request) -> Response:
        """The answer (run in the worker pool; an exception is a 500, logged)."""
        ...


Authorize = Callable[[Headers], bool]
TlsSource = ssl.SSLContext | Callable[[], ssl.SSLContext]
"""A context, or what returns the context for each new connection (a rotated certificate)."""


class _Phase(enum.IntEnum):
    HANDSHAKE = 0
    IDLE = 1
    READING = 2
    WORKING = 3
    WRITING = 4


_EVICTABLE: Final = (_Phase.IDLE, _Phase.HANDSHAKE, _Phase.READING)
"""In eviction order: idle first, then whoever has not finished sending (oldest first)."""


@dataclass(eq=False, slots=True)
class _Conn:
    writer: asyncio.StreamWriter
    phase: _Phase
    since: float

    def enter(self, phase: _Phase) -> None:
        self.phase, self.since = phase, time.monotonic()


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


class _Close(Exception):
    def __init__(self, answer: Response | None = None) -> None:
        super().__init__()
        self.answer = answer


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
        limits: Limits = Limits(),
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
        self._conns: set[_Conn] = set()
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
            if conn.phase in _EVICTABLE:
                conn.writer.transport.abort()
        deadline = time.monotonic() + grace_s
        while self._conns and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self._conns):
            conn.writer.transport.abort()
        await asyncio.sleep(0)
        self._loop.stop()

    # -- admission ----------------------------------------------------------------------------

    def _admit(self, new: _Conn) -> bool:
        """Make room for ``new`` (evicting the least advanced connection) or say no."""
        self.stats.accepted += 1
        if len(self._conns) >= self.max_connections:
            victim = min(
                (c for c in self._conns if c.phase in _EVICTABLE),
                key=lambda c: (_EVICTABLE.index(c.phase) > 0, c.since),
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
        conn = _Conn(writer, _Phase.HANDSHAKE if self._tls is not None else _Phase.READING, time.monotonic())
        if not self._admit(conn):
            writer.transport.abort()
            return
        try:
            if self._tls is not None:
                context = self._tls if isinstance(self._tls, ssl.SSLContext) else self._tls()
                await writer.start_tls(context, ssl_handshake_timeout=self.limits.handshake_timeout_s)
                conn.enter(_Phase.READING)
            await _Session(self, conn, reader, client).run()
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


class _Session:
    """One connection's requests, one after another (HTTP/1.1 keep-alive; no pipelining in parallel)."""

    def __init__(self, server: HttpServer, conn: _Conn, reader: asyncio.StreamReader, client: str) -> None:
        self.server, self.limits = server, server.limits
        self.conn, self.reader, self.writer, self.client = conn, reader, conn.writer, client
        self.h = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_header_bytes)
        self.loop = asyncio.get_running_loop()
        self.deadline = self.loop.time() + self.limits.request_timeout_s  # the first request: from the connection's start
        self.holds_large = False
        self.method = ""

    async def run(self) -> None:
        """Answer requests until the client or an answer closes the connection."""
        try:
            await self._requests()
        finally:
            self._release_large()

    async def _requests(self) -> None:
        h = self.h
        while True:
            try:
                served = await self._one_request()
            except _Close as close:
                if close.answer is not None and h.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await self._send(replace(close.answer, close=True), head_only=self.method == "HEAD")
                    await self._linger()
                return
            except h11.RemoteProtocolError as err:
                if h.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    answer = text(err.error_status_hint, f"bad request: {err}", close=True)
                    await self._send(answer, head_only=self.method == "HEAD")
                    await self._linger()
                return
            if not served or h.our_state is not h11.DONE or h.their_state is not h11.DONE:
                return
            h.start_next_cycle()
            self.conn.enter(_Phase.IDLE)
            self.deadline = self.loop.time() + self.limits.idle_timeout_s

    async def _event(self) -> object:
        """The next h11 event, reading (by the deadline) while it needs data; a first byte starts the request clock."""
        h = self.h
        while True:
            event = h.next_event()
            if event is not h11.NEED_DATA:
                return event
            try:
                async with asyncio.timeout_at(self.deadline):
                    data = await self.reader.read(READ_SIZE)
            except TimeoutError:
                self.server.stats.timed_out += 1
                started = h.their_state is h11.SEND_BODY or bool(h.trailing_data[0])
                late = text(HTTPStatus.REQUEST_TIMEOUT, "request not received in time", close=True)
                raise _Close(late if started else None) from None
            if self.conn.phase is _Phase.IDLE and data:
                self.conn.enter(_Phase.READING)
                self.deadline = self.loop.time() + self.limits.request_timeout_s
            h.receive_data(data)

    async def _one_request(self) -> bool:
        """Read one request and answer it; False when the client closed before sending one."""
        event = await self._event()
        if isinstance(event, h11.ConnectionClosed):
            return False
        if not isinstance(event, h11.Request):
            raise _Close
        server = self.server
        server.stats.requests += 1
        self.method = event.method.decode("latin-1")
        if event.http_version not in (b"1.0", b"1.1"):
            raise _Close(text(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, "HTTP/1.1 only"))
        size = len(event.method) + len(event.target) + sum(len(n) + len(v) + 4 for n, v in event.headers)
        if size > self.limits.max_header_bytes:  # h11 bounds a head that arrives in parts; this, one that came whole
            raise _Close(
                text(
                    HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                    f"request line and headers over {self.limits.max_header_bytes} bytes",
                )
            )
        headers = Headers.from_h11(list(event.headers))
        head = RequestHead(event.method.decode("latin-1"), event.target.decode("latin-1"), headers, self.client)
        if "transfer-encoding" in headers and "content-length" in headers:
            raise _Close(text(HTTPStatus.BAD_REQUEST, "both Transfer-Encoding and Content-Length: ambiguous framing"))
        if server.authorize is not None and not await server.run(_safe_authorize, server.authorize, headers):
            raise _Close(text(HTTPStatus.UNAUTHORIZED, "unauthorized", headers=(("WWW-Authenticate", server.challenge),)))
        refusal = server.handler.check(head)
        if refusal is not None:
            if "transfer-encoding" in headers or headers.get("content-length", "0") != "0":
                raise _Close(refusal)  # its body stays unread: the connection cannot carry another request
            await self._answer(head, refusal)
            return True
        await self._work(Request(head, await self._body(headers)))
        return True

    async def _body(self, headers: Headers) -> bytes:
        """The body, read by the request's deadline within the limits (a large one takes a large-body slot)."""
        limit = self.limits.max_body_bytes
        too_large = text(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body larger than {limit} bytes")
        length = int(headers["content-length"]) if "content-length" in headers else None  # h11 checked its digits
        if length is not None and length > limit:
            raise _Close(too_large)
        if length is not None and length > self.limits.large_body_bytes:
            await self._take_large()
        if self.h.they_are_waiting_for_100_continue:
            self.writer.write(self.h.send(h11.InformationalResponse(status_code=100, headers=[])) or b"")
        buf = bytearray()
        while not isinstance(event := await self._event(), h11.EndOfMessage):
            if not isinstance(event, h11.Data):
                raise _Close
            buf += event.data
            if len(buf) > limit:
                raise _Close(too_large)
            if len(buf) > self.limits.large_body_bytes:
                await self._take_large()
        return bytes(buf)

    async def _take_large(self) -> None:
        if self.holds_large:
            return
        try:
            async with asyncio.timeout_at(self.deadline):
                await self.server.large_slots.acquire()
        except TimeoutError:
            self.server.stats.timed_out += 1
            raise _Close(text(HTTPStatus.SERVICE_UNAVAILABLE, "busy with other large requests; retry")) from None
        self.holds_large = True

    def _release_large(self) -> None:
        if self.holds_large:
            self.holds_large = False
            self.server.large_slots.release()

    async def _work(self, request: Request) -> None:
        """Run the handler in the pool (within the work budget), then send its answer."""
        server = self.server
        self.conn.enter(_Phase.WORKING)
        cost = 0
        try:
            if server.cost is not None:
                cost = await self._take_cost(server.cost(request))
            answer = await server.run(_safe_handle, server.handler, request, server.name)
        finally:
            if cost:
                server.budget.release(cost)
            self._release_large()
        await self._answer(request.head, answer)

    async def _take_cost(self, cost: int) -> int:
        """Wait until ``cost`` fits the work budget and take it; _Close with 413 or 503 when it cannot."""
        budget = self.server.budget
        cost = max(0, cost)
        if cost > budget.total:
            refusal = f"request costs {cost}, more than this server's budget of {budget.total}"
            raise _Close(text(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, refusal))
        try:
            async with asyncio.timeout(self.limits.request_timeout_s):
                await budget.acquire(cost)
        except TimeoutError:
            raise _Close(text(HTTPStatus.SERVICE_UNAVAILABLE, "busy; retry")) from None
        return cost

    async def _answer(self, head: RequestHead, answer: Response) -> None:
        await self._send(answer, head_only=head.method == "HEAD")
        if answer.close:
            raise _Close

    async def _send(self, answer: Response, *, head_only: bool) -> None:
        self.conn.enter(_Phase.WRITING)
        h = self.h
        fields = list(answer.headers)
        if answer.content_type is not None:
            fields.append(("Content-Type", answer.content_type))
        fields.append(("Content-Length", str(len(answer.body))))
        if answer.close:
            fields.append(("Connection", "close"))
        reason = HTTPStatus(answer.status).phrase if answer.status in _KNOWN_STATUSES else ""
        data = h.send(h11.Response(status_code=answer.status, headers=fields, reason=reason)) or b""
        if answer.body and not head_only:
            data += h.send(h11.Data(data=answer.body)) or b""
        data += h.send(h11.EndOfMessage()) or b""
        self.writer.write(data)
        async with asyncio.timeout(self.limits.write_timeout_s):
            await self.writer.drain()

    async def _linger(self) -> None:
        """After a refusal: end the stream, then read and drop what the client still sends, briefly.

        Closing a socket with unread input resets it, and the client may lose the answer before
        reading it; this gives the answer time to be read. Plain TCP: a FIN (the client sees the
        end and closes), then reading until the client closes. TLS: a close_notify, waiting for
        the client's. Bounded by ``LINGER_S`` and ``LINGER_BYTES``; the connection may be evicted
        meanwhile.
        """
        self.conn.enter(_Phase.IDLE)
        dropped = 0
        with contextlib.suppress(TimeoutError, OSError, ssl.SSLError):
            async with asyncio.timeout(LINGER_S):
                if not self.writer.can_write_eof():  # TLS: no half-close
                    self.writer.close()
                    await self.writer.wait_closed()
                    return
                self.writer.write_eof()
                while dropped < LINGER_BYTES and (data := await self.reader.read(READ_SIZE)):
                    dropped += len(data)


_KNOWN_STATUSES: Final = frozenset(s.value for s in HTTPStatus)


def _safe_authorize(authorize: Authorize, headers: Headers) -> bool:
    try:
        return bool(authorize(headers))
    except Exception:
        log.exception("http_authorize_failed")
        return False


def _safe_handle(handler: Handler, request: Request, server: str) -> Response:
    try:
        return handler.handle(request)
    except Exception:
        log.exception("http_handler_crashed", server=server, path=request.head.path)
        return text(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error; see the log", close=True)


def _bind(host: str, port: int) -> socket.socket:
    """A listening-ready socket on ``host:port`` (``::`` is every address, IPv4 too); OSError if it cannot be."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
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
