"""Entry point of ``dra-gpu-webhook``: the validating admission webhook for this driver's opaque configs.

Parses flags (each also an env var), configures JSON logs, loads the TLS certificate (a bad
one exits 1 at start), serves ``webhook.server`` until SIGTERM or SIGINT, then stops accepting
and exits 0. The HTTPS server is bounded (``webhook.server.REVIEW_LIMITS``; ``--max-connections``,
``--request-timeout``). Prometheus metrics (``dra_driver.obs.metrics.WebhookMetrics``) are served over plain
HTTP on ``--metrics-port`` (default 9422, -1 off); a port it cannot listen on exits 2. The Helm
chart runs it when ``webhook.enabled`` (templates/webhook-*.yaml).
"""

from __future__ import annotations

import argparse
import logging
import ssl
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import structlog

from dra_driver.appkit.daemon import run_daemon
from dra_driver.appkit.flags import add_metrics_flags, check_metrics_flags, env
from dra_driver.core.driver import DEFAULT_DRIVER_NAME, validate_driver_name
from dra_driver.obs.metrics import MetricsServer, WebhookMetrics, new_registry, serve_or_log
from dra_driver.obs.ports import DEFAULT_METRICS_ADDRESS
from dra_driver.obs.scrape_auth import NO_SCRAPE_AUTH, ScrapeAuthConfig, load_or_log
from webhook.admission import VALIDATE_PATH
from webhook.server import REVIEW_LIMITS, TlsFiles, WebhookServer

log = structlog.get_logger(__name__)

DEFAULT_PORT = 8443


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """Everything the webhook needs to start."""

    bind_address: str
    port: int
    cert_file: Path
    key_file: Path
    driver_name: str
    log_level: str
    metrics_port: int = -1
    """Prometheus /metrics port (plain HTTP), 0 = any, -1 = off (the flag's default: 9422)."""
    metrics_address: str = DEFAULT_METRICS_ADDRESS
    metrics_auth: ScrapeAuthConfig = NO_SCRAPE_AUTH
    """Who may scrape /metrics (``dra_driver.obs.scrape_auth``)."""
    max_connections: int = REVIEW_LIMITS.max_connections
    """HTTPS connections held at most (a new one beyond takes an idle or slow one's place)."""
    request_timeout_s: float = REVIEW_LIMITS.request_timeout_s
    """Seconds a client has to send a whole request, headers and body."""


def parse(argv: list[str] | None = None) -> WebhookSettings:
    """Parse flags (env vars as defaults); exit 2 with a message naming a bad value."""
    p = argparse.ArgumentParser(
        prog="dra-gpu-webhook", description=f"validating admission webhook for dra-gpu opaque configs ({VALIDATE_PATH})"
    )
    every_address = "0.0.0.0"  # noqa: S104 - a server in a pod listens on the pod's addresses
    p.add_argument(
        "--bind-address", default=env("BIND_ADDRESS", every_address), help="address to listen on; '::' for IPv6 [BIND_ADDRESS]"
    )
    p.add_argument("--port", default=env("PORT", str(DEFAULT_PORT)), help=f"HTTPS port (default {DEFAULT_PORT}) [PORT]")
    p.add_argument(
        "--tls-cert-file", default=env("TLS_CERT_FILE"), help="PEM certificate (chain) to serve [TLS_CERT_FILE] (required)"
    )
    p.add_argument(
        "--tls-private-key-file", default=env("TLS_PRIVATE_KEY_FILE"), help="PEM private key [TLS_PRIVATE_KEY_FILE] (required)"
    )
    p.add_argument(
        "--driver-name",
        default=env("DRIVER_NAME", DEFAULT_DRIVER_NAME),
        help="DRA driver name whose configs to validate [DRIVER_NAME]",
    )
    p.add_argument("--log-level", default=env("LOG_LEVEL", "info"), help="debug, info, warning, error [LOG_LEVEL]")
    p.add_argument(
        "--max-connections",
        default=env("MAX_CONNECTIONS", str(REVIEW_LIMITS.max_connections)),
        help=f"HTTPS connections held at most; beyond, a new one takes an idle or slow one's place "
        f"(default {REVIEW_LIMITS.max_connections}) [MAX_CONNECTIONS]",
    )
    p.add_argument(
        "--request-timeout",
        default=env("REQUEST_TIMEOUT", f"{REVIEW_LIMITS.request_timeout_s:g}"),
        help=f"seconds a client has to send a whole request, headers and body "
        f"(default {REVIEW_LIMITS.request_timeout_s:g}) [REQUEST_TIMEOUT]",
    )
    add_metrics_flags(p, "webhook")
    a = p.parse_args(argv)
    metrics_auth = check_metrics_flags(p, a)
    if not a.tls_cert_file or not a.tls_private_key_file:
        p.error("--tls-cert-file and --tls-private-key-file (or TLS_CERT_FILE and TLS_PRIVATE_KEY_FILE) are required")
    try:
        port = int(a.port)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        p.error(f"--port: not a port number: {a.port!r}")
    try:
        driver = validate_driver_name(a.driver_name)
    except ValueError as err:
        p.error(f"--driver-name: {err}")
    if a.log_level.upper() not in logging.getLevelNamesMapping():
        p.error(f"--log-level: unknown level {a.log_level!r}")
    max_connections = _number(p, "--max-connections", a.max_connections, int, low=1, high=100_000)
    request_timeout = _number(p, "--request-timeout", a.request_timeout, float, low=0.1, high=300.0)
    return WebhookSettings(
        bind_address=a.bind_address,
        port=port,
        cert_file=Path(a.tls_cert_file),
        key_file=Path(a.tls_private_key_file),
        driver_name=driver,
        log_level=a.log_level,
        metrics_port=a.metrics_port,
        metrics_address=a.metrics_address,
        metrics_auth=metrics_auth,
        max_connections=int(max_connections),
        request_timeout_s=float(request_timeout),
    )


