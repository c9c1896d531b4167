"""The coexistence guard: no devices published while NVIDIA's device plugin serves GPUs on this node.

Sits between the publication (the kubelet plugin's ``kubelet_plugin.monitoring.health_taints.TaintedPublication``,
or the standalone controller's device list, which call ``set_devices``) and the slice publisher
(``dra_driver.appkit.publisher``, behind ``dra_driver.appkit.local_cordon``): it keeps the
latest device list and passes it on only while the Node shows no device plugin's GPU resource;
otherwise it publishes an empty pool (existing slices lose their devices). ``run`` reads the Node
every ``--device-plugin-check-interval`` seconds and decides with
``dra_driver.core.device_plugin_conflict.decide``: fail closed, so nothing is published before the
first read, and a Node that cannot be read keeps the last decision. A conflict and its end are
logged (``device_plugin_conflict``, ``device_plugin_conflict_cleared``) and raised as Node Events.

Wired by ``kubelet_plugin.main`` and ``controller.main`` (through ``dra_driver.appkit.node_guards``)
when the publisher starts: the controller publishes a node's slices that a kubelet plugin with
``publishSlices=false`` prepares, so a device plugin on that node would double-allocate there too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from dra_driver.appkit.device_publisher import DevicePublisher
from dra_driver.core.device_plugin_conflict import (
    Change,
    Guard,
    GuardDecision,
    cleared_message,
    conflict_message,
    decide,
    device_plugin_resources,
)
from dra_driver.core.schema import DeviceSpec
from dra_driver.files.checkpoint_store import Notice

log = structlog.get_logger(__name__)

UNKNOWN_RETRY_S = 2.0
"""Before the first successful read nothing is published: retry this often (at most), not at the interval."""


class DevicePluginGuard:
    """A ``DevicePublisher`` that withholds every device while a device plugin serves GPUs on the node."""

    def __init__(
        self,
        publisher: DevicePublisher,
        *,
        node_name: str,
        read_node: Callable[[], Mapping[str, Any]],
        notify: Callable[[Notice], None],
        interval_s: float,
    ) -> None:
        self._publisher = publisher
        self._node = node_name
        self._read_node = read_node
        self._notify = notify
        self._interval_s = interval_s
        self._lock = threading.Lock()  # the decision and the wanted devices; held while passing them on
        self._decision = GuardDecision()
        self._wanted: tuple[list[DeviceSpec], list[dict[str, object]] | None] | None = None
        self._failing = False

    @property
    def decision(self) -> GuardDecision:
        """The decision in force."""
        with self._lock:
            return self._decision

    def set_devices(self, devices: list[DeviceSpec], counter_sets: list[dict[str, object]] | None = None) -> None:
        """The devices the node would publish: passed on now if allowed, else kept for when it is."""
        with self._lock:
            self._wanted = (list(devices), counter_sets)
            if self._decision.publish:
                self._publisher.set_devices(devices, counter_sets)

    def check_once(self) -> GuardDecision:
        """Read the Node, decide, and act on a change; returns the decision in force."""
        observed: dict[str, int] | None
        try:
            observed = device_plugin_resources(self._read_node())
        except Exception as err:  # noqa: BLE001 - fail closed: the last decision stays
            observed = None
            if not self._failing:
                log.warning("device_plugin_check_failed", error=str(err), keeping=self.decision.state.value)
            self._failing = True
        else:
            self._failing = False
        with self._lock:
            previous = self._decision
            decision, change = decide(previous, observed)
            self._decision = decision
            if change is not None:
                self._apply(decision)
        if change is not None:
            self._report(change, decision, previous)
        return decision

    def _apply(self, decision: GuardDecision) -> None:
        """Pass the wanted devices on, or an empty pool (lock held: a newer list never lands first)."""
        if not decision.publish:
            self._publisher.set_devices([], [])
        elif self._wanted is not None:
            self._publisher.set_devices(*self._wanted)

    def _report(self, change: Change, decision: GuardDecision, previous: GuardDecision) -> None:
        if change is Change.CONFLICT:
            resources = dict(decision.resources)
            withheld = len(self._wanted[0]) if self._wanted is not None else 0
            log.warning("device_plugin_conflict", resources=resources, devices_withheld=withheld)
            self._notify(Notice("DevicePluginConflict", conflict_message(self._node, resources), warning=True))
        elif change is Change.CLEARED:
            log.info("device_plugin_conflict_cleared", was=dict(previous.resources))
            self._notify(Notice("DevicePluginConflictCleared", cleared_message(self._node, previous.resources), warning=False))
        else:
            log.info("device_plugin_check_clear", node=self._node)

    def run(self, stop: threading.Event) -> None:
        """Check until ``stop``: at once, then every interval (every ``UNKNOWN_RETRY_S`` until a first read)."""
        while not stop.is_set():
            try:
                decision = self.check_once()
            except Exception:  # the publisher refusing a list must not end the guard
                log.exception("device_plugin_check_crashed")
                decision = self.decision
            wait = self._interval_s if decision.state is not Guard.UNKNOWN else min(self._interval_s, UNKNOWN_RETRY_S)
            if stop.wait(wait):
                return
