"""The daemons' one /metrics helper (dra_driver.appkit.metrics_serving): off, served, or MetricsUnavailable (exit 2)."""

from __future__ import annotations

import socket
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from dra_driver.appkit.metrics_serving import MetricsUnavailable, serve_daemon_metrics
from dra_driver.obs.metrics import Registry, WebhookMetrics
from dra_driver.obs.scrape_auth import ScrapeAuthConfig


@dataclass(frozen=True)
class _Settings:
    metrics_port: int
    metrics_address: str = "127.0.0.1"
    metrics_auth: ScrapeAuthConfig = field(default_factory=ScrapeAuthConfig)


def test_off_builds_nothing_and_serves_nothing() -> None:
    built: list[Registry] = []
    assert serve_daemon_metrics(_Settings(-1), built.append) is None
    assert built == []


def test_on_serves_what_the_daemon_registered_and_returns_its_hooks() -> None:
    served = serve_daemon_metrics(_Settings(0), WebhookMetrics)
    assert served is not None
    try:
        assert isinstance(served.hooks, WebhookMetrics)
        with urllib.request.urlopen(f"http://127.0.0.1:{served.server.port}/metrics", timeout=5) as resp:
            assert "dra_gpu_admission_requests_total" in resp.read().decode()
    finally:
        served.stop()


def test_a_taken_port_raises_after_logging_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with capture_logs() as logs, pytest.raises(MetricsUnavailable):
            serve_daemon_metrics(_Settings(taken.getsockname()[1]), WebhookMetrics)
    assert ["metrics_port_unavailable"] == [e["event"] for e in logs]


def test_an_unusable_token_file_raises_after_logging_it(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("")
    settings = _Settings(0, metrics_auth=ScrapeAuthConfig(token_file=tmp_path / "token"))
    with capture_logs() as logs, pytest.raises(MetricsUnavailable):
        serve_daemon_metrics(settings, WebhookMetrics)
    assert ["metrics_auth_unusable"] == [e["event"] for e in logs]
