"""Who may read a daemon's /metrics: a bearer token and TLS (optionally with client certificates), as Prometheus scrapes.

The daemons' flags (``dra_driver.appkit.flags.metrics_flags``: ``--metrics-token-file``,
``--metrics-tls-cert-file``, ``--metrics-tls-key-file``, ``--metrics-client-ca-file``) make a
``ScrapeAuthConfig``; each daemon's ``main`` turns it into a ``ScrapeGuard`` (``load_or_log``: a
file that cannot be used is logged as ``metrics_auth_unusable`` naming it, and the daemon exits 2;
the kubelet plugin checks before its DRA sockets exist) and hands its ``authorize`` hook and
``ssl_context`` to the metrics server (``dra_driver.obs.metrics.serve_metrics``, whose server
answers 401 when the hook says no). With none of the
flags there is no guard and /metrics is plain HTTP for anyone who can reach it.

* Token: ``Authorization: Bearer <token>`` must carry the token the file holds (surrounding
  whitespace stripped, as Prometheus strips its ``credentials_file``), compared in constant time
  (both sides hashed, then ``hmac.compare_digest``). The file is re-read when it changes (a
  Secret's rotation), checked at most every ``RELOAD_CHECK_S``; a file that becomes unreadable or
  empty keeps the last token (logged), never none.
* TLS: the certificate and key (TLS 1.2 or later), re-read the same way (a new handshake takes
  the new pair); with a client CA every client must present a certificate it signed.

Standard library only: the kubelet plugin checks these before its DRA sockets exist.
"""

from __future__ import annotations

import hashlib
import hmac
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import structlog

from dra_driver.obs.file_reload import Reloaded, Stamp, stamp_of

log = structlog.get_logger(__name__)

RELOAD_CHECK_S = 1.0
"""How often, at most, a request looks whether the token, certificate or CA files changed."""
MAX_TOKEN_BYTES = 4096
"""A token file larger than this is refused (a token is tens to hundreds of bytes)."""
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=")
"""RFC 6750's b64token characters: what an ``Authorization: Bearer`` value may hold."""


class ScrapeAuthError(ValueError):
    """The metrics authentication flags or files cannot be used; the message names the flag or file and why."""


class Headers(Protocol):
    """A request's headers as the HTTP server gives them (``http.client.HTTPMessage`` or a case-insensitive map)."""

    def get(self, name: str, /) -> str | None:
        """The first value of ``name``, or None."""
        ...


@dataclass(frozen=True, slots=True)
class ScrapeAuthConfig:
    """The metrics authentication flags of one daemon (all None: no authentication, plain HTTP)."""

    token_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    client_ca_file: Path | None = None

    @property
    def enabled(self) -> bool:
        """Whether scrapes need anything (a token, TLS or both)."""
        return any(f is not None for f in (self.token_file, self.tls_cert_file, self.tls_key_file, self.client_ca_file))

    @property
    def scheme(self) -> str:
        """``https`` when TLS is configured, else ``http``."""
        return "https" if self.tls_cert_file is not None else "http"

    def problem(self) -> str | None:
        """Why these flags do not go together (a certificate without its key, a client CA without TLS), or None."""
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            return "--metrics-tls-cert-file and --metrics-tls-key-file go together: set both or neither"
        if self.client_ca_file is not None and self.tls_cert_file is None:
            return "--metrics-client-ca-file needs --metrics-tls-cert-file and --metrics-tls-key-file: client certs need TLS"
        return None


NO_SCRAPE_AUTH = ScrapeAuthConfig()
"""No authentication: the settings' default."""


def read_token(path: Path) -> bytes:
    """The token ``path`` holds, whitespace stripped; ScrapeAuthError when unreadable, empty or not a bearer token."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_TOKEN_BYTES + 1)
    except OSError as err:
        raise ScrapeAuthError(f"--metrics-token-file {path}: cannot read it: {err.strerror or err}") from None
    if len(data) > MAX_TOKEN_BYTES:
        raise ScrapeAuthError(f"--metrics-token-file {path}: larger than {MAX_TOKEN_BYTES} bytes, not a token")
    token = data.strip()
    if not token:
        raise ScrapeAuthError(f"--metrics-token-file {path}: empty; a token is needed")
    if not set(token.decode("latin-1")) <= _TOKEN_CHARS:
        raise ScrapeAuthError(
            f"--metrics-token-file {path}: not a bearer token (letters, digits and -._~+/= only, as RFC 6750 allows)"
        )
    return token


def _token_stamp(path: Path) -> Stamp:
    """The token file's stamp; ScrapeAuthError naming the flag and path when it is missing or cannot be looked at."""
    try:
        return stamp_of([path])
    except OSError as err:
        raise ScrapeAuthError(f"--metrics-token-file {path}: cannot read it: {err.strerror or err}") from None


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


