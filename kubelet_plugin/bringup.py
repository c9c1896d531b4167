"""What the kubelet plugin builds once its sockets serve: GPUs, MIG, the publication, the recovered state, the rest.

Imported by ``kubelet_plugin.main`` only after the sockets serve (this module's imports are most of
the plugin's start-up). ``build``: find the GPUs (the API client loads meanwhile,
``kubelet_plugin.api_link``), the publication and the device state; ``bring_up``: recover the checkpoint, the health
monitor's record → open the ``kubelet_plugin.start_gate`` (the kubelet's held calls proceed) → wait
for the API client → metrics (``dra_driver.appkit.metrics_serving``; prometheus_client is loaded only
now; a metrics port it cannot listen on ends start-up: None) → slice publisher.
``Running.stop`` stops what it started, after the servers (``kubelet_plugin.servers``); the caller
closes the state last.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from dra_driver.appkit.inventory import node_publication
from dra_driver.appkit.metrics_serving import MetricsUnavailable, ServedMetrics, serve_daemon_metrics
from dra_driver.appkit.node_guards import guard_publisher
from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import MigBackend, MigStrategy
from dra_driver.core.mig_publish import Publication
from dra_driver.core.schema import gpu_device_name
from dra_driver.files.checkpoint_store import Notice
from dra_driver.mig_backends.select import make_mig_backend
from dra_driver.sources.select import make_source
from kubelet_plugin.api_link import ApiLink
from kubelet_plugin.assembly import build_state, health_monitor, status_reporter
from kubelet_plugin.monitoring.device_status import DeviceStatusReporter
from kubelet_plugin.monitoring.health_monitor import HealthMonitor
from kubelet_plugin.monitoring.health_stream import HealthStreams
from kubelet_plugin.monitoring.health_taints import TaintedPublication
from kubelet_plugin.monitoring.pod_notes import PodNotes
from kubelet_plugin.prepare.state import DeviceState
from kubelet_plugin.servicer import MetricsSlot
from kubelet_plugin.settings import Settings
from kubelet_plugin.start_gate import Parts, StartGate

if TYPE_CHECKING:
    from dra_driver.obs.metrics import PluginMetrics, PublisherMetrics
    from dra_driver.obs.metrics import Registry as CollectorRegistry
    from kubelet_plugin.monitoring.usage import UsageSampler
    from kubelet_plugin.prepare.recovery import StartReport

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class Running:
    """What ``bring_up`` started, for the plugin's shutdown (the state is the caller's to close)."""

    status: DeviceStatusReporter | None
    publisher_thread: threading.Thread | None
    metrics: _Metrics | None

    def stop(self) -> None:
        """After the servers: the publisher, the metrics, the status reporter."""
        if self.publisher_thread is not None:
            self.publisher_thread.join(timeout=5.0)
        if self.metrics is not None:
            self.metrics.stop()
        if self.status is not None:
            self.status.stop()


@dataclass(frozen=True, slots=True)
class Built:
    """The node's GPUs and publication, and the device state over them (not yet recovered)."""

    gpus: list[GpuInfo]
    publication: Publication
    pods: PodNotes
    state: DeviceState


def build(settings: Settings, link: ApiLink, *, boot_id: str) -> Built:
    """Find the GPUs, make the MIG backend and the publication, and the device state over the plugin's files."""
    source = make_source(fake_gpus=settings.fake_gpus, node_name=settings.node_name)
    gpus = source.gpus()
    log.info("gpus_found", source=source.describe(), count=len(gpus), uuids=[g.uuid for g in gpus])

    backend: MigBackend | None = None
    if settings.mig is not MigStrategy.NONE:
        backend = make_mig_backend(
            fake=settings.fake_gpus is not None,
            gpus=gpus,
            state_dir=settings.fake_gpu_state_dir,
            latency=settings.fake_mig_latency,
            boot_id=boot_id,
        )
    # One publication: the start-up sweep only destroys dynamic instances, which the publication
    # (every placement, carved or not) does not list; static instances are never touched.
    publication = node_publication(
        gpus, settings.mig, backend, consumable=settings.consumable, mig_profiles=settings.mig_profiles
    )
    pods = PodNotes()
    state = build_state(settings, gpus, publication, backend, link, boot_id=boot_id, pods=pods)
    return Built(gpus, publication, pods, state)


