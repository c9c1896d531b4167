"""Usage of real GPUs through NVML, strictly read-only: utilization and memory per prepared device.

Implements ``dra_driver.core.usage.UsageSource`` on GPU nodes; the kubelet plugin's usage sampler
(``kubelet_plugin.usage``) calls ``sample`` every pass (10 s) from its own thread. With the other
``dra_driver.sources.nvml*`` modules and ``dra_driver.mig_backends.nvml`` it may import ``pynvml``
(import-linter enforces it). Every call is a query: nothing is ever set.

What it reads, per target:

* full GPU: ``nvmlDeviceGetUtilizationRates`` (``.gpu``, percent of the last sample period in
  which a kernel ran) and ``nvmlDeviceGetMemoryInfo`` (``.used``);
* a shared GPU (``UsageTarget.shared``: time-slicing, MPS, capacity shares or several claims on
  one GPU) also per process: ``nvmlDeviceGetComputeRunningProcesses`` (pid, memory) and
  ``nvmlDeviceGetProcessUtilization`` (SM utilization, averaged over the samples since the
  previous pass); a process NVML lists as running but with no utilization sample since then
  reads 0. Per-process numbers cannot be tied to a claim here (that needs the pid's cgroup), so
  on a shared GPU every claim's row shows the whole GPU's utilization;
* MIG device (handle by MIG UUID): memory from the MIG device's own ``nvmlDeviceGetMemoryInfo``;
  utilization is **None**: NVML's utilization rates are not supported on MIG devices, and GPU
  Performance Monitoring (``nvmlGpmMigSampleGet`` and ``nvmlGpmMetricsGet``, Hopper and newer),
  which could tell, is not implemented. So a MIG device on a real GPU never counts as idle
  (``dra_driver.core.usage``: unknown is never idle).

Any NVMLError leaves that number None (unknown) and is logged once per device and error; a lost
handle is looked up again next pass. NVML is initialised once, at the first sample, and shut down
by ``close``.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

import structlog

from dra_driver.core.usage import DeviceKey, ProcessUsage, UsageSample, UsageTarget

log = structlog.get_logger(__name__)


class NvmlUsageSource:
    """A ``UsageSource`` over NVML. ``nvml`` is injectable for tests (a stand-in module)."""

    def __init__(self, *, nvml: ModuleType | None = None) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        self._nvml = nvml
        self._ready = False
        self._handles: dict[str, Any] = {}
        self._last_sample_us: dict[str, int] = {}
        """Per GPU UUID: the newest process utilization sample seen (NVML returns those after it)."""
        self._told: set[tuple[str, str, str]] = set()

    def describe(self) -> str:
        """``nvml``."""
        return "nvml"

    def close(self) -> None:
        """Shut NVML down if this source initialised it."""
        if self._ready:
            self._handles.clear()
            self._ready = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as err:
                log.warning("nvml_shutdown_failed", error=str(err))

    def _tell(self, uuid: str, what: str, err: Exception) -> None:
        key = (uuid, what, str(err))
        if key not in self._told:
            self._told.add(key)
            log.info("usage_read_failed", uuid=uuid, reading=what, error=str(err))

    def _handle(self, uuid: str) -> Any:
        handle = self._handles.get(uuid)
        if handle is None:
            handle = self._handles[uuid] = self._nvml.nvmlDeviceGetHandleByUUID(uuid)
        return handle

    def sample(self, targets: Sequence[UsageTarget], now: float) -> dict[DeviceKey, UsageSample]:
        """A sample per target whose device NVML found; the numbers it could not read are None."""
        n = self._nvml
        if not self._ready:
            try:
                n.nvmlInit()
            except n.NVMLError as err:
                self._tell("", "nvmlInit", err)
                return {}
            self._ready = True
        out: dict[DeviceKey, UsageSample] = {}
        read: dict[tuple[str, bool], UsageSample | None] = {}  # one read per device per pass, however many claims share it
        for t in targets:
            uuid = t.mig_uuid or t.gpu_uuid
            if (uuid, t.shared) not in read:
                read[(uuid, t.shared)] = self._read(t, uuid, now)
            got = read[(uuid, t.shared)]
            if got is not None:
                out[t.key] = UsageSample(
                    t.device, t.gpu_uuid, t.mig_uuid, got.utilization, got.memory_used_bytes, now, got.processes
                )
        return out

    def _read(self, t: UsageTarget, uuid: str, now: float) -> UsageSample | None:
        n = self._nvml
        try:
            handle = self._handle(uuid)
        except n.NVMLError as err:
            self._tell(uuid, "nvmlDeviceGetHandleByUUID", err)
            return None
        util: float | None = None
        if t.mig_uuid is None:
            try:
                util = min(1.0, max(0.0, int(n.nvmlDeviceGetUtilizationRates(handle).gpu) / 100.0))
            except n.NVMLError as err:
                self._lost(uuid, err)
                self._tell(uuid, "nvmlDeviceGetUtilizationRates", err)
        mem: int | None = None
        try:
            mem = int(n.nvmlDeviceGetMemoryInfo(handle).used)
        except n.NVMLError as err:
            self._lost(uuid, err)
            self._tell(uuid, "nvmlDeviceGetMemoryInfo", err)
        procs = self._processes(handle, uuid, mig=t.mig_uuid is not None) if t.shared else ()
        return UsageSample(t.device, t.gpu_uuid, t.mig_uuid, util, mem, now, procs)

    def _lost(self, uuid: str, err: Exception) -> None:
        """Forget a handle NVML says is gone (the GPU fell off the bus, the MIG device was destroyed)."""
        code = getattr(err, "value", None)
        if code in (getattr(self._nvml, "NVML_ERROR_GPU_IS_LOST", -1), getattr(self._nvml, "NVML_ERROR_NOT_FOUND", -1)):
            self._handles.pop(uuid, None)

    def _processes(self, handle: Any, uuid: str, *, mig: bool) -> tuple[ProcessUsage, ...]:
        n = self._nvml
        try:
            running = n.nvmlDeviceGetComputeRunningProcesses(handle)
        except n.NVMLError as err:
            self._tell(uuid, "nvmlDeviceGetComputeRunningProcesses", err)
            return ()
        utils: dict[int, float] | None = None if mig else self._process_utilization(handle, uuid)
        out = []
        for p in running:
            pid = int(p.pid)
            used = getattr(p, "usedGpuMemory", None)
            util = None if utils is None else utils.get(pid, 0.0)
            out.append(ProcessUsage(pid, util, None if used is None else int(used)))
        return tuple(sorted(out, key=lambda p: p.pid))

    def _process_utilization(self, handle: Any, uuid: str) -> dict[int, float] | None:
        """Per pid, the mean SM utilization (0..1) of the samples since the previous pass; None when unreadable."""
        n = self._nvml
        since = self._last_sample_us.get(uuid, 0)
        try:
            samples = n.nvmlDeviceGetProcessUtilization(handle, since)
        except n.NVMLError as err:
            if getattr(err, "value", None) == getattr(n, "NVML_ERROR_NOT_FOUND", -1):
                return {}  # no process ran a kernel since then
            self._tell(uuid, "nvmlDeviceGetProcessUtilization", err)
            return None
        sums: dict[int, list[float]] = {}
        newest = since
        for s in samples:
            newest = max(newest, int(s.timeStamp))
            sums.setdefault(int(s.pid), []).append(min(100, max(0, int(s.smUtil))) / 100.0)
        self._last_sample_us[uuid] = newest
        return {pid: sum(v) / len(v) for pid, v in sums.items()}
