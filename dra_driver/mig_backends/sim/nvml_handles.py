"""Handles of the simulated NVML: what each ctypes handle points at, and the plumbing every call shares.

A handle is an opaque ctypes pointer, as pynvml's are; behind it is a ``GpuRef``, ``MigDeviceRef``,
``GiRef`` or ``CiRef`` naming the GPU, MIG device, GPU instance or compute instance. GI and CI
handles carry the GI's creation serial, so a handle to a destroyed GI is told from one to a GI
re-made with the same id. ``SimulatedNvmlBase`` holds the handle table, the init refcount and the
call log; the call groups (``nvml_devices``, ``nvml_instances``) build on it, and
``fake_nvml.SimulatedNvml`` puts them together.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from dra_driver.mig_backends.sim.nvml_api import (
    NVML_ERROR_INSUFFICIENT_SIZE,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    NVML_SUCCESS,
    NVMLError,
    c_nvmlDevice_t,
)
from dra_driver.mig_backends.sim.rules import SimError
from dra_driver.mig_backends.sim.simulator import MigSimulator


@dataclass(frozen=True, slots=True)
class GpuRef:
    """What a GPU handle points at."""

    uuid: str


@dataclass(frozen=True, slots=True)
class MigDeviceRef:
    """What a MIG device handle points at: the parent GPU, its GI and CI ids, the MIG UUID."""

    uuid: str
    gi_id: int
    ci_id: int
    mig_uuid: str


@dataclass(frozen=True, slots=True)
class GiRef:
    """What a GPU-instance handle points at: the GPU, the GI id and the GI's creation serial."""

    uuid: str
    gi_id: int
    serial: int


@dataclass(frozen=True, slots=True)
class CiRef:
    """What a compute-instance handle points at: its GI (id and serial), the CI id, the MIG UUID."""

    uuid: str
    gi_id: int
    gi_serial: int
    ci_id: int
    mig_uuid: str


HandleTarget = GpuRef | MigDeviceRef | GiRef | CiRef
_T = TypeVar("_T")
_TOKEN_BASE = 0x5100_0000


def deref(ref: Any) -> Any:
    """The ctypes object behind ``byref(x)``, ``pointer(x)`` or ``x`` itself."""
    obj = getattr(ref, "_obj", None)
    if obj is not None:
        return obj
    if isinstance(ref, ctypes._Pointer):
        return ref.contents
    return ref


def fill_array(array_ref: Any, count_ref: Any, capacity: int, items: Sequence[_T], handle: Callable[[_T], Any]) -> int:
    """Fill a caller's array with a handle per item and ``*count_ref`` with how many (NVML's list calls).

    The array must hold ``capacity`` entries (what nvml.h says the call may return), else
    INSUFFICIENT_SIZE before any handle is made.
    """
    array = deref(array_ref)
    count = deref(count_ref)
    if array is None or len(array) < capacity:
        raise NVMLError(NVML_ERROR_INSUFFICIENT_SIZE)
    for i, item in enumerate(items):
        array[i] = handle(item)
    count.value = len(items)
    return NVML_SUCCESS


class SimulatedNvmlBase:
    """The state every simulated NVML call uses: the simulator, the handle table, init refcount, call log."""

    def __init__(self, simulator: MigSimulator) -> None:
        self.simulator = simulator
        self._lock = threading.RLock()
        self._refcount = 0
        self._tokens: dict[HandleTarget, int] = {}
        self._targets: dict[int, HandleTarget] = {}
        self.calls: list[str] = []
        """Names of the NVML functions called, in order (for tests)."""

    # --- plumbing ------------------------------------------------------------------------------

    def _enter(self, name: str) -> None:
        self.calls.append(name)
        if self._refcount == 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _handle(self, target: HandleTarget, kind: Any) -> Any:
        with self._lock:
            token = self._tokens.get(target)
            if token is None:
                token = _TOKEN_BASE + 16 * len(self._tokens)
                self._tokens[target] = token
                self._targets[token] = target
        return ctypes.cast(ctypes.c_void_p(token), kind)

    def _target(self, handle: Any, kind: type[_T]) -> _T:
        try:
            token = ctypes.cast(handle, ctypes.c_void_p).value
        except ctypes.ArgumentError:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT) from None
        target = self._targets.get(token or 0)
        if not isinstance(target, kind):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return target

    def _sim(self, fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except SimError as err:
            raise NVMLError(int(err.code)) from err

    def _gi_state(self, gi: GiRef) -> Any:
        state = self._sim(lambda: self.simulator.snapshot(gi.uuid))
        found = state.gi(gi.gi_id)
        if found is None or found.serial != gi.serial:
            # The GI behind this handle was destroyed: the handle is dangling.
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return found

    def _gpu_handle(self, uuid: str) -> Any:
        return self._handle(GpuRef(uuid), c_nvmlDevice_t)

    def _mig_devices(self, uuid: str) -> list[MigDeviceRef]:
        state = self._sim(lambda: self.simulator.snapshot(uuid))
        if not state.mode_current:
            return []
        return [
            MigDeviceRef(uuid, gi.gi_id, ci.ci_id, ci.uuid)
            for gi in sorted(state.gis, key=lambda g: g.gi_id)
            for ci in sorted(gi.cis, key=lambda c: c.ci_id)
        ]

    def _product(self, uuid: str) -> Any:
        product = self._sim(lambda: self.simulator.product(uuid))
        if product is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return product
