"""Entry point of ``dra-gpu-kubelet-plugin``: wires settings, GPU source, state, sockets, publisher.

Lifecycle: load GPUs (the API client loads meanwhile, ``kubelet_plugin.api_link``) → recover the
checkpoint → start the DRA socket, then the registration socket (the kubelet may dial as soon as
it sees it) → health → wait for the API client → slice publisher. On SIGTERM:
health NOT_SERVING, registration socket removed first (the kubelet deregisters), in-flight
calls finish (grace), DRA socket removed, publisher stopped.
"""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import structlog

from dra_driver.appkit.daemon import run_daemon
from dra_driver.appkit.inventory import node_publication
from dra_driver.core.cdi import FAKE_DEVICE_NODE_HOST
from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import MigBackend, MigStrategy
from dra_driver.core.mig_publish import Publication
from dra_driver.files.cdi_store import CdiStore, toolkit_device_names
from dra_driver.files.checkpoint_store import BootIdError, CheckpointStore, Notice, read_boot_id
from dra_driver.mig_backends.select import make_mig_backend
from dra_driver.sharing_backends.select import make_sharing_backend
from dra_driver.sources.select import make_source
from kubelet_plugin.api_link import ApiLink
from kubelet_plugin.device_status import DeviceStatusReporter, StatusWriter
from kubelet_plugin.mig_ops import MigOps
from kubelet_plugin.registration import RegistrationServicer
from kubelet_plugin.servicer import add_dra_services
from kubelet_plugin.settings import Settings, parse
from kubelet_plugin.sockets import SocketPaths, secure_socket, unix_server
from kubelet_plugin.state import DeviceState
from proto.pluginregistration import api_pb2_grpc as reg_grpc

if TYPE_CHECKING:
    from kubelet_plugin.health import SocketHealthServicer

log = structlog.get_logger(__name__)

SHUTDOWN_GRACE_S = 10.0
COMPONENT = "dra-gpu-kubelet-plugin"
TOOLKIT_SPEC_DIR = Path("/etc/cdi")  # where nvidia-ctk writes its spec besides /var/run/cdi


@dataclass(slots=True)
class _Servers:
    paths: SocketPaths
    dra: grpc.Server
    registration: grpc.Server
    health_servicer: SocketHealthServicer
    health: grpc.Server | None


def _build_state(
    settings: Settings,
    gpus: list[GpuInfo],
    publication: Publication,
    backend: MigBackend | None,
    link: ApiLink,
    *,
    boot_id: str,
) -> DeviceState:
    settings.plugin_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
    real = settings.fake_gpus is None
    checkpoints = CheckpointStore(settings.plugin_dir, boot_id)
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
        claims=link,
        cdi=CdiStore(settings.cdi_root, settings.driver_name, later=checkpoints.sync),
        checkpoints=checkpoints,
        lock_path=settings.plugin_dir / "serialize.lock",
        device_nodes=True,
        device_node_host="" if real else FAKE_DEVICE_NODE_HOST,
        toolkit_devices=toolkit_device_names([settings.cdi_root, TOOLKIT_SPEC_DIR]) if real else frozenset(),
        notify=link.notify,
    )


def _status_reporter(settings: Settings, link: ApiLink) -> DeviceStatusReporter | None:
    """The device status reporter (None when off); its API client is made on its own thread once loaded."""
    if not settings.device_status:
        log.info("device_status_disabled")
        return None

    def writer() -> StatusWriter:
        conn = link.wait()  # first: the link loads once the sockets serve, and so does this import
        from dra_driver.kube.claim_status_api import KubeClaimStatusApi

        return KubeClaimStatusApi(conn, field_manager=settings.driver_name)

    return DeviceStatusReporter(driver=settings.driver_name, node_name=settings.node_name, writer=writer)


def _start_servers(settings: Settings, state: DeviceState, status: DeviceStatusReporter | None) -> _Servers:
    """DRA socket first, then registration (the kubelet may dial as soon as it sees it), then health."""
    paths = SocketPaths.for_plugin(
        driver=settings.driver_name,
        registrar_dir=settings.registrar_dir,
        plugin_dir=settings.plugin_dir,
        pod_uid=settings.pod_uid,
    )
    dra_server = unix_server(paths.dra)
    add_dra_services(dra_server, state, status)
    dra_server.start()
    secure_socket(paths.dra)

    registration = RegistrationServicer(settings.driver_name, str(paths.dra))
    reg_server = unix_server(paths.registration, max_workers=2)
    reg_grpc.add_RegistrationServicer_to_server(registration, reg_server)
    reg_server.start()
    secure_socket(paths.registration)
    log.info("sockets_listening", registration=str(paths.registration), dra=str(paths.dra))

    # Loaded once the sockets serve: grpc_health (and its protobuf descriptors) is not on the kubelet's path.
    from grpc_health.v1 import health_pb2_grpc

    from kubelet_plugin.health import SocketHealthServicer

    health_servicer = SocketHealthServicer(paths.registration, paths.dra, registration.registered)
    health_server: grpc.Server | None = None
    if settings.healthcheck_port >= 0:
        health_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, health_server)
        port = health_server.add_insecure_port(f"{settings.healthcheck_address}:{settings.healthcheck_port}")
        health_server.start()
        log.info("health_listening", port=port)
    return _Servers(paths, dra_server, reg_server, health_servicer, health_server)