def bring_up(
    settings: Settings,
    link: ApiLink,
    gate: StartGate,
    built: Built,
    *,
    boot_id: str,
    slot: MetricsSlot | None,
    stop: threading.Event,
) -> Running | None:
    """Recover the state, open ``gate``, then monitoring, metrics and the publisher; raises what stops start-up.

    None: the metrics port or files became unusable since the preflight (logged); exit code 2. What
    this started is stopped again when it raises or returns None; the caller closes the state, after
    its servers.
    """
    state, publication = built.state, built.publication
    report = state.startup()
    for note in publication.notes:
        log.warning("publication_note", note=note)
    log.info(
        "devices_published", mig=settings.mig.value, devices=len(publication.devices), counter_sets=len(publication.counter_sets)
    )
    started = Running(status_reporter(settings, link), None, None)
    try:
        monitor = health_monitor(settings, built.gpus, link, boot_id=boot_id)
        tainted = TaintedPublication(publication, settings.driver_name, evict_fatal=settings.health_evict)
        if stop.is_set():  # SIGTERM while recovering: nothing is served from it, the shutdown follows
            gate.fail("the plugin is stopping")
            return started
        gate.open(Parts(state, started.status, _health_streams(settings, monitor, publication)))
        log.info("calls_accepted")
        usage = _usage_sampler(settings, state, publication, built.pods)
        extra = _monitoring_collectors(settings, built.gpus, monitor, usage)
        api_client = link.wait()  # loaded while the GPUs and the state came up; a bad kubeconfig still fails start-up
        started.metrics = _start_metrics(settings, state, report, slot, extra)
        _start_monitor(monitor, tainted, stop)
        if usage is not None:
            threading.Thread(
                target=_usage_loop, args=(usage, state, link, built.pods, stop), name="gpu-usage", daemon=True
            ).start()
        if settings.gc_interval_s > 0:
            threading.Thread(target=_gc_loop, args=(state, settings.gc_interval_s, stop), name="claim-gc", daemon=True).start()
        if state.refusal is not None:
            # Serve (every call answers the refusal; no crash loop) but offer no devices to schedule.
            log.error("plugin_refusing", reason=state.refusal, publishing=False)
        elif settings.publish_slices:
            started.publisher_thread = _start_publisher(
                settings,
                api_client,
                link,
                tainted,
                stop,
                metrics=started.metrics.hooks[1] if started.metrics is not None else None,
            )
    except MetricsUnavailable:
        started.stop()
        return None
    except BaseException:
        started.stop()
        raise
    return started


def _usage_sampler(settings: Settings, state: DeviceState, publication: Publication, pods: PodNotes) -> UsageSampler | None:
    """The per-claim utilization sampler (None when ``--usage-interval 0`` or metrics are off: nothing reads it)."""
    if settings.usage_interval_s <= 0 or settings.metrics_port < 0:
        return None
    # Loaded now, after the sockets serve: nothing on the kubelet's path needs the sampler.
    from kubelet_plugin.monitoring.usage import UsageSampler, cdi_spec_mtime, make_usage_source

    return UsageSampler(
        source=make_usage_source(
            fake=settings.fake_gpus is not None, state_dir=settings.fake_gpu_state_dir or settings.plugin_dir / "fake-gpus"
        ),
        claims=state.prepared_snapshot,
        targets=publication.targets,
        prepared_at=cdi_spec_mtime(settings.cdi_root, settings.driver_name),
        pods=pods,
        interval_s=settings.usage_interval_s,
    )


def _usage_loop(usage: UsageSampler, state: DeviceState, link: ApiLink, pods: PodNotes, stop: threading.Event) -> None:
    """The usage sampler's thread: the pods of claims prepared before a restart, then samples until ``stop``.

    One claim read each, which prepare makes only for new claims: without it their ``pod`` label
    would stay empty until the next garbage collection pass.
    """
    for entry in list(state.prepared_snapshot().values()):
        if stop.is_set():
            return
        try:
            pods.note(link.get_claim(entry.namespace, entry.name))
        except Exception as err:  # noqa: BLE001 - the pod label stays empty until the GC pass reads the claim
            log.debug("usage_claim_unreadable", claim=f"{entry.namespace}/{entry.name}", error=str(err))
    usage.run(stop)


def _monitoring_collectors(
    settings: Settings, gpus: list[GpuInfo], monitor: HealthMonitor | None, usage: UsageSampler | None
) -> list[Callable[[CollectorRegistry], object]]:
    """What registers the health and usage collectors on the metrics registry (loaded with it, after the sockets)."""
    out: list[Callable[[CollectorRegistry], object]] = []
    if monitor is not None:

        def health(registry: CollectorRegistry) -> None:
            from dra_driver.obs.metrics import HealthCollector

            registry.register(HealthCollector(lambda: monitor.book, {g.uuid: gpu_device_name(g.minor) for g in gpus}))

        out.append(health)
    if usage is not None:

        def usage_rows(registry: CollectorRegistry) -> object:
            from dra_driver.obs.usage_metrics import register_usage_collector

            return register_usage_collector(
                registry, usage.snapshot, settings.node_name, tenant_labels=settings.metrics_tenant_labels
            )

        out.append(usage_rows)
    return out


