"""The coexistence guard between the publication and the slice publisher (``dra_driver.appkit.device_plugin_guard``).

Fakes: a recording publisher, a Node the test edits, a Node read that can fail, an Event recorder.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from structlog.testing import capture_logs

from dra_driver.appkit.device_plugin_guard import DevicePluginGuard
from dra_driver.appkit.node_guards import guard_publisher
from dra_driver.core.device_plugin_conflict import Guard
from dra_driver.core.schema import Attr, DeviceSpec
from dra_driver.files.checkpoint_store import Notice
from kubelet_plugin.settings import parse

DEVICES = [DeviceSpec(f"gpu-{i}", {"type": Attr("string", "gpu")}, {}) for i in range(8)]
COUNTERS: list[dict[str, object]] = [{"name": "gpu-0-counters", "counters": {}}]


class Recorder:
    def __init__(self) -> None:
        self.sets: list[tuple[list[str], list[dict[str, object]] | None]] = []

    def set_devices(self, devices: list[DeviceSpec], counter_sets: list[dict[str, object]] | None = None) -> None:
        self.sets.append(([d.name for d in devices], counter_sets))

    @property
    def last(self) -> list[str]:
        return self.sets[-1][0]


class FakeNode:
    def __init__(self) -> None:
        self.allocatable: dict[str, str] = {"cpu": "8"}
        self.down = False
        self.reads = 0

    def read(self) -> dict[str, Any]:
        self.reads += 1
        if self.down:
            raise ConnectionError("API server unreachable")
        return {"status": {"allocatable": dict(self.allocatable), "capacity": dict(self.allocatable)}}


def make(interval_s: float = 30.0) -> tuple[DevicePluginGuard, Recorder, FakeNode, list[Notice]]:
    pub, node = Recorder(), FakeNode()
    events: list[Notice] = []
    guard = DevicePluginGuard(pub, node_name="node-a", read_node=node.read, notify=events.append, interval_s=interval_s)
    return guard, pub, node, events


def test_nothing_is_passed_on_before_the_first_read() -> None:
    guard, pub, _, _ = make()
    guard.set_devices(DEVICES, COUNTERS)
    assert pub.sets == []
    assert guard.decision.state is Guard.UNKNOWN


def test_a_first_read_without_device_plugin_publishes_what_was_set_meanwhile() -> None:
    guard, pub, _, events = make()
    guard.set_devices(DEVICES, COUNTERS)
    with capture_logs() as logs:
        guard.check_once()
    assert pub.sets == [([d.name for d in DEVICES], COUNTERS)]
    assert events == []  # nothing to tell an operator
    assert [entry["event"] for entry in logs] == ["device_plugin_check_clear"]
    guard.set_devices(DEVICES[:2])  # later lists pass straight through
    assert pub.last == ["gpu-0", "gpu-1"]


def test_a_device_plugin_at_start_means_the_devices_are_never_published() -> None:
    guard, pub, node, events = make()
    node.allocatable["nvidia.com/gpu"] = "8"
    guard.set_devices(DEVICES, COUNTERS)
    guard.check_once()
    assert pub.sets == [([], [])]  # an empty pool: slices published before a restart lose their devices
    guard.set_devices(DEVICES)  # a health change meanwhile is kept, not published
    assert pub.sets == [([], [])]
    (event,) = events
    assert event.reason == "DevicePluginConflict" and event.warning
    assert "nvidia.com/gpu=8" in event.message and "extendedResources" in event.message


def test_conflict_withdraws_logs_once_then_clears_and_republishes_the_latest_devices() -> None:
    guard, pub, node, events = make()
    guard.set_devices(DEVICES, COUNTERS)
    guard.check_once()
    node.allocatable.update({"nvidia.com/gpu": "4", "nvidia.com/mig-1g.10gb": "7"})
    with capture_logs() as logs:
        guard.check_once()
        guard.check_once()  # still there: no second log line or Event
    assert pub.last == []
    (conflict,) = [entry for entry in logs if entry["event"] == "device_plugin_conflict"]
    assert conflict["log_level"] == "warning"
    assert conflict["resources"] == {"nvidia.com/gpu": 4, "nvidia.com/mig-1g.10gb": 7}
    assert conflict["devices_withheld"] == len(DEVICES)
    assert [e.reason for e in events] == ["DevicePluginConflict"]

    guard.set_devices(DEVICES[:3], None)  # e.g. a health change while withheld
    node.allocatable.update({"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "0"})  # the kubelet zeroes it
    with capture_logs() as logs:
        guard.check_once()
    assert pub.sets[-1] == (["gpu-0", "gpu-1", "gpu-2"], None)
    assert [entry["event"] for entry in logs] == ["device_plugin_conflict_cleared"]
    assert [e.reason for e in events] == ["DevicePluginConflict", "DevicePluginConflictCleared"]
    assert not events[-1].warning and "nvidia.com/gpu=4" in events[-1].message


def test_an_unreadable_node_keeps_the_last_decision_and_logs_once() -> None:
    guard, pub, node, events = make()
    guard.set_devices(DEVICES)
    node.down = True
    with capture_logs() as logs:
        guard.check_once()
        guard.check_once()
    assert pub.sets == [] and guard.decision.state is Guard.UNKNOWN  # fail closed at start
    assert [entry["event"] for entry in logs] == ["device_plugin_check_failed"]
    node.down = False
    node.allocatable["nvidia.com/gpu"] = "8"
    guard.check_once()
    assert pub.last == []
    node.down = True
    node.allocatable["nvidia.com/gpu"] = "0"  # gone, but nobody can tell: still withheld
    assert guard.check_once().state is Guard.CONFLICT
    assert pub.last == []
    assert [e.reason for e in events] == ["DevicePluginConflict"]
    node.down = False
    guard.check_once()
    assert pub.last == [d.name for d in DEVICES]


def test_run_retries_quickly_until_the_first_read_then_polls_at_the_interval() -> None:
    guard, pub, node, _ = make(interval_s=0.05)
    node.down = True
    stop = threading.Event()
    thread = threading.Thread(target=guard.run, args=(stop,))
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while node.reads < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert node.reads >= 3 and pub.sets == []
        guard.set_devices(DEVICES)
        node.down = False
        while not pub.sets and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pub.last == [d.name for d in DEVICES]
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()


def test_interval_zero_turns_the_guard_off() -> None:
    pub = Recorder()
    events: list[Notice] = []
    with capture_logs() as logs:
        got = guard_publisher(
            pub, node_name="n", driver="d", device_plugin_interval_s=0, local_cordon_interval_s=0, api_client=None,
            notify=events.append, stop=threading.Event(),
        )  # fmt: skip
    assert got is pub
    assert [entry["event"] for entry in logs] == ["local_cordon_disabled", "device_plugin_guard_disabled"]


def test_the_interval_flag_defaults_to_30s_and_refuses_negative_or_nan(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEVICE_PLUGIN_CHECK_INTERVAL", raising=False)
    base = ["--node-name", "n", "--fake-gpus", "h100x8"]
    assert parse(base).device_plugin_check_interval_s == 30.0
    assert parse([*base, "--device-plugin-check-interval", "0"]).device_plugin_check_interval_s == 0.0
    for bad in ("-1", "nan"):
        with pytest.raises(SystemExit) as exc:
            parse([*base, "--device-plugin-check-interval", bad])
        assert exc.value.code == 2
        assert "--device-plugin-check-interval" in capsys.readouterr().err
