"""The DRA gRPC services (v1 and v1beta1) that the kubelet calls on the DRA socket.

Translates protobuf messages to ``kubelet_plugin.prepare.state`` calls and back, typed with the
generated stubs of each version. Both versions share one implementation; v1beta1 has no
``share_id``. A servicer never raises: an unexpected failure becomes each claim's error, so the
kubelet always gets an entry per claim. Claims prepared or unprepared are then handed to the
device status reporter (``kubelet_plugin.monitoring.device_status``), which only queues them: the answer
never waits for a status write, and the reporter hears when calls start and end, so that its
writes wait for the calls to quiet down.

Metrics (``CallMetrics``, ``dra_driver.obs.metrics.PluginMetrics``): each call's duration, the
calls in flight, and each claim's result; the servicers are made with a ``MetricsSlot`` that
``kubelet_plugin.main`` fills once prometheus_client is loaded, after the sockets serve. Without
one (or while it is empty) a call pays one attribute read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import grpc
import structlog

from kubelet_plugin.monitoring.device_status import DeviceStatusReporter
from kubelet_plugin.prepare.requests import ClaimRef, Outcome
from kubelet_plugin.prepare.state import DeviceState
from proto.dra.v1 import api_pb2 as v1
from proto.dra.v1 import api_pb2_grpc as v1_grpc
from proto.dra.v1beta1 import api_pb2 as v1beta1
from proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc

log = structlog.get_logger(__name__)

ClaimMessage = v1.Claim | v1beta1.Claim
PrepareResponse = v1.NodePrepareResourcesResponse | v1beta1.NodePrepareResourcesResponse
UnprepareResponse = v1.NodeUnprepareResourcesResponse | v1beta1.NodeUnprepareResourcesResponse


class CallMetrics(Protocol):
    """What the servicers report per call (``dra_driver.obs.metrics.PluginMetrics``)."""

    def call_started(self, operation: str) -> None:
        """A call of ``operation`` (prepare or unprepare) is being answered."""
        ...

    def call_finished(self, operation: str, api: str, seconds: float, claims: int, errors: Sequence[str]) -> None:
        """A call answered ``claims`` claims in ``seconds``; ``errors``: the failed claims' messages."""
        ...


@dataclass(slots=True)
class MetricsSlot:
    """Where the servicers send call metrics; ``sink`` None: nowhere. Filled after the sockets serve.

    Each call reads it once, so the start and the end of a call reach the same sink.
    """

    sink: CallMetrics | None = None


def _refs(claims: Iterable[ClaimMessage]) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]


