"""What the slice publisher's wrappers need from it: ``set_devices`` (:class:`DevicePublisher`).

Implemented by ``dra_driver.appkit.publisher.SlicePublisher`` and by the wrappers in front of it
(``dra_driver.appkit.local_cordon``, ``dra_driver.appkit.device_plugin_guard``), which the kubelet
plugin (``kubelet_plugin.main``, behind ``kubelet_plugin.monitoring.health_taints``) and the
standalone controller (``controller.main``) put between their device list and the publisher.
"""

from __future__ import annotations

from typing import Protocol

from dra_driver.core.schema import DeviceSpec


class DevicePublisher(Protocol):
    """What the wrappers (and the kubelet plugin's health publication) need from ``SlicePublisher``."""

    def set_devices(self, devices: list[DeviceSpec], counter_sets: list[dict[str, object]] | None = None) -> None:
        """State the pool's devices."""
        ...