def _shutdown(servers: _Servers, publisher_thread: threading.Thread | None) -> None:
    """Health NOT_SERVING, registration socket gone first, in-flight calls finished, DRA socket gone."""
    servers.health_servicer.enter_graceful_shutdown()
    servers.paths.registration.unlink(missing_ok=True)  # the kubelet's watcher deregisters us
    servers.registration.stop(grace=1.0).wait()
    servers.dra.stop(grace=SHUTDOWN_GRACE_S).wait()  # refuse new calls, let in-flight ones finish
    servers.paths.dra.unlink(missing_ok=True)
    if servers.health is not None:
        servers.health.stop(grace=1.0).wait()
    if publisher_thread is not None:
        publisher_thread.join(timeout=5.0)


def _start_publisher(
    settings: Settings, api_client: Any, link: ApiLink, publication: Publication, stop: threading.Event
) -> threading.Thread:
    """The node's ResourceSlice publisher, on a thread of its own until ``stop``."""
    from dra_driver.appkit.publisher import SlicePublisher
    from dra_driver.kube.slices_api import KubeSliceApi

    def refused(message: str) -> None:
        link.notify(Notice("DevicesNotPublished", message, warning=True))

    publisher = SlicePublisher(KubeSliceApi(api_client), settings.driver_name, settings.node_name, on_refusal=refused)
    publisher.set_devices(list(publication.devices), list(publication.counter_sets))
    thread = threading.Thread(target=publisher.run, args=(stop,), name="slice-publisher", daemon=True)
    thread.start()
    return thread


def _gc_loop(state: DeviceState, interval_s: float, stop: threading.Event) -> None:
    """Every ``interval_s``: unprepare claims whose ResourceClaim is gone. Never raises."""
    while not stop.wait(interval_s):
        try:
            state.collect_garbage()
        except Exception:
            log.exception("gc_failed")


def run(settings: Settings, stop: threading.Event) -> int:
    """Run the plugin until ``stop`` is set; return the exit code."""
    structlog.contextvars.bind_contextvars(node=settings.node_name, driver=settings.driver_name)
    try:  # read once: the checkpoint and both simulators must agree on the boot
        boot_id = read_boot_id(settings.boot_id_file)
    except BootIdError as err:
        log.error("boot_id_unreadable", error=str(err), hint="set BOOT_ID_FILE (--boot-id-file) to the node's boot id")
        return 2
    link = ApiLink(kubeconfig=settings.kubeconfig, node_name=settings.node_name, component=COMPONENT)
    link.start()  # beside finding the GPUs: NVML's calls release the interpreter lock
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
    publication = node_publication(gpus, settings.mig, backend, consumable=settings.consumable)
    state = _build_state(settings, gpus, publication, backend, link, boot_id=boot_id)
    try:
        state.startup()
        for note in publication.notes:
            log.warning("publication_note", note=note)
        log.info(
            "devices_published",
            mig=settings.mig.value,
            devices=len(publication.devices),
            counter_sets=len(publication.counter_sets),
        )
        status = _status_reporter(settings, link)
        servers = _start_servers(settings, state, status)
        try:
            api_client = link.wait()  # loaded while the sockets came up; a bad kubeconfig still fails start-up
        except Exception:
            _shutdown(servers, None)
            raise
        gc_thread: threading.Thread | None = None
        if settings.gc_interval_s > 0:
            gc_thread = threading.Thread(
                target=_gc_loop, args=(state, settings.gc_interval_s, stop), name="claim-gc", daemon=True
            )
            gc_thread.start()

        publisher_thread: threading.Thread | None = None
        if state.refusal is not None:
            # Serve (every call answers the refusal; no crash loop) but offer no devices to schedule.
            log.error("plugin_refusing", reason=state.refusal, publishing=False)
        elif settings.publish_slices:
            publisher_thread = _start_publisher(settings, api_client, link, publication, stop)

        log.info("plugin_started")
        stop.wait()
        log.info("plugin_stopping")
        _shutdown(servers, publisher_thread)
        if status is not None:
            status.stop()
        return 0
    finally:
        state.close()  # the last checkpoint write durable; any later one durable as it is made


def main(argv: list[str] | None = None) -> int:
    """Console script entry: parse, configure logs, run until SIGTERM/SIGINT."""
    return run_daemon("plugin", argv, parse, run)


if __name__ == "__main__":
    raise SystemExit(main())
