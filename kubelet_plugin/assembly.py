"""The kubelet plugin's parts built from its settings.

The device state, the claim status reporter and the GPU health monitor.

Called by ``kubelet_plugin.bringup`` once the sockets serve; each returns None where its settings turn it off.
"""

from __future__ import annotations

from pathlib import Path

import structlog

from dra_driver.core.cdi import FAKE_DEVICE_NODE_HOST
from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import MigBackend
from dra_driver.core.mig_publish import Publication
from dra_driver.files.cdi_store import CdiStore
from dra_driver.files.checkpoint_store import CheckpointStore
from dra_driver.sharing_backends.select import make_sharing_backend
from kubelet_plugin.api_link import ApiLink
from kubelet_plugin.driver_userspace import driver_supply
from kubelet_plugin.monitoring.device_status import DeviceStatusReporter, StatusWriter
from kubelet_plugin.monitoring.health_monitor import HealthMonitor, MonitorConfig
from kubelet_plugin.monitoring.pod_notes import PodNotes
from kubelet_plugin.prepare.mig_ops import MigOps
from kubelet_plugin.prepare.state import DeviceState
from kubelet_plugin.settings import Settings

log = structlog.get_logger(__name__)

TOOLKIT_SPEC_DIR = Path("/etc/cdi")  # where nvidia-ctk writes its spec besides /var/run/cdi


def build_state(
    settings: Settings,
    gpus: list[GpuInfo],
    publication: Publication,
    backend: MigBackend | None,
    link: ApiLink,
    *,
    boot_id: str,
    pods: PodNotes,
) -> DeviceState:
    """The plugin's device state over its files, MIG and sharing backends and the driver's user space."""
    settings.plugin_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
    real = settings.fake_gpus is None
    checkpoints = CheckpointStore(settings.plugin_dir, boot_id)
    supply = driver_supply(  # the driver's user space for the containers, found once
        gpus=gpus,
        driver_root=settings.driver_root,
        host_root=settings.driver_root_host_path,
        toolkit_dirs=[settings.cdi_root, TOOLKIT_SPEC_DIR],
        notify=link.notify,
    )
    return DeviceState(
        driver=settings.driver_name,
        node_name=settings.node_name,
        publication=publication,
        mig=MigOps(backend, gpus) if backend is not None else None,
        sharing=make_sharing_backend(
            fake=not real,
            state_dir=settings.fake_gpu_state_dir,
            mps_root=settings.plugin_dir / "mps",
            nvidia_bin_dir=settings.nvidia_bin_dir,
            boot_id=boot_id,
        ),
        mps_root=settings.plugin_dir / "mps",
        claims=pods.watching(link),  # the claims' pods, noted for the usage metrics
        cdi=CdiStore(settings.cdi_root, settings.driver_name, later=checkpoints.sync),
        checkpoints=checkpoints,
        lock_path=settings.plugin_dir / "serialize.lock",
        device_nodes=True,
        device_node_host="" if real else FAKE_DEVICE_NODE_HOST,
        toolkit_devices=supply.toolkit_devices,
        driver_files=supply.files,
        driver_missing=supply.missing,
        notify=link.notify,
    )


def status_reporter(settings: Settings, link: ApiLink) -> DeviceStatusReporter | None:
    """The device status reporter (None when off); its API client is made on its own thread once loaded."""
    if not settings.device_status:
        log.info("device_status_disabled")
        return None

    def writer() -> StatusWriter:
        conn = link.wait()  # first: the link loads once the sockets serve, and so does this import
        from dra_driver.kube.claim_status_api import KubeClaimStatusApi

        return KubeClaimStatusApi(conn, field_manager=settings.driver_name)

    return DeviceStatusReporter(driver=settings.driver_name, node_name=settings.node_name, writer=writer)


def health_monitor(settings: Settings, gpus: list[GpuInfo], link: ApiLink, *, boot_id: str) -> HealthMonitor | None:
    """The GPU health monitor (None when ``--health off``), its record loaded."""
    if settings.health == "off":
        log.info("health_monitoring_disabled")
        return None
    from dra_driver.files.health_store import HealthStore
    from dra_driver.sources.select import make_health_source

    uuids = [g.uuid for g in gpus]
    monitor = HealthMonitor(
        source=lambda: make_health_source(fake_gpus=settings.fake_gpus, state_dir=settings.fake_gpu_state_dir, gpu_uuids=uuids),
        gpus=gpus,
        store=HealthStore(settings.plugin_dir, boot_id),
        plugin_dir=settings.plugin_dir,
        notify=link.notify,
        config=MonitorConfig(check_interval_s=settings.health_check_interval_s, hold_s=settings.health_hold_s),
    )
    monitor.load()
    return monitor
