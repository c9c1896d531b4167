"""The device-plugin coexistence guard end to end: a device plugin appears on the node, the GPUs leave the slices.

Control plane and the kubelet are upstream binaries (testkit/go/build.sh, fake container runtime);
the plugin is our daemon with 8 fake H100s and ``--device-plugin-check-interval 1``. A small device
plugin (``testkit.device_plugin``, the kubelet's device-plugin API v1beta1) registers
``nvidia.com/gpu`` with 8 devices: the kubelet lists it in the Node's allocatable, and the plugin
withdraws its devices (an empty slice) and raises a ``DevicePluginConflict`` Event. Restarted meanwhile,
the plugin's first publication already has no devices. The device plugin stops: the kubelet zeroes
allocatable (capacity stays for its grace), and the devices come back with a ``DevicePluginConflictCleared``
Event. Run with ``-s`` to see the timings.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from e2e.test_kubelet_node import RESOURCE, events, harness, wait_until
from testkit.claimdata import DRIVER
from testkit.device_plugin import FakeDevicePlugin

EVENTS = "/api/v1/namespaces/default/events"


def test_device_plugin_on_the_node_withdraws_the_gpus_until_it_is_gone(tmp_path: Path) -> None:
    with harness(tmp_path, "node-a") as h:
        node = h.nodes["node-a"]
        plugin = h.start_plugin(node, ("--device-plugin-check-interval", "1"))
        slices = f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName=node-a"

        def devices() -> int:
            items = [s for s in h.c.api("GET", slices)["items"] if s["spec"]["driver"] == DRIVER]
            return sum(len(s["spec"].get("devices") or []) for s in items)

        def allocatable() -> str | None:
            value = h.c.api("GET", "/api/v1/nodes/node-a").get("status", {}).get("allocatable", {}).get("nvidia.com/gpu")
            return None if value is None else str(value)

        def node_events(reason: str) -> list[dict[str, Any]]:
            items = h.c.api("GET", EVENTS)["items"]
            return [e for e in items if e.get("reason") == reason and e["involvedObject"].get("name") == "node-a"]

        assert devices() == 8 and allocatable() is None
        with FakeDevicePlugin(node.device_plugin_dir, count=8) as dp:
            t0 = time.monotonic()
            dp.start()
            wait_until("the kubelet to list nvidia.com/gpu=8 in allocatable", lambda: allocatable() == "8", h.diagnostics)
            t_alloc = time.monotonic()
            wait_until("the plugin to withdraw its GPUs", lambda: devices() == 0, h.diagnostics)
            t_withdrawn = time.monotonic()
            assert h.c.api("GET", slices)["items"], "the pool stays, with no devices"
            (event,) = wait_until("the DevicePluginConflict Event", lambda: node_events("DevicePluginConflict"), h.diagnostics)
            assert event["type"] == "Warning"
            assert "nvidia.com/gpu=8" in event["message"] and "extendedResources" in event["message"]
            (logged,) = events(plugin, "device_plugin_conflict")
            assert logged["resources"] == {"nvidia.com/gpu": 8}

            # Restarted while the device plugin serves: the first publication already has no devices.
            plugin.stop()
            mark = len(plugin.logs())
            plugin.start()

            def run_sets() -> list[int]:
                return [e["devices"] for e in plugin.logs()[mark:] if e.get("event") == "slice_devices_set"]

            wait_until("the restarted plugin to state its devices", run_sets, h.diagnostics)
            # The guard logs the conflict just after it passes the empty list on (another thread may read between).
            wait_until(
                "the restarted plugin to log the conflict",
                lambda: len(events(plugin, "device_plugin_conflict")) == 2,
                h.diagnostics,
                5,
            )
            assert all(n == 0 for n in run_sets()), f"published before the guard decided: {run_sets()}"
            assert devices() == 0

            t1 = time.monotonic()
            dp.stop()
            wait_until("the kubelet to zero allocatable", lambda: allocatable() == "0", h.diagnostics)
            t_zero = time.monotonic()
            wait_until("the GPUs to be published again", lambda: devices() == 8, h.diagnostics)
            t_back = time.monotonic()
            capacity = h.c.api("GET", "/api/v1/nodes/node-a")["status"]["capacity"].get("nvidia.com/gpu")
        cleared = wait_until("the cleared Event", lambda: node_events("DevicePluginConflictCleared"), h.diagnostics)
        assert cleared[0]["type"] == "Normal"
        assert events(plugin, "device_plugin_conflict_cleared")
        assert len(node_events("DevicePluginConflict")) == 2  # one per plugin run
        print(
            f"\ndevice plugin registered -> allocatable nvidia.com/gpu=8: {t_alloc - t0:.1f}s, "
            f"-> slices withdrawn: {t_withdrawn - t0:.1f}s ({t_withdrawn - t_alloc:.1f}s after allocatable)\n"
            f"device plugin stopped -> allocatable 0: {t_zero - t1:.1f}s (capacity then {capacity}), "
            f"-> republished: {t_back - t1:.1f}s ({t_back - t_zero:.1f}s after allocatable 0)"
        )
