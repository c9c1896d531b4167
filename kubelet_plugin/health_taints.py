"""Health to scheduling: the node's devices as published, with their GPU's health taints.

Between the health monitor (``kubelet_plugin.health_monitor``, which calls ``on_change``) and the
slice publisher (``dra_driver.appkit.publisher``, attached once the API client is loaded). The
taint effect ``None`` is only sent to API servers that know it (1.35+): an older one would reject
the slice, and the node would publish nothing. Wired by ``kubelet_plugin.main``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

import structlog

from dra_driver.core.health import HealthBook, TaintPolicy, tainted_devices
from dra_driver.core.mig_publish import Publication
from dra_driver.core.schema import DeviceSpec

log = structlog.get_logger(__name__)

MIN_EFFECT_NONE_MINOR = 35
"""The taint effect ``None`` exists from Kubernetes 1.35 on."""


class DevicePublisher(Protocol):
    """What this needs from ``SlicePublisher``."""

    def set_devices(self, devices: list[DeviceSpec], counter_sets: list[dict[str, object]] | None = None) -> None:
        """State the pool's devices."""
        ...


class TaintedPublication:
    """The publication plus the latest health book; republishes on every change once attached."""

    def __init__(self, publication: Publication, driver: str, *, evict_fatal: bool) -> None:
        self._publication = publication
        self._driver = driver
        self._policy = TaintPolicy(evict_fatal=evict_fatal, effect_none=False)
        self._lock = threading.Lock()
        self._book = HealthBook()
        self._publisher: DevicePublisher | None = None
        self._publishing = threading.Lock()  # compute and set together: an older list never lands last

    def devices(self) -> list[DeviceSpec]:
        """The devices with taints for the current book and policy."""
        with self._lock:
            book, policy = self._book, self._policy
        p = self._publication
        return tainted_devices(p.devices, p.targets, book, self._driver, policy)

    def on_change(self, book: HealthBook) -> None:
        """The monitor's book changed: republish (when a publisher is attached)."""
        with self._lock:
            self._book = book
            publisher = self._publisher
        if publisher is not None:
            self._publish(publisher)

    def attach(self, publisher: DevicePublisher, server_minor: Callable[[], int]) -> None:
        """Start publishing through ``publisher``; ``server_minor`` decides whether effect ``None`` may be sent."""
        try:
            minor = server_minor()
        except Exception as err:  # noqa: BLE001 - without the version, do not risk a rejected slice
            log.warning("server_version_unknown", error=str(err), effect="informational health causes are not tainted")
            minor = 0
        with self._lock:
            self._policy = TaintPolicy(evict_fatal=self._policy.evict_fatal, effect_none=minor >= MIN_EFFECT_NONE_MINOR)
            self._publisher = publisher
        self._publish(publisher)

    def _publish(self, publisher: DevicePublisher) -> None:
        with self._publishing:
            devices = self.devices()
            publisher.set_devices(devices, list(self._publication.counter_sets))
        tainted = sum(1 for d in devices if d.extra.get("taints"))
        if tainted:
            log.info("devices_tainted", devices=tainted)
