"""The DRA gRPC services (v1 and v1beta1) that the kubelet calls on the DRA socket.

Translates protobuf messages to ``kubelet_plugin.prepare.state`` calls and back, typed with the
generated stubs of each version. Both versions share one implementation; v1beta1 has no
``share_id``. The servicers serve before the plugin has recovered its state: a call with claims
waits at the ``kubelet_plugin.start_gate`` (and answers each claim the gate's ``NotReady`` error if
start-up does not finish in time or fails: fail closed); a call with none touches no state and is
answered at once (the liveness probe's). A servicer never raises: an unexpected failure becomes each claim's error, so the
kubelet always gets an entry per claim. Claims prepared or unprepared are then handed to the
device status reporter (``kubelet_plugin.monitoring.device_status``), which only queues them: the answer
never waits for a status write, and the reporter hears when calls start and end, so that its
writes wait for the calls to quiet down.

Metrics (``CallMetrics``, ``dra_driver.obs.metrics.PluginMetrics``): each call's duration, the
calls in flight, and each claim's result; the servicers are made with a ``MetricsSlot`` that
``kubelet_plugin.bringup`` fills once prometheus_client is loaded, after the gate opens: calls
held at the gate, and the empty ones answered before, are not counted. Without one (or while it
is empty) a call pays one attribute read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import grpc
import structlog

from kubelet_plugin.start_gate import NotReady, Parts, StartGate
from proto.dra.v1 import api_pb2 as v1
from proto.dra.v1 import api_pb2_grpc as v1_grpc
from proto.dra.v1beta1 import api_pb2 as v1beta1
from proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc

if TYPE_CHECKING:
    from kubelet_plugin.monitoring.device_status import DeviceStatusReporter
    from kubelet_plugin.prepare.requests import ClaimRef, Outcome

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
    # Imported at the first call, past the gate: start-up has loaded it by then (not before the sockets serve).
    from kubelet_plugin.prepare.requests import ClaimRef

    return [ClaimRef(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]


class _Dra:
    """The shared implementation of both API versions: answers go into the version's response."""

    def __init__(self, gate: StartGate, version: str, metrics: MetricsSlot | None = None) -> None:
        self._gate = gate
        self._version = version
        self._metrics = metrics

    def prepare(self, claims: Sequence[ClaimMessage], resp: PrepareResponse) -> None:
        if claims:  # none: nothing to wait for (the liveness probe's call)
            self._observed("prepare", claims, resp, lambda parts: self._prepare(parts, claims, resp))

    def unprepare(self, claims: Sequence[ClaimMessage], resp: UnprepareResponse) -> None:
        if claims:
            self._observed("unprepare", claims, resp, lambda parts: self._unprepare(parts, claims, resp))

    def _observed(
        self,
        operation: str,
        claims: Sequence[ClaimMessage],
        resp: PrepareResponse | UnprepareResponse,
        answer: Callable[[Parts], None],
    ) -> None:
        """``answer(parts)`` once start-up is done, the status reporter told; timed and counted when metrics are on."""
        metrics = self._metrics.sink if self._metrics is not None else None
        if metrics is not None:
            metrics.call_started(operation)
        start = time.perf_counter()
        try:
            try:
                parts = self._gate.wait()
            except NotReady as err:  # fail closed: nothing is done from a state not recovered
                log.warning("call_refused_starting", operation=operation, api=self._version, error=str(err))
                for c in claims:
                    resp.claims[c.uid].error = str(err)
                return
            with _call(parts.status):
                answer(parts)
        finally:
            if metrics is not None:
                seconds = time.perf_counter() - start
                try:
                    errors = [c.error for c in resp.claims.values() if c.error]
                    metrics.call_finished(operation, self._version, seconds, len(resp.claims), errors)
                except Exception:  # metrics never change the kubelet's answer
                    log.exception("metrics_failed", operation=operation, api=self._version)

    def _prepare(self, parts: Parts, claims: Iterable[ClaimMessage], resp: PrepareResponse) -> None:
        from kubelet_plugin.prepare.requests import Outcome  # past the gate: loaded by start-up

        refs = _refs(claims)
        try:
            outcomes = parts.state.prepare(refs)
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
        _report(parts.status, refs, prepared=outcomes, api=self._version)

    def _unprepare(self, parts: Parts, claims: Iterable[ClaimMessage], resp: UnprepareResponse) -> None:
        refs = _refs(claims)
        try:
            errors = parts.state.unprepare(refs)
        except Exception as err:
            log.exception("unprepare_unexpected_error", api=self._version)
            errors = {r.uid: f"internal error: {err}" for r in refs}
        for r in refs:
            resp.claims[r.uid].error = errors.get(r.uid, "internal error: claim not handled")
        _report(parts.status, [r for r in refs if errors.get(r.uid) == ""], prepared=None, api=self._version)


@contextmanager
def _call(status: DeviceStatusReporter | None) -> Iterator[None]:
    """Tell the status reporter a call is in flight (its writes wait for quiet)."""
    if status is not None:
        status.call_started()
    try:
        yield
    finally:
        if status is not None:
            status.call_finished()


def _report(status: DeviceStatusReporter | None, refs: list[ClaimRef], *, prepared: dict[str, Outcome] | None, api: str) -> None:
    """Queue device status writes: the devices of claims prepared, removal for claims unprepared (``refs``)."""
    if status is None:
        return
    try:
        for r in refs:
            if prepared is None:
                status.unprepared(r)
            elif (outcome := prepared.get(r.uid)) is not None and not outcome.error and outcome.devices:
                status.prepared(r, outcome)
    except Exception:  # device status is best effort: never the kubelet's answer's problem
        log.exception("device_status_queue_failed", api=api)


class DraV1Servicer(v1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``."""

    def __init__(self, gate: StartGate, metrics: MetricsSlot | None = None) -> None:
        self._impl = _Dra(gate, "v1", metrics)

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

    def __init__(self, gate: StartGate, metrics: MetricsSlot | None = None) -> None:
        self._impl = _Dra(gate, "v1beta1", metrics)

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


def add_dra_services(server: grpc.Server, gate: StartGate, metrics: MetricsSlot | None = None) -> None:
    """Serve both DRA versions on ``server`` (the DRA socket), their calls held at ``gate`` until start-up is done.

    ``metrics`` gets each call's metrics once filled (None: off).
    """
    v1_grpc.add_DRAPluginServicer_to_server(DraV1Servicer(gate, metrics), server)
    v1beta1_grpc.add_DRAPluginServicer_to_server(DraV1beta1Servicer(gate, metrics), server)
