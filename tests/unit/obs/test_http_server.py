"""The bounded HTTP server (dra_driver.obs.http_server) over real loopback sockets, in-process.

Each bound is shown by a client that breaks it: more connections than the cap, a request
trickled in past its deadline, a TLS client that never says hello, bodies over the limit
(by Content-Length and chunked), header floods, ambiguous framing, handlers that block, the
authorize hook saying no, requests over the work budget. After each, a good request is
still answered.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from dra_driver.obs.http_server import (
    ACCEPT_BACKLOG,
    FD_RESERVE,
    LISTENERS_PER_PROCESS,
    LOOP_FDS,
    HttpServer,
    fd_bounded_connections,
)
from dra_driver.obs.http_types import Headers, Limits, Request, RequestHead, Response
from testkit.webhookcerts import make_certs

FAST = Limits(
    max_connections=8,
    request_timeout_s=0.6,
    handshake_timeout_s=0.6,
    idle_timeout_s=0.6,
    write_timeout_s=2.0,
    max_header_bytes=4096,
    max_body_bytes=1000,
    large_body_bytes=100,
    large_body_slots=1,
    workers=2,
)


class Echo:
    """Answers with the body's length; ``/slow`` waits for ``release``; counts what runs at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.threads: set[str] = set()
        self.bodies: list[int] = []

    def check(self, head: RequestHead) -> Response | None:
        return Response(404, b"no\n") if head.path == "/missing" else None

    def handle(self, request: Request) -> Response:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.threads.add(threading.current_thread().name)
            self.bodies.append(len(request.body))
        try:
            if request.head.path == "/slow":
                self.release.wait(10)
            if request.head.path == "/crash":
                raise RuntimeError("bug")
            return Response(200, f"{len(request.body)}\n".encode())
        finally:
            with self.lock:
                self.running -= 1


@pytest.fixture
def app() -> Echo:
    return Echo()


def serve(app: Echo, limits: Limits = FAST, **kwargs: object) -> HttpServer:
    return HttpServer("test", "127.0.0.1", 0, app, limits, **kwargs).start()  # type: ignore[arg-type]


@pytest.fixture
def server(app: Echo) -> Iterator[HttpServer]:
    srv = serve(app)
    yield srv
    app.release.set()
    srv.stop(grace_s=1.0)


def exchange(port: int, payload: bytes, *, timeout: float = 5.0) -> bytes:
    """Send ``payload``, read until the server closes or stops answering."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError):
            pass
        return b"".join(chunks)


def get(port: int, path: str = "/", extra: str = "") -> bytes:
    return exchange(port, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n".encode())


def wait_running(app: Echo, count: int) -> None:
    """Until ``count`` handlers run (or 10 s), then a moment more for any that should not start."""
    deadline = time.monotonic() + 10
    while app.running < count and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def test_idle_connections_beyond_the_cap_take_no_thread_and_a_real_request_still_gets_in(
    server: HttpServer,
) -> None:
    threads = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(60)]
    try:
        time.sleep(0.2)
        assert server.stats.open <= server.max_connections == 8
        assert threading.active_count() <= threads + 2  # at most the pool's threads, started on demand
        assert 200 == status(get(server.port))  # the least advanced idle connection made room
        assert server.stats.evicted > 0
    finally:
        for s in idle:
            s.close()


def test_when_every_connection_is_being_answered_a_new_one_is_closed_not_queued(app: Echo) -> None:
    srv = serve(app, Limits(max_connections=2, workers=2, request_timeout_s=5))
    try:
        busy = [socket.create_connection(("127.0.0.1", srv.port), timeout=5) for _ in range(2)]
        for s in busy:
            s.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        while app.running < 2:
            time.sleep(0.01)
        assert b"" == get(srv.port)  # closed at once
        assert srv.stats.refused >= 1
        app.release.set()
        for s in busy:
            assert s.recv(100).startswith(b"HTTP/1.1 200")
            s.close()
    finally:
        app.release.set()
        srv.stop(grace_s=1.0)


def test_a_request_trickled_in_is_cut_at_its_deadline_not_kept_alive_by_each_byte(server: HttpServer) -> None:
    """Slowloris: one header byte every 0.1 s would take 3 s; the whole request has 0.6 s."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\n")
        sent = 0
        answer = b""
        for _ in range(30):
            try:
                s.sendall(b"X")
                sent += 1
            except OSError:
                break
            s.settimeout(0.1)
            try:
                answer = s.recv(1000)
            except TimeoutError:
                continue
            break
    assert 408 == status(answer)
    assert sent < 30
    assert 200 == status(get(server.port))


