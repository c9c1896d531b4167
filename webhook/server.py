"""The webhook's HTTPS server: the bounded server of ``dra_driver.obs.http_server``, TLS reloaded on rotation.

Called by ``webhook.main``; tests start it in-process. Routes: ``POST
/validate-resource-claim-parameters`` (``webhook.admission``), ``GET /readyz`` and ``GET
/livez``. A request never takes the server down: a bad body gets 400, a wrong media type 415,
a missing length 411, an oversized body 413 (from its Content-Length, before any of it is
read), anything unexpected 500 with a logged traceback.

Bounds (``REVIEW_LIMITS``; ``--max-connections`` and ``--request-timeout`` change two of them):
at most 64 connections, a new one beyond taking the place of an idle or slow one; 5 s for the
TLS handshake; 10 s for a request, headers and body together, however slowly it trickles in;
120 s for a kept-alive connection's next request (longer than the API server's 90 s, so the
client always closes an idle connection first and never sends into a closing one); two
worker threads. Memory per review is bounded twice:

* ``MAX_BODY_BYTES`` (4 MiB) admits the largest AdmissionReview the API server can send for a
  ResourceClaim or ResourceClaimTemplate: an UPDATE carries the object and its old version,
  each at most 1.5 MiB as stored (etcd's request limit bounds every object; the spec's own
  limits do not: 32 requests of 32 selectors of 10 KiB each alone would be 10 MiB), and their
  JSON is at most about a third larger than the stored form (field names, quoting, Go's
  escaping of ``<``, ``>`` and ``&``): 2 x 1.5 MiB x 4/3 = 4 MiB with the envelope. Bodies
  larger than 64 KiB are read two at a time at most.
* Parsing JSON into Python objects takes up to about 50 times the body for hostile shapes
  (``[[[[...]]]]``, ``{},{},...``; a 4 MiB body would take 200 MiB, over the chart's 192 Mi
  limit on its own). So every review is charged ``review_cost``, an upper bound of what
  ``json.loads`` allocates for it, estimated from its structural bytes before anything is
  parsed; reviews are parsed only while their costs add up to at most ``PARSE_BUDGET_BYTES``,
  and one that would exceed it alone is refused with 413. A real review costs a few times its
  size (strings dominate), so the largest legitimate ones fit many times over.

TLS: the certificate and key are files (a Secret volume in the chart). Each new connection
checks whether they changed (a rotated Secret is swapped in atomically by the kubelet) and,
if so, loads them into a fresh context; a half-written pair keeps the old context and is
logged. The handshake runs on the server's event loop, bounded by its deadline.

Metrics: every POST to the validate path that reaches a verdict or a refusal (400, 411, 413,
415, 500) is reported to ``metrics`` (a ``ReviewMetrics``, ``dra_driver.obs.metrics.WebhookMetrics``
in ``webhook.main``) with the object's kind, the result (allowed, denied, or error for anything
that got no verdict) and its duration.
"""

from __future__ import annotations

import json
import ssl
import time
from dataclasses import replace
from http import HTTPStatus
from pathlib import Path
from typing import Any, Final, Protocol

import structlog

from dra_driver.obs.file_reload import Reloaded, stamp_of
from dra_driver.obs.http_server import HttpServer, ServerStats
from dra_driver.obs.http_types import Limits, Request, RequestHead, Response, text
from webhook.admission import VALIDATE_PATH, BadReview, Verdict, review

log = structlog.get_logger(__name__)

MAX_BODY_BYTES: Final = 4 << 20
"""The largest AdmissionReview body read (see the module docstring); 413 beyond, unread."""
PARSE_BUDGET_BYTES: Final = 80 << 20
"""What the reviews being parsed at once may cost together (``review_cost``, bytes)."""
REVIEW_LIMITS: Final = Limits(
    max_connections=64,
    request_timeout_s=10.0,
    handshake_timeout_s=5.0,
    idle_timeout_s=120.0,
    write_timeout_s=10.0,
    max_header_bytes=16 * 1024,
    max_body_bytes=MAX_BODY_BYTES,
    large_body_bytes=64 * 1024,
    large_body_slots=2,
    workers=2,
    work_budget=PARSE_BUDGET_BYTES,
)
"""The HTTPS listener's bounds (``dra_driver.obs.http_server.Limits``)."""
RELOAD_CHECK_S = 5.0
"""How often, at most, the certificate files are checked for a change."""

# What json.loads allocates, at most, per structural byte (CPython 3.11, 64-bit; measured with
# tracemalloc and RSS over hostile shapes, tests/unit/webhook/test_webhook_limits.py): a list with its
# first slots, a dict with its first entries, a key's entry (and memo), a value's slot, a string.
_COST_PER_BYTE: Final = 2  # the body, and the text json.loads decodes it to
_COST_PER_LIST: Final = 128
_COST_PER_OBJECT: Final = 232
_COST_PER_COLON: Final = 56
_COST_PER_COMMA: Final = 48
_COST_PER_QUOTE: Final = 32


def review_cost(body: bytes) -> int:
    """An upper bound, in bytes, of what parsing ``body`` as JSON takes, from counts of its structural bytes (C speed)."""
    return (
        _COST_PER_BYTE * len(body)
        + _COST_PER_LIST * body.count(b"[")
        + _COST_PER_OBJECT * body.count(b"{")
        + _COST_PER_COLON * body.count(b":")
        + _COST_PER_COMMA * body.count(b",")
        + _COST_PER_QUOTE * body.count(b'"')
    )


def _request_cost(request: Request) -> int:
    return review_cost(request.body) if request.head.path == VALIDATE_PATH else 0


