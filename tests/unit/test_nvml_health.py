"""The NVML health source against a stand-in pynvml module (no GPU on CI machines).

The stand-in raises the real ``pynvml.NVMLError`` subclasses with the real error codes and uses the
real event type bits (the real module is imported here only for those constants); any function whose
name says it changes a GPU raises, so the tests also show that the source only queries.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, NoReturn

import pynvml
import pytest
import structlog

from dra_driver.core.health import GpuCheck, HealthEvent, HealthSource
from dra_driver.sources.nvml_health import MAX_EVENTS_PER_CALL, NvmlHealthSource

XID = pynvml.nvmlEventTypeXidCriticalError
DBE = pynvml.nvmlEventTypeDoubleBitEccError
NA = 0xFFFFFFFF
A, B, C = "GPU-aaaa", "GPU-bbbb", "GPU-cccc"
WALL = 1_700_000_000.0


class FakeNvml:
    """Answers like NVML for GPUs by UUID; handles are small objects that map back to their UUID."""

    NVMLError = pynvml.NVMLError
    NVML_ERROR_TIMEOUT = pynvml.NVML_ERROR_TIMEOUT
    NVML_ERROR_GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST
    NVML_ERROR_UNKNOWN = pynvml.NVML_ERROR_UNKNOWN
    NVML_ERROR_NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    nvmlEventTypeXidCriticalError = XID  # noqa: N815 - pynvml's names
    nvmlEventTypeDoubleBitEccError = DBE  # noqa: N815 - pynvml's names

    def __init__(self, uuids: tuple[str, ...] = (A, B)) -> None:
        self.handles = {u: SimpleNamespace(uuid=u) for u in (*uuids, C)}
        self.present = set(uuids)
        self.supported: dict[str, int] = {u: XID | DBE | pynvml.nvmlEventTypePState for u in self.handles}
        self.register_error: dict[str, int] = {}
        self.lookup_error: dict[str, int] = {}
        self.retired: dict[str, int] = {}  # value, or an NVML error code when >= 2
        self.rows: dict[str, tuple[int, int, int, int] | int] = {}
        self.registered: dict[str, int] = {}
        self.queue: list[Any] = []  # event data, or an error code to raise
        self.waits: list[int] = []
        self.calls: list[str] = []
        self.event_set = object()
        self.set_error: int | None = None

    def __getattr__(self, name: str) -> Any:
        if (
            name.startswith(("nvmlDeviceSet", "nvmlSet", "nvmlDeviceCreate", "nvmlGpuInstance"))
            or "Reset" in name
            or "Clear" in name
        ):
            raise AssertionError(f"the health source must not call {name}")
        raise AttributeError(name)

    @staticmethod
    def fail(code: int) -> NoReturn:
        raise pynvml.NVMLError(code)

    def nvmlInit(self) -> None:
        self.calls.append("init")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlEventSetCreate(self) -> object:
        if self.set_error is not None:
            self.fail(self.set_error)
        self.calls.append("set-create")
        return self.event_set

    def nvmlEventSetFree(self, event_set: object) -> None:
        assert event_set is self.event_set
        self.calls.append("set-free")

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any:
        if uuid in self.lookup_error:
            self.fail(self.lookup_error[uuid])
        if uuid not in self.present:
            self.fail(pynvml.NVML_ERROR_NOT_FOUND)
        return self.handles[uuid]

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return str(handle.uuid)

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        return self.supported[handle.uuid]

    def nvmlDeviceRegisterEvents(self, handle: Any, types: int, event_set: object) -> None:
        assert event_set is self.event_set
        if handle.uuid in self.register_error:
            self.fail(self.register_error[handle.uuid])
        self.registered[handle.uuid] = types

    def nvmlEventSetWait_v2(self, event_set: object, ms: int) -> Any:
        assert event_set is self.event_set
        self.waits.append(ms)
        if not self.queue:
            self.fail(pynvml.NVML_ERROR_TIMEOUT)
        item = self.queue.pop(0)
        if isinstance(item, int):
            self.fail(item)
        return item

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        value = int(self.retired.get(handle.uuid, pynvml.NVML_FEATURE_DISABLED))
        if value > 1:
            self.fail(value)
        return value

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        value = self.rows.get(handle.uuid, (0, 0, 0, 0))
        if isinstance(value, int):
            self.fail(value)
        return value

    # -- helpers for the tests
    def event(self, uuid: str, kind: int, data: int = 0, gi: int = NA, ci: int = NA) -> Any:
        return SimpleNamespace(device=self.handles[uuid], eventType=kind, eventData=data, gpuInstanceId=gi, computeInstanceId=ci)


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


@pytest.fixture
def nvml() -> FakeNvml:
    return FakeNvml()


@pytest.fixture
def clock() -> FakeTime:
    return FakeTime()


@pytest.fixture
def source(nvml: FakeNvml, clock: FakeTime) -> Iterator[NvmlHealthSource]:
    src = make(nvml, clock)
    yield src
    src.close()


def make(nvml: FakeNvml, clock: FakeTime, uuids: tuple[str, ...] = (A, B)) -> NvmlHealthSource:
    return NvmlHealthSource(uuids, nvml=nvml, clock=lambda: WALL, monotonic=clock.monotonic, sleep=clock.sleep)  # type: ignore[arg-type]  # a stand-in for the pynvml module


def test_it_is_a_health_source_named_nvml_without_a_replayable_log(source: NvmlHealthSource) -> None:
    as_protocol: HealthSource = source
    assert "nvml" == as_protocol.name
    source.resume(42)
    assert 0 == source.position()


def test_start_inits_nvml_and_registers_only_xid_and_double_bit_ecc_on_one_event_set(
    nvml: FakeNvml, source: NvmlHealthSource
) -> None:
    assert ["init", "set-create"] == nvml.calls
    assert {A: XID | DBE, B: XID | DBE} == nvml.registered  # PState is supported but not asked for
    assert {} == source.unmonitored()
    assert [(A, XID | DBE | pynvml.nvmlEventTypePState, XID | DBE, "")] == [
        (r.gpu_uuid, r.supported, r.registered, r.error) for r in source.registrations if r.gpu_uuid == A
    ]


def test_only_the_event_types_a_gpu_supports_are_registered(nvml: FakeNvml, clock: FakeTime) -> None:
    nvml.supported[B] = XID
    src = make(nvml, clock)
    assert (XID | DBE, XID) == (nvml.registered[A], nvml.registered[B])
    assert {} == src.unmonitored()


def test_xid_event_becomes_a_health_event_naming_the_mig_instance(nvml: FakeNvml, source: NvmlHealthSource) -> None:
    nvml.queue = [nvml.event(B, XID, 79, gi=3, ci=1)]
    got = source.events(5.0)
    assert [HealthEvent(B, "xid", WALL, xid=79, detail="MIG GPU instance 3, compute instance 1")] == got
    assert 5000 == nvml.waits[0]


def test_xid_event_of_a_gpu_instance_without_compute_instance_names_only_the_gpu_instance(
    nvml: FakeNvml, source: NvmlHealthSource
) -> None:
    nvml.queue = [nvml.event(A, XID, 31, gi=5)]
    assert "MIG GPU instance 5" == source.events(1.0)[0].detail


def test_double_bit_ecc_event_becomes_double_bit_ecc_without_xid(nvml: FakeNvml, source: NvmlHealthSource) -> None:
    nvml.queue = [nvml.event(A, DBE)]
    assert [HealthEvent(A, "double-bit-ecc", WALL)] == source.events(1.0)


def test_wait_timeout_returns_no_events_without_sleeping(nvml: FakeNvml, clock: FakeTime, source: NvmlHealthSource) -> None:
    assert [] == source.events(2.5)
    assert [2500] == nvml.waits
    assert [] == clock.slept


def test_pending_events_are_drained_with_zero_millisecond_waits(nvml: FakeNvml, source: NvmlHealthSource) -> None:
    nvml.queue = [nvml.event(A, XID, 13), nvml.event(B, DBE), nvml.event(A, XID, 48)]
    got = source.events(5.0)
    assert [(A, "xid", 13), (B, "double-bit-ecc", None), (A, "xid", 48)] == [(e.gpu_uuid, e.kind, e.xid) for e in got]
    assert [5000, 0, 0, 0] == nvml.waits  # the last 0 ms wait timed out: nothing more pending


def test_drain_is_bounded_and_the_rest_waits_for_the_next_call(nvml: FakeNvml, source: NvmlHealthSource) -> None:
    nvml.queue = [nvml.event(A, XID, 13) for _ in range(MAX_EVENTS_PER_CALL + 4)]
    assert MAX_EVENTS_PER_CALL == len(source.events(1.0)) == 256
    assert 4 == len(source.events(1.0))


def test_event_for_a_gpu_not_watched_is_skipped_with_a_log_line(nvml: FakeNvml, source: NvmlHealthSource) -> None:
    nvml.queue = [nvml.event(C, XID, 79), nvml.event(A, XID, 43)]
    with structlog.testing.capture_logs() as logs:
        got = source.events(1.0)
    assert [(A, 43)] == [(e.gpu_uuid, e.xid) for e in got]
    skipped = [e for e in logs if e["event"] == "nvml_health_event_skipped"]
    assert [(C, "GPU not watched")] == [(e["gpu"], e["reason"]) for e in skipped]


def test_xid_number_out_of_range_is_skipped_not_raised(nvml: FakeNvml, source: NvmlHealthSource) -> None:
    nvml.queue = [nvml.event(A, XID, 1 << 40), nvml.event(B, XID, 119)]
    with structlog.testing.capture_logs() as logs:
        assert [(B, 119)] == [(e.gpu_uuid, e.xid) for e in source.events(1.0)]
    assert ["XID number out of range"] == [e["reason"] for e in logs if e["event"] == "nvml_health_event_skipped"]


def test_gpu_whose_event_registration_is_not_supported_is_unmonitored_in_check(nvml: FakeNvml, clock: FakeTime) -> None:
    nvml.register_error[B] = pynvml.NVML_ERROR_NOT_SUPPORTED
    src = make(nvml, clock)  # does not raise
    assert {B: "events not supported: Not Supported"} == src.unmonitored()
    got = src.check([A, B])
    assert GpuCheck() == got[A]
    assert GpuCheck(error="events not supported: Not Supported") == got[B]


def test_gpu_supporting_neither_event_type_is_unmonitored_and_nothing_is_registered(nvml: FakeNvml, clock: FakeTime) -> None:
    nvml.supported[A] = pynvml.nvmlEventTypePState
    src = make(nvml, clock)
    assert A not in nvml.registered
    assert src.check([A])[A].error.startswith("events not supported: neither XID nor double-bit ECC")


def test_event_set_that_cannot_be_created_leaves_every_gpu_unmonitored_and_events_only_wait(
    nvml: FakeNvml, clock: FakeTime
) -> None:
    nvml.set_error = pynvml.NVML_ERROR_NOT_SUPPORTED
    src = make(nvml, clock)
    assert {A, B} == set(src.unmonitored())
    assert [] == src.events(3.0)
    assert [3.0] == clock.slept
    assert "events not supported: event set: Not Supported" == src.check([A])[A].error
    src.close()
    assert ["init", "shutdown"] == nvml.calls  # no set to free


@pytest.mark.parametrize(
    "code",
    [pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_NOT_FOUND],
    ids=["lost", "gone"],
)
def test_gpu_that_fails_its_handle_lookup_after_it_existed_is_lost(nvml: FakeNvml, source: NvmlHealthSource, code: int) -> None:
    nvml.lookup_error[A] = code
    assert {A: GpuCheck(lost=True), B: GpuCheck()} == source.check([A, B])


@pytest.mark.parametrize("query", ["retired", "rows"])
def test_gpu_lost_in_a_query_is_lost(nvml: FakeNvml, source: NvmlHealthSource, query: str) -> None:
    getattr(nvml, query)[A] = pynvml.NVML_ERROR_GPU_IS_LOST
    assert GpuCheck(lost=True) == source.check([A])[A]


def test_an_unknown_nvml_error_is_not_taken_for_a_lost_gpu(nvml: FakeNvml, source: NvmlHealthSource) -> None:
    """UNKNOWN can be transient; a lost GPU is fatal (evicting with health.evict), so only NVML's own word counts."""
    nvml.lookup_error[A] = pynvml.NVML_ERROR_UNKNOWN
    got = source.check([A])[A]
    assert not got.lost and "Unknown Error" in got.error