def _start_monitor(monitor: HealthMonitor | None, tainted: TaintedPublication, stop: threading.Event) -> None:
    """The monitor's thread; its changes republish the devices with taints."""
    if monitor is None:
        return
    tainted.on_change(monitor.book)
    monitor.set_on_change(tainted.on_change)
    threading.Thread(target=monitor.run, args=(stop,), name="gpu-health", daemon=True).start()


def _health_streams(settings: Settings, monitor: HealthMonitor | None, publication: Publication) -> HealthStreams | None:
    if monitor is None or not settings.health_stream:
        return None
    by_gpu: dict[str, list[str]] = {}
    for name, target in publication.targets.items():
        by_gpu.setdefault(target.gpu.uuid, []).append(name)
    return HealthStreams(monitor, pool_name=settings.node_name, devices_by_gpu=by_gpu)


_Metrics = ServedMetrics[tuple["PluginMetrics", "PublisherMetrics"]]
"""The plugin's metrics being served: the calls' and the publisher's hooks, and the server."""


def _start_metrics(
    settings: Settings,
    state: DeviceState,
    report: StartReport,
    slot: MetricsSlot | None,
    extra: Sequence[Callable[[CollectorRegistry], object]] = (),
) -> _Metrics | None:
    """The metrics (None when off): the calls' metrics into ``slot``, the prepared claims' gauges, the server.

    Checked before the sockets too (``kubelet_plugin.main``); a file or the port may have gone since (``MetricsUnavailable``).
    """
    if slot is None:
        return None

    def build(registry: CollectorRegistry) -> tuple[PluginMetrics, PublisherMetrics]:
        # Loaded only now, after the sockets serve: prometheus_client takes about 0.1 s to import.
        from dra_driver.obs.metrics import PluginMetrics, PreparedClaimsCollector, PublisherMetrics

        plugin = PluginMetrics(registry)
        plugin.checkpoint_loaded(report.reasons, fresh=report.fresh)
        mig_devices = [name for name, target in state.targets.items() if target.is_mig]
        registry.register(PreparedClaimsCollector(state.prepared_snapshot, mig_devices))
        publisher = PublisherMetrics(registry)
        for register in extra:  # GPU health, per-claim usage
            register(registry)
        return plugin, publisher

    served = serve_daemon_metrics(settings, build)
    if served is not None:
        slot.sink = served.hooks[0]
    return served


def _start_publisher(
    settings: Settings,
    api_client: Any,
    link: ApiLink,
    publication: TaintedPublication,
    stop: threading.Event,
    *,
    metrics: PublisherMetrics | None = None,
) -> threading.Thread:
    """The node's ResourceSlice publisher, on a thread of its own until ``stop``."""
    from dra_driver.appkit.publisher import SlicePublisher
    from dra_driver.kube.slices_api import KubeSliceApi

    def refused(message: str) -> None:
        link.notify(Notice("DevicesNotPublished", message, warning=True))

    api = KubeSliceApi(api_client)
    publisher = SlicePublisher(
        api, settings.driver_name, settings.node_name, on_refusal=refused, metrics=metrics, on_dropped=publication.on_dropped
    )

    target = guard_publisher(  # no cordoned GPU, nothing beside a device plugin (NODE_GUARD_FLAGS)
        publisher,
        node_name=settings.node_name,
        driver=settings.driver_name,
        device_plugin_interval_s=settings.device_plugin_check_interval_s,
        local_cordon_interval_s=settings.local_cordon_check_interval_s,
        api_client=api_client,
        notify=link.notify,
        stop=stop,
    )

    def run() -> None:
        publication.attach(target, api.server_minor_version)  # on this thread: the version is an API call
        publisher.run(stop)

    thread = threading.Thread(target=run, name="slice-publisher", daemon=True)
    thread.start()
    return thread


def _gc_loop(state: DeviceState, interval_s: float, stop: threading.Event) -> None:
    """Every ``interval_s``: unprepare claims whose ResourceClaim is gone. Never raises."""
    while not stop.wait(interval_s):
        try:
            state.collect_garbage()
        except Exception:
            log.exception("gc_failed")
