"""The simulated NVML's device-level calls: init, GPUs, MIG mode, GPU-instance profiles, MIG devices.

Part of ``dra_driver.mig_backends.sim.fake_nvml.SimulatedNvml``: the calls that read or change a
whole GPU (its identity, its MIG mode, what it can be carved into) and resolve MIG device handles.
Same names, signatures, return shapes and errors as pynvml's.
"""

# pynvml's names (camelCase functions and arguments) are the interface being reproduced.
# ruff: noqa: N802, N803

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any, TypeVar

from dra_driver.mig_backends.sim.nvml_api import (
    NVML_DEVICE_MIG_DISABLE,
    NVML_DEVICE_MIG_ENABLE,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_INSUFFICIENT_SIZE,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_GPU_INSTANCE_PROFILE_COUNT,
    NVML_SUCCESS,
    NVMLError,
    c_nvmlDevice_t,
    c_nvmlGpuInstanceProfileInfo_t,
    c_nvmlGpuInstanceProfileInfo_v2_t,
)
from dra_driver.mig_backends.sim.nvml_handles import GpuRef, MigDeviceRef, SimulatedNvmlBase, deref

_T = TypeVar("_T")


class DeviceCalls(SimulatedNvmlBase):
    """NVML's init, device, MIG-mode, GI-profile and MIG-device calls over the simulator."""

    # --- init ------------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        """Initialise (reference counted, like NVML)."""
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        """Initialise with flags (ignored)."""
        self.calls.append("nvmlInitWithFlags")
        with self._lock:
            self._refcount += 1

    def nvmlShutdown(self) -> None:
        """Drop one initialisation; UNINITIALIZED when there is none."""
        self._enter("nvmlShutdown")
        with self._lock:
            self._refcount -= 1

    # --- devices ---------------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        """The number of GPUs."""
        self._enter("nvmlDeviceGetCount")
        return len(self.simulator.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        """The handle of the index-th GPU (ordered by minor)."""
        self._enter("nvmlDeviceGetHandleByIndex")
        gpus = self.simulator.gpus
        if not 0 <= index < len(gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._gpu_handle(gpus[index].uuid)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> Any:
        """The handle of the GPU (or MIG device) with this UUID; NOT_FOUND when none has it."""
        self._enter("nvmlDeviceGetHandleByUUID")
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for g in self.simulator.gpus:
            if g.uuid == text:
                return self._gpu_handle(g.uuid)
            for mig in self._mig_devices(g.uuid) if self.simulator.product(g.uuid) else ():
                if mig.mig_uuid == text:
                    return self._handle(mig, c_nvmlDevice_t)
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def _any_device(self, handle: Any) -> GpuRef | MigDeviceRef:
        try:
            return self._target(handle, GpuRef)
        except NVMLError:
            return self._target(handle, MigDeviceRef)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        """The GPU's ``GPU-...`` or the MIG device's ``MIG-...`` UUID."""
        self._enter("nvmlDeviceGetUUID")
        dev = self._any_device(handle)
        return dev.mig_uuid if isinstance(dev, MigDeviceRef) else dev.uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        """The product name (``NVIDIA H100 80GB HBM3``; MIG devices add ``MIG <profile>``)."""
        self._enter("nvmlDeviceGetName")
        dev = self._any_device(handle)
        gpu = next(g for g in self.simulator.gpus if g.uuid == dev.uuid)
        if isinstance(dev, MigDeviceRef):
            gi = self.simulator.snapshot(dev.uuid).gi(dev.gi_id)
            return f"{gpu.product_name} MIG {gi.profile_name if gi else '?'}"
        return gpu.product_name

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        """The GPU's minor number; NOT_SUPPORTED for a MIG device (it has none)."""
        self._enter("nvmlDeviceGetMinorNumber")
        dev = self._any_device(handle)
        if isinstance(dev, MigDeviceRef):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return next(g.minor for g in self.simulator.gpus if g.uuid == dev.uuid)

    # --- MIG mode --------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        """``[current, pending]``; NOT_SUPPORTED when the GPU is not MIG capable."""
        self._enter("nvmlDeviceGetMigMode")
        uuid = self._target(device, GpuRef).uuid
        mode = self._sim(lambda: self.simulator.mode(uuid))
        return [int(mode.current), int(mode.pending)]

    def nvmlDeviceSetMigMode(self, device: Any, mode: int) -> int:
        """Set MIG mode; return the activation status (``NVML_ERROR_RESET_REQUIRED`` until a reset)."""
        self._enter("nvmlDeviceSetMigMode")
        uuid = self._target(device, GpuRef).uuid
        if mode not in (NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return int(self._sim(lambda: self.simulator.set_mig_mode(uuid, mode == NVML_DEVICE_MIG_ENABLE)))

    # --- GPU instance profiles -------------------------------------------------------------------

    def nvmlDeviceGetGpuInstanceProfileInfo(self, device: Any, profile: int, version: int = 2) -> Any:
        """Info of the GI profile at NVML profile index ``profile``; NOT_SUPPORTED when the GPU lacks it."""
        self._enter("nvmlDeviceGetGpuInstanceProfileInfo")
        product = self._product(self._target(device, GpuRef).uuid)
        if not 0 <= profile < NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        p = product.gi_by_index(profile)
        if p is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return self._gi_info(p, version)

    def nvmlDeviceGetGpuInstanceProfileInfoById(self, device: Any, profileId: int) -> Any:
        """Info of the GI profile with this profile id (version 2)."""
        self._enter("nvmlDeviceGetGpuInstanceProfileInfoById")
        p = self._product(self._target(device, GpuRef).uuid).gi_by_id(profileId)
        if p is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._gi_info(p, 2)

    @staticmethod
    def _gi_info(p: Any, version: int) -> Any:
        if version == 2:
            info: Any = c_nvmlGpuInstanceProfileInfo_v2_t()
            info.name = f"MIG {p.name}"
        elif version == 1:
            info = c_nvmlGpuInstanceProfileInfo_t()
        else:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        info.id = p.profile_id
        info.isP2pSupported = 0
        info.sliceCount = p.slices
        info.instanceCount = p.instance_count
        info.multiprocessorCount = p.multiprocessors
        info.copyEngineCount = p.copy_engines
        info.decoderCount = p.decoders
        info.encoderCount = p.encoders
        info.jpegCount = p.jpeg_engines
        info.ofaCount = p.ofa_engines
        info.memorySizeMB = p.memory_mib
        return info

    def nvmlDeviceGetGpuInstancePossiblePlacements(self, device: Any, profileId: int, placementsRef: Any, countRef: Any) -> int:
        """Fill ``placementsRef`` (capacity: ``*countRef``) with every placement of the profile.

        A None array asks for the count only; a too small capacity fails with INSUFFICIENT_SIZE and
        leaves the needed count in ``*countRef``. Occupancy and MIG mode do not matter.
        """
        self._enter("nvmlDeviceGetGpuInstancePossiblePlacements")
        uuid = self._target(device, GpuRef).uuid
        placements = self._sim(lambda: self.simulator.possible_placements(uuid, profileId))
        count = deref(countRef)
        if placementsRef is None:
            count.value = len(placements)
            return NVML_SUCCESS
        self._fill(deref(placementsRef), count, [(p.start, p.size) for p in placements], self._set_placement)
        return NVML_SUCCESS

    @staticmethod
    def _set_placement(slot: Any, value: tuple[int, int]) -> None:
        slot.start, slot.size = value

    @staticmethod
    def _fill(array: Any, count: Any, values: list[_T], put: Callable[[Any, _T], None]) -> None:
        capacity = int(count.value)
        if capacity < len(values):
            count.value = len(values)
            raise NVMLError(NVML_ERROR_INSUFFICIENT_SIZE)
        if len(array) < len(values):  # a capacity larger than the buffer would overrun it in C
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        for i, v in enumerate(values):
            put(array[i], v)
        count.value = len(values)

    # --- MIG devices -----------------------------------------------------------------------------

    def nvmlDeviceIsMigDeviceHandle(self, device: Any) -> ctypes.c_uint:
        """A ``c_uint`` (not an int: pynvml returns the ctypes object) that is 1 for a MIG device."""
        self._enter("nvmlDeviceIsMigDeviceHandle")
        return ctypes.c_uint(1 if isinstance(self._any_device(device), MigDeviceRef) else 0)

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        """How many MIG devices the GPU can have at most (its 1-slice instance count)."""
        self._enter("nvmlDeviceGetMaxMigDeviceCount")
        product = self._product(self._target(device, GpuRef).uuid)
        return int(max(p.instance_count for p in product.gi_profiles if p.slices == 1))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> Any:
        """The index-th MIG device of the GPU; NOT_FOUND when there is none at that index."""
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex")
        uuid = self._target(device, GpuRef).uuid
        product = self._product(uuid)
        if not 0 <= index < max(p.instance_count for p in product.gi_profiles if p.slices == 1):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        migs = self._mig_devices(uuid)
        if index >= len(migs):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return self._handle(migs[index], c_nvmlDevice_t)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: Any) -> Any:
        """The parent GPU of a MIG device."""
        self._enter("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        return self._gpu_handle(self._target(migDevice, MigDeviceRef).uuid)

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        """The GI id of a MIG device; INVALID_ARGUMENT for a full GPU."""
        self._enter("nvmlDeviceGetGpuInstanceId")
        return self._target(device, MigDeviceRef).gi_id

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        """The CI id of a MIG device; INVALID_ARGUMENT for a full GPU."""
        self._enter("nvmlDeviceGetComputeInstanceId")
        return self._target(device, MigDeviceRef).ci_id