def _number(p: argparse.ArgumentParser, flag: str, value: str, kind: type[float], *, low: float, high: float) -> float:
    """``value`` as ``kind`` within ``low..high``; ``p.error`` (exit 2) naming ``flag`` otherwise."""
    try:
        number = kind(value)
    except ValueError:
        p.error(f"{flag}: not a number: {value!r}")
    if not low <= number <= high:
        p.error(f"{flag}: {value} is outside {low:g}..{high:g}")
    return number


def serve(settings: WebhookSettings, stop: threading.Event) -> int:
    """Serve until ``stop`` is set; return the exit code (1 when the certificate or port is unusable, 2 the metrics port)."""
    try:
        tls = TlsFiles(settings.cert_file, settings.key_file)
    except (OSError, ssl.SSLError) as err:
        log.error("tls_certificate_unusable", error=str(err), cert_file=str(settings.cert_file), key_file=str(settings.key_file))
        return 1
    metrics: WebhookMetrics | None = None
    metrics_server: MetricsServer | None = None
    if settings.metrics_port >= 0:
        registry = new_registry()
        metrics = WebhookMetrics(registry)
        guard = load_or_log(settings.metrics_auth)  # who may scrape (a token, TLS)
        if guard is None:
            return 2
        metrics_server = serve_or_log(
            registry, settings.metrics_address, settings.metrics_port, authorize=guard.authorize, ssl_context=guard.ssl_context
        )
        if metrics_server is None:
            return 2
    try:
        limits = replace(
            REVIEW_LIMITS,
            max_connections=settings.max_connections,
            request_timeout_s=settings.request_timeout_s,
            handshake_timeout_s=min(REVIEW_LIMITS.handshake_timeout_s, settings.request_timeout_s),
        )
        server = WebhookServer(
            (settings.bind_address, settings.port), tls=tls, driver=settings.driver_name, metrics=metrics, limits=limits
        )
    except OSError as err:
        log.error("listen_failed", error=str(err), address=settings.bind_address, port=settings.port)
        if metrics_server is not None:
            metrics_server.stop(wait=False)
        return 1
    thread = threading.Thread(target=server.serve_forever, name="webhook-server", daemon=True)
    thread.start()
    log.info(
        "webhook_serving",
        address=settings.bind_address,
        port=server.port,
        path=VALIDATE_PATH,
        max_connections=server.max_connections,
        request_timeout_s=settings.request_timeout_s,
    )
    stop.wait()
    server.shutdown()  # stops accepting; reviews being answered finish
    server.server_close()
    thread.join()
    if metrics_server is not None:
        metrics_server.stop(wait=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Console script entry: parse, configure logs, run until SIGTERM/SIGINT."""
    return run_daemon("webhook", argv, parse, serve, lambda s: {"driver": s.driver_name})


if __name__ == "__main__":
    raise SystemExit(main())
