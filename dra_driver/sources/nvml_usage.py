"""Usage of real GPUs through NVML, strictly read-only: utilization and memory per prepared device.

Implements ``dra_driver.core.usage.UsageSource`` on GPU nodes; the kubelet plugin's usage sampler
(``kubelet_plugin.monitoring.usage``) calls ``sample`` every pass (10 s) from its own thread. With the other
``dra_driver.sources.nvml*`` modules and ``dra_driver.mig_backends.nvml`` it may import ``pynvml``
(import-linter enforces it). Every call is a query: nothing is ever set.

What it reads, per target:

* full GPU: utilization through GPU Performance Monitoring where the GPU has it (below), else
  (pre-Hopper, or the first pass) ``nvmlDeviceGetUtilizationRates`` (``.gpu``, percent of the
  last sample period in which a kernel ran); memory from ``nvmlDeviceGetMemoryInfo`` (``.used``);
* a shared GPU (``UsageTarget.shared``: time-slicing, MPS, capacity shares or several claims on
  one GPU) also per process: ``nvmlDeviceGetComputeRunningProcesses`` (pid, memory) and
  ``nvmlDeviceGetProcessUtilization`` (SM utilization, averaged over the samples since the
  previous pass); a process NVML lists as running but with no utilization sample since then
  reads 0. Per-process numbers cannot be tied to a claim here (that needs the pid's cgroup), so
  on a shared GPU every claim's row shows the whole GPU's utilization;
* MIG device (handle by MIG UUID): memory from the MIG device's own ``nvmlDeviceGetMemoryInfo``;
  utilization through GPM, the only way NVML tells it for a MIG device (its utilization rates are
  not supported); on a GPU without GPM it is **None**: unknown, never idle
  (``dra_driver.core.usage``), never a made-up 0.

GPU Performance Monitoring (Hopper and newer; ``nvmlGpmQueryDeviceSupport`` on the GPU, asked once
per GPU): each pass takes one sample per device (``nvmlGpmSampleAlloc``, then ``nvmlGpmSampleGet``
for a GPU, ``nvmlGpmMigSampleGet(GPU, GPU instance ID, ...)`` for a MIG device) and keeps it until
the next pass, which hands the two to ``nvmlGpmMetricsGet``: so the utilization NVML computes
covers the whole interval between passes (10 s), not the last fraction of a second, and no pass
sleeps. A device's first pass has no utilization from GPM (a full GPU reads its utilization rates
instead). The metric is ``NVML_GPM_METRIC_GRAPHICS_UTIL`` (the share of time a graphics or compute
engine was active: the meaning of the utilization rates and of the idle threshold) and
``NVML_GPM_METRIC_SM_UTIL`` (the share of SMs busy), the larger of the ones NVML returns, so a
device is never idle by one metric while busy by the other. Samples are always freed: the older
one after each computation, both on any error, those of devices no longer prepared at the end of a
pass, all at ``close``. GPM is only read: streaming is never switched on, nothing is set.

Any NVMLError leaves that number None (unknown) and is logged once per device and error; a lost
handle is looked up again next pass. NVML is initialised once, at the first sample, and shut down
by ``close``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import structlog

from dra_driver.core.usage import DeviceKey, ProcessUsage, UsageSample, UsageTarget

log = structlog.get_logger(__name__)

MIN_GPM_INTERVAL_S = 0.1
"""Two GPM samples closer than this are not compared (NVML refreshes its counters about that often)."""
_GPM_METRICS = ("NVML_GPM_METRIC_GRAPHICS_UTIL", "NVML_GPM_METRIC_SM_UTIL")


@dataclass(frozen=True, slots=True)
class _GpmSample:
    """One GPM sample buffer of one device, and when (the pass's ``now``) it was read."""

    buffer: Any
    at: float


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
        self._gpm_support: dict[str, bool] = {}
        """Per GPU UUID: whether it has GPM (asked once; an error other than 'not supported' is asked again)."""
        self._gpm_samples: dict[str, _GpmSample] = {}
        """Per device UUID (GPU or MIG device): the previous pass's sample, freed when compared or dropped."""
        self._gpu_instance: dict[str, int] = {}
        """Per MIG device UUID: its GPU instance ID (what ``nvmlGpmMigSampleGet`` takes)."""

    def describe(self) -> str:
        """``nvml``."""
        return "nvml"

    def close(self) -> None:
        """Free every GPM sample held and shut NVML down if this source initialised it."""
        if self._ready:
            for uuid in list(self._gpm_samples):
                self._drop_sample(uuid)
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
        utilization: dict[str, float | None] = {}  # one GPM sample per device per pass, shared or not
        for t in targets:
            uuid = t.mig_uuid or t.gpu_uuid
            if (uuid, t.shared) not in read:
                read[(uuid, t.shared)] = self._read(t, uuid, now, utilization)
            got = read[(uuid, t.shared)]
            if got is not None:
                out[t.key] = UsageSample(
                    t.device, t.gpu_uuid, t.mig_uuid, got.utilization, got.memory_used_bytes, now, got.processes
                )
        for uuid in [u for u in self._gpm_samples if u not in utilization]:  # no longer prepared (or not read)
            self._drop_sample(uuid)
        return out

    def _read(self, t: UsageTarget, uuid: str, now: float, utilization: dict[str, float | None]) -> UsageSample | None:
        n = self._nvml
        try:
            handle = self._handle(uuid)
        except n.NVMLError as err:
            self._tell(uuid, "nvmlDeviceGetHandleByUUID", err)
            return None
        if uuid not in utilization:
            utilization[uuid] = self._gpm_utilization(t, uuid, handle, now)
        util = utilization[uuid]
        if util is None and t.mig_uuid is None:  # no GPM reading (pre-Hopper, first pass, error): the utilization rates
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
            self._gpu_instance.pop(uuid, None)

    # -- GPU Performance Monitoring ---------------------------------------------------------

    def _gpm_supported(self, gpu_uuid: str) -> bool:
        """Whether the GPU has GPM (False too when this pynvml lacks it, or this pass could not tell)."""
        known = self._gpm_support.get(gpu_uuid)
        if known is not None:
            return known
        n = self._nvml
        if not hasattr(n, "nvmlGpmQueryDeviceSupport"):
            self._gpm_support[gpu_uuid] = False
            return False
        try:
            supported = bool(int(n.nvmlGpmQueryDeviceSupport(self._handle(gpu_uuid)).isSupportedDevice))
        except n.NVMLError as err:
            if getattr(err, "value", None) not in (
                getattr(n, "NVML_ERROR_NOT_SUPPORTED", -1),
                getattr(n, "NVML_ERROR_FUNCTION_NOT_FOUND", -1),
            ):
                self._lost(gpu_uuid, err)
                self._tell(gpu_uuid, "nvmlGpmQueryDeviceSupport", err)
                return False  # asked again next pass
            supported = False
        self._gpm_support[gpu_uuid] = supported
        log.info("usage_gpm_support", uuid=gpu_uuid, supported=supported)
        return supported

    def _gpm_utilization(self, t: UsageTarget, uuid: str, handle: Any, now: float) -> float | None:
        """The device's utilization (0..1) between the previous pass's GPM sample and one taken now; None without one."""
        if not self._gpm_supported(t.gpu_uuid):
            return None
        previous = self._gpm_samples.get(uuid)
        if previous is not None and now - previous.at < MIN_GPM_INTERVAL_S:
            return None  # too close to compare: the previous one is kept for the next pass
        n = self._nvml
        what = "nvmlGpmSampleAlloc"
        buffer: Any = None
        kept = False
        try:
            buffer = n.nvmlGpmSampleAlloc()
            if t.mig_uuid is None:
                what = "nvmlGpmSampleGet"
                n.nvmlGpmSampleGet(handle, buffer)
            else:
                what = "nvmlDeviceGetGpuInstanceId"
                instance = self._gpu_instance.get(uuid)
                if instance is None:
                    instance = self._gpu_instance[uuid] = int(n.nvmlDeviceGetGpuInstanceId(handle))
                what = "nvmlGpmMigSampleGet"
                n.nvmlGpmMigSampleGet(self._handle(t.gpu_uuid), instance, buffer)
            self._gpm_samples[uuid] = _GpmSample(buffer, now)
            kept = True
        except n.NVMLError as err:
            self._lost(uuid, err)
            self._lost(t.gpu_uuid, err)  # a MIG device's sample is read through its GPU's handle
            self._tell(uuid, what, err)
            self._drop_sample(uuid)  # a device that failed a sample starts over: no comparison across a failure
            return None
        finally:
            if buffer is not None and not kept:  # any failure after the allocation, NVML's or not
                self._free(uuid, buffer)
        if previous is None:
            return None  # the first sample: a utilization from the next pass on
        try:
            return self._gpm_metrics(uuid, previous.buffer, buffer)
        finally:
            self._free(uuid, previous.buffer)

    def _gpm_metrics(self, uuid: str, first: Any, second: Any) -> float | None:
        """NVML's utilization between two samples: the larger of GRAPHICS_UTIL and SM_UTIL it returns, as 0..1."""
        n = self._nvml
        ask = n.c_nvmlGpmMetricsGet_t()
        ask.version = n.NVML_GPM_METRICS_GET_VERSION
        ask.numMetrics = len(_GPM_METRICS)
        ask.sample1 = first
        ask.sample2 = second
        for i, name in enumerate(_GPM_METRICS):
            ask.metrics[i].metricId = getattr(n, name)
        try:
            got = n.nvmlGpmMetricsGet(ask)
        except n.NVMLError as err:
            self._lost(uuid, err)
            self._tell(uuid, "nvmlGpmMetricsGet", err)
            return None
        values = []
        for i, name in enumerate(_GPM_METRICS):
            metric = got.metrics[i]
            value = float(metric.value)
            if int(metric.nvmlReturn) == 0 and math.isfinite(value):
                values.append(value)
            else:
                self._tell(uuid, name, RuntimeError(f"NVML return {int(metric.nvmlReturn)}"))
        return min(1.0, max(0.0, max(values) / 100.0)) if values else None

    def _drop_sample(self, uuid: str) -> None:
        held = self._gpm_samples.pop(uuid, None)
        if held is not None:
            self._free(uuid, held.buffer)

    def _free(self, uuid: str, buffer: Any) -> None:
        try:
            self._nvml.nvmlGpmSampleFree(buffer)
        except self._nvml.NVMLError as err:
            self._tell(uuid, "nvmlGpmSampleFree", err)

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
