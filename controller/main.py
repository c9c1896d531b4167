"""Entry point of ``dra-gpu-controller``: publishes one node's ResourceSlices, standalone.

Useful without a kubelet plugin (demos, control-plane-only tests, fake GPUs): discovers the
node's GPUs (``make_source``), maps them with the publication rules (``--mig`` included) and runs the
``SlicePublisher`` until SIGTERM or SIGINT, then exits 0. Each flag defaults to an env var.
Prometheus metrics of the publisher (``dra_driver.obs.metrics.PublisherMetrics``) are served over
plain HTTP on ``--metrics-port`` (default 9421, -1 off); a port it cannot listen on exits 2.
"""

from __future__ import annotations

import argparse
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from dra_driver.appkit.daemon import run_daemon
from dra_driver.appkit.flags import (
    add_common_flags,
    add_metrics_flags,
    check_common_flags,
    check_metrics_flags,
)
from dra_driver.appkit.inventory import node_publication
from dra_driver.core.mig import MigStrategy
from dra_driver.mig_backends.select import make_mig_backend
from dra_driver.obs.ports import DEFAULT_METRICS_ADDRESS
from dra_driver.obs.scrape_auth import NO_SCRAPE_AUTH, ScrapeAuthConfig, load_or_log
from dra_driver.sources.select import make_source

if TYPE_CHECKING:
    from dra_driver.appkit.publisher import PublisherMetricsHook

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """Everything the standalone controller needs."""

    node_name: str
    driver_name: str
    fake_gpus: str | None
    kubeconfig: str | None
    log_level: str
    mig: MigStrategy = MigStrategy.NONE
    consumable: bool = False
    fake_gpu_state_dir: Path | None = None
    metrics_port: int = -1
    """Prometheus /metrics port (plain HTTP), 0 = any, -1 = off (the flag's default: 9421)."""
    metrics_address: str = DEFAULT_METRICS_ADDRESS
    metrics_auth: ScrapeAuthConfig = NO_SCRAPE_AUTH
    """Who may scrape /metrics (``dra_driver.obs.scrape_auth``)."""


def parse(argv: list[str] | None = None) -> ControllerSettings:
    """Parse flags (env vars as defaults); exit 2 with a message naming a bad value."""
    p = argparse.ArgumentParser(prog="dra-gpu-controller", description="publish one node's dra-gpu ResourceSlices")
    add_common_flags(p)
    add_metrics_flags(p, "controller")
    a = p.parse_args(argv)
    driver = check_common_flags(p, a)
    metrics_auth = check_metrics_flags(p, a)
    return ControllerSettings(
        node_name=a.node_name,
        driver_name=driver,
        fake_gpus=a.fake_gpus or None,
        kubeconfig=a.kubeconfig or None,
        log_level=a.log_level,
        mig=MigStrategy(a.mig),
        consumable=a.sharing == "consumable",
        fake_gpu_state_dir=Path(a.fake_gpu_state_dir) if a.fake_gpu_state_dir else None,
        metrics_port=a.metrics_port,
        metrics_address=a.metrics_address,
        metrics_auth=metrics_auth,
    )


def run(settings: ControllerSettings, stop: threading.Event) -> int:
    """Publish the node's devices until ``stop`` is set; return the exit code (2: the metrics port or auth files are unusable)."""
    # Imported here, as the publisher's below, so that --help and flag errors load neither client.
    from dra_driver.obs.metrics import MetricsServer, PublisherMetrics, new_registry, serve_or_log

    metrics: PublisherMetrics | None = None
    server: MetricsServer | None = None
    if settings.metrics_port >= 0:
        registry = new_registry()
        metrics = PublisherMetrics(registry)
        guard = load_or_log(settings.metrics_auth)  # who may scrape (a token, TLS)
        if guard is None:
            return 2
        server = serve_or_log(
            registry, settings.metrics_address, settings.metrics_port, authorize=guard.authorize, ssl_context=guard.ssl_context
        )
        if server is None:
            return 2
    try:
        _publish(settings, stop, metrics)
    finally:
        if server is not None:
            server.stop(wait=False)
    return 0


def _publish(settings: ControllerSettings, stop: threading.Event, metrics: PublisherMetricsHook | None) -> None:
    from dra_driver.appkit.publisher import SlicePublisher
    from dra_driver.kube.client import load_api_client
    from dra_driver.kube.slices_api import KubeSliceApi

    source = make_source(fake_gpus=settings.fake_gpus, node_name=settings.node_name)
    gpus = source.gpus()
    log.info("gpus_found", source=source.describe(), count=len(gpus))
    backend = None
    if settings.mig is not MigStrategy.NONE:
        backend = make_mig_backend(fake=settings.fake_gpus is not None, gpus=gpus, state_dir=settings.fake_gpu_state_dir)
    publication = node_publication(gpus, settings.mig, backend, consumable=settings.consumable)

    api = KubeSliceApi(load_api_client(settings.kubeconfig))
    publisher = SlicePublisher(api, settings.driver_name, settings.node_name, metrics=metrics)
    publisher.set_devices(list(publication.devices), list(publication.counter_sets))
    publisher.run(stop)


def main(argv: list[str] | None = None) -> int:
    """Console script entry: parse, configure logs, run until SIGTERM/SIGINT."""
    return run_daemon("controller", argv, parse, run, lambda s: {"node": s.node_name, "driver": s.driver_name})


if __name__ == "__main__":
    raise SystemExit(main())
