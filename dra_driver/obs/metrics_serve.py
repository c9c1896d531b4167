"""The /metrics listener of the dra-gpu daemons: one registry served on the bounded HTTP server.

``serve_metrics``/``serve_or_log`` are called by the daemons' ``main`` (re-exported by
``dra_driver.obs.metrics``) with ``--metrics-port``/``METRICS_PORT`` and
``--metrics-address``/``METRICS_ADDRESS`` (-1 is off). The server is
``dra_driver.obs.http_server`` with ``METRICS_LIMITS`` (a connection cap, deadlines, two threads;
a scrape flood cannot take the daemon's threads or descriptors); ``MetricsApp`` answers as
prometheus-client's own WSGI app does.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qs

import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from dra_driver.obs.http_server import HttpServer
from dra_driver.obs.http_types import Authorize, Limits, Request, RequestHead, Response, TlsSource, text
from dra_driver.obs.ports import IPV6_MISSING, METRICS_FLAGS, bind_host

log = structlog.get_logger(__name__)


class MetricsPortError(Exception):
    """The metrics server cannot listen where it was told (port taken, address not on this host)."""


METRICS_LIMITS: Final = Limits(
    max_connections=32,  # Prometheus holds one kept-alive connection per target; a few scrapers and probes
    request_timeout_s=10.0,
    handshake_timeout_s=5.0,
    idle_timeout_s=120.0,  # longer than a scrape interval: a kept-alive scraper is never cut (the cap evicts idle ones)
    max_body_bytes=0,  # a scrape has no body
    workers=2,
)
"""The /metrics listener's bounds (``dra_driver.obs.http_server``): 2 threads, at most 32 connections."""


class MetricsApp:
    """prometheus-client's exposition of one registry, as its own WSGI app answers (any path; OPTIONS, GET, HEAD)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def check(self, head: RequestHead) -> Response | None:
        """OPTIONS is answered here; any method but GET and HEAD is 405."""
        allow = (("Allow", "OPTIONS,GET"),)
        if head.method == "OPTIONS":
            return Response(200, headers=allow, content_type=None)
        if head.method not in ("GET", "HEAD"):
            return text(405, f"# HTTP 405 Method Not Allowed: {head.method[:32]}; use OPTIONS or GET", headers=allow)
        return None

    def handle(self, request: Request) -> Response:
        """The registry's samples in the format the scraper accepts (gzip if it asks), ``name[]`` filtering as upstream."""
        head = request.head
        if head.path == "/favicon.ico":
            return Response(200, content_type=None)
        encoder, content_type = choose_encoder(head.headers.get("accept", ""))
        names = parse_qs(head.query).get("name[]")
        registry = self._registry.restricted_registry(names) if names else self._registry
        output = encoder(registry)
        if gzip_accepted(head.headers.get("accept-encoding", "")):
            return Response(200, gzip.compress(output), content_type, headers=(("Content-Encoding", "gzip"),))
        return Response(200, output, content_type)


@dataclass(slots=True)
class MetricsServer:
    """The bounded HTTP server serving one registry's ``/metrics``; ``stop`` at shutdown."""

    port: int
    """The bound port (the one asked for, or the one the system chose for 0)."""
    server: HttpServer

    def stop(self, *, wait: bool = True) -> None:
        """Stop serving and close the socket.

        With ``wait=False`` this returns at once and the socket closes in the background (a
        daemon's shutdown: its process exits anyway, and its SIGTERM path gets no slower).
        """
        closer = threading.Thread(target=self.server.stop, kwargs={"grace_s": 1.0}, name="metrics-stop", daemon=True)
        closer.start()
        if wait:
            closer.join()


def serve_metrics(
    registry: CollectorRegistry,
    address: str,
    port: int,
    *,
    authorize: Authorize | None = None,
    ssl_context: TlsSource | None = None,
    limits: Limits = METRICS_LIMITS,
) -> MetricsServer:
    """Serve ``registry`` on ``address:port`` (0: any free port) from a daemon thread; log ``metrics_listening``.

    ``::`` (or ``[::]``) is every address, IPv4 too; on a host without IPv6 it falls back to
    ``0.0.0.0``. ``authorize``: a scrape's headers -> whether to answer it (401 otherwise);
    ``ssl_context``: serve HTTPS. Raises MetricsPortError naming the address, the port and the
    flags when the port is taken or the address is not this host's.
    """
    if not 0 <= port <= 65535:
        raise MetricsPortError(f"metrics port {port} is not a port number (0-65535; -1 turns metrics off); set {METRICS_FLAGS}")
    host = bind_host(address)
    try:
        server = HttpServer("metrics", host, port, MetricsApp(registry), limits, tls=ssl_context, authorize=authorize)
    except OSError as err:
        if host != "::" or err.errno not in IPV6_MISSING:
            raise MetricsPortError(
                f"cannot serve metrics on {address} port {port}: {err.strerror or err}; "
                f"choose another with {METRICS_FLAGS}, or -1 to turn metrics off"
            ) from err
        log.info("metrics_ipv6_unavailable", error=str(err), address="0.0.0.0")  # noqa: S104 - every address, as asked
        every_ipv4 = "0.0.0.0"  # noqa: S104 - every IPv4 address: "::" was asked for
        return serve_metrics(
            registry,
            every_ipv4,
            port,
            authorize=authorize,
            ssl_context=ssl_context,
            limits=limits,
        )
    server.start()
    log.info("metrics_listening", address=address, port=server.port, path="/metrics", max_connections=server.max_connections)
    return MetricsServer(server.port, server)


def serve_or_log(
    registry: CollectorRegistry,
    address: str,
    port: int,
    *,
    authorize: Authorize | None = None,
    ssl_context: TlsSource | None = None,
    limits: Limits = METRICS_LIMITS,
) -> MetricsServer | None:
    """``serve_metrics``, or None after logging ``metrics_port_unavailable`` (the daemon then exits 2)."""
    try:
        return serve_metrics(registry, address, port, authorize=authorize, ssl_context=ssl_context, limits=limits)
    except MetricsPortError as err:
        log.error("metrics_port_unavailable", error=str(err), address=address, port=port)
        return None
