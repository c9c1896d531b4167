"""Fuzzing the HTTP framing of every listener: the /metrics server (plugin, controller, webhook) and the webhook's HTTPS.

Every listener is ``dra_driver.obs.http_server``: the metrics one through ``serve_metrics`` (what
the three daemons run), the webhook's through ``WebhookServer`` with TLS. Inputs are valid
requests mutated at the framing level: request lines (methods, targets, versions, spaces,
bare CR or LF, NUL), headers (floods, folding, odd bytes, conflicting or odd Content-Length,
Transfer-Encoding variants), chunked bodies (bad and huge sizes, extensions, trailers, missing
CRLF), truncation and pipelining; on the TLS port also raw and truncated TLS records. Each
input is sent and the client's side half-closed; per input: the answer is nothing or starts
with an HTTP/1.1 status line, no answer is a 500, the server logs no unexpected exception; and
a good request is answered after every few inputs and at the end.
"""

from __future__ import annotations

import random
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from dra_driver.obs.http_types import Limits
from dra_driver.obs.metrics import METRICS_LIMITS, MetricsServer, PluginMetrics, new_registry, serve_metrics
from testkit.admission import DRIVER, GOOD, body, claim_obj, request
from testkit.webhookcerts import Certs, make_certs
from tests.fuzz import harness
from webhook.admission import VALIDATE_PATH
from webhook.server import REVIEW_LIMITS, TlsFiles, WebhookServer

QUICK = {"request_timeout_s": 0.3, "handshake_timeout_s": 0.3, "idle_timeout_s": 0.3}
"""Short deadlines: a truncated input costs the server its deadline, not the test's seconds."""
UNEXPECTED = {"http_connection_failed", "http_handler_crashed", "admission_review_crashed"}

