"""Entry point of ``dra-gpu-controller``: publishes one node's ResourceSlices, standalone.

Useful without a kubelet plugin (demos, control-plane-only tests, fake GPUs): discovers the
node's GPUs (``make_source``), maps them with the publication rules (``--mig`` included) and runs the
``SlicePublisher`` until SIGTERM or SIGINT, then exits 0. Between the two sit the kubelet plugin's
guards (``dra_driver.appkit.device_plugin_guard``, ``dra_driver.appkit.local_cordon``): a kubelet
plugin started with ``--publish-slices=false`` prepares what the controller publishes, so a device
plugin serving the node's GPUs, or a GPU cordoned locally, keeps devices out of its slices here
too. Each flag defaults to an env var (the table: ``controller.settings``). Prometheus metrics of the publisher
(``dra_driver.obs.metrics.PublisherMetrics``) are served over plain HTTP on ``--metrics-port``
(default 9421, -1 off; ``dra_driver.appkit.metrics_serving``); a port it cannot listen on exits 2.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import structlog

from controller.settings import ControllerSettings, parse
from dra_driver.appkit.daemon import run_daemon
from dra_driver.appkit.inventory import node_publication
from dra_driver.appkit.metrics_serving import MetricsUnavailable, serve_daemon_metrics
from dra_driver.appkit.node_guards import guard_publisher
from dra_driver.core.mig import MigStrategy
from dra_driver.files.checkpoint_store import Notice
from dra_driver.mig_backends.select import make_mig_backend
from dra_driver.sources.select import make_source

if TYPE_CHECKING:
    from dra_driver.appkit.slice_api import PublisherMetricsHook

__all__ = ["main", "parse", "run"]

log = structlog.get_logger(__name__)


def run(settings: ControllerSettings, stop: threading.Event) -> int:
    """Publish the node's devices until ``stop`` is set; return the exit code (2: the metrics port or auth files are unusable)."""
    # Imported here, as the publisher's below, so that --help and flag errors load neither client.
    from dra_driver.obs.metrics import PublisherMetrics

    try:
        served = serve_daemon_metrics(settings, PublisherMetrics)
    except MetricsUnavailable:
        return 2
    try:
        _publish(settings, stop, served.hooks if served is not None else None)
    finally:
        if served is not None:
            served.stop()
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
    publication = node_publication(
        gpus, settings.mig, backend, consumable=settings.consumable, mig_profiles=settings.mig_profiles
    )

    client = load_api_client(settings.kubeconfig)
    api = KubeSliceApi(client)
    for note in publication.notes:
        log.warning("publication_note", note=note)
    publisher = SlicePublisher(api, settings.driver_name, settings.node_name, metrics=metrics)
    # The same guards as the kubelet plugin's: a kubelet plugin with publishSlices=false prepares what this
    # publishes, so a device plugin on the node, or a local cordon, must keep devices out of these slices too.
    target = guard_publisher(
        publisher,
        node_name=settings.node_name,
        driver=settings.driver_name,
        device_plugin_interval_s=settings.device_plugin_check_interval_s,
        local_cordon_interval_s=settings.local_cordon_check_interval_s,
        api_client=client,
        notify=_logged,
        stop=stop,
    )
    target.set_devices(list(publication.devices), list(publication.counter_sets))
    publisher.run(stop)


def _logged(notice: Notice) -> None:
    """The guards' Node Events, as log lines: the controller's role may not create Events."""
    log.warning("node_event_not_sent", reason=notice.reason, message=notice.message, warning=notice.warning)


def main(argv: list[str] | None = None) -> int:
    """Console script entry: parse, configure logs, run until SIGTERM/SIGINT."""
    return run_daemon("controller", argv, parse, run, lambda s: {"node": s.node_name, "driver": s.driver_name})


if __name__ == "__main__":
    raise SystemExit(main())