def test_gpu_never_found_is_an_error_not_lost(nvml: FakeNvml, clock: FakeTime) -> None:
    src = make(nvml, clock, (A, C))  # C is not on this machine
    got = src.check([C])[C]
    assert not got.lost
    assert "events not registered: GPU lookup failed: Not Found; GPU lookup: Not Found" == got.error


def test_retired_pages_pending_a_reset(nvml: FakeNvml, source: NvmlHealthSource) -> None:
    nvml.retired[A] = pynvml.NVML_FEATURE_ENABLED
    nvml.rows[A] = pynvml.NVML_ERROR_NOT_SUPPORTED  # pre-Ampere: no row remapping
    assert {A: GpuCheck(retirement_pending=True), B: GpuCheck()} == source.check([A, B])


def test_remapped_rows_pending_and_failed(nvml: FakeNvml, source: NvmlHealthSource) -> None:
    nvml.rows[A] = (2, 1, 1, 0)
    nvml.rows[B] = (0, 5, 0, 1)
    assert {A: GpuCheck(remap_pending=True), B: GpuCheck(remap_failed=True)} == source.check([A, B])


def test_not_supported_queries_are_no_finding(nvml: FakeNvml, source: NvmlHealthSource) -> None:
    nvml.retired[A] = pynvml.NVML_ERROR_NOT_SUPPORTED  # Ampere and later: row remapping instead
    nvml.rows[A] = (0, 0, 1, 0)
    nvml.retired[B] = pynvml.NVML_ERROR_NOT_SUPPORTED
    nvml.rows[B] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND  # a driver without the call
    assert {A: GpuCheck(remap_pending=True), B: GpuCheck()} == source.check([A, B])