class BearerToken:
    """The token of ``--metrics-token-file``, re-read when the file changes; ``authorize`` checks a request's header."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        """Read the file now: ScrapeAuthError when it cannot be used (a start-up error)."""
        self.path = path
        self._digest = Reloaded(
            lambda: _token_stamp(path),
            lambda: _digest(read_token(path)),
            every_s=lambda: RELOAD_CHECK_S,
            clock=clock,
            errors=(OSError, ScrapeAuthError),
            reloaded=lambda: log.info("metrics_token_reloaded", token_file=str(path)),
            failed=lambda err: log.warning(
                "metrics_token_reload_failed", error=str(err), token_file=str(path), effect="last token kept"
            ),
        )

    def _current(self) -> bytes:
        return self._digest.current()

    def authorize(self, headers: Headers) -> bool:
        """True when the request's ``Authorization`` header is ``Bearer <the token>`` (scheme case-insensitive)."""
        get_all = getattr(headers, "get_all", None)
        if get_all is not None and len(get_all("Authorization") or ()) > 1:
            return False  # two credentials: which one counts is the reader's guess
        value = headers.get("Authorization")
        if value is None:
            return False
        scheme, _, given = str(value).strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        expected = self._current()
        return hmac.compare_digest(_digest(given.strip().encode("utf-8", "surrogateescape")), expected)


class ServerTls:
    """The server-side TLS context of the metrics server; a new handshake takes the files as they are now."""

    def __init__(
        self, cert_file: Path, key_file: Path, client_ca_file: Path | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Load the files now: ScrapeAuthError naming them when they cannot be used (a start-up error)."""
        self.cert_file, self.key_file, self.client_ca_file = cert_file, key_file, client_ca_file
        self._contexts = Reloaded(
            self._files_stamp,
            self._load,
            every_s=lambda: RELOAD_CHECK_S,
            clock=clock,
            errors=(ScrapeAuthError,),
            reloaded=lambda: log.info("metrics_tls_reloaded", cert_file=str(self.cert_file)),
            failed=lambda err: log.warning("metrics_tls_reload_failed", error=str(err), effect="last certificate kept"),
        )
        self.context = self._contexts.value
        """The context to wrap sockets with: each handshake is switched to the newest files' context."""
        self.context.sni_callback = self._switch

    def _paths(self) -> list[Path]:
        return [p for p in (self.cert_file, self.key_file, self.client_ca_file) if p is not None]

    def _files_stamp(self) -> Stamp:
        try:
            return stamp_of(self._paths())
        except OSError as err:
            raise ScrapeAuthError(f"metrics TLS files: {err.filename}: {err.strerror or err}") from None

    def _load(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as err:
            raise ScrapeAuthError(
                f"--metrics-tls-cert-file {self.cert_file} / --metrics-tls-key-file {self.key_file}: not a usable "
                f"certificate and key: {err}"
            ) from None
        if self.client_ca_file is not None:
            try:
                ctx.load_verify_locations(cafile=self.client_ca_file)
            except (OSError, ssl.SSLError) as err:
                raise ScrapeAuthError(f"--metrics-client-ca-file {self.client_ca_file}: not a usable CA bundle: {err}") from None
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def newest(self) -> ssl.SSLContext:
        """The context of the files as they are now (re-read at most every ``RELOAD_CHECK_S``; a bad change keeps the last)."""
        return self._contexts.current()

    def _switch(self, sock: ssl.SSLObject | ssl.SSLSocket, _server_name: str | None, _ctx: ssl.SSLContext) -> None:
        # Called by OpenSSL on every ClientHello (with or without a server name): the handshake
        # goes on with the newest files' context.
        sock.context = self.newest()


@dataclass(frozen=True, slots=True)
class ScrapeGuard:
    """What the metrics server is given: the ``authorize`` hook (None: no token) and the TLS context (None: plain HTTP)."""

    token: BearerToken | None = None
    tls: ServerTls | None = None

    @classmethod
    def load(cls, config: ScrapeAuthConfig) -> ScrapeGuard:
        """Read the configured files; ScrapeAuthError naming the flag or file when one cannot be used."""
        if problem := config.problem():
            raise ScrapeAuthError(problem)
        token = BearerToken(config.token_file) if config.token_file is not None else None
        tls = None
        if config.tls_cert_file is not None and config.tls_key_file is not None:
            tls = ServerTls(config.tls_cert_file, config.tls_key_file, config.client_ca_file)
        return cls(token, tls)

    @property
    def authorize(self) -> Callable[[Headers], bool] | None:
        """The server's hook (False: 401), or None when no token is configured."""
        return None if self.token is None else self.token.authorize

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The context to serve TLS with, or None for plain HTTP."""
        return None if self.tls is None else self.tls.context


def load_or_log(config: ScrapeAuthConfig) -> ScrapeGuard | None:
    """``ScrapeGuard.load``, or None after logging ``metrics_auth_unusable`` (the daemon then exits 2)."""
    try:
        return ScrapeGuard.load(config)
    except ScrapeAuthError as err:
        log.error("metrics_auth_unusable", error=str(err))
        return None
