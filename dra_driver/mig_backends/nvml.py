"""The NVML MIG backend: ``MigBackend`` over pynvml calls (real NVML, or ``SimulatedNvml``).

With ``nvml=None`` it imports ``pynvml`` lazily (only this module and ``dra_driver.sources.nvml``
import it); tests and fake-GPU nodes pass ``dra_driver.mig_backends.sim.SimulatedNvml``. NVML is
initialised once in the constructor and shut down by ``close()``; device handles are cached by UUID
(a UUID lookup can be slow under load). Capability device nodes come from procfs.

Used by the kubelet plugin's MIG logic through ``dra_driver.core.mig.MigBackend``.
"""

from __future__ import annotations

import ctypes
import re
import threading
from pathlib import Path
from typing import Any

from dra_driver.core.gpu import GpuInfo, nvml_text
from dra_driver.core.mig import MigCatalog, MigError, MigErrorCode, MigInstance, MigMode, MigProfile, Placement

_CAP_MINOR = re.compile(r"^DeviceFileMinor:\s*(\d+)\s*$", re.MULTILINE)

# NVML return codes (pynvml NVML_ERROR_*) to what they mean to a caller.
_CODES = {
    2: MigErrorCode.INVALID_ARGUMENT,
    3: MigErrorCode.NOT_SUPPORTED,
    4: MigErrorCode.NO_PERMISSION,
    6: MigErrorCode.NOT_FOUND,
    16: MigErrorCode.RESET_REQUIRED,
    19: MigErrorCode.IN_USE,
    23: MigErrorCode.INSUFFICIENT_RESOURCES,
}
_NOT_SUPPORTED = 3
_INVALID_ARGUMENT = 2
_NOT_FOUND = 6
_SUCCESS = 0
# NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1: drivers report it where it is wrong (reference B11 #7).
_CI_PROFILE_1_SLICE_REV1 = 7


def map_nvml_code(code: int) -> MigErrorCode:
    """The meaning of an NVML return code for a MIG caller."""
    return _CODES.get(code, MigErrorCode.UNKNOWN)


