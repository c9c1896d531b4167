"""The plugin-registration service the kubelet's plugin watcher calls on the registration socket.

GetInfo tells the kubelet who we are and where the DRA socket is; NotifyRegistrationStatus
tells us whether it accepted us. Called by the kubelet (and by our own liveness check).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import grpc
import structlog

from proto.pluginregistration import api_pb2 as reg
from proto.pluginregistration import api_pb2_grpc as reg_grpc

log = structlog.get_logger(__name__)

PLUGIN_TYPE = "DRAPlugin"
# Service names, not proto packages; the kubelet takes the first it supports, so v1 first.
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


class RegistrationServicer(reg_grpc.RegistrationServicer):
    """``pluginregistration.Registration``."""

    def __init__(
        self,
        driver: str,
        dra_endpoint: str,
        *,
        extra_services: tuple[str, ...] = (),
        on_registered: Callable[[], None] | None = None,
    ) -> None:
        """``extra_services`` are advertised after the DRA services (the health stream's).

        ``on_registered`` is called on each accepted registration (``kubelet_plugin.waiting_pods``; it must not block).
        """
        self._versions = [*SUPPORTED_VERSIONS, *extra_services]
        self._driver = driver
        self._endpoint = dra_endpoint
        self.registered = threading.Event()
        self.last_error = ""
        self._on_registered = on_registered

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - gRPC name
        """Who we are: type, driver name, absolute DRA socket path, versions."""
        del request, context
        return reg.PluginInfo(
            type=PLUGIN_TYPE, name=self._driver, endpoint=self._endpoint, supported_versions=list(self._versions)
        )

    def NotifyRegistrationStatus(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - gRPC name
        """The kubelet's verdict on our registration."""
        del context
        if request.plugin_registered:
            self.registered.set()
            self.last_error = ""
            log.info("plugin_registered", driver=self._driver)
            if self._on_registered is not None:
                self._on_registered()
        else:
            self.registered.clear()
            self.last_error = request.error
            log.error("plugin_registration_failed", driver=self._driver, error=request.error)
        return reg.RegistrationStatusResponse()
