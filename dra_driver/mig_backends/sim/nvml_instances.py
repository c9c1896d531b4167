"""The simulated NVML's GPU-instance and compute-instance calls: create, list, look up, inspect, destroy.

Part of ``dra_driver.mig_backends.sim.fake_nvml.SimulatedNvml``. Handles to GIs and CIs name the
GI's creation serial, so a handle outliving its GI fails with INVALID_ARGUMENT as NVML's would.
Same names, signatures, return shapes and errors as pynvml's.
"""

# pynvml's names (camelCase functions and arguments) are the interface being reproduced.
# ruff: noqa: N802, N803

from __future__ import annotations

from typing import Any

from dra_driver.core.mig import Placement
from dra_driver.mig_backends.sim.catalog import CI_PROFILE_1_SLICE_REV1
from dra_driver.mig_backends.sim.nvml_api import (
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_INSUFFICIENT_RESOURCES,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_SUCCESS,
    NVMLError,
    c_nvmlComputeInstance_t,
    c_nvmlComputeInstanceInfo_t,
    c_nvmlComputeInstanceProfileInfo_t,
    c_nvmlComputeInstanceProfileInfo_v2_t,
    c_nvmlDevice_t,
    c_nvmlGpuInstance_t,
    c_nvmlGpuInstanceInfo_t,
)
from dra_driver.mig_backends.sim.nvml_handles import CiRef, GiRef, GpuRef, MigDeviceRef, SimulatedNvmlBase, deref, fill_array


