"""What the plugin publishes for unhealthy GPUs, by what the API server accepts (``kubelet_plugin.monitoring.health_taints``)."""

from __future__ import annotations

from dra_driver.appkit.inventory import node_publication
from dra_driver.core.health import GpuCheck, HealthBook, HealthEvent, record_check, record_event
from dra_driver.core.mig import MigStrategy
from dra_driver.core.schema import DeviceSpec
from dra_driver.sources.fake import FakeGpuSource
from kubelet_plugin.monitoring.health_taints import TaintedPublication

D = "gpu.example.com"
GPUS = FakeGpuSource("h100x8", "node-a").gpus()


class Recorder:
    def __init__(self) -> None:
        self.sets: list[list[DeviceSpec]] = []

    def set_devices(self, devices: list[DeviceSpec], counter_sets: list[dict[str, object]] | None = None) -> None:
        self.sets.append(devices)


def sick_book() -> HealthBook:
    book = HealthBook()
    for e in (
        HealthEvent(GPUS[0].uuid, "xid", 1.0, 79),
        HealthEvent(GPUS[0].uuid, "double-bit-ecc", 1.0),
        HealthEvent(GPUS[0].uuid, "gpu-lost", 1.0),
        HealthEvent(GPUS[0].uuid, "xid", 1.0, 13),
    ):
        book = record_event(book, e)
    book = record_check(book, GPUS[0].uuid, GpuCheck(remap_failed=True, error="x"), 1.0)
    return record_event(book, HealthEvent(GPUS[1].uuid, "xid", 1.0, 13))


def taints(devices: list[DeviceSpec], name: str) -> list[tuple[str, str]]:
    (d,) = [d for d in devices if d.name == name]
    return [(t["key"].split("/")[1], t["effect"]) for t in d.extra.get("taints", [])]


def test_a_1_34_server_gets_at_most_4_taints_the_most_severe_and_no_effect_none() -> None:
    tp = TaintedPublication(node_publication(GPUS, MigStrategy.NONE, None), D, evict_fatal=False)
    rec = Recorder()
    tp.on_change(sick_book())
    tp.attach(rec, lambda: 34)
    got = taints(rec.sets[-1], "gpu-0")
    assert 4 == len(got) and all(effect == "NoSchedule" for _, effect in got)
    assert "unmonitored" not in dict(got)  # informational: no effect None on 1.34
    assert [] == taints(rec.sets[-1], "gpu-1")


def test_a_1_36_server_gets_every_taint_and_effect_none() -> None:
    tp = TaintedPublication(node_publication(GPUS, MigStrategy.NONE, None), D, evict_fatal=True)
    rec = Recorder()
    tp.on_change(sick_book())
    tp.attach(rec, lambda: 36)
    assert {"ecc", "gpu-lost", "memory-repair", "unmonitored", "xid"} == {k for k, _ in taints(rec.sets[-1], "gpu-0")}
    assert [("xid", "None")] == taints(rec.sets[-1], "gpu-1")


def test_an_unknown_server_version_risks_nothing_and_is_asked_again() -> None:
    answers: list[int | Exception] = [RuntimeError("version unreachable"), 36]

    def minor() -> int:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    tp = TaintedPublication(node_publication(GPUS, MigStrategy.NONE, None), D, evict_fatal=False)
    rec = Recorder()
    tp.on_change(sick_book())
    tp.attach(rec, minor)
    assert [] == taints(rec.sets[-1], "gpu-1")  # effect None not risked
    tp.on_change(sick_book())
    assert [("xid", "None")] == taints(rec.sets[-1], "gpu-1")


def test_when_the_server_drops_taints_unhealthy_gpus_are_left_out_not_offered() -> None:
    pub = node_publication(GPUS, MigStrategy.NONE, None)
    tp = TaintedPublication(pub, D, evict_fatal=True)
    rec = Recorder()
    tp.on_change(sick_book())
    tp.attach(rec, lambda: 35)
    tp.on_dropped(["spec.devices[0].taints"])
    names = [d.name for d in rec.sets[-1]]
    assert "gpu-0" not in names and "gpu-1" in names  # gpu-1 is only informational: still offered
    assert len(names) == len(pub.devices) - 1
    tp.on_change(HealthBook())  # healthy again: offered again
    assert "gpu-0" in [d.name for d in rec.sets[-1]]
    published = len(rec.sets)
    tp.on_dropped(["spec.devices[0].consumesCounters"])  # other fields are the publisher's business
    assert published == len(rec.sets)