def test_other_query_errors_give_nvmls_text(nvml: FakeNvml, source: NvmlHealthSource) -> None:
    nvml.retired[A] = pynvml.NVML_ERROR_NO_PERMISSION
    nvml.rows[A] = pynvml.NVML_ERROR_CORRUPTED_INFOROM
    nvml.lookup_error[B] = pynvml.NVML_ERROR_INVALID_ARGUMENT
    got = source.check([A, B])
    assert GpuCheck(error="retired pages: Insufficient Permissions; remapped rows: Corrupted infoROM") == got[A]
    assert GpuCheck(error="GPU lookup: Invalid Argument") == got[B]


def test_check_of_a_gpu_not_watched_says_its_events_are_not_registered(nvml: FakeNvml, source: NvmlHealthSource) -> None:
    nvml.present.add(C)
    assert GpuCheck(error="events not registered: not among the GPUs this source watches") == source.check([C])[C]


def test_wait_error_sleeps_the_rest_of_the_timeout_and_logs_once_per_run(
    nvml: FakeNvml, clock: FakeTime, source: NvmlHealthSource
) -> None:
    nvml.queue = [pynvml.NVML_ERROR_UNKNOWN] * 3
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            assert [] == source.events(4.0)
    assert [4.0, 4.0, 4.0] == clock.slept  # a caller's loop waits instead of spinning
    failed = [e for e in logs if e["event"] == "nvml_health_wait_failed"]
    assert [("Unknown Error", pynvml.NVML_ERROR_UNKNOWN)] == [(e["error"], e["code"]) for e in failed]