class InstanceCalls(SimulatedNvmlBase):
    """NVML's GPU-instance and compute-instance calls over the simulator."""

    # --- GPU instances ---------------------------------------------------------------------------

    def _gi_handle(self, uuid: str, gi: Any) -> Any:
        return self._handle(GiRef(uuid, gi.gi_id, gi.serial), c_nvmlGpuInstance_t)

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, device: Any, profileId: int, placement: Any) -> Any:
        """Create a GI of the profile at exactly ``placement`` (a struct, or ``byref``/pointer to one)."""
        self._enter("nvmlDeviceCreateGpuInstanceWithPlacement")
        uuid = self._target(device, GpuRef).uuid
        pl = deref(placement)
        gi_id = self._sim(lambda: self.simulator.create_gpu_instance(uuid, profileId, int(pl.start), int(pl.size)))
        gi = self.simulator.snapshot(uuid).gi(gi_id)
        return self._gi_handle(uuid, gi)

    def nvmlDeviceCreateGpuInstance(self, device: Any, profileId: int) -> Any:
        """Create a GI of the profile wherever it fits (the lowest free placement)."""
        self._enter("nvmlDeviceCreateGpuInstance")
        uuid = self._target(device, GpuRef).uuid
        placements = self._sim(lambda: self.simulator.possible_placements(uuid, profileId))
        taken = [Placement(g.start, g.size) for g in self.simulator.snapshot(uuid).gis]
        free = [p for p in placements if not any(p.overlaps(t) for t in taken)]
        if free:
            first = free[0]
            gi_id = self._sim(lambda: self.simulator.create_gpu_instance(uuid, profileId, first.start, first.size))
            return self._gi_handle(uuid, self.simulator.snapshot(uuid).gi(gi_id))
        # Let the simulator say why nothing fits (MIG mode off, or insufficient resources).
        self._sim(lambda: self.simulator.create_gpu_instance(uuid, profileId, placements[0].start, placements[0].size))
        raise NVMLError(NVML_ERROR_INSUFFICIENT_RESOURCES)

    def nvmlDeviceGetGpuInstances(self, device: Any, profileId: int, gpuInstancesRef: Any, countRef: Any) -> int:
        """Fill ``gpuInstancesRef`` with the GIs of the profile; ``*countRef`` gets how many.

        The buffer must hold the profile's instance count (nvml.h), else INSUFFICIENT_SIZE.
        """
        self._enter("nvmlDeviceGetGpuInstances")
        uuid = self._target(device, GpuRef).uuid
        product = self._product(uuid)
        profile = product.gi_by_id(profileId)
        if profile is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        state = self._sim(lambda: self.simulator.snapshot(uuid))
        if not state.mode_current:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        gis = sorted((g for g in state.gis if g.profile_id == profileId), key=lambda g: g.gi_id)
        return fill_array(gpuInstancesRef, countRef, profile.instance_count, gis, lambda gi: self._gi_handle(uuid, gi))

    def nvmlDeviceGetGpuInstanceById(self, device: Any, gpuInstanceId: int) -> Any:
        """The GI with this id; NOT_FOUND when absent, NOT_SUPPORTED when MIG mode is off."""
        self._enter("nvmlDeviceGetGpuInstanceById")
        uuid = self._target(device, GpuRef).uuid
        self._product(uuid)
        state = self._sim(lambda: self.simulator.snapshot(uuid))
        if not state.mode_current:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        gi = state.gi(gpuInstanceId)
        if gi is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return self._gi_handle(uuid, gi)

    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        """The GI's device, id, profile id and placement."""
        self._enter("nvmlGpuInstanceGetInfo")
        target = self._target(gpuInstance, GiRef)
        gi = self._gi_state(target)
        info = c_nvmlGpuInstanceInfo_t()
        info.device = self._gpu_handle(target.uuid)
        info.id = gi.gi_id
        info.profileId = gi.profile_id
        info.placement.start = gi.start
        info.placement.size = gi.size
        return info

    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        """Destroy the GI; IN_USE while it has compute instances."""
        self._enter("nvmlGpuInstanceDestroy")
        target = self._target(gpuInstance, GiRef)
        self._gi_state(target)
        self._sim(lambda: self.simulator.destroy_gpu_instance(target.uuid, target.gi_id))
        return NVML_SUCCESS

    # --- compute instances -----------------------------------------------------------------------

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, device: Any, profile: int, engProfile: int, version: int = 2) -> Any:
        """Info of the CI profile at NVML CI profile index ``profile`` inside the GI ``device``."""
        self._enter("nvmlGpuInstanceGetComputeInstanceProfileInfo")
        target = self._target(device, GiRef)
        self._gi_state(target)
        if not 0 <= profile < NVML_COMPUTE_INSTANCE_PROFILE_COUNT or engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gi_profile, offered = self._sim(lambda: self.simulator.ci_profiles(target.uuid, target.gi_id))
        ci = next((c for c in offered if c.index == profile), None)
        if ci is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        product = self._product(target.uuid)
        if version == 2:
            info: Any = c_nvmlComputeInstanceProfileInfo_v2_t()
            if ci.index == CI_PROFILE_1_SLICE_REV1:
                info.name = f"MIG 1c.{gi_profile.name}+rev1"
            else:
                info.name = f"MIG {gi_profile.name}" if ci.slices == gi_profile.slices else f"MIG {ci.slices}c.{gi_profile.name}"
        elif version == 1:
            info = c_nvmlComputeInstanceProfileInfo_t()
        else:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        info.id = ci.profile_id
        info.sliceCount = ci.slices
        info.instanceCount = ci.instance_count
        info.multiprocessorCount = product.ci_multiprocessors(gi_profile, ci)
        info.sharedCopyEngineCount = gi_profile.copy_engines
        info.sharedDecoderCount = gi_profile.decoders
        info.sharedEncoderCount = gi_profile.encoders
        info.sharedJpegCount = gi_profile.jpeg_engines
        info.sharedOfaCount = gi_profile.ofa_engines
        return info

    def _ci_handle(self, target: GiRef, ci: Any) -> Any:
        return self._handle(CiRef(target.uuid, target.gi_id, target.serial, ci.ci_id, ci.uuid), c_nvmlComputeInstance_t)

    def nvmlGpuInstanceCreateComputeInstance(self, gpuInstance: Any, profileId: int) -> Any:
        """Create a CI of the CI profile id in the GI."""
        self._enter("nvmlGpuInstanceCreateComputeInstance")
        target = self._target(gpuInstance, GiRef)
        self._gi_state(target)
        ci = self._sim(lambda: self.simulator.create_compute_instance(target.uuid, target.gi_id, profileId))
        return self._ci_handle(target, ci)

    def nvmlGpuInstanceGetComputeInstances(
        self, gpuInstance: Any, profileId: int, computeInstancesRef: Any, countRef: Any
    ) -> int:
        """Fill ``computeInstancesRef`` with the GI's CIs of the CI profile id; ``*countRef`` gets how many."""
        self._enter("nvmlGpuInstanceGetComputeInstances")
        target = self._target(gpuInstance, GiRef)
        gi = self._gi_state(target)
        _, offered = self._sim(lambda: self.simulator.ci_profiles(target.uuid, target.gi_id))
        ci_profile = next((c for c in offered if c.profile_id == profileId), None)
        if ci_profile is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        cis = sorted((c for c in gi.cis if c.profile_id == profileId), key=lambda c: c.ci_id)
        return fill_array(computeInstancesRef, countRef, ci_profile.instance_count, cis, lambda ci: self._ci_handle(target, ci))

    def nvmlGpuInstanceGetComputeInstanceById(self, gpuInstance: Any, computeInstanceId: int) -> Any:
        """The GI's CI with this id; NOT_FOUND when absent."""
        self._enter("nvmlGpuInstanceGetComputeInstanceById")
        target = self._target(gpuInstance, GiRef)
        gi = self._gi_state(target)
        ci = next((c for c in gi.cis if c.ci_id == computeInstanceId), None)
        if ci is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return self._ci_handle(target, ci)

    def _ci_state(self, target: CiRef) -> Any:
        gi = self._gi_state(GiRef(target.uuid, target.gi_id, target.gi_serial))
        ci = next((c for c in gi.cis if c.ci_id == target.ci_id and c.uuid == target.mig_uuid), None)
        if ci is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return ci

    def nvmlComputeInstanceGetInfo_v2(self, computeInstance: Any) -> Any:
        """The CI's MIG device, GI, id, profile id and placement."""
        self._enter("nvmlComputeInstanceGetInfo_v2")
        target = self._target(computeInstance, CiRef)
        ci = self._ci_state(target)
        info = c_nvmlComputeInstanceInfo_t()
        info.device = self._handle(MigDeviceRef(target.uuid, target.gi_id, ci.ci_id, ci.uuid), c_nvmlDevice_t)
        info.gpuInstance = self._handle(GiRef(target.uuid, target.gi_id, target.gi_serial), c_nvmlGpuInstance_t)
        info.id = ci.ci_id
        info.profileId = ci.profile_id
        info.placement.start = ci.start
        info.placement.size = ci.slices
        return info

    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> Any:
        """Alias of ``nvmlComputeInstanceGetInfo_v2`` (as in pynvml)."""
        return self.nvmlComputeInstanceGetInfo_v2(computeInstance)

    def nvmlComputeInstanceDestroy(self, computeInstance: Any) -> int:
        """Destroy the CI; IN_USE while a process uses its MIG device."""
        self._enter("nvmlComputeInstanceDestroy")
        target = self._target(computeInstance, CiRef)
        self._ci_state(target)
        self._sim(lambda: self.simulator.destroy_compute_instance(target.uuid, target.gi_id, target.ci_id))
        return NVML_SUCCESS
