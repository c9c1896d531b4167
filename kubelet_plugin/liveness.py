"""Liveness and readiness: a gRPC health service whose answer exercises the plugin's own sockets.

Check dials the registration socket (GetInfo) and the DRA socket (an empty
NodePrepareResources, which touches no state); ``liveness`` is SERVING only when both answer.
``readiness`` also needs the kubelet to have accepted our registration and start-up to have
recovered the state (``kubelet_plugin.start_gate``: the sockets serve, and the kubelet registers
the plugin, before that): a DaemonSet rolling update (surge) then removes the old plugin pod only
once the new one is registered and answering, so the node is never without a plugin the kubelet
can call. The kubelet's probes (gRPC) call it;
``kubelet_plugin.main`` starts it on a TCP port.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2

from proto.dra.v1 import api_pb2 as dra
from proto.dra.v1 import api_pb2_grpc as dra_grpc
from proto.pluginregistration import api_pb2 as reg
from proto.pluginregistration import api_pb2_grpc as reg_grpc

LIVENESS_SERVICE = "liveness"
READINESS_SERVICE = "readiness"


def probe_sockets(registration: Path | None, dra_socket: Path, timeout_s: float = 5.0) -> str | None:
    """None when both sockets answer (the DRA socket alone while ``registration`` is None); otherwise what failed."""
    try:
        if registration is not None:
            with grpc.insecure_channel(f"unix://{registration}") as ch:
                info = reg_grpc.RegistrationStub(ch).GetInfo(reg.InfoRequest(), timeout=timeout_s)
            if info.endpoint != str(dra_socket):
                return f"registration names endpoint {info.endpoint}, expected {dra_socket}"
        with grpc.insecure_channel(f"unix://{dra_socket}") as ch:
            dra_grpc.DRAPluginStub(ch).NodePrepareResources(dra.NodePrepareResourcesRequest(), timeout=timeout_s)
    except grpc.RpcError as err:
        return f"socket probe failed: {err.code()} {err.details()}"
    return None


class SocketHealthServicer(health.HealthServicer):
    """Health whose ``""`` and ``liveness`` services reflect a live probe of the sockets."""

    def __init__(
        self,
        registration: Path,
        dra_socket: Path,
        registered: threading.Event | None = None,
        *,
        started: Callable[[], bool] = lambda: True,
        registering: Callable[[], bool] = lambda: True,
    ) -> None:
        """Probe ``registration`` and ``dra_socket``; readiness also needs ``registered``, ``started``.

        ``started``: the state is recovered; ``registering``: the registration socket is served (a rolling
        update's new pod serves it only once its state is recovered).
        """
        super().__init__()
        self._reg = registration
        self._dra = dra_socket
        self._registered = registered or threading.Event()
        self._started = started
        self._registering = registering

    def Check(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - gRPC name
        """Probe the sockets (liveness), and the kubelet's verdict (readiness); other services as registered."""
        if request.service in ("", LIVENESS_SERVICE, READINESS_SERVICE):
            problem = probe_sockets(self._reg if self._registering() else None, self._dra)
            if request.service == READINESS_SERVICE and not self._registered.is_set():
                problem = problem or "not registered with the kubelet yet"
            if request.service == READINESS_SERVICE and not self._started():
                problem = problem or "still recovering its state"
            if request.service == READINESS_SERVICE and self._gracefully_shutting_down:
                problem = "shutting down"
            status = health_pb2.HealthCheckResponse.NOT_SERVING if problem else health_pb2.HealthCheckResponse.SERVING
            return health_pb2.HealthCheckResponse(status=status)
        return super().Check(request, context)