class NvmlMigBackend:
    """``MigBackend`` implemented with pynvml calls only."""

    def __init__(self, *, nvml: Any | None = None, proc_root: Path = Path("/proc")) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        self._n = nvml
        self._proc_root = proc_root
        self._lock = threading.RLock()
        self._handles: dict[str, Any] = {}
        self._catalogs: dict[str, MigCatalog | None] = {}
        self._closed = False
        self._call("init", nvml.nvmlInit)

    # --- plumbing ------------------------------------------------------------------------------

    def _call(self, op: str, fn: Any, *args: Any, detail: str = "") -> Any:
        try:
            return fn(*args)
        except self._n.NVMLError as err:
            code = int(err.value)
            raise MigError(op, map_nvml_code(code), f"{detail or fn.__name__}: {err} (NVML {code})") from err

    def _call_unless(self, op: str, skip: tuple[int, ...], detail: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, or None when NVML answers one of ``skip``; MigError(op) naming ``detail`` otherwise."""
        try:
            return fn(*args)
        except self._n.NVMLError as err:
            if int(err.value) in skip:
                return None
            raise MigError(op, map_nvml_code(int(err.value)), f"{detail}: {err}") from err

    def close(self) -> None:
        """Shut NVML down (once)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._call("shutdown", self._n.nvmlShutdown)

    def _handle(self, gpu: GpuInfo) -> Any:
        with self._lock:
            h = self._handles.get(gpu.uuid)
            if h is None:
                h = self._call("lookup", self._n.nvmlDeviceGetHandleByUUID, gpu.uuid, detail=f"GPU {gpu.uuid}")
                self._handles[gpu.uuid] = h
            return h

    def _gi(self, op: str, gpu: GpuInfo, gi_id: int) -> Any:
        return self._call(op, self._n.nvmlDeviceGetGpuInstanceById, self._handle(gpu), gi_id, detail=f"GPU instance {gi_id}")

    # --- catalog and mode ----------------------------------------------------------------------

    def catalog(self, gpu: GpuInfo) -> MigCatalog | None:
        """GI profiles and their possible placements, by NVML profile index; None when not MIG capable."""
        with self._lock:
            if gpu.uuid not in self._catalogs:
                self._catalogs[gpu.uuid] = self._read_catalog(gpu)
            return self._catalogs[gpu.uuid]

    def _read_catalog(self, gpu: GpuInfo) -> MigCatalog | None:
        n = self._n
        h = self._handle(gpu)
        if self._call_unless("catalog", (_NOT_SUPPORTED,), f"MIG mode of {gpu.uuid}", n.nvmlDeviceGetMigMode, h) is None:
            return None
        profiles = []
        for index in range(int(n.NVML_GPU_INSTANCE_PROFILE_COUNT)):
            info = self._call_unless(
                "catalog",
                (_NOT_SUPPORTED, _INVALID_ARGUMENT),
                f"GI profile {index}",
                n.nvmlDeviceGetGpuInstanceProfileInfo,
                h,
                index,
            )
            if info is None:
                continue
            profiles.append(
                MigProfile(
                    name=nvml_text(info.name).removeprefix("MIG "),
                    profile_id=int(info.id),
                    slices=int(info.sliceCount),
                    instance_count=int(info.instanceCount),
                    memory_mib=int(info.memorySizeMB),
                    multiprocessors=int(info.multiprocessorCount),
                    copy_engines=int(info.copyEngineCount),
                    decoders=int(info.decoderCount),
                    encoders=int(info.encoderCount),
                    jpeg_engines=int(info.jpegCount),
                    ofa_engines=int(info.ofaCount),
                    placements=self._placements(h, int(info.id)),
                    index=index,
                )
            )
        if not profiles:
            return None
        memory_slices = max(p.start + p.size for prof in profiles for p in prof.placements)
        return MigCatalog(memory_slices=memory_slices, profiles=tuple(profiles))

    def _placements(self, handle: Any, profile_id: int) -> tuple[Placement, ...]:
        n = self._n
        count = ctypes.c_uint(0)
        self._call("catalog", n.nvmlDeviceGetGpuInstancePossiblePlacements, handle, profile_id, None, ctypes.byref(count))
        array = (n.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
        self._call("catalog", n.nvmlDeviceGetGpuInstancePossiblePlacements, handle, profile_id, array, ctypes.byref(count))
        return tuple(Placement(int(array[i].start), int(array[i].size)) for i in range(count.value))

    def mode(self, gpu: GpuInfo) -> MigMode:
        """The GPU's MIG mode (current and pending)."""
        current, pending = self._call("mode", self._n.nvmlDeviceGetMigMode, self._handle(gpu), detail=f"GPU {gpu.uuid}")
        enable = int(self._n.NVML_DEVICE_MIG_ENABLE)
        return MigMode(current=int(current) == enable, pending=int(pending) == enable)

    def set_mode(self, gpu: GpuInfo, enabled: bool) -> None:
        """Set MIG mode; RESET_REQUIRED when it only takes effect after a GPU reset (never done here)."""
        n = self._n
        value = n.NVML_DEVICE_MIG_ENABLE if enabled else n.NVML_DEVICE_MIG_DISABLE
        status = int(self._call("set_mode", n.nvmlDeviceSetMigMode, self._handle(gpu), value, detail=f"GPU {gpu.uuid}"))
        if status != _SUCCESS:
            raise MigError("set_mode", map_nvml_code(status), f"GPU {gpu.uuid}: activation status {status}")
        if self.mode(gpu).current != enabled:
            raise MigError("set_mode", MigErrorCode.RESET_REQUIRED, f"GPU {gpu.uuid}: mode pending until a reset")

    # --- instances -----------------------------------------------------------------------------

    def _mig_uuids(self, handle: Any) -> dict[tuple[int, int], str]:
        """(GI id, CI id) → MIG device UUID, walking the GPU's MIG device handles."""
        n = self._n
        out: dict[tuple[int, int], str] = {}
        for index in range(int(self._call("instances", n.nvmlDeviceGetMaxMigDeviceCount, handle))):
            mig = self._call_unless(
                "instances",
                (_NOT_FOUND, _INVALID_ARGUMENT),
                f"MIG device {index}",
                n.nvmlDeviceGetMigDeviceHandleByIndex,
                handle,
                index,
            )
            if mig is None:
                continue
            gi = int(self._call("instances", n.nvmlDeviceGetGpuInstanceId, mig))
            ci = int(self._call("instances", n.nvmlDeviceGetComputeInstanceId, mig))
            out[(gi, ci)] = nvml_text(self._call("instances", n.nvmlDeviceGetUUID, mig))
        return out

    def _ci_profiles(self, op: str, gi: Any) -> list[Any]:
        """CI profile infos offered in a GI (shared engines), the REV1 profile left out."""
        n = self._n
        out = []
        for index in range(int(n.NVML_COMPUTE_INSTANCE_PROFILE_COUNT)):
            if index == _CI_PROFILE_1_SLICE_REV1:
                continue
            info = self._call_unless(
                op,
                (_NOT_SUPPORTED, _INVALID_ARGUMENT),
                f"CI profile {index}",
                n.nvmlGpuInstanceGetComputeInstanceProfileInfo,
                gi,
                index,
                n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
            )
            if info is not None:
                out.append(info)
        return out

    def _compute_instances(self, op: str, gi: Any) -> list[Any]:
        """Every CI handle of a GI."""
        n = self._n
        out: list[Any] = []
        for info in self._ci_profiles(op, gi):
            array = (n.c_nvmlComputeInstance_t * max(int(info.instanceCount), 1))()
            count = ctypes.c_uint(len(array))
            self._call(op, n.nvmlGpuInstanceGetComputeInstances, gi, int(info.id), array, ctypes.byref(count))
            out.extend(array[i] for i in range(count.value))
        return out

    def instances(self, gpu: GpuInfo) -> list[MigInstance]:
        """Every GI of the GPU with its (lowest) CI and MIG UUID, ordered by GI id."""
        n = self._n
        catalog = self.catalog(gpu)
        if catalog is None or not self.mode(gpu).current:
            return []
        h = self._handle(gpu)
        uuids = self._mig_uuids(h)
        out = []
        for profile in catalog.profiles:
            array = (n.c_nvmlGpuInstance_t * max(profile.instance_count, 1))()
            count = ctypes.c_uint(len(array))
            self._call("instances", n.nvmlDeviceGetGpuInstances, h, profile.profile_id, array, ctypes.byref(count))
            for i in range(count.value):
                info = self._call("instances", n.nvmlGpuInstanceGetInfo, array[i])
                gi_id = int(info.id)
                ci_ids = sorted(
                    int(self._call("instances", n.nvmlComputeInstanceGetInfo, ci).id)
                    for ci in self._compute_instances("instances", array[i])
                )
                ci_id = ci_ids[0] if ci_ids else None
                out.append(
                    MigInstance(
                        parent_uuid=gpu.uuid,
                        profile_id=profile.profile_id,
                        profile_name=profile.name,
                        placement=Placement(int(info.placement.start), int(info.placement.size)),
                        gi_id=gi_id,
                        ci_id=ci_id,
                        uuid=uuids.get((gi_id, ci_id)) if ci_id is not None else None,
                    )
                )
        return sorted(out, key=lambda m: m.gi_id)

    def create_gpu_instance(self, gpu: GpuInfo, profile_id: int, start: int) -> int:
        """Create a GI of ``profile_id`` at exactly ``start``; return its GI id."""
        n = self._n
        catalog = self.catalog(gpu)
        if catalog is None:
            raise MigError("create_gi", MigErrorCode.NOT_SUPPORTED, f"GPU {gpu.uuid} is not MIG capable")
        try:
            profile = catalog.by_id(profile_id)
        except KeyError:
            raise MigError("create_gi", MigErrorCode.INVALID_ARGUMENT, f"GPU {gpu.uuid} has no profile {profile_id}") from None
        size = next((p.size for p in profile.placements if p.start == start), profile.placements[0].size)
        placement = n.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = start, size
        detail = f"{profile.name} at {start} on {gpu.uuid}"
        gi = self._call(
            "create_gi",
            n.nvmlDeviceCreateGpuInstanceWithPlacement,
            self._handle(gpu),
            profile_id,
            ctypes.byref(placement),
            detail=detail,
        )
        return int(self._call("create_gi", n.nvmlGpuInstanceGetInfo, gi).id)

    def create_compute_instance(self, gpu: GpuInfo, gi_id: int) -> MigInstance:
        """Create the full-size CI (CI slices == GI slices, shared engines) in a GI."""
        n = self._n
        gi = self._gi("create_ci", gpu, gi_id)
        gi_info = self._call("create_ci", n.nvmlGpuInstanceGetInfo, gi)
        catalog = self.catalog(gpu)
        profile = catalog.by_id(int(gi_info.profileId)) if catalog else None
        if profile is None:
            raise MigError("create_ci", MigErrorCode.UNKNOWN, f"GPU instance {gi_id} has an unknown profile")
        full = next((c for c in self._ci_profiles("create_ci", gi) if int(c.sliceCount) == profile.slices), None)
        if full is None:
            raise MigError("create_ci", MigErrorCode.NOT_SUPPORTED, f"no full-size compute instance profile for {profile.name}")
        ci = self._call(
            "create_ci", n.nvmlGpuInstanceCreateComputeInstance, gi, int(full.id), detail=f"CI in GPU instance {gi_id}"
        )
        ci_id = int(self._call("create_ci", n.nvmlComputeInstanceGetInfo, ci).id)
        mig_uuid = self._mig_uuids(self._handle(gpu)).get((gi_id, ci_id))
        if mig_uuid is None:
            raise MigError("create_ci", MigErrorCode.UNKNOWN, f"no MIG device for GI {gi_id} CI {ci_id} on {gpu.uuid}")
        return MigInstance(
            parent_uuid=gpu.uuid,
            profile_id=profile.profile_id,
            profile_name=profile.name,
            placement=Placement(int(gi_info.placement.start), int(gi_info.placement.size)),
            gi_id=gi_id,
            ci_id=ci_id,
            uuid=mig_uuid,
        )

    def destroy_compute_instances(self, gpu: GpuInfo, gi_id: int) -> None:
        """Destroy every CI of a GI (none is fine); NOT_FOUND when the GI does not exist."""
        n = self._n
        gi = self._gi("destroy_ci", gpu, gi_id)
        for ci in self._compute_instances("destroy_ci", gi):
            self._call_unless("destroy_ci", (_NOT_FOUND,), f"CI of GPU instance {gi_id}", n.nvmlComputeInstanceDestroy, ci)

    def destroy_gpu_instance(self, gpu: GpuInfo, gi_id: int) -> None:
        """Destroy a GI with no CI left; NOT_FOUND when it does not exist."""
        gi = self._gi("destroy_gi", gpu, gi_id)
        self._call("destroy_gi", self._n.nvmlGpuInstanceDestroy, gi, detail=f"GPU instance {gi_id} on {gpu.uuid}")

    # --- device nodes --------------------------------------------------------------------------

    def caps_device_nodes(self, gpu: GpuInfo, gi_id: int, ci_id: int) -> tuple[str, ...]:
        """``/dev/nvidia-caps/nvidia-cap<N>`` of the GI and of its CI, N read from procfs."""
        base = self._proc_root / "driver" / "nvidia" / "capabilities" / f"gpu{gpu.minor}" / "mig" / f"gi{gi_id}"
        return tuple(
            f"/dev/nvidia-caps/nvidia-cap{self._cap_minor(path)}" for path in (base / "access", base / f"ci{ci_id}" / "access")
        )

    @staticmethod
    def _cap_minor(path: Path) -> int:
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise MigError("caps", MigErrorCode.NOT_FOUND, f"no capability file {path}") from None
        m = _CAP_MINOR.search(text)
        if m is None:
            raise MigError("caps", MigErrorCode.UNKNOWN, f"no DeviceFileMinor in {path}")
        return int(m.group(1))
