"""The NVML usage source (dra_driver.sources.nvml_usage) against a stand-in pynvml module (no GPU here).

The stand-in raises the real ``pynvml.NVMLError`` subclasses with the real codes, answers only
the query functions the source may call, and fails the test on any setter. What it checks: the
numbers built from NVML's answers, per process on shared GPUs only, MIG devices read by their
own handle with utilization unknown, and that a failing call makes that number unknown.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from dra_driver.core.usage import ProcessUsage, UsageTarget
from dra_driver.sources.nvml_usage import NvmlUsageSource

GIB = 1 << 30


class FakeNvml:
    """Two GPUs (GPU-0, GPU-1) and a MIG device (MIG-0) on GPU-1."""

    NVMLError = pynvml.NVMLError
    NVML_ERROR_NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST

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

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("nvmlDeviceSet", "nvmlSet", "nvmlDeviceCreate", "nvmlGpuInstance")) or "Reset" in name:
            raise AssertionError(f"the NVML usage source must not call {name}")
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
        if uuid not in self.used:
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


def test_a_mig_device_reads_its_own_memory_and_unknown_utilization(nvml: FakeNvml) -> None:
    got = source(nvml).sample([MIG], 1.0)[MIG.key]
    assert got.utilization is None
    assert got.memory_used_bytes == 3 * GIB
    assert got.mig_uuid == "MIG-0"
    assert got.gpu_uuid == "GPU-1"
    assert "nvmlDeviceGetUtilizationRates" not in nvml.calls  # not even tried on a MIG handle


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
