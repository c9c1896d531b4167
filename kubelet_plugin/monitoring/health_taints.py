"""Health to scheduling: the node's devices as published, with their GPU's health taints.

Between the health monitor (``kubelet_plugin.monitoring.health_monitor``, which calls ``on_change``) and the
slice publisher (``dra_driver.appkit.publisher``, attached once the API client is loaded). What a
server accepts decides the taints (``dra_driver.core.health.TaintPolicy``):

* the effect ``None`` only from 1.35 (an older server would reject the slice, and the node would
  publish nothing), and at most 4 taints per device before 1.35 (16 after), the most severe kept;
  until the server's version is known (its ``/version`` failed), neither is risked, and it is asked
  again at the next publication;
* a server that drops ``taints`` (``DRADeviceTaints`` off: alpha and off by default before 1.36)
  would let the scheduler hand out a broken GPU: once a write comes back without them, the devices
  of unhealthy GPUs are left out of the slices instead (``health_taints_dropped``, fail closed).

Wired by ``kubelet_plugin.main``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import structlog

from dra_driver.appkit.device_publisher import DevicePublisher
from dra_driver.core.health import HealthBook, TaintPolicy, tainted_devices
from dra_driver.core.mig_publish import Publication
from dra_driver.core.schema import DeviceSpec

log = structlog.get_logger(__name__)

MIN_EFFECT_NONE_MINOR = 35
"""The taint effect ``None``, and 16 taints per device (not 4), exist from Kubernetes 1.35 on."""
OLD_MAX_TAINTS = 4


def policy_for(minor: int | None, *, evict_fatal: bool, withhold: bool) -> TaintPolicy:
    """The taints a server of minor release ``minor`` accepts (None: not known yet, the safe subset)."""
    new = minor is not None and minor >= MIN_EFFECT_NONE_MINOR
    return TaintPolicy(
        evict_fatal=evict_fatal,
        effect_none=new,
        max_taints=16 if new else OLD_MAX_TAINTS,
        withhold_unhealthy=withhold,
    )


class TaintedPublication:
    """The publication plus the latest health book; republishes on every change once attached."""

    def __init__(self, publication: Publication, driver: str, *, evict_fatal: bool) -> None:
        self._publication = publication
        self._driver = driver
        self._evict = evict_fatal
        self._lock = threading.Lock()
        self._book = HealthBook()
        self._minor: int | None = None
        self._server_minor: Callable[[], int] | None = None
        self._withhold = False
        self._publisher: DevicePublisher | None = None
        self._publishing = threading.Lock()  # compute and set together: an older list never lands last

    @property
    def policy(self) -> TaintPolicy:
        """The taint policy in force now."""
        with self._lock:
            return policy_for(self._minor, evict_fatal=self._evict, withhold=self._withhold)

    def devices(self) -> list[DeviceSpec]:
        """The devices with taints for the current book and policy."""
        with self._lock:
            book = self._book
        p = self._publication
        return tainted_devices(p.devices, p.targets, book, self._driver, self.policy)

    def on_change(self, book: HealthBook) -> None:
        """The monitor's book changed: republish (when a publisher is attached)."""
        with self._lock:
            self._book = book
            publisher = self._publisher
        if publisher is not None:
            self._publish(publisher)

    def on_dropped(self, paths: Sequence[str]) -> None:
        """The server dropped fields from a write (the publisher's ``on_dropped``)."""
        if not any(p.rsplit(".", 1)[-1].split("[", 1)[0] == "taints" for p in paths):
            return
        with self._lock:
            first = not self._withhold
            self._withhold = True
            publisher = self._publisher
        if first:
            log.error(
                "health_taints_dropped",
                effect="the devices of unhealthy GPUs are left out of the slices instead",
                likely_cause="the feature gate DRADeviceTaints is off (alpha before 1.36) in kube-apiserver",
            )
            if publisher is not None:
                self._publish(publisher)

    def attach(self, publisher: DevicePublisher, server_minor: Callable[[], int]) -> None:
        """Start publishing through ``publisher``; ``server_minor`` tells which taints the server accepts."""
        with self._lock:
            self._server_minor = server_minor
            self._publisher = publisher
        self._publish(publisher)

    def _learn_minor(self) -> None:
        with self._lock:
            ask = self._server_minor if self._minor is None else None
        if ask is None:
            return
        try:
            minor = ask()
        except Exception as err:  # noqa: BLE001 - without the version, risk nothing; ask again next time
            log.warning("server_version_unknown", error=str(err), effect="no effect None, at most 4 taints, until known")
            return
        with self._lock:
            self._minor = minor

    def _publish(self, publisher: DevicePublisher) -> None:
        self._learn_minor()
        with self._publishing:
            devices = self.devices()
            publisher.set_devices(devices, list(self._publication.counter_sets))
        tainted = sum(1 for d in devices if d.extra.get("taints"))
        withheld = len(self._publication.devices) - len(devices)
        if tainted or withheld:
            log.info("devices_tainted", devices=tainted, withheld=withheld)
