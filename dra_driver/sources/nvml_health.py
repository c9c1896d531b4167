"""The NVML health source: every NVML event type a GPU offers, and periodic checks (lost, memory repair, recovery action).

``NvmlHealthSource`` satisfies ``dra_driver.core.health.HealthSource`` on real GPU nodes. The plugin's
health monitor (``kubelet_plugin.monitoring.health_monitor``) gets it through ``dra_driver.sources.select`` or
the plugin's wiring, calls ``events()`` in a loop and ``check()`` periodically, and folds what they
return into its ``HealthBook``.

What it does with NVML, strictly read-only towards the GPUs: ``nvmlInit``, one event set of this
process's own (``nvmlEventSetCreate``) on which each watched GPU registers, one type at a time,
every event type of ``dra_driver.core.health_causes.EVENT_CAUSES`` that
``nvmlDeviceGetSupportedEventTypes`` says it supports (so a type NVML refuses, ``NOT_SUPPORTED`` on
some SKUs and with MIG, loses only itself), ``nvmlEventSetWait_v2`` for events, and query
functions for the checks (handle lookup, pending page retirement, remapped rows, and the GPU
recovery action through ``nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)``, also read
when a recovery action event arrives: NVML documents ``eventData`` for XIDs only). It never sets
MIG mode, clocks, power, never resets a GPU and never clears a counter. ``close()`` frees the event
set and shuts NVML down. Which types each GPU watches is logged (``nvml_health_events_watched``)
and kept in ``registrations``.

Every event becomes a ``HealthEvent`` of its kind; the core decides what it means (recorded-only
kinds such as P-state or clock changes change nothing and are logged here at debug level). A GPU
on which no type that raises a condition could be registered is not an error of the source: it is
remembered as unmonitored and every ``check()`` reports it in ``GpuCheck.error``.

NVML has no replayable event log: ``position()`` is always 0 and ``resume()`` ignores its argument.

Threads: ``events()`` and ``check()`` are called from the plugin's one health monitor thread only;
the class holds no lock. Like ``dra_driver.sources.nvml`` it imports ``pynvml`` lazily, and only
here (import-linter enforces who may); tests pass a stand-in module.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import structlog

from dra_driver.core.gpu import nvml_text
from dra_driver.core.health import GpuCheck, HealthEvent
from dra_driver.core.health_causes import EVENT_CAUSES, MAX_XID, NVML_EVENT_KINDS, RECOVERY_ACTIONS

log = structlog.get_logger(__name__)

MAX_EVENTS_PER_CALL = 256
"""One ``events()`` call drains at most this many pending events (the rest wait for the next call)."""
_NOT_APPLICABLE = 0xFFFFFFFF
"""``gpuInstanceId``/``computeInstanceId`` of an event that is not about a MIG instance."""
_MAX_WAIT_MS = 0xFFFFFFFF  # nvmlEventSetWait_v2 takes an unsigned int of milliseconds
_RECOVERY_FIELD = "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"
_VALUE_MEMBERS = {  # nvmlValue_t's member for each nvmlValueType_t
    "NVML_VALUE_TYPE_DOUBLE": "dVal",
    "NVML_VALUE_TYPE_UNSIGNED_INT": "uiVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG": "ulVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": "ullVal",
    "NVML_VALUE_TYPE_SIGNED_LONG_LONG": "sllVal",
    "NVML_VALUE_TYPE_SIGNED_INT": "siVal",
    "NVML_VALUE_TYPE_UNSIGNED_SHORT": "usVal",
}


@dataclass(frozen=True, slots=True)
class Registration:
    """What the source asked NVML to report for one GPU at start."""

    gpu_uuid: str
    supported: int | None
    """``nvmlDeviceGetSupportedEventTypes``' mask (None: not known, the GPU or the query failed)."""
    registered: int
    """The event types registered on the event set (0: none)."""
    error: str = ""
    """Why the GPU is unmonitored (empty: monitored): no type that raises a condition is registered."""
    refused: tuple[tuple[str, str], ...] = ()
    """(event kind, NVML's error) of each supported type whose registration failed."""