METHODS = [b"GET", b"POST", b"HEAD", b"OPTIONS", b"PUT", b"get", b"G\x00T", b"", b"GET GET", b"\xff\xfe", b"X" * 5000]
TARGETS = [b"/", b"/metrics", VALIDATE_PATH.encode(), b"/readyz", b"*", b"http://x/metrics", b"", b"/%00", b"/\xff", b"/" * 9000]
VERSIONS = [b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/0.9", b"HTTP/1.1x", b"http/1.1", b"", b"HTTP/1", b"HTTP/11.1"]
LENGTHS = [b"0", b"5", b"-1", b"+5", b"0x10", b"5, 5", b"5, 6", b"99999999999999999999999", b"", b" 5 ", b"1e3", b"\xff"]
ENCODINGS = [b"chunked", b"Chunked", b"chunked, gzip", b"gzip, chunked", b"identity", b" chunked", b"chunked\x00", b"x"]
CHUNKS = [
    b"5\r\nhello\r\n0\r\n\r\n",
    b"ffffffffffffffffffffffff\r\n",
    b"-5\r\nhello\r\n",
    b"5;ext=1\r\nhello\r\n0\r\n\r\n",
    b"5\r\nhello0\r\n\r\n",
    b"0\r\nTrailer: x\r\n\r\n",
    b"5\r\nhel",
    b"zz\r\n",
    b"5\nhello\n0\n\n",
    b"1" * 100 + b"\r\n",
    b"3e8\r\n" + b"x" * 1000 + b"\r\n" * 2,
]


def hostile_request(rng: random.Random) -> bytes:
    """One request, valid at first, its framing mutated one to three times."""
    method, target, version = rng.choice(METHODS[:2]), rng.choice(TARGETS[:4]), b"HTTP/1.1"
    headers: list[bytes] = [b"Host: x"]
    payload = body(request(claim_obj(GOOD)))
    body_part = b""
    if method == b"POST":
        headers += [b"Content-Type: application/json", b"Content-Length: %d" % len(payload)]
        body_part = payload
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if r < 0.12:
            method = rng.choice(METHODS)
        elif r < 0.2:
            target = rng.choice(TARGETS)
        elif r < 0.28:
            version = rng.choice(VERSIONS)
        elif r < 0.4:
            headers.append(b"Content-Length: " + rng.choice(LENGTHS))
        elif r < 0.52:
            headers.append(b"Transfer-Encoding: " + rng.choice(ENCODINGS))
            body_part = rng.choice(CHUNKS)
        elif r < 0.58:
            headers += [b"X-Flood-%d: %s" % (i, b"a" * rng.choice([1, 100])) for i in range(rng.choice([10, 500, 3000]))]
        elif r < 0.62:
            headers.append(b"X-Long: " + b"a" * rng.choice([1000, 20_000, 100_000]))
        elif r < 0.66:
            headers.append(b" folded continuation")
        elif r < 0.70:
            headers.append(rng.choice([b"No-Colon", b": empty-name", b"Bad Name: x", b"X: \x00\x01", b"X:\xff\xfe"]))
        elif r < 0.76:
            body_part = body_part[: rng.randrange(len(body_part) + 1)]  # truncated
        elif r < 0.80:
            headers.append(b"Expect: 100-continue")
        elif r < 0.84:
            headers.append(b"Connection: " + rng.choice([b"close", b"keep-alive", b"upgrade", b"\xff"]))
        elif r < 0.88:
            body_part += b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * rng.choice([1, 50])  # pipelined
        elif r < 0.92:
            sep = rng.choice([b"\n", b"\r", b"\r\r\n", b"\x00"])
            return method + b" " + target + b" " + version + sep + sep.join(headers) + sep + sep + body_part
        else:
            raw = bytearray(method + b" " + target + b" " + version + b"\r\n" + b"\r\n".join(headers) + b"\r\n\r\n" + body_part)
            for _ in range(rng.randint(1, 8)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            return bytes(raw)
    line = method + b" " + target + b" " + version if version else method + b" " + target
    return line + b"\r\n" + b"\r\n".join(headers) + b"\r\n\r\n" + body_part


def inputs(name: str, count: int) -> Iterator[bytes]:
    rng = random.Random(harness.seed_for(name))
    for _ in range(count):
        yield hostile_request(rng)


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except (TimeoutError, ConnectionResetError, ssl.SSLError, OSError):
        pass
    return b"".join(chunks)


def check_answer(answer: bytes) -> None:
    """Nothing (closed), or HTTP/1.1 status lines, none of them a 500."""
    if not answer:
        return
    assert answer.startswith(b"HTTP/1.1 ") and answer[9:12].isdigit(), answer[:80]
    assert b"HTTP/1.1 500" not in answer, answer[:200]


def plain_exchange(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        try:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may refuse and close while we still send
        return read_all(s)


def tls_exchange(port: int, ca: Path, raw: bytes) -> bytes:
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s, ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
        try:
            t.sendall(raw)
        except OSError:
            pass
        return read_all(t)


def run_listener(name: str, count: int, exchange: Callable[[bytes], bytes], good: Callable[[], bytes]) -> None:
    with capture_logs() as logs:
        rep = harness.run(name, inputs(name, count), lambda raw: check_answer(exchange(raw)), ())
        for _ in range(3):
            assert good().startswith(b"HTTP/1.1 200")
    harness.assert_clean(rep)
    assert not [e for e in logs if e["event"] in UNEXPECTED], [e for e in logs if e["event"] in UNEXPECTED][:3]


@pytest.fixture
def metrics_server() -> Iterator[MetricsServer]:
    registry = new_registry()
    PluginMetrics(registry)
    limits = Limits(**{**{f: getattr(METRICS_LIMITS, f) for f in METRICS_LIMITS.__dataclass_fields__}, **QUICK})
    server = serve_metrics(registry, "127.0.0.1", 0, limits=limits)
    yield server
    server.stop()


def test_hostile_http_framing_on_the_metrics_port_is_answered_or_closed(metrics_server: MetricsServer) -> None:
    port = metrics_server.port

    def good() -> bytes:
        return plain_exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")

    run_listener("http-metrics", harness.budget(300), lambda raw: plain_exchange(port, raw), good)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def webhook_server(certs: Certs) -> Iterator[WebhookServer]:
    limits = Limits(**{**{f: getattr(REVIEW_LIMITS, f) for f in REVIEW_LIMITS.__dataclass_fields__}, **QUICK})
    srv = WebhookServer(("127.0.0.1", 0), tls=TlsFiles(certs.cert, certs.key), driver=DRIVER, limits=limits)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    thread.join()


def good_review(port: int, ca: Path) -> bytes:
    payload = body(request(claim_obj(GOOD)))
    head = f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
    return tls_exchange(port, ca, head.encode() + b"Content-Length: %d\r\n\r\n" % len(payload) + payload)


def test_hostile_http_framing_inside_tls_on_the_webhook_port_is_answered_or_closed(
    webhook_server: WebhookServer, certs: Certs
) -> None:
    port = webhook_server.port
    run_listener(
        "http-webhook", harness.budget(80), lambda raw: tls_exchange(port, certs.ca, raw), lambda: good_review(port, certs.ca)
    )


TLS_GARBAGE = [
    b"",
    b"\x16",
    b"\x16\x03\x01",
    b"\x16\x03\x01\x02\x00",  # a record header promising 512 bytes, then nothing
    b"\x16\x03\x01\x00\x05hello",
    b"\x16\x03\x03\xff\xff" + b"\x00" * 100,
    b"\x15\x03\x03\x00\x02\x02\x28",  # an alert
    b"\x17\x03\x03\x00\x10" + b"x" * 16,  # application data before any handshake
    b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n",  # plain HTTP on the TLS port
    bytes(range(256)) * 4,
]


def client_hello() -> bytes:
    """The first flight of a real TLS client (its ClientHello), to be cut short."""
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def test_raw_and_truncated_tls_on_the_webhook_port_is_closed_and_reviews_go_on(
    webhook_server: WebhookServer, certs: Certs
) -> None:
    hello = client_hello()
    rng = random.Random(harness.seed_for("tls-raw"))
    garbage = [*TLS_GARBAGE, *(hello[: rng.randrange(1, len(hello))] for _ in range(20)), hello + b"\x00" * 50]
    port = webhook_server.port

    def target(raw: bytes) -> None:
        answer = plain_exchange(port, raw)
        assert not answer.startswith(b"HTTP/"), answer[:80]  # no plain-HTTP answer on the TLS port

    with capture_logs() as logs:
        rep = harness.run("tls-raw", iter(garbage), target, ())
        assert good_review(port, certs.ca).startswith(b"HTTP/1.1 200")
    harness.assert_clean(rep)
    assert not [e for e in logs if e["event"] in UNEXPECTED]
