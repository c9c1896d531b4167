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

from dra_driver.core.health import GpuCheck, HealthBook, HealthEvent, HealthSource, TaintPolicy, record_event, taints_for
from dra_driver.sources.nvml_health import MAX_EVENTS_PER_CALL, NvmlHealthSource

XID = pynvml.nvmlEventTypeXidCriticalError
DBE = pynvml.nvmlEventTypeDoubleBitEccError
SBE = pynvml.nvmlEventTypeSingleBitEccError
PSTATE = pynvml.nvmlEventTypePState
RECOVERY = pynvml.nvmlEventTypeGpuRecoveryAction
FIELD_RECOVERY = pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
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

    def __init__(self, uuids: tuple[str, ...] = (A, B)) -> None:
        self.handles = {u: SimpleNamespace(uuid=u) for u in (*uuids, C)}
        self.present = set(uuids)
        self.supported: dict[str, int] = {u: XID | DBE | PSTATE for u in self.handles}
        self.register_error: dict[str, int] = {}  # every type of the GPU fails with this code
        self.type_error: dict[tuple[str, int], int] = {}  # (GPU, event type) fails with this code
        self.register_calls: list[tuple[str, int]] = []
        self.recovery: dict[str, int] = {}  # the recovery action field's value (missing: not supported)
        self.field_error: dict[str, int] = {}  # the whole nvmlDeviceGetFieldValues call fails
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
        if name.startswith(("NVML_", "nvmlEvent")) and not callable(getattr(pynvml, name, None)):
            return getattr(pynvml, name)  # the real constants (event type bits, recovery actions, fields)
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
        self.register_calls.append((handle.uuid, types))
        if handle.uuid in self.register_error:
            self.fail(self.register_error[handle.uuid])
        if (handle.uuid, types) in self.type_error:
            self.fail(self.type_error[(handle.uuid, types)])
        self.registered[handle.uuid] = self.registered.get(handle.uuid, 0) | types

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[int]) -> list[Any]:
        assert [FIELD_RECOVERY] == field_ids
        if handle.uuid in self.field_error:
            self.fail(self.field_error[handle.uuid])
        if handle.uuid not in self.recovery:
            return [SimpleNamespace(fieldId=FIELD_RECOVERY, nvmlReturn=pynvml.NVML_ERROR_NOT_SUPPORTED, valueType=0, value=None)]
        value = SimpleNamespace(uiVal=self.recovery[handle.uuid])
        return [SimpleNamespace(fieldId=FIELD_RECOVERY, nvmlReturn=0, valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, value=value)]

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


def test_start_inits_nvml_and_registers_every_supported_type_one_per_call_on_one_event_set(
    nvml: FakeNvml, source: NvmlHealthSource
) -> None:
    assert ["init", "set-create"] == nvml.calls
    assert {A: XID | DBE | PSTATE, B: XID | DBE | PSTATE} == nvml.registered
    assert all(bin(types).count("1") == 1 for _, types in nvml.register_calls)  # one type at a time
    assert 6 == len(nvml.register_calls)
    assert {} == source.unmonitored()
    assert [(A, XID | DBE | PSTATE, XID | DBE | PSTATE, "", ())] == [
        (r.gpu_uuid, r.supported, r.registered, r.error, r.refused) for r in source.registrations if r.gpu_uuid == A
    ]


def test_only_the_event_types_a_gpu_supports_are_registered_and_logged_as_watched(nvml: FakeNvml, clock: FakeTime) -> None:
    nvml.supported[B] = XID | SBE | RECOVERY
    with structlog.testing.capture_logs() as logs:
        src = make(nvml, clock)
    assert (XID | DBE | PSTATE, XID | SBE | RECOVERY) == (nvml.registered[A], nvml.registered[B])
    assert {} == src.unmonitored()
    watched = {e["gpu"]: e for e in logs if e["event"] == "nvml_health_events_watched"}
    assert ["xid", "single-bit-ecc", "gpu-recovery-action"] == watched[B]["watched"]
    assert "double-bit-ecc" in watched[B]["unsupported"] and "pstate" in watched[B]["unsupported"]
    assert ["xid", "double-bit-ecc", "pstate"] == src.kinds(nvml.registered[A])


def test_a_type_nvml_refuses_loses_only_itself(nvml: FakeNvml, clock: FakeTime) -> None:
    nvml.supported[A] = XID | DBE | SBE | RECOVERY
    nvml.type_error[(A, DBE)] = pynvml.NVML_ERROR_NOT_SUPPORTED
    with structlog.testing.capture_logs() as logs:
        src = make(nvml, clock)
    assert XID | SBE | RECOVERY == nvml.registered[A]
    (reg,) = [r for r in src.registrations if r.gpu_uuid == A]
    assert (("double-bit-ecc", "Not Supported"),) == reg.refused
    assert "" == reg.error and A not in src.unmonitored()
    assert [{"double-bit-ecc": "Not Supported"}] == [
        e["refused"] for e in logs if e["event"] == "nvml_health_events_watched" and e["gpu"] == A
    ]
    nvml.queue = [nvml.event(A, XID, 79), nvml.event(A, SBE)]
    assert ["xid", "single-bit-ecc"] == [e.kind for e in src.events(1.0)]


