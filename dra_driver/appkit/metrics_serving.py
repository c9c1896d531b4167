"""The daemons' /metrics listener: one registry, filled by the daemon, served with its scrape auth.

Called by ``kubelet_plugin.main``, ``controller.main`` and ``webhook.main`` after their own
start-up work: ``serve_daemon_metrics`` is None when ``--metrics-port`` is -1; otherwise it builds a
registry (``dra_driver.obs.metrics.new_registry``), lets the daemon register its metrics on it
(``build``, whose return it keeps as ``hooks``), loads who may scrape (``load_or_log``: the token and
TLS files) and listens (``serve_or_log``). Either failure is logged by those and raised as
``MetricsUnavailable``: the daemon exits 2. prometheus_client is imported only here, in the call,
so ``--help`` and flag errors never load it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from dra_driver.obs.scrape_auth import ScrapeAuthConfig, load_or_log

if TYPE_CHECKING:
    from dra_driver.obs.metrics import MetricsServer, Registry

T = TypeVar("T")


class MetricsSettings(Protocol):
    """The /metrics fields of every daemon's settings (``dra_driver.appkit.flags.metrics_flags``)."""

    @property
    def metrics_port(self) -> int:
        """0 = any free port, -1 = off."""
        ...

    @property
    def metrics_address(self) -> str:
        """Where to listen."""
        ...

    @property
    def metrics_auth(self) -> ScrapeAuthConfig:
        """Who may scrape."""
        ...


class MetricsUnavailable(Exception):
    """The scrape auth files or the port are unusable (already logged); the daemon exits 2."""


@dataclass(slots=True)
class ServedMetrics(Generic[T]):
    """A daemon's metrics being served: what ``build`` returned, and the server."""

    hooks: T
    server: MetricsServer

    def stop(self) -> None:
        """Stop listening (scrapes being answered are not waited for)."""
        self.server.stop(wait=False)


def serve_daemon_metrics(settings: MetricsSettings, build: Callable[[Registry], T]) -> ServedMetrics[T] | None:
    """None when metrics are off; else ``build``'s hooks and the listening server (``MetricsUnavailable`` if it cannot)."""
    if settings.metrics_port < 0:
        return None
    from dra_driver.obs.metrics import new_registry, serve_or_log

    registry = new_registry()
    hooks = build(registry)
    guard = load_or_log(settings.metrics_auth)  # who may scrape (a token, TLS); logged when unusable
    if guard is None:
        raise MetricsUnavailable
    server = serve_or_log(
        registry, settings.metrics_address, settings.metrics_port, authorize=guard.authorize, ssl_context=guard.ssl_context
    )
    if server is None:  # logged
        raise MetricsUnavailable
    return ServedMetrics(hooks, server)