def test_wait_error_sleeps_only_what_the_wait_left_of_the_timeout(
    nvml: FakeNvml, clock: FakeTime, source: NvmlHealthSource
) -> None:
    def slow_fail(event_set: object, ms: int) -> Any:
        clock.now += 1.5
        nvml.fail(pynvml.NVML_ERROR_UNKNOWN)

    nvml.nvmlEventSetWait_v2 = slow_fail  # type: ignore[method-assign]  # this test's failing wait
    assert [] == source.events(4.0)
    assert [2.5] == clock.slept


def test_gpu_lost_in_wait_returns_nothing_and_waits(nvml: FakeNvml, clock: FakeTime, source: NvmlHealthSource) -> None:
    nvml.queue = [pynvml.NVML_ERROR_GPU_IS_LOST]
    with structlog.testing.capture_logs() as logs:
        assert [] == source.events(2.0)
    assert [2.0] == clock.slept
    assert [True] == [e["gpu_lost"] for e in logs if e["event"] == "nvml_health_wait_failed"]


def test_wait_error_while_draining_keeps_the_events_already_taken(
    nvml: FakeNvml, clock: FakeTime, source: NvmlHealthSource
) -> None:
    nvml.queue = [nvml.event(A, XID, 13), pynvml.NVML_ERROR_UNKNOWN]
    assert [13] == [e.xid for e in source.events(2.0)]
    assert [] == clock.slept


def test_close_frees_the_event_set_then_shuts_down_once(nvml: FakeNvml, clock: FakeTime) -> None:
    src = make(nvml, clock)
    src.close()
    src.close()
    assert ["init", "set-create", "set-free", "shutdown"] == nvml.calls
    with pytest.raises(RuntimeError, match="after close"):
        src.events(1.0)


def test_an_unexpected_failure_at_start_releases_nvml_and_raises(nvml: FakeNvml, clock: FakeTime) -> None:
    nvml.supported = {}  # a KeyError: a bug, not an NVML answer
    with pytest.raises(KeyError):
        make(nvml, clock)
    assert ["init", "set-create", "set-free", "shutdown"] == nvml.calls


def test_the_module_does_not_import_pynvml_until_a_source_is_built() -> None:
    code = "import sys, dra_driver.sources.nvml_health; assert 'pynvml' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
