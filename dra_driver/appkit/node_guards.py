"""What stands between a node's device list and its ResourceSlices: local cordons, then the device-plugin guard.

:func:`guard_publisher` puts the slice publisher behind ``dra_driver.appkit.local_cordon.LocalCordon``
(the GPUs ``dra-gpu cordon`` withholds on the Node) behind
``dra_driver.appkit.device_plugin_guard.DevicePluginGuard`` (nothing while a device plugin serves
the node's GPUs), each reading the Node on a thread of its own at its interval (0: that one off).
Called by ``kubelet_plugin.main`` and ``controller.main`` (the flags: ``dra_driver.appkit.flags.NODE_GUARD_FLAGS``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from dra_driver.appkit.device_plugin_guard import DevicePluginGuard
from dra_driver.appkit.device_publisher import DevicePublisher
from dra_driver.appkit.local_cordon import LocalCordon
from dra_driver.files.checkpoint_store import Notice

log = structlog.get_logger(__name__)


def guard_publisher(
    publisher: DevicePublisher,
    *,
    node_name: str,
    driver: str,
    device_plugin_interval_s: float,
    local_cordon_interval_s: float,
    api_client: Any,
    notify: Callable[[Notice], None],
    stop: threading.Event,
) -> DevicePublisher:
    """``publisher`` behind the running guards (their threads started); ``publisher`` itself when both are off."""
    read_node: Callable[[], Mapping[str, Any]] | None = None
    if local_cordon_interval_s > 0 or device_plugin_interval_s > 0:
        from dra_driver.kube.node_api import KubeNodeApi

        nodes = KubeNodeApi(api_client)

        def read_node() -> Mapping[str, Any]:
            return nodes.get_node(node_name)

    target = publisher
    if read_node is None or local_cordon_interval_s <= 0:
        log.info("local_cordon_disabled")
    else:
        cordon = LocalCordon(
            target, node_name=node_name, driver=driver, read_node=read_node, notify=notify, interval_s=local_cordon_interval_s
        )
        threading.Thread(target=cordon.run, args=(stop,), name="local-cordon", daemon=True).start()
        target = cordon
    if read_node is None or device_plugin_interval_s <= 0:
        log.info("device_plugin_guard_disabled")
    else:
        guard = DevicePluginGuard(
            target, node_name=node_name, read_node=read_node, notify=notify, interval_s=device_plugin_interval_s
        )
        threading.Thread(target=guard.run, args=(stop,), name="device-plugin-guard", daemon=True).start()
        target = guard
    return target
