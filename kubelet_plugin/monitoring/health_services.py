"""The kubelet's DRAResourceHealth services (``v1`` and ``v1alpha1``) registered on the DRA socket before start-up ends.

The DRA socket serves before the plugin has built its health monitor (``kubelet_plugin.start_gate``),
and a gRPC server takes no services once started, so both versions' ``NodeWatchResources`` are
registered here with only their protos loaded. Each stream first asks ``streams()`` for the plugin's
``kubelet_plugin.monitoring.health_stream.HealthStreams``, which waits for start-up; if that raises
(start-up did not finish in time, or failed) the stream ends with UNAVAILABLE and its message, and
the kubelet opens another 5 s later. Called by ``kubelet_plugin.servers``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import grpc
import structlog

from proto.health.v1 import api_pb2 as h1
from proto.health.v1 import api_pb2_grpc as h1_grpc
from proto.health.v1alpha1 import api_pb2 as h1a1
from proto.health.v1alpha1 import api_pb2_grpc as h1a1_grpc

if TYPE_CHECKING:
    from kubelet_plugin.monitoring.health_stream import HealthStreams

log = structlog.get_logger(__name__)

SERVICE_NAMES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
"""What registration advertises besides the DRA services (the kubelet of 1.37 prefers v1)."""


class _Health(h1_grpc.DRAResourceHealthServicer, h1a1_grpc.DRAResourceHealthServicer):
    """One version's ``DRAResourceHealth`` (``pb``: its messages; both versions' services have the same shape)."""

    def __init__(self, streams: Callable[[], HealthStreams], pb: Any) -> None:
        self._streams = streams
        self._pb = pb

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:  # noqa: N802 - gRPC name
        """The stream, once start-up hands the health streams over; UNAVAILABLE with the reason if it does not."""
        del request
        try:
            served = self._streams()
        except Exception as err:  # noqa: BLE001 - start-up's failure or timeout, told to the kubelet, which reconnects
            log.warning("health_stream_refused_starting", error=str(err))
            context.abort(grpc.StatusCode.UNAVAILABLE, str(err))
        return served.watch(context, lambda entries: served.response(self._pb, entries))


def add_health_services(server: grpc.Server, streams: Callable[[], HealthStreams]) -> None:
    """Register both versions' ``NodeWatchResources`` on ``server``; each stream is served by ``streams()``."""
    h1_grpc.add_DRAResourceHealthServicer_to_server(_Health(streams, h1), server)
    h1a1_grpc.add_DRAResourceHealthServicer_to_server(_Health(streams, h1a1), server)
