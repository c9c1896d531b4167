"""Entry point of ``dra-gpu-webhook``: the validating admission webhook for this driver's opaque configs.

Parses flags (each also an env var; the table: ``webhook.settings``), configures JSON logs, loads
the TLS certificate (a bad one exits 1 at start), serves ``webhook.server`` until SIGTERM or SIGINT,
then stops accepting and exits 0. The HTTPS server is bounded (``webhook.server.REVIEW_LIMITS``;
``--max-connections``, ``--request-timeout``). Prometheus metrics (``dra_driver.obs.metrics.WebhookMetrics``)
are served over plain HTTP on ``--metrics-port`` (default 9422, -1 off;
``dra_driver.appkit.metrics_serving``); a port it cannot listen on exits 2. The Helm chart runs it
when ``webhook.enabled`` (templates/webhook-*.yaml).
"""

from __future__ import annotations

import ssl
import threading
from dataclasses import replace

import structlog

from dra_driver.appkit.daemon import run_daemon
from dra_driver.appkit.metrics_serving import MetricsUnavailable, serve_daemon_metrics
from dra_driver.obs.metrics import WebhookMetrics
from webhook.admission import VALIDATE_PATH
from webhook.server import REVIEW_LIMITS, TlsFiles, WebhookServer
from webhook.settings import WebhookSettings, parse

__all__ = ["WebhookSettings", "main", "parse", "serve"]

log = structlog.get_logger(__name__)


def serve(settings: WebhookSettings, stop: threading.Event) -> int:
    """Serve until ``stop`` is set; return the exit code (1 when the certificate or port is unusable, 2 the metrics port)."""
    try:
        tls = TlsFiles(settings.cert_file, settings.key_file)
    except (OSError, ssl.SSLError) as err:
        log.error("tls_certificate_unusable", error=str(err), cert_file=str(settings.cert_file), key_file=str(settings.key_file))
        return 1
    try:
        served = serve_daemon_metrics(settings, WebhookMetrics)
    except MetricsUnavailable:
        return 2
    try:
        limits = replace(
            REVIEW_LIMITS,
            max_connections=settings.max_connections,
            request_timeout_s=settings.request_timeout_s,
            handshake_timeout_s=min(REVIEW_LIMITS.handshake_timeout_s, settings.request_timeout_s),
        )
        hooks = served.hooks if served is not None else None
        address = (settings.bind_address, settings.port)
        server = WebhookServer(address, tls=tls, driver=settings.driver_name, metrics=hooks, limits=limits)
    except OSError as err:
        log.error("listen_failed", error=str(err), address=settings.bind_address, port=settings.port)
        if served is not None:
            served.stop()
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
    if served is not None:
        served.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Console script entry: parse, configure logs, run until SIGTERM/SIGINT."""
    return run_daemon("webhook", argv, parse, serve, lambda s: {"driver": s.driver_name})


if __name__ == "__main__":
    raise SystemExit(main())