def test_a_connection_that_never_sends_is_closed_and_an_idle_kept_alive_one_too(server: HttpServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        assert b"" == s.recv(100)  # nothing sent: closed without an answer
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(1000).startswith(b"HTTP/1.1 200")
        assert b"" == s.recv(100)  # kept alive, then idle past idle_timeout_s: closed
    assert server.stats.timed_out >= 2


def test_a_tls_client_that_never_finishes_its_handshake_is_closed_at_the_handshake_deadline(app: Echo, tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certs.cert, certs.key)
    srv = serve(app, tls=ctx)
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as raw:
            raw.sendall(b"\x16\x03\x01\x00\xff")  # a TLS record header, and then nothing
            assert b"" == raw.recv(100)
        client = ssl.create_default_context(cafile=str(certs.ca))
        with (
            socket.create_connection(("127.0.0.1", srv.port), timeout=5) as raw,
            client.wrap_socket(raw, server_hostname="127.0.0.1") as s,
        ):
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert s.recv(1000).startswith(b"HTTP/1.1 200")
    finally:
        srv.stop(grace_s=1.0)


def test_a_body_over_the_limit_is_refused_from_its_length_before_it_is_read(server: HttpServer, app: Echo) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n" + b"x" * 1000)
        answer = s.recv(1000)
    assert 413 == status(answer)
    assert b"Connection: close" in answer
    assert [] == app.bodies  # the handler never saw it


def test_a_chunked_body_is_cut_as_soon_as_it_passes_the_limit(server: HttpServer, app: Echo) -> None:
    chunk = b"100\r\n" + b"x" * 256 + b"\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        sent = 0
        answer = b""
        s.settimeout(0.01)
        for _ in range(100):
            try:
                s.sendall(chunk)
                sent += len(chunk)
                answer = s.recv(1000)
                break
            except TimeoutError:
                continue
            except OSError:
                break
    assert 413 == status(answer)
    assert sent < 100 * len(chunk)
    assert [] == app.bodies
    small = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    assert exchange(server.port, small).endswith(b"\r\n\r\n5\n")


@pytest.mark.parametrize(
    ("request_bytes", "expected"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-Flood: " + b"a" * 8000 + b"\r\n\r\n", 431),
        (b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X: y\r\n" * 2000 + b"\r\n", 431),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello!", 400),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"GET / HTTP/9.9\r\n\r\n", 505),
        (b"\x16\x03\x01 not http at all\r\n\r\n", 400),
        (b"GET  / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", 400),
    ],
    ids=[
        "long-header",
        "many-headers",
        "two-lengths",
        "length-list",
        "length-and-chunked",
        "unknown-coding",
        "bad-chunk-size",
        "http-9.9",
        "tls-bytes",
        "double-space",
        "no-colon",
    ],
)
def test_bad_framing_gets_an_error_and_a_closed_connection(server: HttpServer, request_bytes: bytes, expected: int) -> None:
    answer = exchange(server.port, request_bytes)
    assert expected == status(answer), answer[:200]
    assert b"Connection: close" in answer
    assert 200 == status(get(server.port))


def test_handlers_run_on_the_pool_only_and_a_crash_is_a_500(server: HttpServer, app: Echo) -> None:
    clients = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(6)]
    for s in clients:
        s.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    wait_running(app, 2)
    assert 2 == app.most  # two workers, however many requests wait
    app.release.set()
    for s in clients:
        assert s.recv(1000).startswith(b"HTTP/1.1 200")
        s.close()
    assert len(app.threads) <= 2
    with capture_logs() as logs:
        assert 500 == status(get(server.port, "/crash"))
    assert any(e["event"] == "http_handler_crashed" for e in logs)
    assert 200 == status(get(server.port))


def test_a_refusal_from_check_is_sent_without_reading_the_body(server: HttpServer, app: Echo) -> None:
    answer = exchange(server.port, b"POST /missing HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n")
    assert 404 == status(answer) and b"Connection: close" in answer
    assert [] == app.bodies


