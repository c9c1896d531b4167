"""Local withholding: the devices ``dra-gpu cordon`` recorded on this Node are left out of the ResourceSlice.

Where the API server serves no DeviceTaintRule, a cordon is the Node annotation
``<driver>/cordoned-devices`` (``dra_driver.core.local_cordon``). This sits between the device
list's source (the device-plugin guard, or the publication) and the slice publisher: it keeps the
latest list and passes it on without the cordoned devices (a GPU with its MIG devices), so the
scheduler allocates them to no new claim; claims that already hold them are untouched (the plugin
still prepares them: it prepares what the allocation names). ``run`` reads the Node every
``--local-cordon-check-interval`` seconds and republishes when the cordons change.

Fail closed on a malformed annotation: every device is withheld until it is fixed (the admin meant
some to be out; which is unknown), logged and raised as a Node Event (``LocalCordonMalformed``).
Nothing is passed on before the first read of the Node (retried every ``FIRST_READ_RETRY_S``), so
a restarted plugin never publishes a cordoned GPU for a moment; a Node that cannot be read later
keeps the last cordons. Each change of the withheld
set is logged (``local_cordon_changed``) and raised as a Node Event (``DevicesWithheld``).

Wired by ``kubelet_plugin.main`` and ``controller.main`` (through ``dra_driver.appkit.node_guards``) when the publisher starts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from dra_driver.appkit.device_publisher import DevicePublisher
from dra_driver.core.local_cordon import Withholding, annotation_key, withheld
from dra_driver.core.schema import DeviceSpec
from dra_driver.files.checkpoint_store import Notice

log = structlog.get_logger(__name__)

FIRST_READ_RETRY_S = 2.0
"""Before the first successful read nothing is passed on: retry this often (at most), not at the interval."""


class LocalCordon:
    """A ``DevicePublisher`` that leaves out the devices cordoned on the Node."""

    def __init__(
        self,
        publisher: DevicePublisher,
        *,
        node_name: str,
        driver: str,
        read_node: Callable[[], Mapping[str, Any]],
        notify: Callable[[Notice], None],
        interval_s: float,
    ) -> None:
        self._publisher = publisher
        self._node = node_name
        self._driver = driver
        self._read_node = read_node
        self._notify = notify
        self._interval_s = interval_s
        self._lock = threading.Lock()  # the withholding and the wanted devices; held while passing them on
        self._withholding = Withholding()
        self._wanted: tuple[list[DeviceSpec], list[dict[str, object]] | None] | None = None
        self._withheld: frozenset[str] = frozenset()
        self._failing = False
        self._read = False  # nothing is passed on before the Node was read once

    @property
    def withheld(self) -> frozenset[str]:
        """The device names left out of the last list passed on."""
        with self._lock:
            return self._withheld

    def set_devices(self, devices: list[DeviceSpec], counter_sets: list[dict[str, object]] | None = None) -> None:
        """The devices the node would publish: passed on without the cordoned ones."""
        with self._lock:
            self._wanted = (list(devices), counter_sets)
            self._pass_on()

    def _pass_on(self) -> None:
        """Pass the wanted devices on, less the withheld (lock held: a newer list never lands first)."""
        if self._wanted is None or not self._read:
            return
        devices, counter_sets = self._wanted
        w = self._withholding
        names = {d.name for d in devices} if w.everything else withheld(((d.name, d.attributes) for d in devices), w.cordoned)
        self._withheld = frozenset(names)
        self._publisher.set_devices([d for d in devices if d.name not in names], counter_sets)

    def check_once(self) -> Withholding:
        """Read the Node and act on a change of its cordons; returns the withholding in force."""
        try:
            node = self._read_node()
        except Exception as err:  # noqa: BLE001 - the last cordons stay
            if not self._failing:
                log.warning("local_cordon_check_failed", error=str(err))
            self._failing = True
            return self._withholding
        self._failing = False
        found = Withholding.from_node(node, self._driver)
        with self._lock:
            previous, self._withholding = self._withholding, found
            first, self._read = not self._read, True
            if found == previous and not first:
                return found
            before = self._withheld
            self._pass_on()
            now = self._withheld
        if found != previous:
            self._report(found, previous, before, now)
        return found

    def _report(self, found: Withholding, previous: Withholding, before: frozenset[str], now: frozenset[str]) -> None:
        if found.everything and not previous.everything:
            log.error("local_cordon_malformed", problem=found.problem, devices_withheld=len(now))
            message = (
                f"Node {self._node}: {found.problem}: every device of {self._driver} is withheld until it is fixed "
                f"(dra-gpu uncordon, or kubectl annotate node {self._node} {annotation_key(self._driver)}-)"
            )
            self._notify(Notice("LocalCordonMalformed", message, warning=True))
            return
        log.info("local_cordon_changed", cordoned=dict(found.cordoned), withheld=sorted(now), was=sorted(before))
        if found.cordoned:
            why = ", ".join(f"{dev} ({reason})" for dev, reason in sorted(found.cordoned.items()))
            text = f"Node {self._node}: cordoned by dra-gpu, not published: {why}; withheld: {', '.join(sorted(now)) or 'none'}"
        else:
            text = f"Node {self._node}: no device cordoned locally: every device is published again"
        self._notify(Notice("DevicesWithheld", text, warning=bool(found.cordoned)))

    def run(self, stop: threading.Event) -> None:
        """Check until ``stop``: at once, then every interval."""
        while not stop.is_set():
            try:
                self.check_once()
            except Exception:  # the publisher refusing a list must not end the checks
                log.exception("local_cordon_check_crashed")
            wait = self._interval_s if self._read else min(self._interval_s, FIRST_READ_RETRY_S)
            if stop.wait(wait):
                return
