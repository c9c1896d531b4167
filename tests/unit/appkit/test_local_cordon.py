"""Local withholding between the publication and the slice publisher (``dra_driver.appkit.local_cordon``).

Fakes: a recording publisher, a Node whose cordon annotation the test edits, a Node read that can
fail, an Event recorder. Nothing before the first read; a cordoned GPU leaves with its MIG
devices and comes back on uncordon; a malformed annotation withholds everything (an Event says so);
an unreadable Node keeps the last cordons; the running thread acts within its interval.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from structlog.testing import capture_logs

from dra_driver.appkit.local_cordon import LocalCordon
from dra_driver.appkit.node_guards import guard_publisher
from dra_driver.core.local_cordon import annotation_key
from dra_driver.core.schema import Attr, DeviceSpec
from dra_driver.files.checkpoint_store import Notice
from kubelet_plugin.settings import parse

DRIVER = "gpu.dra-gpu.dev"
KEY = annotation_key(DRIVER)
GPUS = [DeviceSpec(f"gpu-{i}", {"uuid": Attr("string", f"GPU-{i}")}, {}) for i in range(4)]
MIG = DeviceSpec("gpu-1-mig-1g10gb-0", {"parentUUID": Attr("string", "GPU-1")}, {})
DEVICES = [*GPUS, MIG]
COUNTERS: list[dict[str, object]] = [{"name": "gpu-1-counters", "counters": {}}]


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
        self.annotations: dict[str, str] = {}
        self.down = False

    def read(self) -> dict[str, Any]:
        if self.down:
            raise ConnectionError("API server unreachable")
        return {"metadata": {"name": "node-a", "annotations": dict(self.annotations)}}


def make(interval_s: float = 10.0) -> tuple[LocalCordon, Recorder, FakeNode, list[Notice]]:
    pub, node = Recorder(), FakeNode()
    events: list[Notice] = []
    cordon = LocalCordon(pub, node_name="node-a", driver=DRIVER, read_node=node.read, notify=events.append, interval_s=interval_s)
    return cordon, pub, node, events


def test_nothing_is_passed_on_before_the_first_read_then_everything() -> None:
    cordon, pub, _, events = make()
    cordon.set_devices(DEVICES, COUNTERS)
    assert pub.sets == []
    cordon.check_once()
    assert pub.sets == [([d.name for d in DEVICES], COUNTERS)] and events == []


def test_a_cordoned_gpu_leaves_with_its_mig_devices_and_comes_back() -> None:
    cordon, pub, node, events = make()
    node.annotations[KEY] = '{"gpu-1": "fan failing"}'
    cordon.set_devices(DEVICES, COUNTERS)
    with capture_logs() as logs:
        cordon.check_once()
    assert pub.last == ["gpu-0", "gpu-2", "gpu-3"] and pub.sets[-1][1] == COUNTERS
    assert cordon.withheld == {"gpu-1", MIG.name}
    assert events[-1].reason == "DevicesWithheld" and events[-1].warning and "gpu-1 (fan failing)" in events[-1].message
    assert any(e["event"] == "local_cordon_changed" for e in logs)
    cordon.set_devices(DEVICES, COUNTERS)  # a new list from the publication: still without them
    assert pub.last == ["gpu-0", "gpu-2", "gpu-3"]
    n = len(pub.sets)
    cordon.check_once()  # nothing changed: nothing passed on, no Event
    assert len(pub.sets) == n and len(events) == 1
    del node.annotations[KEY]
    cordon.check_once()
    assert pub.last == [d.name for d in DEVICES] and not events[-1].warning and "published again" in events[-1].message


def test_other_drivers_annotations_are_not_ours() -> None:
    cordon, pub, node, _ = make()
    node.annotations[annotation_key("other.example.com")] = '{"gpu-0": "x"}'
    cordon.set_devices(DEVICES, COUNTERS)
    cordon.check_once()
    assert pub.last == [d.name for d in DEVICES]


def test_a_malformed_annotation_withholds_everything_and_says_so() -> None:
    cordon, pub, node, events = make()
    node.annotations[KEY] = "gpu-1"
    cordon.set_devices(DEVICES, COUNTERS)
    with capture_logs() as logs:
        cordon.check_once()
    assert pub.last == [] and cordon.withheld == {d.name for d in DEVICES}
    assert events[-1].reason == "LocalCordonMalformed" and events[-1].warning and "every device" in events[-1].message
    assert any(e["event"] == "local_cordon_malformed" and e["log_level"] == "error" for e in logs)
    node.annotations[KEY] = '{"gpu-2": "ok now"}'
    cordon.check_once()
    assert pub.last == ["gpu-0", "gpu-1", "gpu-3", MIG.name]


def test_an_unreadable_node_keeps_the_last_cordons() -> None:
    cordon, pub, node, _ = make()
    node.annotations[KEY] = '{"gpu-0": "x"}'
    cordon.set_devices(DEVICES, COUNTERS)
    cordon.check_once()
    node.down = True
    del node.annotations[KEY]
    with capture_logs() as logs:
        cordon.check_once()
        cordon.check_once()
    assert [e["event"] for e in logs] == ["local_cordon_check_failed"]  # once, not at every read
    assert "gpu-0" not in pub.last


def test_the_thread_acts_within_its_interval_and_zero_turns_it_off() -> None:
    pub, node, stop = Recorder(), FakeNode(), threading.Event()
    zero = {"device_plugin_interval_s": 0, "local_cordon_interval_s": 0}
    assert guard_publisher(pub, node_name="node-a", driver=DRIVER, api_client=None, notify=print, stop=stop, **zero) is pub
    cordon = LocalCordon(pub, node_name="node-a", driver=DRIVER, read_node=node.read, notify=lambda _n: None, interval_s=0.05)
    cordon.set_devices(DEVICES, COUNTERS)
    thread = threading.Thread(target=cordon.run, args=(stop,), daemon=True)
    thread.start()
    try:
        node.annotations[KEY] = '{"gpu-3": "x"}'
        deadline = time.monotonic() + 5
        while (not pub.sets or "gpu-3" in pub.last) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pub.sets and "gpu-3" not in pub.last
    finally:
        stop.set()
        thread.join(5)


def test_the_flag_defaults_to_ten_seconds_and_refuses_negatives(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCAL_CORDON_CHECK_INTERVAL", raising=False)
    base = ["--node-name", "n", "--fake-gpus", "h100x8"]
    assert parse(base).local_cordon_check_interval_s == 10.0
    assert parse([*base, "--local-cordon-check-interval", "0"]).local_cordon_check_interval_s == 0.0
    for bad in ("-1", "nan"):
        with pytest.raises(SystemExit) as exc:
            parse([*base, "--local-cordon-check-interval", bad])
        assert exc.value.code == 2
        assert "--local-cordon-check-interval" in capsys.readouterr().err
