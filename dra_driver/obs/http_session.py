"""One connection of the bounded HTTP server: its requests read, checked, worked on and answered in turn.

Run by ``dra_driver.obs.http_server.HttpServer`` for each admitted connection (after its TLS
handshake): h11 parses the framing; the head is bounded, authorized and checked before the body
is read; the body is bounded (a large one holds a large-body slot); the handler runs in the
server's pool within its work budget; a refusal is answered, then the connection lingers briefly
so the client can read it. The phases here are what the server's eviction reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import ssl
import time
from dataclasses import dataclass, replace
from http import HTTPStatus
from typing import TYPE_CHECKING, Final

import h11
import structlog

from dra_driver.obs.http_types import Authorize, Handler, Headers, Request, RequestHead, Response, text

if TYPE_CHECKING:
    from dra_driver.obs.http_server import HttpServer

log = structlog.get_logger(__name__)

READ_SIZE: Final = 64 * 1024
LINGER_S: Final = 2.0
LINGER_BYTES: Final = 1 << 20
"""After a refusal, what the server still reads and drops so that the client can read the answer."""


class Phase(enum.IntEnum):
    """Where a connection is in its request; what eviction reads."""

    HANDSHAKE = 0
    IDLE = 1
    READING = 2
    WORKING = 3
    WRITING = 4


EVICTABLE: Final = (Phase.IDLE, Phase.HANDSHAKE, Phase.READING)
"""In eviction order: idle first, then whoever has not finished sending (oldest first)."""


@dataclass(eq=False, slots=True)
class Conn:
    """An admitted connection: its writer, its phase and since when."""

    writer: asyncio.StreamWriter
    phase: Phase
    since: float

    def enter(self, phase: Phase) -> None:
        """Move to ``phase`` now."""
        self.phase, self.since = phase, time.monotonic()


class _Close(Exception):
    def __init__(self, answer: Response | None = None) -> None:
        super().__init__()
        self.answer = answer


class Session:
    """One connection's requests, one after another (HTTP/1.1 keep-alive; no pipelining in parallel)."""

    def __init__(self, server: HttpServer, conn: Conn, reader: asyncio.StreamReader, client: str) -> None:
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
            self.conn.enter(Phase.IDLE)
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
            if self.conn.phase is Phase.IDLE and data:
                self.conn.enter(Phase.READING)
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
        self.conn.enter(Phase.WORKING)
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
        self.conn.enter(Phase.WRITING)
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
        self.conn.enter(Phase.IDLE)
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
