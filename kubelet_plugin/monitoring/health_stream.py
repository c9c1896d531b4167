"""The kubelet's DRAResourceHealth stream (``v1alpha1`` and ``v1``) on the DRA socket.

The kubelet (gate ``ResourceHealthStatus``) opens ``NodeWatchResources`` and keeps it open; each
message is the full list of this node's devices with their health, which the kubelet copies into
``pod.status.containerStatuses[].allocatedResourcesStatus`` of the pods using them. Sent on every
change of the health monitor's book and every ``resend_s`` (each device says how long its answer
holds, ``lease_s``; the time sent is the monitor's last pass, so a stalled monitor lets the kubelet
turn the devices Unknown instead of reporting stale health).

Bounded: at most ``max_streams`` streams at once; a new one ends the oldest (the kubelet reconnects
every 5 s after a stream ends and never needs two), so streams never take the worker threads
prepare needs: a replaced stream, one whose client hung up (gRPC's callback) and every stream at
shutdown end at once, not at the next resend. Built by ``kubelet_plugin.bringup``; served through
``kubelet_plugin.monitoring.health_services``, registered before it exists.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import grpc
import structlog

from dra_driver.core.health import HealthBook, health_message, is_unhealthy
from kubelet_plugin.monitoring.health_monitor import HealthMonitor

log = structlog.get_logger(__name__)


class _Stream:
    def __init__(self) -> None:
        self.ended = threading.Event()


class HealthStreams:
    """Serves ``NodeWatchResources`` for both API versions from one monitor."""

    def __init__(
        self,
        monitor: HealthMonitor,
        *,
        pool_name: str,
        devices_by_gpu: Mapping[str, Sequence[str]],
        lease_s: int = 60,
        resend_s: float = 20.0,
        max_streams: int = 2,
    ) -> None:
        self._monitor = monitor
        self._pool = pool_name
        self._devices = {u: tuple(sorted(names)) for u, names in devices_by_gpu.items()}
        self._lease_s = lease_s
        self._resend_s = resend_s
        self._max = max_streams
        self._lock = threading.Lock()
        self._streams: list[_Stream] = []
        self._stopping = threading.Event()

    def stop(self) -> None:
        """End every stream (shutdown)."""
        self._stopping.set()
        with self._lock:
            for s in self._streams:
                s.ended.set()
        self._monitor.wake_streams()

    def entries(self, book: HealthBook, alive_at: float) -> list[tuple[str, int, str, int]]:
        """(device, status, message, time) for every device: 1 HEALTHY, 2 UNHEALTHY (the protos' numbers)."""
        out: list[tuple[str, int, str, int]] = []
        for uuid, names in sorted(self._devices.items()):
            conds = book.of(uuid)
            status = 2 if is_unhealthy(conds) else 1
            message = health_message(conds)
            out.extend((name, status, message, int(alive_at)) for name in names)
        return sorted(out)

    def _ended(self, stream: _Stream) -> bool:
        return stream.ended.is_set() or self._stopping.is_set()

    def _open(self) -> _Stream:
        stream = _Stream()
        with self._lock:
            self._streams.append(stream)
            while len(self._streams) > self._max:
                oldest = self._streams.pop(0)
                oldest.ended.set()
                log.info("health_stream_replaced", streams=self._max)
        self._monitor.wake_streams()
        return stream

    def _close(self, stream: _Stream) -> None:
        with self._lock:
            if stream in self._streams:
                self._streams.remove(stream)

    def watch(self, context: grpc.ServicerContext, response: Callable[[list[tuple[str, int, str, int]]], Any]) -> Iterator[Any]:
        """The stream: the full list at once, then on every change and every ``resend_s``."""
        stream = self._open()

        def gone() -> None:
            stream.ended.set()
            self._monitor.wake_streams()

        context.add_callback(gone)
        log.info("health_stream_opened", pool=self._pool)
        try:
            version, book, alive_at = self._monitor.snapshot()
            while True:
                yield response(self.entries(book, alive_at))
                self._monitor.wait_for_change(version, self._resend_s, until=lambda: self._ended(stream))
                if self._ended(stream) or not context.is_active():
                    return
                version, book, alive_at = self._monitor.snapshot()
        finally:
            self._close(stream)
            log.info("health_stream_closed", pool=self._pool)

    def response(self, pb: Any, entries: list[tuple[str, int, str, int]]) -> Any:
        """The version's NodeWatchResourcesResponse (``pb``: its api_pb2; both versions' messages are the same)."""
        return pb.NodeWatchResourcesResponse(
            devices=[
                pb.DeviceHealth(
                    device=pb.DeviceIdentifier(pool_name=self._pool, device_name=name),
                    health=status,
                    last_updated_time=at,
                    health_check_timeout_seconds=self._lease_s,
                    message=message,
                )
                for name, status, message, at in entries
            ]
        )
