"""The webhook's HTTPS server: stdlib ``http.server``, one thread per connection, TLS reloaded on rotation.

Called by ``webhook.main``; tests start it in-process. Routes: ``POST
/validate-resource-claim-parameters`` (``webhook.admission``), ``GET /readyz`` and ``GET
/livez``. A request never takes the server down: a bad body gets 400, a wrong media type 415,
a missing length 411, an oversized body 413, anything unexpected 500 with a logged traceback.

TLS: the certificate and key are files (a Secret volume in the chart). Each new connection
checks whether they changed (a rotated Secret is swapped in atomically by the kubelet) and,
if so, loads them into a fresh context; a half-written pair keeps the old context and is
logged. The handshake runs in the connection's thread, so a slow client cannot stall accepting.

Metrics: every POST to the validate path is reported to ``metrics`` (a ``ReviewMetrics``,
``dra_driver.obs.metrics.WebhookMetrics`` in ``webhook.main``) with the object's kind, the
result (allowed, denied, or error for anything that got no verdict) and its duration.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

import structlog

from webhook.admission import VALIDATE_PATH, BadReview, Verdict, review

log = structlog.get_logger(__name__)

MAX_BODY_BYTES = 8 << 20
"""Larger than any AdmissionReview of a claim or template (objects are at most ~1.5 MiB in etcd)."""
CONNECTION_TIMEOUT_S = 30.0
"""Handshake, read and idle keep-alive limit per connection."""
RELOAD_CHECK_S = 5.0
"""How often, at most, the certificate files are checked for a change."""


class ReviewMetrics(Protocol):
    """What the server reports per review (``dra_driver.obs.metrics.WebhookMetrics``)."""

    def reviewed(self, kind: str, result: str, seconds: float) -> None:
        """One review answered: the object's kind ("" when unknown), allowed, denied or error, and its duration."""
        ...


class TlsFiles:
    """A server-side SSL context from a certificate and key file, reloaded when the files change."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self._lock = threading.Lock()
        self._stamp = self._files_stamp()
        self._context = self._load()  # at start a bad pair is fatal: raise
        self._checked = time.monotonic()

    def _files_stamp(self) -> tuple[tuple[int, int, int], ...]:
        stats = (f.stat() for f in (self.cert_file, self.key_file))
        return tuple((s.st_ino, s.st_mtime_ns, s.st_size) for s in stats)

    def _load(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def context(self) -> ssl.SSLContext:
        """The current context; reloads (at most every RELOAD_CHECK_S) when either file changed."""
        with self._lock:
            now = time.monotonic()
            if now - self._checked < RELOAD_CHECK_S:
                return self._context
            self._checked = now
            try:
                stamp = self._files_stamp()
                if stamp != self._stamp:
                    self._context, self._stamp = self._load(), stamp
                    log.info("tls_certificate_reloaded", cert_file=str(self.cert_file))
            except (OSError, ssl.SSLError) as err:
                log.warning("tls_certificate_reload_failed", error=str(err), cert_file=str(self.cert_file))
            return self._context


class WebhookServer(ThreadingHTTPServer):
    """The HTTPS server; ``serve_forever`` until ``shutdown``."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], *, tls: TlsFiles, driver: str, metrics: ReviewMetrics | None = None) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.tls = tls
        self.driver = driver
        self.metrics = metrics
        super().__init__(address, _Handler)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self.server_address[1])

    def get_request(self) -> tuple[Any, Any]:
        """Accept a connection and wrap it in TLS; the handshake happens later, in its own thread."""
        sock, addr = self.socket.accept()
        sock.settimeout(CONNECTION_TIMEOUT_S)
        try:
            return self.tls.context().wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr
        except (OSError, ssl.SSLError):
            sock.close()
            raise

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Complete the TLS handshake, then serve the connection's requests."""
        try:
            request.do_handshake()
        except (OSError, ssl.SSLError) as err:
            log.debug("tls_handshake_failed", client=str(client_address[0]), error=str(err))
            return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection failed outside a request handler (a reset, a TLS error): log it, keep serving."""
        log.warning("connection_failed", client=str(client_address[0]), exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: WebhookServer
    protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses its connections
    server_version = "dra-gpu-webhook"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http", client=self.client_address[0], message=format % args)

    def _reply(self, status: HTTPStatus, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")  # so the client opens a new connection for its next request
        self.end_headers()
        self.wfile.write(body)

    def _text(self, status: HTTPStatus, text: str) -> None:
        self._reply(status, (text + "\n").encode())

    def _route(self) -> str:
        return self.path.split("?", 1)[0]  # the API server adds ?timeout=<n>s

    def do_GET(self) -> None:
        """Health endpoints: the server answers, so it is ready and alive."""
        if self._route() in ("/readyz", "/livez"):
            self._text(HTTPStatus.OK, "ok")
        else:
            self._text(HTTPStatus.NOT_FOUND, f"no such path; POST {VALIDATE_PATH}, GET /readyz")

    def do_POST(self) -> None:
        """Validate one AdmissionReview."""
        if self._route() != VALIDATE_PATH:
            self.close_connection = True  # its body is unread: the connection cannot carry another request
            self._text(HTTPStatus.NOT_FOUND, f"no such path; POST {VALIDATE_PATH}")
            return
        start = time.perf_counter()
        verdict: Verdict | None = None
        try:
            verdict = self._validate()
        except Exception:
            log.exception("admission_review_crashed")
            self.close_connection = True
            self._text(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error; see the webhook's log")
        finally:
            if self.server.metrics is not None:
                self.server.metrics.reviewed(*_outcome(verdict), time.perf_counter() - start)

    def _validate(self) -> Verdict | None:  # noqa: PLR0911 - one early answer per way a request is refused
        """Read, review and answer the request; the verdict, or None when it got none (an error answered)."""
        media = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            self.close_connection = True
            self._text(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, f"Content-Type must be application/json, got {media or 'none'!r}")
            return None
        length_header = self.headers.get("Content-Length")
        if length_header is None or not length_header.isdigit():
            self.close_connection = True
            self._text(HTTPStatus.LENGTH_REQUIRED, "a Content-Length is required")
            return None
        length = int(length_header)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            self._text(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body larger than {MAX_BODY_BYTES} bytes")
            return None
        try:
            body = self.rfile.read(length)
        except OSError as err:  # a client that stalls or hangs up mid-body: nobody to answer
            log.warning("admission_review_unread", client=self.client_address[0], error=str(err))
            self.close_connection = True
            return None
        if len(body) < length:
            log.warning("admission_review_truncated", client=self.client_address[0], expected=length, got=len(body))
            self.close_connection = True
            return None
        try:
            verdict = review(body, self.server.driver)
        except BadReview as err:
            log.warning("bad_admission_review", client=self.client_address[0], error=str(err))
            self._text(HTTPStatus.BAD_REQUEST, str(err))
            return None
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
        self._reply(HTTPStatus.OK, _json(verdict.response()), "application/json")
        return verdict


def _outcome(verdict: Verdict | None) -> tuple[str, str]:
    """The object's kind and the result of a review, as the metrics count it ("", "error" without a verdict)."""
    if verdict is None:
        return "", "error"
    return verdict.subject.kind, "allowed" if verdict.allowed else "denied"


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()