class NvmlHealthSource:
    """A ``HealthSource`` over NVML events and queries for the GPUs ``gpu_uuids``.

    ``nvml`` defaults to the ``pynvml`` module (imported here, lazily); ``clock`` gives the events' Unix
    times, ``monotonic`` and ``sleep`` time the wait after an NVML error (tests pass fakes). NVML is
    initialised and the events registered by the constructor; ``close()`` undoes both. Used from one
    thread only (the health monitor's).
    """

    name = "nvml"

    def __init__(
        self,
        gpu_uuids: Sequence[str],
        *,
        nvml: ModuleType | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        self._n: Any = nvml
        self._uuids = tuple(dict.fromkeys(gpu_uuids))
        self._clock = clock
        self._monotonic = monotonic
        self._sleep = sleep
        self._event_set: Any = None
        self._registrations: dict[str, Registration] = {}
        self._seen: set[str] = set()  # UUIDs NVML found once: "not found" later means the GPU is gone
        self._last_wait_error: int | None = None
        self._closed = False
        self._counts: dict[tuple[str, str], int] = {}
        n = self._n
        # NVML's bit of each kind this pynvml knows (an older binding lacks the newer types' names).
        self._bits: dict[str, int] = {
            k: int(getattr(n, EVENT_CAUSES[k].nvml)) for k in NVML_EVENT_KINDS if hasattr(n, EVENT_CAUSES[k].nvml)
        }
        self._actions = {int(getattr(n, a.nvml)): name for name, a in RECOVERY_ACTIONS.items() if a.nvml and hasattr(n, a.nvml)}
        self._recovery_field: int | None = int(getattr(n, _RECOVERY_FIELD)) if hasattr(n, _RECOVERY_FIELD) else None
        # Only NVML's own word: UNKNOWN can be transient, and "lost" is fatal (with eviction on, pods go).
        self._lost_codes = {int(n.NVML_ERROR_GPU_IS_LOST)}
        self._unsupported_codes = {int(n.NVML_ERROR_NOT_SUPPORTED), int(n.NVML_ERROR_FUNCTION_NOT_FOUND)}
        self.start()

    # -- start and stop ---------------------------------------------------------------------

    def start(self) -> None:
        """``nvmlInit``, one event set, and each GPU's supported event types on it, one at a time.

        Raises the NVML error of ``nvmlInit`` (no driver: no source). Anything later only leaves GPUs
        unmonitored: no event set at all (every GPU unmonitored), or one GPU's lookup or registration.
        """
        n = self._n
        n.nvmlInit()
        try:
            self._event_set = n.nvmlEventSetCreate()
        except n.NVMLError as err:
            log.warning("nvml_health_event_set_failed", error=str(err))
            self._event_set = None
            for uuid in self._uuids:
                self._registrations[uuid] = Registration(uuid, None, 0, f"events not supported: event set: {err}")
            return
        try:
            for uuid in self._uuids:
                self._registrations[uuid] = self._register(uuid)
        except BaseException:  # not an NVML error (those are per GPU): release NVML, then let it out
            self.close()
            raise

    def _register(self, uuid: str) -> Registration:
        n = self._n
        try:
            handle = n.nvmlDeviceGetHandleByUUID(uuid)
        except n.NVMLError as err:
            log.warning("nvml_health_gpu_not_found", gpu=uuid, error=str(err))
            return Registration(uuid, None, 0, f"events not registered: GPU lookup failed: {err}")
        self._seen.add(uuid)
        try:
            supported = int(n.nvmlDeviceGetSupportedEventTypes(handle))
        except n.NVMLError as err:
            log.warning("nvml_health_events_unsupported", gpu=uuid, error=str(err))
            return Registration(uuid, None, 0, f"events not supported: {err}")
        registered = 0
        refused: list[tuple[str, str]] = []
        for kind, bit in self._bits.items():
            if not supported & bit:
                continue
            try:  # one type per call: NVML refusing one (NOT_SUPPORTED) must not lose the others
                n.nvmlDeviceRegisterEvents(handle, bit, self._event_set)
            except n.NVMLError as err:
                refused.append((kind, str(err)))
                continue
            registered |= bit
        watched = self.kinds(registered)
        log.info(
            "nvml_health_events_watched",
            gpu=uuid,
            watched=watched,
            unsupported=[k for k, bit in self._bits.items() if not supported & bit],
            refused=dict(refused),
            supported=hex(supported),
        )
        if any(EVENT_CAUSES[k].key for k in watched):
            return Registration(uuid, supported, registered, "", tuple(refused))
        if refused and not registered:
            why = "; ".join(dict.fromkeys(e for _, e in refused))
        elif registered:
            why = f"no health event type registered, only {', '.join(watched)}"
        else:
            why = f"no event type this driver watches is supported (supported mask {supported:#x})"
        log.warning("nvml_health_events_unsupported", gpu=uuid, why=why)
        return Registration(uuid, supported, registered, f"events not supported: {why}", tuple(refused))

    def kinds(self, mask: int | None) -> list[str]:
        """The event kinds of an NVML event type mask (in ``EVENT_CAUSES`` order)."""
        return [] if mask is None else [k for k, bit in self._bits.items() if mask & bit]

    def event_counts(self) -> dict[str, dict[str, int]]:
        """Per GPU, how many events of each kind ``events()`` returned so far (for the device check script)."""
        out: dict[str, dict[str, int]] = {}
        for (uuid, kind), count in sorted(self._counts.items()):
            out.setdefault(uuid, {})[kind] = count
        return out

    def close(self) -> None:
        """Free the event set and shut NVML down; a second call does nothing. Errors are logged, not raised."""
        if self._closed:
            return
        self._closed = True
        n = self._n
        if self._event_set is not None:
            try:
                n.nvmlEventSetFree(self._event_set)
            except n.NVMLError as err:
                log.warning("nvml_health_event_set_free_failed", error=str(err))
            self._event_set = None
        try:
            n.nvmlShutdown()
        except n.NVMLError as err:
            log.warning("nvml_health_shutdown_failed", error=str(err))

    @property
    def registrations(self) -> tuple[Registration, ...]:
        """What each watched GPU registered at start (for logs and the device check script)."""
        return tuple(self._registrations.values())

    def unmonitored(self) -> dict[str, str]:
        """The watched GPUs whose events are not registered, with why."""
        return {r.gpu_uuid: r.error for r in self._registrations.values() if r.error}

    # -- HealthSource -----------------------------------------------------------------------

    def resume(self, position: int) -> None:
        """Nothing to skip: NVML has no replayable event log."""

    def position(self) -> int:
        """Always 0: NVML has no replayable event log."""
        return 0

    def events(self, timeout_s: float) -> list[HealthEvent]:
        """Wait up to ``timeout_s`` for an event that raises a condition, then drain what is pending (at most 256).

        Recorded-only events (P-state, clock, power source, MIG configuration: frequent on a busy GPU)
        are collected without ending the wait, so they never wake the caller more than once per
        ``timeout_s``. A timeout returns what was collected ([] if nothing). An NVML error (GPU lost
        included: ``check()`` attributes that) is logged once per run of equal errors and, when it
        is the first answer, returns [] after sleeping what is left of ``timeout_s``, so a caller's
        loop never spins.
        """
        if self._closed:
            raise RuntimeError("NvmlHealthSource.events() after close()")
        start = self._monotonic()
        if self._event_set is None:  # nothing registered anywhere: only checks
            self._sleep(max(0.0, timeout_s))
            return []
        n = self._n
        out: list[HealthEvent] = []
        draining = False
        for consumed in range(MAX_EVENTS_PER_CALL):  # NVML events taken, skipped ones included
            left = timeout_s - (self._monotonic() - start)
            ms = 0 if draining else min(_MAX_WAIT_MS, max(0, round(left * 1000)))
            try:
                data = n.nvmlEventSetWait_v2(self._event_set, ms)
            except n.NVMLError as err:
                code = int(err.value)
                if code == int(n.NVML_ERROR_TIMEOUT):
                    self._last_wait_error = None
                    return out
                self._wait_failed(code, str(err), drained=consumed)
                if not consumed:
                    self._sleep(max(0.0, timeout_s - (self._monotonic() - start)))
                return out
            self._last_wait_error = None
            event = self._event(data)
            if event is not None:
                out.append(event)
                draining = draining or bool(EVENT_CAUSES[event.kind].key)
        return out

    def _wait_failed(self, code: int, error: str, *, drained: int) -> None:
        if code == self._last_wait_error:
            return
        self._last_wait_error = code
        lost = code == int(self._n.NVML_ERROR_GPU_IS_LOST)
        log.warning("nvml_health_wait_failed", error=error, code=code, gpu_lost=lost, drained=drained)

    def _event(self, data: Any) -> HealthEvent | None:
        """The HealthEvent of one NVML event data, or None (logged) when it is not ours to report."""
        n = self._n
        try:
            uuid = nvml_text(n.nvmlDeviceGetUUID(data.device))
        except n.NVMLError as err:
            log.warning("nvml_health_event_skipped", reason="device UUID unreadable", error=str(err))
            return None
        if uuid not in self._registrations:
            log.warning("nvml_health_event_skipped", reason="GPU not watched", gpu=uuid)
            return None
        event_type, value = int(data.eventType), int(data.eventData)
        kind = next((k for k, bit in self._bits.items() if event_type & bit), None)
        if kind is None:
            log.warning("nvml_health_event_skipped", reason="event type not registered", gpu=uuid, event_type=hex(event_type))
            return None
        event = self._health_event(kind, uuid, value, data)
        if event is not None:
            self._counts[(uuid, kind)] = self._counts.get((uuid, kind), 0) + 1
            if not EVENT_CAUSES[kind].key:
                log.debug("nvml_health_event_recorded", gpu=uuid, kind=kind, data=value)
        return event

    def _health_event(self, kind: str, uuid: str, value: int, data: Any) -> HealthEvent | None:
        if kind == "xid":
            if not 0 <= value < MAX_XID:  # the core refuses it: skip here, as the Protocol says
                log.warning("nvml_health_event_skipped", reason="XID number out of range", gpu=uuid, xid=value)
                return None
            # NVML documents the MIG instance IDs for XID events only.
            gi, ci = getattr(data, "gpuInstanceId", _NOT_APPLICABLE), getattr(data, "computeInstanceId", _NOT_APPLICABLE)
            return HealthEvent(gpu_uuid=uuid, kind="xid", at=self._clock(), xid=value, detail=_mig_detail(gi, ci))
        if kind == "gpu-recovery-action":
            action, detail = self._event_recovery_action(data.device)
            return HealthEvent(gpu_uuid=uuid, kind=kind, at=self._clock(), detail=detail, action=action)
        return HealthEvent(gpu_uuid=uuid, kind=kind, at=self._clock())

    def _event_recovery_action(self, handle: Any) -> tuple[str, str]:
        """(action, detail) NVML asks for after a recovery action event; ``unknown`` (fail closed) when unreadable."""
        try:
            code = self._recovery_code(handle)
        except self._n.NVMLError as err:
            log.warning("nvml_health_recovery_action_unreadable", error=str(err))
            return "unknown", f"recovery action unreadable: {err}"
        if code is None:
            return "unknown", "recovery action unreadable: this NVML binding has no recovery action field"
        action = self._actions.get(code)
        return (action, "") if action is not None else ("unknown", f"NVML recovery action {code}")

    def _recovery_code(self, handle: Any) -> int | None:
        """NVML's recovery action value (None: this binding has no such field); raises NVMLError."""
        n = self._n
        if self._recovery_field is None:
            return None
        (field,) = n.nvmlDeviceGetFieldValues(handle, [self._recovery_field])
        if int(field.nvmlReturn) != 0:
            raise n.NVMLError(int(field.nvmlReturn))
        member = next(
            (m for t, m in _VALUE_MEMBERS.items() if hasattr(n, t) and int(getattr(n, t)) == int(field.valueType)), "uiVal"
        )
        return int(getattr(field.value, member))

    def check(self, gpu_uuids: Sequence[str]) -> dict[str, GpuCheck]:
        """Each GPU: lost, pending page retirement, pending or failed row remapping, the recovery action, or why not checked.

        Read-only queries. ``GPU_IS_LOST`` or ``UNKNOWN`` from any of them, or a GPU once found and now
        not, is ``lost``; ``NOT_SUPPORTED`` (page retirement on Ampere and later, row remapping before)
        is no finding; any other error is the ``error`` text, as is a GPU whose events are unmonitored.
        """
        if self._closed:
            raise RuntimeError("NvmlHealthSource.check() after close()")
        return {uuid: self._check_one(uuid) for uuid in dict.fromkeys(gpu_uuids)}

    def _check_one(self, uuid: str) -> GpuCheck:
        n = self._n
        errors: list[str] = []
        reg = self._registrations.get(uuid)
        if reg is None:
            errors.append("events not registered: not among the GPUs this source watches")
        elif reg.error:
            errors.append(reg.error)
        try:
            handle = n.nvmlDeviceGetHandleByUUID(uuid)
        except n.NVMLError as err:
            code = int(err.value)
            if code in self._lost_codes or (code == int(n.NVML_ERROR_NOT_FOUND) and uuid in self._seen):
                return GpuCheck(lost=True)
            return GpuCheck(error="; ".join([*errors, f"GPU lookup: {err}"]))
        self._seen.add(uuid)
        retirement = self._query(n.nvmlDeviceGetRetiredPagesPendingStatus, handle, "retired pages", errors)
        if retirement is _LOST:
            return GpuCheck(lost=True)
        rows = self._query(n.nvmlDeviceGetRemappedRows, handle, "remapped rows", errors)
        if rows is _LOST:
            return GpuCheck(lost=True)
        code = self._query(self._recovery_code, handle, "recovery action", errors)
        if code is _LOST:
            return GpuCheck(lost=True)
        action = "" if code is None else self._actions.get(int(code), "unknown")
        remap_pending = remap_failed = False
        if rows is not None:
            _corr, _unc, pending, failed = rows
            remap_pending, remap_failed = bool(pending), bool(failed)
        return GpuCheck(
            retirement_pending=retirement is not None and bool(int(retirement)),
            remap_pending=remap_pending,
            remap_failed=remap_failed,
            error="; ".join(errors),
            recovery_action=action,
        )

    def _query(self, fn: Callable[[Any], Any], handle: Any, what: str, errors: list[str]) -> Any:
        """``fn(handle)``; None when unsupported or failed (appended to ``errors``), ``_LOST`` when lost."""
        try:
            return fn(handle)
        except self._n.NVMLError as err:
            code = int(err.value)
            if code in self._lost_codes:
                return _LOST
            if code not in self._unsupported_codes:
                errors.append(f"{what}: {err}")
            return None


_LOST = object()
"""``_query``'s answer when NVML says the GPU is lost."""


def _mig_detail(gpu_instance: int, compute_instance: int) -> str:
    """``MIG GPU instance N, compute instance M`` for an event inside a MIG instance; else empty."""
    if int(gpu_instance) == _NOT_APPLICABLE:
        return ""
    if int(compute_instance) == _NOT_APPLICABLE:
        return f"MIG GPU instance {int(gpu_instance)}"
    return f"MIG GPU instance {int(gpu_instance)}, compute instance {int(compute_instance)}"