class ReviewMetrics(Protocol):
    """What the server reports per review (``dra_driver.obs.metrics.WebhookMetrics``)."""

    def reviewed(self, kind: str, result: str, seconds: float) -> None:
        """One review answered: the object's kind ("" when unknown), allowed, denied or error, and its duration."""
        ...


class TlsFiles:
    """A server-side SSL context from a certificate and key file, reloaded when they change (``dra_driver.obs.file_reload``)."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        """Load the pair now: OSError or ssl.SSLError when it cannot be used (at start a bad pair is fatal)."""
        self.cert_file, self.key_file = cert_file, key_file
        self._context = Reloaded(
            lambda: stamp_of((self.cert_file, self.key_file)),
            self._load,
            every_s=lambda: RELOAD_CHECK_S,
            clock=time.monotonic,
            errors=(OSError, ssl.SSLError),
            reloaded=lambda: log.info("tls_certificate_reloaded", cert_file=str(self.cert_file)),
            failed=lambda err: log.warning("tls_certificate_reload_failed", error=str(err), cert_file=str(self.cert_file)),
        )

    def _load(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def context(self) -> ssl.SSLContext:
        """The current context; reloads (at most every RELOAD_CHECK_S) when either file changed."""
        return self._context.current()


class WebhookServer:
    """The HTTPS server: bound at construction (OSError if it cannot be); ``serve_forever`` until ``shutdown``."""

    def __init__(
        self,
        address: tuple[str, int],
        *,
        tls: TlsFiles,
        driver: str,
        metrics: ReviewMetrics | None = None,
        limits: Limits = REVIEW_LIMITS,
    ) -> None:
        self.tls = tls
        self.driver = driver
        self.metrics = metrics
        self._http = HttpServer("webhook", address[0], address[1], _ReviewApp(self), limits, tls=tls.context, cost=_request_cost)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return self._http.port

    @property
    def max_connections(self) -> int:
        """The connection cap in force (the wanted one, lowered to fit the open-files limit)."""
        return self._http.max_connections

    @property
    def stats(self) -> ServerStats:
        """Connection and request counts since the start."""
        return self._http.stats

    def serve_forever(self) -> None:
        """Serve in this thread until ``shutdown``."""
        self._http.serve_forever()

    def shutdown(self) -> None:
        """Stop accepting; reviews being answered finish (up to 5 s); returns once stopped."""
        self._http.stop()

    def server_close(self) -> None:
        """Nothing left to close after ``shutdown`` (kept for callers written for socketserver)."""


class _ReviewApp:
    """The routes, for ``dra_driver.obs.http_server``."""

    def __init__(self, server: WebhookServer) -> None:
        self.server = server

    def _report(self, verdict: Verdict | None, start: float) -> None:
        if self.server.metrics is not None:
            self.server.metrics.reviewed(*_outcome(verdict), time.perf_counter() - start)

    def check(self, head: RequestHead) -> Response | None:
        """Refusals decided from the request line and headers, before the body is read."""
        if head.method == "GET":
            return None
        if head.method != "POST" or head.path != VALIDATE_PATH:
            return text(HTTPStatus.NOT_FOUND, f"no such path; POST {VALIDATE_PATH}, GET /readyz")
        start = time.perf_counter()
        refusal: Response | None = None
        media = head.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        length = head.headers.get("content-length")
        if media != "application/json":
            refusal = text(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE, f"Content-Type must be application/json, got {media[:100] or 'none'!r}"
            )
        elif length is None or not length.isdigit():
            refusal = text(HTTPStatus.LENGTH_REQUIRED, "a Content-Length is required")
        elif int(length) > MAX_BODY_BYTES:
            refusal = text(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body larger than {MAX_BODY_BYTES} bytes")
        if refusal is not None:
            self._report(None, start)
            return replace(refusal, close=True)
        return None

    def handle(self, request: Request) -> Response:
        """Health endpoints, or one AdmissionReview."""
        if request.head.method == "GET":
            if request.head.path in ("/readyz", "/livez"):
                return text(HTTPStatus.OK, "ok")
            return text(HTTPStatus.NOT_FOUND, f"no such path; POST {VALIDATE_PATH}, GET /readyz")
        start = time.perf_counter()
        verdict: Verdict | None = None
        try:
            verdict, answer = self._validate(request)
        except Exception:
            log.exception("admission_review_crashed")
            answer = text(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error; see the webhook's log", close=True)
        self._report(verdict, start)
        return answer

    def _validate(self, request: Request) -> tuple[Verdict | None, Response]:
        """Review and answer the request; the verdict (None when it got none) and the answer."""
        client = request.head.client
        try:
            verdict = review(request.body, self.server.driver)
        except BadReview as err:
            log.warning("bad_admission_review", client=client, error=str(err))
            return None, text(HTTPStatus.BAD_REQUEST, str(err))
        log.info(
            "admission_reviewed",
            uid=verdict.uid,
            operation=verdict.subject.operation,
            kind=verdict.subject.kind,
            namespace=verdict.subject.namespace,
            name=verdict.subject.name,
            allowed=verdict.allowed,
            invalid_configs=verdict.invalid_configs,
            **({"message": verdict.message} if verdict.message else {}),
            **({"warnings": list(verdict.warnings)} if verdict.warnings else {}),
        )
        return verdict, Response(HTTPStatus.OK, _json(verdict.response()), "application/json")


def _outcome(verdict: Verdict | None) -> tuple[str, str]:
    """The object's kind and the result of a review, as the metrics count it ("", "error" without a verdict)."""
    if verdict is None:
        return "", "error"
    return verdict.subject.kind, "allowed" if verdict.allowed else "denied"


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()
