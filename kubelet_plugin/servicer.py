"""The DRA gRPC services (v1 and v1beta1) that the kubelet calls on the DRA socket.

Translates protobuf messages to ``kubelet_plugin.state`` calls and back. Both versions share
one implementation; v1beta1 has no ``share_id``. A servicer never raises: an unexpected
failure becomes each claim's error, so the kubelet always gets an entry per claim.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import grpc
import structlog

from kubelet_plugin.state import ClaimRef, DeviceState, Outcome
from proto.dra.v1 import api_pb2 as v1
from proto.dra.v1 import api_pb2_grpc as v1_grpc
from proto.dra.v1beta1 import api_pb2 as v1beta1
from proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc

log = structlog.get_logger(__name__)


def _refs(request: Any) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, uid=c.uid, name=c.name) for c in request.claims]


def _prepare_response(pb: ModuleType, outcomes: dict[str, Outcome], with_share_id: bool) -> Any:
    resp = pb.NodePrepareResourcesResponse()
    for uid, outcome in outcomes.items():
        entry = resp.claims[uid]
        if outcome.error:
            entry.error = outcome.error
            continue
        for d in outcome.devices:
            dev = entry.devices.add(
                request_names=list(d.request_names),
                pool_name=d.pool_name,
                device_name=d.device_name,
                cdi_device_ids=list(d.cdi_device_ids),
            )
            if with_share_id and d.share_id:
                dev.share_id = d.share_id
    return resp


class _Dra:
    """The shared implementation of both API versions."""

    def __init__(self, state: DeviceState, pb: ModuleType, version: str) -> None:
        self._state = state
        self._pb = pb
        self._version = version

    def prepare(self, request: Any, context: grpc.ServicerContext) -> Any:
        del context
        refs = _refs(request)
        try:
            outcomes = self._state.prepare(refs)
        except Exception as err:
            log.exception("prepare_unexpected_error", api=self._version)
            outcomes = {r.uid: Outcome(error=f"internal error: {err}") for r in refs}
        for r in refs:  # every requested claim must appear in the answer
            outcomes.setdefault(r.uid, Outcome(error="internal error: claim not handled"))
        return _prepare_response(self._pb, outcomes, with_share_id=self._version == "v1")

    def unprepare(self, request: Any, context: grpc.ServicerContext) -> Any:
        del context
        refs = _refs(request)
        try:
            errors = self._state.unprepare(refs)
        except Exception as err:
            log.exception("unprepare_unexpected_error", api=self._version)
            errors = {r.uid: f"internal error: {err}" for r in refs}
        resp = self._pb.NodeUnprepareResourcesResponse()
        for r in refs:
            resp.claims[r.uid].error = errors.get(r.uid, "internal error: claim not handled")
        return resp


class DraV1Servicer(v1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``."""

    def __init__(self, state: DeviceState) -> None:
        self._impl = _Dra(state, v1, "v1")

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - gRPC name
        """Prepare the claims' devices."""
        return self._impl.prepare(request, context)

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - gRPC name
        """Unprepare the claims' devices."""
        return self._impl.unprepare(request, context)


class DraV1beta1Servicer(v1beta1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``."""

    def __init__(self, state: DeviceState) -> None:
        self._impl = _Dra(state, v1beta1, "v1beta1")

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - gRPC name
        """Prepare the claims' devices."""
        return self._impl.prepare(request, context)

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - gRPC name
        """Unprepare the claims' devices."""
        return self._impl.unprepare(request, context)


def add_dra_services(server: grpc.Server, state: DeviceState) -> None:
    """Serve both DRA versions on ``server`` (the DRA socket)."""
    v1_grpc.add_DRAPluginServicer_to_server(DraV1Servicer(state), server)
    v1beta1_grpc.add_DRAPluginServicer_to_server(DraV1beta1Servicer(state), server)
