"""The NVML usage source (dra_driver.sources.nvml_usage) against a stand-in pynvml module (no GPU here).

The stand-in raises the real ``pynvml.NVMLError`` subclasses with the real codes, answers only
the query functions the source may call, and fails the test on any setter. It models GPU
Performance Monitoring as NVML documents it: a support flag per GPU, sample buffers that are real
ctypes ``nvmlGpmSample_t`` pointers (allocated, filled by ``nvmlGpmSampleGet`` or, for a MIG
device, ``nvmlGpmMigSampleGet`` on the parent GPU with the GPU instance ID, freed once), and
``nvmlGpmMetricsGet`` filling pynvml's own ``c_nvmlGpmMetricsGet_t`` from two samples of one
device, the second taken later. What it checks: the numbers built from NVML's answers, per process
on shared GPUs only, MIG devices read by their own handle with GPM utilization (unknown without
GPM), and that a failing call makes that number unknown and leaks no sample.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from dra_driver.core.usage import Activity, IdlePolicy, ProcessUsage, UsageTarget, classify
from dra_driver.sources.nvml_usage import NvmlUsageSource

GIB = 1 << 30


class FakeNvml:
    """Two GPUs: GPU-0 before Hopper (no GPM), GPU-1 a Hopper with GPM and a MIG device (MIG-0, GPU instance 3)."""

    NVMLError = pynvml.NVMLError
    NVML_ERROR_NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t  # noqa: N815 - pynvml's name

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.util = {"GPU-0": 37, "GPU-1": 0}
        self.used = {"GPU-0": 10 * GIB, "GPU-1": 0, "MIG-0": 3 * GIB}
        self.fail: dict[str, int] = {}  # function name -> NVML error code
        self.procs: dict[str, list[Any]] = {
            "GPU-0": [SimpleNamespace(pid=11, usedGpuMemory=4 * GIB), SimpleNamespace(pid=12, usedGpuMemory=None)]
        }
        self.samples: dict[str, list[Any]] = {
            "GPU-0": [
                SimpleNamespace(pid=11, timeStamp=100, smUtil=40, memUtil=0, encUtil=0, decUtil=0),
                SimpleNamespace(pid=11, timeStamp=200, smUtil=60, memUtil=0, encUtil=0, decUtil=0),
            ]
        }
        self.since: list[int] = []
        self.inits = 0
        self.shutdowns = 0
        # GPM
        self.gpm = {"GPU-0": False, "GPU-1": True}
        self.instances = {"MIG-0": ("GPU-1", 3)}  # MIG device -> (GPU, GPU instance ID)
        self.activity: dict[tuple[str, int | None], tuple[float, float]] = {("GPU-1", None): (0.0, 0.0), ("GPU-1", 3): (0.0, 0.0)}
        """Per (GPU, GPU instance or None for the whole GPU): (GRAPHICS_UTIL, SM_UTIL) in percent since the last sample."""
        self.metric_error: dict[int, int] = {}  # metric ID -> the nvmlReturn NVML puts in that metric
        self.live: dict[int, Any] = {}  # sample address -> its backing buffer (allocated, not yet freed)
        self.taken: dict[int, tuple[tuple[str, int | None], int, tuple[float, float]]] = {}  # address -> (device, seq, activity)
        self.seq = 0
        self.allocs = 0

    def __getattr__(self, name: str) -> Any:
        if (
            name.startswith(("nvmlDeviceSet", "nvmlSet", "nvmlDeviceCreate", "nvmlGpuInstance", "nvmlGpmSet"))
            or "Reset" in name
            or "Streaming" in name
        ):
            raise AssertionError(f"the NVML usage source must not call {name}")
        if name.startswith(("NVML_GPM_", "NVML_VALUE")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise pynvml.NVMLError(self.fail[name])

    def nvmlInit(self) -> None:
        self._call("nvmlInit")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self._call("nvmlDeviceGetHandleByUUID")
        if uuid not in self.used and uuid not in self.gpm:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return f"h:{uuid}"

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        self._call("nvmlDeviceGetUtilizationRates")
        uuid = h[2:]
        if uuid.startswith("MIG-"):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=self.util[uuid], memory=0)

    def nvmlDeviceGetMemoryInfo(self, h: str) -> Any:
        self._call("nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(used=self.used[h[2:]], total=80 * GIB, free=0)

    def nvmlDeviceGetComputeRunningProcesses(self, h: str) -> list[Any]:
        self._call("nvmlDeviceGetComputeRunningProcesses")
        return self.procs.get(h[2:], [])

    def nvmlDeviceGetGpuInstanceId(self, h: str) -> int:
        self._call("nvmlDeviceGetGpuInstanceId")
        if h[2:] not in self.instances:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # not a MIG device handle
        return self.instances[h[2:]][1]

    def nvmlGpmQueryDeviceSupport(self, h: str) -> Any:
        self._call("nvmlGpmQueryDeviceSupport")
        return SimpleNamespace(version=pynvml.NVML_GPM_SUPPORT_VERSION, isSupportedDevice=int(self.gpm[h[2:]]))

    def nvmlGpmSampleAlloc(self) -> Any:
        self._call("nvmlGpmSampleAlloc")
        backing = ctypes.create_string_buffer(8)
        self.live[ctypes.addressof(backing)] = backing
        self.allocs += 1
        return ctypes.cast(backing, pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        address = self._address(sample)
        self.calls.append("nvmlGpmSampleFree")
        del self.live[address]
        self.taken.pop(address, None)

    def _address(self, sample: Any) -> int:
        address = ctypes.cast(sample, ctypes.c_void_p).value
        assert address in self.live, "a sample used after it was freed, or never allocated"
        return int(address)

    def _take(self, device: tuple[str, int | None], sample: Any) -> Any:
        address = self._address(sample)
        self.seq += 1
        self.taken[address] = (device, self.seq, self.activity[device])
        return sample

    def nvmlGpmSampleGet(self, h: str, sample: Any) -> Any:
        self._call("nvmlGpmSampleGet")
        assert h[2:].startswith("GPU-") and self.gpm[h[2:]], "GPM sample of a device without GPM"
        return self._take((h[2:], None), sample)

    def nvmlGpmMigSampleGet(self, h: str, gpu_instance: int, sample: Any) -> Any:
        self._call("nvmlGpmMigSampleGet")
        assert h[2:].startswith("GPU-"), "nvmlGpmMigSampleGet takes the parent GPU's handle"
        if (h[2:], gpu_instance) not in self.activity:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return self._take((h[2:], gpu_instance), sample)

    def nvmlGpmMetricsGet(self, ask: Any) -> Any:
        self._call("nvmlGpmMetricsGet")
        assert isinstance(ask, pynvml.c_nvmlGpmMetricsGet_t) and ask.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        first, second = self.taken[self._address(ask.sample1)], self.taken[self._address(ask.sample2)]
        assert first[0] == second[0] and first[1] < second[1], "two samples of one device, the first taken first"
        graphics, sm = second[2]
        for i in range(ask.numMetrics):
            metric = ask.metrics[i]
            value = {pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: graphics, pynvml.NVML_GPM_METRIC_SM_UTIL: sm}[metric.metricId]
            metric.nvmlReturn = self.metric_error.get(metric.metricId, 0)
            metric.value = 0.0 if metric.nvmlReturn else value
        return ask

    def nvmlDeviceGetProcessUtilization(self, h: str, since: int) -> list[Any]:
        self._call("nvmlDeviceGetProcessUtilization")
        self.since.append(since)
        got = [s for s in self.samples.get(h[2:], []) if s.timeStamp > since]
        if not got:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return got


GPU0 = UsageTarget("uid-a", "gpu-0", "GPU-0")
GPU0_SHARED = UsageTarget("uid-a", "gpu-0", "GPU-0", shared=True)
GPU1 = UsageTarget("uid-b", "gpu-1", "GPU-1")
MIG = UsageTarget("uid-c", "gpu-1-mig-1g10gb-6", "GPU-1", mig_uuid="MIG-0")


@pytest.fixture
def nvml() -> FakeNvml:
    return FakeNvml()


def source(nvml: FakeNvml) -> NvmlUsageSource:
    return NvmlUsageSource(nvml=nvml)  # type: ignore[arg-type]  # a stand-in for the pynvml module


def test_full_gpu_utilization_and_memory(nvml: FakeNvml) -> None:
    got = source(nvml).sample([GPU0, GPU1], 50.0)
    assert (got[GPU0.key].utilization, got[GPU0.key].memory_used_bytes) == (0.37, 10 * GIB)
    assert (got[GPU1.key].utilization, got[GPU1.key].memory_used_bytes) == (0.0, 0)
    assert got[GPU0.key].processes == ()  # not shared: no per-process reads
    assert "nvmlDeviceGetComputeRunningProcesses" not in nvml.calls
    assert got[GPU0.key].at == 50.0


def test_a_mig_device_reads_its_own_memory_and_its_first_pass_utilization_is_unknown(nvml: FakeNvml) -> None:
    got = source(nvml).sample([MIG], 1.0)[MIG.key]
    assert got.utilization is None  # one GPM sample: nothing to compare it with yet
    assert got.memory_used_bytes == 3 * GIB
    assert got.mig_uuid == "MIG-0"
    assert got.gpu_uuid == "GPU-1"
    assert "nvmlDeviceGetUtilizationRates" not in nvml.calls  # not even tried on a MIG handle


IDLE = IdlePolicy()


def test_a_mig_claim_reads_idle_then_busy_through_gpm_over_the_interval_between_passes(nvml: FakeNvml) -> None:
    src = source(nvml)
    src.sample([MIG], 10.0)
    got = src.sample([MIG], 20.0)[MIG.key]
    assert (0.0, Activity.IDLE) == (got.utilization, classify(got, IDLE))
    nvml.activity[("GPU-1", 3)] = (80.0, 55.0)
    got = src.sample([MIG], 30.0)[MIG.key]
    assert (0.8, Activity.BUSY) == (got.utilization, classify(got, IDLE))
    assert 3 == nvml.calls.count("nvmlGpmMigSampleGet") and 0 == nvml.calls.count("nvmlGpmSampleGet")
    assert 1 == len(nvml.live)  # the newest sample only: each older one freed once compared
    assert 1 == nvml.calls.count("nvmlGpmQueryDeviceSupport")  # asked once per GPU
    src.close()
    assert {} == nvml.live


def test_the_larger_of_the_two_gpm_metrics_counts_and_a_metric_nvml_cannot_give_is_left_out(nvml: FakeNvml) -> None:
    src = source(nvml)
    nvml.activity[("GPU-1", 3)] = (2.0, 9.0)
    src.sample([MIG], 10.0)
    assert 0.09 == src.sample([MIG], 20.0)[MIG.key].utilization
    nvml.metric_error[pynvml.NVML_GPM_METRIC_SM_UTIL] = pynvml.NVML_ERROR_NOT_SUPPORTED
    assert 0.02 == src.sample([MIG], 30.0)[MIG.key].utilization
    nvml.metric_error[pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL] = pynvml.NVML_ERROR_NOT_SUPPORTED
    assert src.sample([MIG], 40.0)[MIG.key].utilization is None  # neither: unknown, not 0


def test_a_mig_device_on_a_gpu_without_gpm_is_unknown_not_zero_and_takes_no_sample(nvml: FakeNvml) -> None:
    nvml.gpm["GPU-1"] = False
    src = source(nvml)
    for now in (10.0, 20.0, 30.0):
        got = src.sample([MIG], now)[MIG.key]
        assert got.utilization is None and classify(got, IDLE) is Activity.UNKNOWN
    assert 0 == nvml.allocs
    assert 1 == nvml.calls.count("nvmlGpmQueryDeviceSupport")


def test_a_pynvml_without_gpm_reads_mig_devices_unknown(nvml: FakeNvml) -> None:
    class OldBinding(FakeNvml):
        def __getattribute__(self, name: str) -> Any:
            if name == "nvmlGpmQueryDeviceSupport":
                raise AttributeError(name)
            return super().__getattribute__(name)

    old = OldBinding()
    src = source(old)
    assert [None, None] == [src.sample([MIG], now)[MIG.key].utilization for now in (10.0, 20.0)]
    assert 0 == old.allocs


def test_a_full_gpu_without_gpm_reads_utilization_rates_every_pass(nvml: FakeNvml) -> None:
    src = source(nvml)
    assert [0.37, 0.37] == [src.sample([GPU0], now)[GPU0.key].utilization for now in (10.0, 20.0)]
    assert 0 == nvml.allocs and 2 == nvml.calls.count("nvmlDeviceGetUtilizationRates")


def test_a_full_gpu_with_gpm_reads_it_after_its_first_pass(nvml: FakeNvml) -> None:
    nvml.util["GPU-1"] = 12  # the utilization rates: the last fraction of a second
    nvml.activity[("GPU-1", None)] = (64.0, 30.0)  # GPM: the whole interval since the previous pass
    src = source(nvml)
    assert 0.12 == src.sample([GPU1], 10.0)[GPU1.key].utilization
    assert 0.64 == src.sample([GPU1], 20.0)[GPU1.key].utilization
    assert 1 == nvml.calls.count("nvmlDeviceGetUtilizationRates")
    assert 2 == nvml.calls.count("nvmlGpmSampleGet") and 1 == len(nvml.live)


def test_passes_closer_than_nvmls_refresh_do_not_resample(nvml: FakeNvml) -> None:
    src = source(nvml)
    src.sample([MIG], 10.0)
    assert src.sample([MIG], 10.05)[MIG.key].utilization is None
    assert 1 == nvml.allocs
    nvml.activity[("GPU-1", 3)] = (40.0, 0.0)
    assert 0.4 == src.sample([MIG], 20.0)[MIG.key].utilization


@pytest.mark.parametrize("failing", ["nvmlGpmMigSampleGet", "nvmlGpmMetricsGet", "nvmlGpmSampleAlloc"])
def test_an_error_mid_way_leaves_utilization_unknown_and_no_sample_leaked(nvml: FakeNvml, failing: str) -> None:
    src = source(nvml)
    src.sample([MIG], 10.0)
    nvml.fail[failing] = pynvml.NVML_ERROR_UNKNOWN
    got = src.sample([MIG], 20.0)[MIG.key]
    assert got.utilization is None and got.memory_used_bytes == 3 * GIB
    assert len(nvml.live) == (1 if failing == "nvmlGpmMetricsGet" else 0)  # a valid newest sample is kept, nothing else
    del nvml.fail[failing]
    nvml.activity[("GPU-1", 3)] = (70.0, 70.0)
    values = [src.sample([MIG], now)[MIG.key].utilization for now in (30.0, 40.0)]
    assert values == ([0.7, 0.7] if failing == "nvmlGpmMetricsGet" else [None, 0.7])  # a failed sample starts over
    src.close()
    assert {} == nvml.live


def test_a_gpu_instance_id_nvml_cannot_give_frees_the_allocated_sample(nvml: FakeNvml) -> None:
    nvml.fail["nvmlDeviceGetGpuInstanceId"] = pynvml.NVML_ERROR_UNKNOWN
    src = source(nvml)
    assert src.sample([MIG], 10.0)[MIG.key].utilization is None
    assert (1, {}) == (nvml.allocs, nvml.live)
    del nvml.fail["nvmlDeviceGetGpuInstanceId"]
    assert [None, 0.0] == [src.sample([MIG], now)[MIG.key].utilization for now in (20.0, 30.0)]


def test_a_failure_that_is_not_nvmls_frees_the_sample_before_it_propagates(nvml: FakeNvml) -> None:
    src = source(nvml)
    src.sample([MIG], 10.0)

    def broken(h: str, gpu_instance: int, sample: Any) -> Any:
        raise TypeError("a binding bug")

    nvml.nvmlGpmMigSampleGet = broken  # type: ignore[method-assign]  # this test's failing call
    with pytest.raises(TypeError):
        src.sample([MIG], 20.0)
    assert 1 == len(nvml.live)  # the previous pass's sample, still held (freed at close)
    src.close()
    assert {} == nvml.live


def test_the_sample_of_a_device_no_longer_prepared_is_freed(nvml: FakeNvml) -> None:
    src = source(nvml)
    src.sample([MIG, GPU1], 10.0)
    assert 2 == len(nvml.live)
    src.sample([GPU1], 20.0)
    assert 1 == len(nvml.live)
    src.sample([], 30.0)
    assert {} == nvml.live


def test_a_gpm_support_question_nvml_fails_is_asked_again_next_pass(nvml: FakeNvml) -> None:
    nvml.fail["nvmlGpmQueryDeviceSupport"] = pynvml.NVML_ERROR_UNKNOWN
    src = source(nvml)
    assert src.sample([MIG], 10.0)[MIG.key].utilization is None
    del nvml.fail["nvmlGpmQueryDeviceSupport"]
    src.sample([MIG], 20.0)
    assert 0.0 == src.sample([MIG], 30.0)[MIG.key].utilization
    assert 2 == nvml.calls.count("nvmlGpmQueryDeviceSupport")


def test_one_gpm_sample_per_device_per_pass_for_a_shared_and_an_exclusive_claim(nvml: FakeNvml) -> None:
    shared = UsageTarget("uid-s", "gpu-1-mig-1g10gb-6", "GPU-1", mig_uuid="MIG-0", shared=True)
    src = source(nvml)
    src.sample([MIG, shared], 10.0)
    nvml.activity[("GPU-1", 3)] = (50.0, 50.0)
    got = src.sample([MIG, shared], 20.0)
    assert 0.5 == got[MIG.key].utilization == got[shared.key].utilization
    assert 2 == nvml.calls.count("nvmlGpmMigSampleGet") and 1 == len(nvml.live)


def test_shared_gpu_processes_with_utilization_averaged_since_the_last_pass(nvml: FakeNvml) -> None:
    src = source(nvml)
    got = src.sample([GPU0_SHARED], 1.0)[GPU0_SHARED.key]
    assert got.processes == (ProcessUsage(11, 0.5, 4 * GIB), ProcessUsage(12, 0.0, None))
    nvml.samples["GPU-0"].append(SimpleNamespace(pid=12, timeStamp=300, smUtil=90, memUtil=0, encUtil=0, decUtil=0))
    got = src.sample([GPU0_SHARED], 2.0)[GPU0_SHARED.key]
    assert nvml.since == [0, 200]  # asks only for samples after the newest one seen
    assert got.processes == (ProcessUsage(11, 0.0, 4 * GIB), ProcessUsage(12, 0.9, None))
    got = src.sample([GPU0_SHARED], 3.0)[GPU0_SHARED.key]  # NOT_FOUND: nobody ran a kernel since
    assert [p.utilization for p in got.processes] == [0.0, 0.0]


def test_process_utilization_unreadable_is_unknown_not_zero(nvml: FakeNvml) -> None:
    nvml.fail["nvmlDeviceGetProcessUtilization"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    got = source(nvml).sample([GPU0_SHARED], 1.0)[GPU0_SHARED.key]
    assert [(p.pid, p.utilization) for p in got.processes] == [(11, None), (12, None)]


def test_a_failing_call_makes_that_number_unknown(nvml: FakeNvml) -> None:
    nvml.fail["nvmlDeviceGetUtilizationRates"] = pynvml.NVML_ERROR_UNKNOWN
    got = source(nvml).sample([GPU0], 1.0)[GPU0.key]
    assert got.utilization is None
    assert got.memory_used_bytes == 10 * GIB


def test_a_device_nvml_cannot_find_is_left_out(nvml: FakeNvml) -> None:
    gone = UsageTarget("uid-d", "gpu-0-mig-1g10gb-5", "GPU-0", mig_uuid="MIG-gone")
    got = source(nvml).sample([gone, GPU0], 1.0)
    assert gone.key not in got
    assert GPU0.key in got


def test_a_lost_gpu_handle_is_looked_up_again(nvml: FakeNvml) -> None:
    src = source(nvml)
    src.sample([GPU0], 1.0)
    nvml.fail["nvmlDeviceGetMemoryInfo"] = pynvml.NVML_ERROR_GPU_IS_LOST
    src.sample([GPU0], 2.0)
    del nvml.fail["nvmlDeviceGetMemoryInfo"]
    before = nvml.calls.count("nvmlDeviceGetHandleByUUID")
    assert src.sample([GPU0], 3.0)[GPU0.key].memory_used_bytes == 10 * GIB
    assert nvml.calls.count("nvmlDeviceGetHandleByUUID") == before + 1


def test_one_read_per_device_however_many_claims_share_it(nvml: FakeNvml) -> None:
    other = UsageTarget("uid-z", "gpu-0", "GPU-0")
    got = source(nvml).sample([GPU0, other], 1.0)
    assert got[GPU0.key].utilization == got[other.key].utilization == 0.37
    assert nvml.calls.count("nvmlDeviceGetUtilizationRates") == 1


def test_init_once_and_shutdown_at_close(nvml: FakeNvml) -> None:
    src = source(nvml)
    src.sample([GPU0], 1.0)
    src.sample([GPU0], 2.0)
    assert nvml.inits == 1
    src.close()
    src.close()
    assert nvml.shutdowns == 1


def test_nvml_that_cannot_start_reads_nothing_and_retries(nvml: FakeNvml) -> None:
    nvml.fail["nvmlInit"] = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    src = source(nvml)
    assert src.sample([GPU0], 1.0) == {}
    del nvml.fail["nvmlInit"]
    assert GPU0.key in src.sample([GPU0], 2.0)