def test_a_pynvml_without_the_newer_type_names_registers_the_ones_it_has(clock: FakeTime) -> None:
    class OldBinding(FakeNvml):
        def __getattr__(self, name: str) -> Any:
            if name in (
                "nvmlEventTypeGpuRecoveryAction",
                "nvmlEventTypeGpuUnavailableError",
                "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION",
            ):
                raise AttributeError(name)
            return super().__getattr__(name)

    old = OldBinding()
    old.supported[A] = XID | RECOVERY
    src = make(old, clock)
    assert XID == old.registered[A]
    assert GpuCheck() == src.check([A])[A]  # no recovery field to read: not read, not an error


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


ALL_TYPES = sum(
    int(getattr(pynvml, n))
    for n in dir(pynvml)
    if (n.startswith("nvmlEventType") or n == "nvmlEventMigConfigChange") and n not in ("nvmlEventTypeAll", "nvmlEventTypeNone")
)
EVERY_TYPE = [
    # (NVML event type, kind, taint with eviction on: (key, value, effect), or None: recorded, nothing tainted)
    ("nvmlEventTypeXidCriticalError", "xid", ("xid", "79", "NoExecute")),
    ("nvmlEventTypeDoubleBitEccError", "double-bit-ecc", ("ecc", "double-bit", "NoExecute")),
    ("nvmlEventTypeSingleBitEccErrorStorm", "single-bit-ecc-storm", ("ecc", "single-bit-storm", "NoSchedule")),
    ("nvmlEventTypeSingleBitEccError", "single-bit-ecc", ("ecc", "single-bit", "None")),
    ("nvmlEventTypeDramRetirementFailure", "dram-retirement-failure", ("dram-retirement", "failed", "NoSchedule")),
    ("nvmlEventTypeDramRetirementEvent", "dram-retirement", ("dram-retirement", "retired", "None")),
    ("nvmlEventTypeFatalPoisonError", "fatal-poison", ("poison", "fatal", "NoExecute")),
    ("nvmlEventTypeNonFatalPoisonError", "non-fatal-poison", ("poison", "non-fatal", "None")),
    ("nvmlEventTypeGpuUnavailableError", "gpu-unavailable", ("gpu-lost", "unavailable", "NoExecute")),
    ("nvmlEventTypeGpuRecoveryAction", "gpu-recovery-action", ("recovery-action", "gpu-reset", "NoExecute")),
    ("nvmlEventTypePState", "pstate", None),
    ("nvmlEventTypeClock", "clock", None),
    ("nvmlEventTypePowerSourceChange", "power-source", None),
    ("nvmlEventMigConfigChange", "mig-config", None),
]


def test_every_event_type_nvml_offers_is_in_the_table() -> None:
    assert ALL_TYPES == sum(int(getattr(pynvml, name)) for name, _, _ in EVERY_TYPE)


@pytest.mark.parametrize(("type_name", "kind", "taint"), EVERY_TYPE, ids=[k for _, k, _ in EVERY_TYPE])
def test_each_event_type_becomes_its_kind_and_its_taint(
    nvml: FakeNvml, clock: FakeTime, type_name: str, kind: str, taint: tuple[str, str, str] | None
) -> None:
    bit = int(getattr(pynvml, type_name))
    nvml.supported[A] = ALL_TYPES
    nvml.recovery[A] = pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET
    src = make(nvml, clock)
    assert ALL_TYPES == nvml.registered[A]
    nvml.queue = [nvml.event(A, bit, 79 if kind == "xid" else 0)]
    (event,) = src.events(1.0)
    assert (A, kind) == (event.gpu_uuid, event.kind)
    taints = taints_for(record_event(HealthBook(), event).of(A), "d", TaintPolicy(evict_fatal=True))
    assert ([] if taint is None else [{"key": f"d/{taint[0]}", "value": taint[1], "effect": taint[2]}]) == taints
    assert {A: {kind: 1}} == src.event_counts()