def test_the_authorize_hook_sees_the_headers_and_a_no_is_a_401_before_the_body(app: Echo) -> None:
    seen: list[str | None] = []

    def authorize(headers: Headers) -> bool:
        seen.append(headers.get("Authorization"))
        if headers.get("authorization") == "Bearer boom":
            raise RuntimeError("hook bug")
        return headers.get("Authorization") == "Bearer good"

    srv = serve(app, authorize=authorize)
    try:
        refused = exchange(srv.port, b"POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer bad\r\nContent-Length: 3\r\n\r\nabc")
        assert 401 == status(refused)
        assert b"WWW-Authenticate: Bearer" in refused
        assert 401 == status(get(srv.port))  # no header at all
        with capture_logs() as logs:
            assert 401 == status(get(srv.port, extra="Authorization: Bearer boom\r\n"))  # a failing hook says no
        assert any(e["event"] == "http_authorize_failed" for e in logs)
        assert [] == app.bodies
        assert 200 == status(get(srv.port, extra="Authorization: Bearer good\r\n"))
        assert ["Bearer bad", None, "Bearer boom", "Bearer good"] == seen
    finally:
        srv.stop(grace_s=1.0)


def test_requests_run_only_within_the_work_budget_and_one_over_it_is_refused(app: Echo) -> None:
    limits = Limits(max_body_bytes=10_000, large_body_bytes=10_000, work_budget=100, workers=4, request_timeout_s=5)
    srv = serve(app, limits, cost=lambda request: len(request.body))
    try:
        post = b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 60\r\n\r\n" + b"x" * 60
        first, second = (socket.create_connection(("127.0.0.1", srv.port), timeout=5) for _ in range(2))
        first.sendall(post)
        second.sendall(post)
        wait_running(app, 1)
        assert 1 == app.most  # 60 + 60 > 100: the second waits for the first
        big = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n" + b"x" * 101
        assert 413 == status(exchange(srv.port, big))
        app.release.set()
        for s in (first, second):
            assert s.recv(1000).startswith(b"HTTP/1.1 200")
            s.close()
    finally:
        app.release.set()
        srv.stop(grace_s=1.0)


def test_large_bodies_are_read_one_slot_at_a_time(app: Echo) -> None:
    srv = serve(app, Limits(max_body_bytes=1000, large_body_bytes=100, large_body_slots=1, workers=4, request_timeout_s=5))
    try:
        post = b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n" + b"x" * 200
        clients = [socket.create_connection(("127.0.0.1", srv.port), timeout=5) for _ in range(3)]
        for s in clients:
            s.sendall(post)
        wait_running(app, 1)
        assert 1 == app.most
        small = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
        assert 200 == status(exchange(srv.port, small))  # a small body does not wait for the slot
        app.release.set()
        for s in clients:
            assert s.recv(1000).startswith(b"HTTP/1.1 200")
            s.close()
    finally:
        app.release.set()
        srv.stop(grace_s=1.0)


def test_connection_caps_leave_the_reserve_of_descriptors_free() -> None:
    for soft in (300, 512, 1024, 4096):
        cap = fd_bounded_connections(10_000, soft)
        used = LISTENERS_PER_PROCESS * (cap + ACCEPT_BACKLOG + LOOP_FDS)
        assert used <= soft - FD_RESERVE or cap == 1
    assert 316 == fd_bounded_connections(10_000, 1024)
    assert 64 == fd_bounded_connections(64, 1024)
    assert 64 == fd_bounded_connections(64, 1 << 20)


def test_a_port_in_use_raises_at_construction() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            HttpServer("test", "127.0.0.1", taken.getsockname()[1], Echo())


def test_head_gets_the_headers_without_the_body_and_keep_alive_carries_several_requests(server: HttpServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert 2 == data.count(b"HTTP/1.1 200")
    assert data.endswith(b"\r\n\r\n0\n")  # only the GET has a body


def test_stop_before_serving_or_twice_returns_at_once_and_frees_the_port() -> None:
    never = HttpServer("test", "127.0.0.1", 0, Echo())
    racing = HttpServer("test", "127.0.0.1", 0, Echo())
    thread = threading.Thread(target=racing.serve_forever)
    thread.start()
    racing.stop(grace_s=0.5)  # may come before the loop runs: serve_forever must then not start
    thread.join(5)
    assert not thread.is_alive()
    for srv in (never, racing):
        srv.stop()
        srv.stop()
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", srv.port))  # the port is free again
