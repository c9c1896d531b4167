"""GPU health, pure rules and the monitor: classification, conditions, taints, the record, repairs."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from dra_driver.appkit.inventory import node_publication
from dra_driver.core.health import (
    GpuCheck,
    HealthBook,
    HealthEvent,
    TaintPolicy,
    classify_xid,
    condition_for,
    expire,
    health_message,
    is_unhealthy,
    next_expiry,
    record_check,
    record_event,
    repair,
    tainted_devices,
    taints_for,
)
from dra_driver.core.health_causes import EVENT_CAUSES, RECOVERY_ACTIONS, Clears, Severity
from dra_driver.core.health_record import HealthRecordError, from_json, to_json
from dra_driver.core.mig import MigStrategy
from dra_driver.files.health_store import HealthStore, request_repair
from dra_driver.sources.fake import FakeGpuSource
from kubelet_plugin.monitoring.health_monitor import HealthMonitor, MonitorConfig

D = "gpu.example.com"


def xid(n: int, at: float = 100.0, uuid: str = "GPU-a") -> HealthEvent:
    return HealthEvent(uuid, "xid", at, n)


def test_xids_are_classified_by_nvidias_immediate_action_and_unknown_ones_are_degraded() -> None:
    assert Severity.FATAL == classify_xid(79)[0] == classify_xid(48)[0] == classify_xid(95)[0]
    assert Severity.APPLICATION == classify_xid(13)[0] == classify_xid(31)[0] == classify_xid(43)[0]
    assert Severity.INFORMATIONAL == classify_xid(92)[0]
    severity, _, known = classify_xid(4242)
    assert (Severity.DEGRADED, False) == (severity, known)


def test_one_condition_per_key_the_more_severe_wins_and_keeps_its_first_time() -> None:
    book = record_event(HealthBook(), xid(13, at=1.0))
    book = record_event(book, xid(79, at=2.0))
    book = record_event(book, xid(13, at=3.0))  # a later, milder XID does not hide the fatal one
    (cond,) = book.of("GPU-a")
    assert ("79", Severity.FATAL, Clears.REPAIR, 2.0) == (cond.value, cond.severity, cond.clears, cond.since)
    book = record_event(book, xid(79, at=9.0))
    assert 2.0 == book.of("GPU-a")[0].since


def test_a_reset_clears_what_events_raised_but_not_what_checks_see() -> None:
    book = record_event(HealthBook(), xid(48))
    book = record_check(book, "GPU-a", GpuCheck(remap_pending=True), 5.0)
    book = record_event(book, HealthEvent("GPU-a", "gpu-reset", 6.0))
    assert ["memory-repair"] == [c.key for c in book.of("GPU-a")]


def test_checks_raise_and_clear_their_own_conditions() -> None:
    book = record_check(HealthBook(), "GPU-a", GpuCheck(lost=True, error="boom"), 1.0)
    assert {"gpu-lost", "unmonitored"} == {c.key for c in book.of("GPU-a")}
    book = record_check(book, "GPU-a", GpuCheck(lost=True), 2.0)
    assert [("gpu-lost", 1.0)] == [(c.key, c.since) for c in book.of("GPU-a")]  # first time kept
    assert HealthBook() == record_check(book, "GPU-a", GpuCheck(), 3.0)


def test_a_lost_gpu_event_stays_after_the_check_sees_it_again_until_repaired() -> None:
    book = record_event(HealthBook(), HealthEvent("GPU-a", "gpu-lost", 1.0))
    book = record_check(book, "GPU-a", GpuCheck(lost=True), 2.0)
    book = record_check(book, "GPU-a", GpuCheck(), 3.0)
    assert ["gpu-lost"] == [c.key for c in book.of("GPU-a")]
    book, cleared = repair(book, "GPU-a", 4.0)
    assert ["gpu-lost"] == [c.key for c in cleared] and HealthBook() == book


def test_repair_clears_only_what_was_raised_until_the_request() -> None:
    book = record_event(HealthBook(), xid(48, at=1.0))
    book = record_check(book, "GPU-a", GpuCheck(remap_failed=True), 1.0)
    book, cleared = repair(book, "GPU-a", 0.5)
    assert [] == cleared
    book, cleared = repair(book, "GPU-a", 1.0)
    assert ["xid"] == [c.key for c in cleared]
    assert ["memory-repair"] == [c.key for c in book.of("GPU-a")]  # the check still sees it


def test_application_and_informational_causes_expire_after_the_hold() -> None:
    book = record_event(record_event(HealthBook(), xid(13, at=10.0)), xid(79, at=10.0, uuid="GPU-b"))
    assert 70.0 == next_expiry(book, 60.0)
    assert book == expire(book, 69.0, 60.0)
    after = expire(book, 70.0, 60.0)
    assert () == after.of("GPU-a") and ["xid"] == [c.key for c in after.of("GPU-b")]


@pytest.mark.parametrize(
    ("n", "policy", "effect"),
    [
        (79, TaintPolicy(), "NoSchedule"),
        (79, TaintPolicy(evict_fatal=True), "NoExecute"),
        (4242, TaintPolicy(evict_fatal=True), "NoSchedule"),
        (13, TaintPolicy(effect_none=True), "None"),
        (13, TaintPolicy(effect_none=False), None),
    ],
)
def test_taint_effects_follow_severity_and_what_the_cluster_allows(n: int, policy: TaintPolicy, effect: str | None) -> None:
    book = record_event(HealthBook(), xid(n))
    taints = taints_for(book.of("GPU-a"), D, policy)
    assert ([{"key": f"{D}/xid", "value": str(n), "effect": effect}] if effect else []) == taints


def test_the_gpu_every_mig_placement_on_it_inherit_its_taints_and_no_other_device_does(tmp_path: Path) -> None:
    gpus = FakeGpuSource("h100x8", "node-a").gpus()
    from dra_driver.mig_backends.select import make_mig_backend

    backend = make_mig_backend(fake=True, gpus=gpus, state_dir=tmp_path)
    pub = node_publication(gpus, MigStrategy.DYNAMIC, backend)
    book = record_event(HealthBook(), HealthEvent(gpus[1].uuid, "double-bit-ecc", 1.0))
    out = tainted_devices(pub.devices, pub.targets, book, D, TaintPolicy())
    tainted = {d.name for d in out if d.extra.get("taints")}
    on_gpu1 = {n for n, t in pub.targets.items() if t.gpu.uuid == gpus[1].uuid}
    assert tainted == on_gpu1 and "gpu-1" in tainted and len(tainted) > 10
    assert all(d.extra.get("consumesCounters") for d in out if d.name in tainted)  # other fields kept


def test_kubelet_health_is_unhealthy_for_fatal_and_degraded_with_the_cause_in_words() -> None:
    book = record_event(record_event(HealthBook(), xid(13)), HealthEvent("GPU-a", "double-bit-ecc", 1.0))
    conds = book.of("GPU-a")
    assert is_unhealthy(conds)
    assert health_message(conds).startswith("fatal: double-bit ECC error; application: XID 13")
    assert not is_unhealthy(record_event(HealthBook(), xid(13)).of("GPU-a"))
    assert len(health_message(record_event(HealthBook(), HealthEvent("GPU-a", "xid", 1.0, 79, "d" * 5000)).of("GPU-a"))) <= 1024


def test_recorded_only_kinds_change_nothing_and_a_reset_still_clears() -> None:
    book = record_event(HealthBook(), xid(48))
    for kind in ("pstate", "clock", "power-source", "mig-config"):
        assert book == record_event(book, HealthEvent("GPU-a", kind, 5.0))
        assert HealthBook() == record_event(HealthBook(), HealthEvent("GPU-a", kind, 5.0))
    assert HealthBook() == record_event(book, HealthEvent("GPU-a", "gpu-reset", 6.0))


def test_a_milder_cause_on_the_same_key_does_not_hide_a_worse_one() -> None:
    book = record_event(HealthBook(), HealthEvent("GPU-a", "single-bit-ecc-storm", 1.0))
    book = record_event(book, HealthEvent("GPU-a", "single-bit-ecc", 2.0))
    assert [("ecc", "single-bit-storm", Severity.DEGRADED, Clears.REPAIR, 2.0)] == [
        (c.key, c.value, c.severity, c.clears, c.seen) for c in book.of("GPU-a")
    ]
    book = record_event(book, HealthEvent("GPU-a", "double-bit-ecc", 3.0))
    assert [("ecc", "double-bit", Severity.FATAL)] == [(c.key, c.value, c.severity) for c in book.of("GPU-a")]


@pytest.mark.parametrize(
    ("action", "severity"),
    [
        ("none", None),
        ("gpu-reset", Severity.FATAL),
        ("node-reboot", Severity.FATAL),
        ("drain-p2p", Severity.DEGRADED),
        ("drain-and-reset", Severity.FATAL),
        ("recover-imex-domain", Severity.DEGRADED),
        ("bus-reset", Severity.FATAL),
        ("system-reboot", Severity.FATAL),
        ("unknown", Severity.DEGRADED),
    ],
)
def test_each_recovery_action_has_its_severity(action: str, severity: Severity | None) -> None:
    conds = record_event(HealthBook(), HealthEvent("GPU-a", "gpu-recovery-action", 1.0, action=action)).of("GPU-a")
    assert ([] if severity is None else [("recovery-action", action, severity)]) == [(c.key, c.value, c.severity) for c in conds]
    checked = record_check(HealthBook(), "GPU-a", GpuCheck(recovery_action=action), 1.0).of("GPU-a")
    assert [c.severity for c in conds] == [c.severity for c in checked]


def test_a_recovery_action_lasts_while_nvml_asks_for_it_and_survives_a_check_that_cannot_read_it() -> None:
    book = record_event(HealthBook(), HealthEvent("GPU-a", "gpu-recovery-action", 1.0, action="gpu-reset"))
    book = record_event(book, HealthEvent("GPU-a", "gpu-reset", 2.0))  # events' reset: the action is NVML's to clear
    book = record_check(book, "GPU-a", GpuCheck(recovery_action="gpu-reset"), 3.0)
    assert [("gpu-reset", 1.0)] == [(c.value, c.since) for c in book.of("GPU-a")]
    book = record_check(book, "GPU-a", GpuCheck(error="boom"), 4.0)  # not read: not seen gone
    assert {"recovery-action", "unmonitored"} == {c.key for c in book.of("GPU-a")}
    book = record_check(book, "GPU-a", GpuCheck(recovery_action="drain-p2p"), 5.0)
    assert [("drain-p2p", Severity.DEGRADED)] == [(c.value, c.severity) for c in book.of("GPU-a")]
    assert HealthBook() == record_check(book, "GPU-a", GpuCheck(recovery_action="none"), 6.0)


def test_an_unknown_recovery_action_stays_until_repaired() -> None:
    book = record_event(HealthBook(), HealthEvent("GPU-a", "gpu-recovery-action", 1.0, detail="unreadable", action="unknown"))
    book = record_check(book, "GPU-a", GpuCheck(recovery_action="none"), 2.0)
    assert [("unknown", Clears.REPAIR)] == [(c.value, c.clears) for c in book.of("GPU-a")]
    assert "GPU recovery action: NVML asked for a recovery action" in book.of("GPU-a")[0].message
    assert HealthBook() == repair(book, "GPU-a", 2.0)[0]


@pytest.mark.parametrize(
    "event",
    [
        HealthEvent("GPU-a", "overheated", 1.0),
        HealthEvent("GPU-a", "gpu-recovery-action", 1.0, action="panic"),
        HealthEvent("GPU-a", "gpu-recovery-action", 1.0),
        HealthEvent("GPU-a", "xid", 1.0),
    ],
    ids=["unknown-kind", "unknown-action", "no-action", "xid-without-number"],
)
def test_events_no_source_should_produce_are_refused(event: HealthEvent) -> None:
    with pytest.raises(ValueError, match=event.gpu_uuid):
        record_event(HealthBook(), event)


def test_the_cause_tables_give_taint_keys_and_label_values_the_record_accepts() -> None:
    conds = [
        condition_for(HealthEvent("GPU-a", k, 1.0, 79)) for k in EVENT_CAUSES if k not in ("gpu-reset", "gpu-recovery-action")
    ]
    conds += [condition_for(HealthEvent("GPU-a", "gpu-recovery-action", 1.0, action=a)) for a in RECOVERY_ACTIONS]
    raised = [c for c in conds if c is not None]
    assert len({(c.key, c.value) for c in raised}) == len(raised) == 18
    doc = to_json(HealthBook({f"GPU-{i}": (c,) for i, c in enumerate(raised)}), "boot-1")
    assert len(raised) == len(from_json(json.loads(json.dumps(doc)))[0].conditions)  # every key and value passes the reader


def test_the_record_round_trips_and_refuses_what_it_cannot_trust() -> None:
    book = record_check(record_event(HealthBook(), xid(79)), "GPU-b", GpuCheck(retirement_pending=True), 3.0)
    doc = json.loads(json.dumps(to_json(book, "boot-1", {"fake": 4})))
    assert (book, "boot-1", {"fake": 4}) == from_json(doc)
    doc["version"] = 2
    with pytest.raises(HealthRecordError, match="unknown record version 2"):
        from_json(doc)
    doc = to_json(book, "boot-1")
    doc["gpus"]["GPU-a"][0]["value"] = "not a label value!"
    with pytest.raises(HealthRecordError, match="not a label value"):
        from_json(doc)


def test_the_store_fails_closed_on_an_unreadable_record_and_drops_conditions_after_a_reboot(tmp_path: Path) -> None:
    store = HealthStore(tmp_path, "boot-1")
    store.save(record_event(HealthBook(), xid(79)), {"fake": 3})
    loaded = HealthStore(tmp_path, "boot-1").load(["GPU-a", "GPU-b"], 9.0)
    assert ["xid"] == [c.key for c in loaded.book.of("GPU-a")] and {"fake": 3} == loaded.consumed
    rebooted = HealthStore(tmp_path, "boot-2").load(["GPU-a"], 9.0)
    assert rebooted.rebooted and HealthBook() == rebooted.book and {"fake": 3} == rebooted.consumed
    store.path.write_text("{torn")
    broken = store.load(["GPU-a", "GPU-b"], 9.0)
    assert broken.problems and all(broken.book.of(u)[0].severity is Severity.DEGRADED for u in ("GPU-a", "GPU-b"))


class ScriptedSource:
    name = "fake"

    def __init__(self) -> None:
        self.queue: list[HealthEvent] = []
        self.checks: dict[str, GpuCheck] = {}
        self.pos = 0
        self.resumed_from: int | None = None

    def resume(self, position: int) -> None:
        self.resumed_from = position
        self.pos = position

    def position(self) -> int:
        return self.pos

    def events(self, timeout_s: float) -> list[HealthEvent]:
        out, self.queue = self.queue, []
        self.pos += len(out)
        return out

    def check(self, gpu_uuids: Sequence[str]) -> dict[str, GpuCheck]:
        return {u: self.checks.get(u, GpuCheck()) for u in gpu_uuids}

    def close(self) -> None:
        pass


def test_the_monitor_folds_events_persists_notifies_and_applies_repairs(tmp_path: Path) -> None:
    gpus = FakeGpuSource("h100x8", "node-a").gpus()[:2]
    source = ScriptedSource()
    changes: list[HealthBook] = []
    notices: list[str] = []
    now = [1000.0]
    monitor = HealthMonitor(
        source=lambda: source,
        gpus=gpus,
        store=HealthStore(tmp_path, "boot-1"),
        plugin_dir=tmp_path,
        on_change=changes.append,
        notify=lambda n: notices.append(n.reason),
        config=MonitorConfig(check_interval_s=5.0, hold_s=60.0, event_wait_s=0.0),
        clock=lambda: now[0],
    )
    monitor.load()
    version = monitor.snapshot()[0]
    source.queue = [HealthEvent(gpus[0].uuid, "xid", 999.0, 79), HealthEvent("GPU-stranger", "xid", 999.0, 79)]
    monitor.step()
    monitor.drain_notices()
    assert ["xid"] == [c.key for c in changes[-1].of(gpus[0].uuid)] and ["GpuUnhealthy"] == notices
    assert monitor.wait_for_change(version, 0.0) != version  # streams wake
    assert 2 == from_json(json.loads((tmp_path / "health.json").read_bytes()))[2]["fake"]
    now[0] = 1001.0
    request_repair(tmp_path, "gpu-0")
    monitor.step()
    monitor.drain_notices()
    assert HealthBook() == monitor.book and ["GpuUnhealthy", "GpuHealthy"] == notices
    with pytest.raises(ValueError, match="not a GPU device name"):
        request_repair(tmp_path, "../etc")

    second = ScriptedSource()
    restarted = HealthMonitor(source=lambda: second, gpus=gpus, store=HealthStore(tmp_path, "boot-1"), plugin_dir=tmp_path)
    restarted.load()
    restarted.step()
    assert second.resumed_from == 2  # no replay after a restart


def test_the_monitor_loop_survives_a_failing_source(tmp_path: Path) -> None:
    class Broken(ScriptedSource):
        def events(self, timeout_s: float) -> list[HealthEvent]:
            raise RuntimeError("nvml exploded")

    gpus = FakeGpuSource("h100x8", "node-a").gpus()[:1]
    stop = threading.Event()
    monitor = HealthMonitor(
        source=Broken, gpus=gpus, store=HealthStore(tmp_path, "b"), plugin_dir=tmp_path, config=MonitorConfig(event_wait_s=0.01)
    )
    t = threading.Thread(target=monitor.run, args=(stop,))
    t.start()
    stop.wait(0.1)
    stop.set()
    t.join(2.0)
    assert not t.is_alive()


def _monitor(tmp_path: Path, source: ScriptedSource, now: list[float], store: HealthStore | None = None) -> HealthMonitor:
    gpus = FakeGpuSource("h100x8", "node-a").gpus()[:2]
    return HealthMonitor(
        source=lambda: source,
        gpus=gpus,
        store=store or HealthStore(tmp_path, "boot-1"),
        plugin_dir=tmp_path,
        config=MonitorConfig(check_interval_s=5.0, hold_s=60.0, event_wait_s=0.0),
        clock=lambda: now[0],
    )


GPU0 = FakeGpuSource("h100x8", "node-a").gpus()[0].uuid


def test_events_read_in_a_pass_that_fails_are_folded_in_by_the_next(tmp_path: Path) -> None:
    class FailingOnce(HealthStore):
        failed = False

        def save(self, book: HealthBook, consumed: Mapping[str, int]) -> None:
            if not self.failed:
                self.failed = True
                raise OSError(28, "No space left on device")
            super().save(book, consumed)

    source = ScriptedSource()
    monitor = _monitor(tmp_path, source, [1000.0], FailingOnce(tmp_path, "boot-1"))
    source.queue = [HealthEvent(GPU0, "xid", 999.0, 48)]
    with pytest.raises(OSError, match="No space"):
        monitor.step()
    assert HealthBook() == monitor.book  # nothing half-applied
    monitor.step()  # the source has nothing new: the event kept from the failed pass is applied
    assert ["48"] == [c.value for c in monitor.book.of(GPU0)]


def test_hostile_repair_requests_never_stop_the_monitor(tmp_path: Path) -> None:
    repairs = tmp_path / "health-repairs"
    repairs.mkdir()
    (repairs / "gpu-0").mkdir()  # a directory where a request should be
    os.mkfifo(repairs / "gpu-1")  # a FIFO: reading it would block
    (repairs / "all").write_text("not a time")
    (repairs / "gpu-99").write_text("1")  # no such GPU
    for i in range(80):
        (repairs / f".dra-gpu-tmp-{i}").write_text("x")  # stale temp files do not crowd out requests
    source = ScriptedSource()
    monitor = _monitor(tmp_path, source, [1000.0])
    source.queue = [HealthEvent(GPU0, "xid", 999.0, 79)]
    monitor.step()
    monitor.step()
    assert ["79"] == [c.value for c in monitor.book.of(GPU0)]  # events applied, bad requests ignored


def test_the_requests_directory_being_a_file_does_not_stop_the_monitor(tmp_path: Path) -> None:
    (tmp_path / "health-repairs").write_text("oops")
    source = ScriptedSource()
    monitor = _monitor(tmp_path, source, [1000.0])
    source.queue = [HealthEvent(GPU0, "xid", 999.0, 79)]
    monitor.step()
    assert ["79"] == [c.value for c in monitor.book.of(GPU0)]


def test_a_repair_does_not_clear_a_fault_that_recurred_after_it_was_asked_for() -> None:
    book = record_event(HealthBook(), xid(48, at=10.0))
    book = record_event(book, xid(48, at=30.0))  # again, after the request below was made
    book, cleared = repair(book, "GPU-a", 20.0)
    assert [] == cleared and ["48"] == [c.value for c in book.of("GPU-a")]
    assert 10.0 == book.of("GPU-a")[0].since


def test_the_hold_runs_from_the_last_sighting_of_an_informational_cause() -> None:
    book = record_event(record_event(HealthBook(), xid(31, at=1000.0)), xid(31, at=1590.0))
    assert ["31"] == [c.value for c in expire(book, 1601.0, 600.0).of("GPU-a")]
    assert () == expire(book, 2190.0, 600.0).of("GPU-a")


def test_both_plugins_of_a_rolling_update_apply_a_repair_and_once_each(tmp_path: Path) -> None:
    now = [1000.0]
    old, new = ScriptedSource(), ScriptedSource()
    a, b = _monitor(tmp_path, old, now), _monitor(tmp_path, new, now)
    old.queue = [HealthEvent(GPU0, "xid", 999.0, 79)]
    new.queue = [HealthEvent(GPU0, "xid", 999.0, 79)]
    a.step()
    b.step()
    request_repair(tmp_path, "gpu-0", at=1000.0)
    a.step()
    b.step()
    assert HealthBook() == a.book == b.book
    assert (tmp_path / "health-repairs" / "gpu-0").exists()  # left for the other plugin (and harmless later)
    new.queue = [HealthEvent(GPU0, "xid", 1001.0, 79)]
    b.step()
    b.step()  # the same request is not applied again to what came after it
    assert ["79"] == [c.value for c in b.book.of(GPU0)]


def test_the_fake_gpus_fault_tool_injects_every_new_cause_and_a_recovery_action_until_recovered(tmp_path: Path) -> None:
    from dra_driver.sources.fake_health import FakeHealthSource
    from dra_driver.sources.fake_health import main as faults

    uuid = FakeGpuSource("h100x8", "node-a").gpus()[2].uuid
    base = ["--state-dir", str(tmp_path), "--fake-gpus", "h100x8", "--node-name", "node-a"]
    kinds = [k for k in EVENT_CAUSES if k not in ("xid", "gpu-recovery-action", "gpu-reset", "gpu-lost")]
    for kind in kinds:
        assert 0 == faults([*base, "event", "--gpu", "2", "--kind", kind])
    assert 0 == faults([*base, "recovery", "--gpu", "2", "--action", "drain-and-reset"])
    source = FakeHealthSource(tmp_path, sleep=lambda s: None)
    got = source.events(0.0)
    assert [*kinds, "gpu-recovery-action"] == [e.kind for e in got] and "drain-and-reset" == got[-1].action
    book = HealthBook()
    for e in got:
        book = record_event(book, e)
    book = record_check(book, uuid, source.check([uuid])[uuid], 2.0)
    assert {
        ("ecc", "double-bit"),
        ("dram-retirement", "failed"),
        ("poison", "fatal"),
        ("gpu-lost", "unavailable"),
        ("recovery-action", "drain-and-reset"),
    } == {(c.key, c.value) for c in book.of(uuid)}
    assert 0 == faults([*base, "recover", "--gpu", "2"])
    book = record_event(book, source.events(0.0)[0])
    assert HealthBook() == record_check(book, uuid, source.check([uuid])[uuid], 3.0)


def test_the_fault_tool_refuses_a_recovery_action_or_kind_it_does_not_know(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dra_driver.sources.fake_health import main as faults

    base = ["--state-dir", str(tmp_path), "--fake-gpus", "h100x8", "--node-name", "node-a"]
    for args in (["recovery", "--gpu", "0", "--action", "panic"], ["event", "--gpu", "0", "--kind", "overheated"]):
        with pytest.raises(SystemExit) as exit_info:
            faults([*base, *args])
        assert 2 == exit_info.value.code
    assert "invalid choice: 'panic'" in capsys.readouterr().err
    assert not (tmp_path / "gpu-faults.json").exists()