class _Dra:
    """The shared implementation of both API versions: answers go into the version's response."""

    def __init__(
        self, state: DeviceState, version: str, status: DeviceStatusReporter | None, metrics: MetricsSlot | None = None
    ) -> None:
        self._state = state
        self._version = version
        self._status = status
        self._metrics = metrics

    def prepare(self, claims: Iterable[ClaimMessage], resp: PrepareResponse) -> None:
        self._observed("prepare", resp, lambda: self._prepare(claims, resp))

    def unprepare(self, claims: Iterable[ClaimMessage], resp: UnprepareResponse) -> None:
        self._observed("unprepare", resp, lambda: self._unprepare(claims, resp))

    def _observed(self, operation: str, resp: PrepareResponse | UnprepareResponse, answer: Callable[[], None]) -> None:
        """``answer()`` the call, the status reporter told; timed and counted when metrics are on."""
        metrics = self._metrics.sink if self._metrics is not None else None
        if metrics is None:
            with self._call():
                answer()
            return
        metrics.call_started(operation)
        start = time.perf_counter()
        try:
            with self._call():
                answer()
        finally:
            seconds = time.perf_counter() - start
            try:
                errors = [c.error for c in resp.claims.values() if c.error]
                metrics.call_finished(operation, self._version, seconds, len(resp.claims), errors)
            except Exception:  # metrics never change the kubelet's answer
                log.exception("metrics_failed", operation=operation, api=self._version)

    @contextmanager
    def _call(self) -> Iterator[None]:
        """Tell the status reporter a call is in flight (its writes wait for quiet)."""
        if self._status is not None:
            self._status.call_started()
        try:
            yield
        finally:
            if self._status is not None:
                self._status.call_finished()

    def _prepare(self, claims: Iterable[ClaimMessage], resp: PrepareResponse) -> None:
        refs = _refs(claims)
        try:
            outcomes = self._state.prepare(refs)
        except Exception as err:
            log.exception("prepare_unexpected_error", api=self._version)
            outcomes = {r.uid: Outcome(error=f"internal error: {err}") for r in refs}
        for r in refs:  # every requested claim must appear in the answer
            outcomes.setdefault(r.uid, Outcome(error="internal error: claim not handled"))
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
                if isinstance(dev, v1.Device) and d.share_id:
                    dev.share_id = d.share_id
        self._report(refs, prepared=outcomes)

    def _unprepare(self, claims: Iterable[ClaimMessage], resp: UnprepareResponse) -> None:
        refs = _refs(claims)
        try:
            errors = self._state.unprepare(refs)
        except Exception as err:
            log.exception("unprepare_unexpected_error", api=self._version)
            errors = {r.uid: f"internal error: {err}" for r in refs}
        for r in refs:
            resp.claims[r.uid].error = errors.get(r.uid, "internal error: claim not handled")
        self._report([r for r in refs if errors.get(r.uid) == ""], prepared=None)

    def _report(self, refs: list[ClaimRef], prepared: dict[str, Outcome] | None) -> None:
        """Queue device status writes: the devices of claims prepared, removal for claims unprepared (``refs``)."""
        if self._status is None:
            return
        try:
            for r in refs:
                if prepared is None:
                    self._status.unprepared(r)
                elif (outcome := prepared.get(r.uid)) is not None and not outcome.error and outcome.devices:
                    self._status.prepared(r, outcome)
        except Exception:  # device status is best effort: never the kubelet's answer's problem
            log.exception("device_status_queue_failed", api=self._version)


class DraV1Servicer(v1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``."""

    def __init__(
        self, state: DeviceState, status: DeviceStatusReporter | None = None, metrics: MetricsSlot | None = None
    ) -> None:
        self._impl = _Dra(state, "v1", status, metrics)

    def NodePrepareResources(  # noqa: N802 - gRPC name
        self, request: v1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1.NodePrepareResourcesResponse:
        """Prepare the claims' devices."""
        resp = v1.NodePrepareResourcesResponse()
        self._impl.prepare(request.claims, resp)
        return resp

    def NodeUnprepareResources(  # noqa: N802 - gRPC name
        self, request: v1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1.NodeUnprepareResourcesResponse:
        """Unprepare the claims' devices."""
        resp = v1.NodeUnprepareResourcesResponse()
        self._impl.unprepare(request.claims, resp)
        return resp


class DraV1beta1Servicer(v1beta1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``."""

    def __init__(
        self, state: DeviceState, status: DeviceStatusReporter | None = None, metrics: MetricsSlot | None = None
    ) -> None:
        self._impl = _Dra(state, "v1beta1", status, metrics)

    def NodePrepareResources(  # noqa: N802 - gRPC name
        self, request: v1beta1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1.NodePrepareResourcesResponse:
        """Prepare the claims' devices."""
        resp = v1beta1.NodePrepareResourcesResponse()
        self._impl.prepare(request.claims, resp)
        return resp

    def NodeUnprepareResources(  # noqa: N802 - gRPC name
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        """Unprepare the claims' devices."""
        resp = v1beta1.NodeUnprepareResourcesResponse()
        self._impl.unprepare(request.claims, resp)
        return resp


def add_dra_services(
    server: grpc.Server, state: DeviceState, status: DeviceStatusReporter | None = None, metrics: MetricsSlot | None = None
) -> None:
    """Serve both DRA versions on ``server`` (the DRA socket).

    ``status`` reports device status, ``metrics`` gets each call's metrics once filled (None: off).
    """
    v1_grpc.add_DRAPluginServicer_to_server(DraV1Servicer(state, status, metrics), server)
    v1beta1_grpc.add_DRAPluginServicer_to_server(DraV1beta1Servicer(state, status, metrics), server)