@pytest.mark.parametrize(
    ("code", "action"),
    [
        (pynvml.NVML_GPU_RECOVERY_ACTION_NONE, "none"),
        (pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET, "gpu-reset"),
        (pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT, "node-reboot"),
        (pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P, "drain-p2p"),
        (pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET, "drain-and-reset"),
        (pynvml.NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN, "recover-imex-domain"),
        (pynvml.NVML_GPU_RECOVERY_ACTION_BUS_RESET, "bus-reset"),
        (pynvml.NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT, "system-reboot"),
        (99, "unknown"),
    ],
)
def test_recovery_action_is_read_from_nvmls_field_on_the_event_and_in_checks(
    nvml: FakeNvml, clock: FakeTime, code: int, action: str
) -> None:
    nvml.supported[A] = XID | RECOVERY
    nvml.recovery[A] = code
    src = make(nvml, clock)
    nvml.queue = [nvml.event(A, RECOVERY, 12345)]  # eventData is not the action: NVML documents it for XIDs only
    assert [
        HealthEvent(A, "gpu-recovery-action", WALL, detail="NVML recovery action 99" if code == 99 else "", action=action)
    ] == (src.events(1.0))
    assert GpuCheck(recovery_action=action) == src.check([A])[A]


def test_recovery_action_unreadable_on_the_event_is_unknown_and_in_checks_is_an_error_or_nothing(
    nvml: FakeNvml, clock: FakeTime, source: NvmlHealthSource
) -> None:
    nvml.field_error[A] = pynvml.NVML_ERROR_UNKNOWN
    nvml.queue = [nvml.event(A, RECOVERY)]
    (event,) = source.events(1.0)
    assert ("unknown", "recovery action unreadable: Unknown Error") == (event.action, event.detail)
    assert GpuCheck(error="recovery action: Unknown Error") == source.check([A])[A]
    nvml.field_error[A] = pynvml.NVML_ERROR_GPU_IS_LOST
    assert GpuCheck(lost=True) == source.check([A])[A]
    del nvml.field_error[A]  # the field NOT_SUPPORTED (older GPUs and drivers): no finding
    assert GpuCheck() == source.check([A])[A]


def test_routine_events_are_returned_and_counted_but_raise_nothing(nvml: FakeNvml, source: NvmlHealthSource) -> None:
    nvml.queue = [nvml.event(A, PSTATE), nvml.event(A, PSTATE), nvml.event(B, XID, 13)]
    got = source.events(1.0)
    assert ["pstate", "pstate", "xid"] == [e.kind for e in got]
    book = HealthBook()
    for e in got[:2]:
        book = record_event(book, e)
    assert HealthBook() == book
    assert {A: {"pstate": 2}, B: {"xid": 1}} == source.event_counts()


def test_routine_events_do_not_end_the_wait_an_event_that_raises_a_condition_does(
    nvml: FakeNvml, clock: FakeTime, source: NvmlHealthSource
) -> None:
    def wait(event_set: object, ms: int) -> Any:
        nvml.waits.append(ms)
        clock.now += 0.5  # each answer takes half a second
        if not nvml.queue:
            nvml.fail(pynvml.NVML_ERROR_TIMEOUT)
        return nvml.queue.pop(0)

    nvml.nvmlEventSetWait_v2 = wait  # type: ignore[method-assign]  # this test's timed wait
    nvml.queue = [nvml.event(A, PSTATE), nvml.event(A, PSTATE)]
    assert ["pstate", "pstate"] == [e.kind for e in source.events(2.0)]
    assert [2000, 1500, 1000] == nvml.waits  # the rest of the timeout each time, until it timed out
    nvml.waits.clear()
    nvml.queue = [nvml.event(A, PSTATE), nvml.event(B, XID, 48), nvml.event(A, PSTATE)]
    assert ["pstate", "xid", "pstate"] == [e.kind for e in source.events(2.0)]
    assert [2000, 1500, 0, 0] == nvml.waits  # the XID: drain what is pending and return


def test_mig_instance_ids_are_read_for_xid_events_only(nvml: FakeNvml, source: NvmlHealthSource) -> None:
    nvml.queue = [nvml.event(A, DBE, gi=0, ci=0)]  # undocumented for other types: not taken for an instance
    assert "" == source.events(1.0)[0].detail


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


def test_gpu_with_only_routine_event_types_is_unmonitored(nvml: FakeNvml, clock: FakeTime) -> None:
    nvml.supported[A] = PSTATE | pynvml.nvmlEventTypeClock
    src = make(nvml, clock)
    assert PSTATE | pynvml.nvmlEventTypeClock == nvml.registered[A]
    assert "events not supported: no health event type registered, only pstate, clock" == src.check([A])[A].error


def test_gpu_supporting_no_type_this_driver_watches_is_unmonitored_and_nothing_is_registered(
    nvml: FakeNvml, clock: FakeTime
) -> None:
    nvml.supported[A] = 0x20  # a bit no NVML event type has
    src = make(nvml, clock)
    assert A not in nvml.registered
    assert src.check([A])[A].error == "events not supported: no event type this driver watches is supported (supported mask 0x20)"


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
