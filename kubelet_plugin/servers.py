"""The kubelet plugin's gRPC servers: the DRA socket, the registration socket and the health port, in order.

Called by ``kubelet_plugin.main`` before the plugin's state exists: ``start_servers`` serves the DRA
socket first (its calls held at the ``kubelet_plugin.start_gate`` until start-up hands the state
over), then the registration socket (the kubelet may dial as soon as it sees it), then the gRPC
health port;
``PluginServers.stop`` undoes it on SIGTERM: health NOT_SERVING, the registration socket removed first
(the kubelet deregisters), in-flight calls finished (grace), the DRA socket removed, health last.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc
import structlog

from kubelet_plugin.registration import RegistrationServicer
from kubelet_plugin.servicer import MetricsSlot, add_dra_services
from kubelet_plugin.sockets import SocketPaths, live_registrations, secure_socket, unix_server
from kubelet_plugin.start_gate import StartGate
from proto.pluginregistration import api_pb2_grpc as reg_grpc

if TYPE_CHECKING:
    from kubelet_plugin.liveness import SocketHealthServicer
    from kubelet_plugin.monitoring.health_stream import HealthStreams
    from kubelet_plugin.settings import Settings

log = structlog.get_logger(__name__)

SHUTDOWN_GRACE_S = 10.0
"""Seconds the DRA calls in flight at SIGTERM have to finish."""


@dataclass(slots=True)
class PluginServers:
    """The plugin's servers, as ``start_servers`` left them (``registration`` None until ``register``)."""

    paths: SocketPaths
    dra: grpc.Server
    registration_servicer: RegistrationServicer
    gate: StartGate
    registration: grpc.Server | None = None
    health_servicer: SocketHealthServicer | None = None
    health: grpc.Server | None = None

    def register(self) -> None:
        """Serve the registration socket: the kubelet's plugin watcher registers the plugin when it sees it."""
        if self.registration is not None:
            return
        server = unix_server(self.paths.registration, max_workers=2)
        reg_grpc.add_RegistrationServicer_to_server(self.registration_servicer, server)
        server.start()
        secure_socket(self.paths.registration)
        self.registration = server
        log.info("registration_listening", registration=str(self.paths.registration))

    def stop(self) -> None:
        """Health NOT_SERVING, registration socket gone first, in-flight calls finished, DRA socket gone, health last.

        Calls still held at the gate (start-up failed or was stopped) are refused first.
        """
        if self.health_servicer is not None:
            self.health_servicer.enter_graceful_shutdown()
        self.paths.registration.unlink(missing_ok=True)  # the kubelet's watcher deregisters us
        if self.registration is not None:
            self.registration.stop(grace=1.0).wait()
        self.gate.fail("the plugin is stopping")
        parts = self.gate.parts
        if parts is not None and parts.streams is not None:
            parts.streams.stop()  # open streams would hold the grace period below
        self.dra.stop(grace=SHUTDOWN_GRACE_S).wait()  # refuse new calls, let in-flight ones finish
        self.paths.dra.unlink(missing_ok=True)
        if self.health is not None:
            self.health.stop(grace=1.0).wait()


def start_servers(
    settings: Settings,
    gate: StartGate,
    metrics: MetricsSlot | None = None,
    *,
    health_streams: bool = False,
    on_registered: Callable[[], None] | None = None,
) -> PluginServers:
    """DRA socket first, then registration (the kubelet may dial as soon as it sees it), then health.

    The DRA calls wait at ``gate``; ``health_streams``: serve the kubelet's health streams (their
    ``HealthStreams`` handed over through the gate). ``on_registered`` is called on each registration
    the kubelet accepts (``kubelet_plugin.waiting_pods``). If another plugin pod of the driver is
    serving its registration (a rolling update), this one registers only when the gate opens: the
    kubelet calls the newest registration, and the old pod answers at once while this one recovers.
    """
    paths = SocketPaths.for_plugin(
        driver=settings.driver_name,
        registrar_dir=settings.registrar_dir,
        plugin_dir=settings.plugin_dir,
        pod_uid=settings.pod_uid,
    )
    dra_server = unix_server(paths.dra)
    add_dra_services(dra_server, gate, metrics)
    extra_services: tuple[str, ...] = ()
    if health_streams:
        from kubelet_plugin.monitoring.health_services import SERVICE_NAMES, add_health_services

        add_health_services(dra_server, lambda: _streams(gate))
        extra_services = SERVICE_NAMES
    dra_server.start()
    secure_socket(paths.dra)

    registration = RegistrationServicer(
        settings.driver_name,
        str(paths.dra),
        extra_services=extra_services,
        on_registered=on_registered,
    )
    others = live_registrations(settings.registrar_dir, settings.driver_name, paths.registration)
    servers = PluginServers(paths, dra_server, registration, gate)
    if others:
        paths.registration.unlink(missing_ok=True)  # ours from an earlier run of this pod, if any
        gate.when_open(servers.register)
        log.info("registration_deferred", serving=[str(o) for o in others], until="the state is recovered")
    else:
        servers.register()
    log.info("sockets_listening", registration=str(paths.registration), dra=str(paths.dra))

    # Loaded once the sockets serve: grpc_health (and its protobuf descriptors) is not on the kubelet's path.
    from grpc_health.v1 import health_pb2_grpc

    from kubelet_plugin.liveness import SocketHealthServicer

    servers.health_servicer = SocketHealthServicer(
        paths.registration,
        paths.dra,
        registration.registered,
        started=lambda: gate.is_open,
        registering=lambda: servers.registration is not None,
    )
    if settings.healthcheck_port >= 0:
        health_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        health_pb2_grpc.add_HealthServicer_to_server(servers.health_servicer, health_server)
        port = health_server.add_insecure_port(f"{settings.healthcheck_address}:{settings.healthcheck_port}")
        health_server.start()
        servers.health = health_server
        log.info("health_listening", port=port)
    return servers


def _streams(gate: StartGate) -> HealthStreams:
    """The health streams once start-up hands them over (``NotReady`` until then, or if they are off)."""
    streams = gate.wait().streams
    if streams is None:
        raise RuntimeError("health streams are not served by this plugin")
    return streams
