"""Read-only checks of dra-gpu's NVML path on a machine with a real NVIDIA GPU (issue 17's items 1-4).

Run by hand on a GPU machine: ``python3 scripts/gpu_readonly_check.py OUT_DIR`` from the repository
root (``PYTHONPATH`` must reach dra-gpu's dependencies). Nothing here changes the GPU: every
pynvml function whose name says it sets, creates, destroys, resets, clears or enables something
is replaced by one that raises before the checks start, so a bug in dra-gpu that tried would fail
loudly instead. Writes into OUT_DIR:

* ``inventory-<strategy>.json``: the ResourceSlices ``dra-gpu inventory --nvml`` would print for
  MIG strategies none, static and dynamic, and how long each took (``timings.json``);
* ``nvml-mig-profiles.json``: the GPU instance profiles and placements NVML reports per GPU;
* ``nvml-calls.json``: each NVML query the health and utilization work would use, ok or its error;
* ``nvml-gpm.json``: GPU Performance Monitoring, read only: per GPU whether it has GPM, the
  metrics NVML computes from two samples 0.5 s apart (``GRAPHICS_UTIL``, ``SM_UTIL``,
  ``SM_OCCUPANCY``, ``ANY_TENSOR_UTIL``, ``DRAM_BW_UTIL``: each its NVML return and value, in
  percent), the same for each existing MIG device (``nvmlGpmMigSampleGet``; none are made), and
  the utilization dra-gpu's own usage source reads for those devices in two passes 1 s apart
  (``usage_source``: per device, ``first`` and ``second``, 0..1 or null; the first pass of a MIG
  device is null by design, and every sample is freed);
* ``cdi.json``: the device nodes a claim's CDI spec would name, and whether each exists;
* ``nvidia-smi-q.xml`` and ``nvidia-smi-query.csv`` when ``nvidia-smi`` is on the PATH.

Compared afterwards, off the GPU machine, against the simulator's profile files.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pynvml

_MUTATING = re.compile(r"^nvml\w*(Set|Create|Destroy|Reset|Clear|Enable|Disable|Register|Unregister|Modify)", re.ASCII)
_ALLOWED = {"nvmlEventSetCreate", "nvmlDeviceRegisterEvents", "nvmlEventSetFree", "nvmlEventSetWait", "nvmlEventSetWait_v2"}
"""An event set is the process's own subscription: it changes nothing on the GPU."""


def _guard() -> list[str]:
    refused = []
    for name in dir(pynvml):
        if _MUTATING.match(name) and name not in _ALLOWED and callable(getattr(pynvml, name)):

            def refuse(*_a: Any, _n: str = name, **_k: Any) -> Any:
                raise RuntimeError(f"read-only check: {_n} refused")

            setattr(pynvml, name, refuse)
            refused.append(name)
    return refused


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _try(fn: Any, *args: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        value = fn(*args)
        out: dict[str, Any] = {"ok": True, "value": _plain(value)}
    except Exception as err:  # noqa: BLE001 - every failure is a finding
        out = {"ok": False, "error": f"{type(err).__name__}: {err}"}
    out["ms"] = round(1000 * (time.perf_counter() - t0), 3)
    return out


def _plain(v: Any) -> Any:
    if isinstance(v, (bytes, str, int, float, bool)) or v is None:
        return _text(v)
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v][:64]
    if hasattr(v, "_fields_"):
        return {f[0]: _plain(getattr(v, f[0])) for f in v._fields_ if not f[0].startswith("_")}
    return repr(v)


def inventory(out: Path) -> dict[str, float]:
    """Write the slices of each MIG strategy; the seconds each took."""
    from dra_driver.appkit.inventory import node_publication
    from dra_driver.core.driver import DEFAULT_DRIVER_NAME
    from dra_driver.core.mig import MigStrategy
    from dra_driver.core.slices import slice_objects, split_pool
    from dra_driver.mig_backends.select import make_mig_backend
    from dra_driver.sources.select import make_source

    times = {}
    for strategy in (MigStrategy.NONE, MigStrategy.STATIC, MigStrategy.DYNAMIC):
        t0 = time.perf_counter()
        try:
            gpus = make_source(fake_gpus=None, node_name="gpu-node").gpus()
            backend = make_mig_backend(fake=False, gpus=gpus) if strategy is not MigStrategy.NONE else None
            pub = node_publication(gpus, strategy, backend)
            slices = slice_objects(
                driver=DEFAULT_DRIVER_NAME, node_name="gpu-node", contents=split_pool(list(pub.devices), list(pub.counter_sets))
            )
            result: Any = slices
        except Exception as err:  # noqa: BLE001 - a strategy that fails on this GPU is a finding, and the others still run
            result = {"error": f"{type(err).__name__}: {err}"}
        times[strategy.value] = round(time.perf_counter() - t0, 4)
        (out / f"inventory-{strategy.value}.json").write_text(json.dumps(result, indent=1, default=str))
    return times


def profiles(n: Any) -> list[dict[str, Any]]:
    """Each GPU's GPU instance profiles and placements as NVML reports them."""
    gpus = []
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        g: dict[str, Any] = {"index": i, "name": _text(n.nvmlDeviceGetName(h)), "mig_mode": _try(n.nvmlDeviceGetMigMode, h)}
        table = []
        for index in range(n.NVML_GPU_INSTANCE_PROFILE_COUNT):
            row: dict[str, Any] = {"profile_index": index}
            info = _try(n.nvmlDeviceGetGpuInstanceProfileInfo, h, index)
            row["info"] = info
            if info["ok"]:
                pid = info["value"]["id"]
                count = ctypes.c_uint(0)
                try:
                    n.nvmlDeviceGetGpuInstancePossiblePlacements(h, pid, None, ctypes.byref(count))
                    arr = (n.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
                    n.nvmlDeviceGetGpuInstancePossiblePlacements(h, pid, arr, ctypes.byref(count))
                    row["placements"] = [(arr[k].start, arr[k].size) for k in range(count.value)]
                except Exception as err:  # noqa: BLE001 - an unsupported profile is a finding, the table goes on
                    row["placements"] = f"{type(err).__name__}: {err}"
            table.append(row)
        g["profiles"] = table
        gpus.append(g)
    return gpus


def calls(n: Any) -> dict[str, Any]:
    """The health and utilization queries on GPU 0, each ok or its error."""
    out: dict[str, Any] = {}
    h = n.nvmlDeviceGetHandleByIndex(0)
    for name, args in [
        ("nvmlDeviceGetUtilizationRates", (h,)),
        ("nvmlDeviceGetMemoryInfo", (h,)),
        ("nvmlDeviceGetComputeRunningProcesses", (h,)),
        ("nvmlDeviceGetProcessUtilization", (h, 0)),
        ("nvmlDeviceGetSupportedEventTypes", (h,)),
        ("nvmlDeviceGetTotalEccErrors", (h, 1, 1)),  # uncorrected, aggregate
        ("nvmlDeviceGetRetiredPagesPendingStatus", (h,)),
        ("nvmlDeviceGetRemappedRows", (h,)),
        ("nvmlDeviceGetCurrentClocksEventReasons", (h,)),
        ("nvmlDeviceGetTemperature", (h, 0)),
        ("nvmlDeviceGetPowerUsage", (h,)),
        ("nvmlDeviceGetNumaNodeId", (h,)),
        ("nvmlDeviceGetPciInfo", (h,)),
        ("nvmlDeviceGetMaxMigDeviceCount", (h,)),
        ("nvmlGpmQueryDeviceSupport", (h,)),
        ("nvmlDeviceGetFieldValues(GPU_RECOVERY_ACTION)", (h, [getattr(n, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", 230)])),
    ]:
        fn = getattr(n, name.split("(")[0], None)
        out[name] = _try(fn, *args) if fn else {"ok": False, "error": "not in this pynvml"}
    es = _try(n.nvmlEventSetCreate)
    out["nvmlEventSetCreate"] = es
    if es["ok"]:
        evset = n.nvmlEventSetCreate()
        mask = n.nvmlEventTypeXidCriticalError | n.nvmlEventTypeDoubleBitEccError | n.nvmlEventTypeSingleBitEccError
        out["nvmlDeviceRegisterEvents(xid|dbe|sbe)"] = _try(n.nvmlDeviceRegisterEvents, h, mask, evset)
        out["nvmlEventSetWait_v2(100ms)"] = _try(n.nvmlEventSetWait_v2, evset, 100)
        out["nvmlEventSetFree"] = _try(n.nvmlEventSetFree, evset)
    out["euid"] = os.geteuid()
    return out


GPM_METRICS = (
    "NVML_GPM_METRIC_GRAPHICS_UTIL",
    "NVML_GPM_METRIC_SM_UTIL",
    "NVML_GPM_METRIC_SM_OCCUPANCY",
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "NVML_GPM_METRIC_DRAM_BW_UTIL",
)


def _gpm_metrics(n: Any, take: Any) -> dict[str, Any]:
    """NVML's GPM metrics from two samples 0.5 s apart, read by ``take(sample)``; the samples always freed."""
    samples: list[Any] = []
    result: dict[str, Any]
    try:
        for i in range(2):
            samples.append(n.nvmlGpmSampleAlloc())
            take(samples[-1])
            if i == 0:
                time.sleep(0.5)
        ask = n.c_nvmlGpmMetricsGet_t()
        ask.version = n.NVML_GPM_METRICS_GET_VERSION
        ask.numMetrics = len(GPM_METRICS)
        ask.sample1, ask.sample2 = samples
        for i, name in enumerate(GPM_METRICS):
            ask.metrics[i].metricId = getattr(n, name)
        got = n.nvmlGpmMetricsGet(ask)
        result = {
            name.removeprefix("NVML_GPM_METRIC_"): {
                "return": int(got.metrics[i].nvmlReturn),
                "value": float(got.metrics[i].value),
            }
            for i, name in enumerate(GPM_METRICS)
        }
    except Exception as err:  # noqa: BLE001 - a GPM call that fails is a finding
        result = {"error": f"{type(err).__name__}: {err}"}
    for sample in samples:
        try:
            n.nvmlGpmSampleFree(sample)
        except Exception as err:  # noqa: BLE001 - a free that fails is a finding too
            result.setdefault("free_errors", []).append(f"{type(err).__name__}: {err}")
    return result


def gpm(n: Any) -> dict[str, Any]:
    """GPM on every GPU and each existing MIG device, read only, then dra-gpu's usage source over the same devices."""
    from dra_driver.core.usage import UsageTarget

    out: dict[str, Any] = {"gpus": []}
    targets: list[UsageTarget] = []
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        uuid = _text(n.nvmlDeviceGetUUID(h))
        try:
            supported = bool(int(n.nvmlGpmQueryDeviceSupport(h).isSupportedDevice))
            support: dict[str, Any] = {"ok": True, "isSupportedDevice": supported}
        except Exception as err:  # noqa: BLE001 - no GPM (or no such call in this pynvml) is a finding
            supported, support = False, {"ok": False, "error": f"{type(err).__name__}: {err}"}
        g: dict[str, Any] = {"index": i, "uuid": uuid, "support": support, "mig_devices": []}
        if supported:
            g["metrics"] = _gpm_metrics(n, lambda sample, h=h: n.nvmlGpmSampleGet(h, sample))
        targets.append(UsageTarget(f"check-{uuid}", f"gpu-{i}", uuid))
        mode = _try(n.nvmlDeviceGetMigMode, h)
        if mode["ok"] and mode["value"][0] == n.NVML_DEVICE_MIG_ENABLE:
            for j in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
                try:
                    mig = n.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
                except n.NVMLError:
                    continue  # no MIG device at this index
                mig_uuid = _text(n.nvmlDeviceGetUUID(mig))
                instance = int(n.nvmlDeviceGetGpuInstanceId(mig))
                m: dict[str, Any] = {"uuid": mig_uuid, "gpu_instance": instance}
                if supported:
                    m["metrics"] = _gpm_metrics(n, lambda sample, h=h, gi=instance: n.nvmlGpmMigSampleGet(h, gi, sample))
                g["mig_devices"].append(m)
                targets.append(UsageTarget(f"check-{mig_uuid}", f"gpu-{i}-mig-{j}", uuid, mig_uuid=mig_uuid))
        out["gpus"].append(g)
    out["usage_source"] = _usage_passes(targets)
    return out


def _usage_passes(targets: list[Any]) -> dict[str, Any]:
    """What dra-gpu's NVML usage source reads for the devices in two passes 1 s apart."""
    from dra_driver.sources.nvml_usage import NvmlUsageSource

    source = NvmlUsageSource()
    try:
        first = source.sample(targets, time.time())
        time.sleep(1.0)
        second = source.sample(targets, time.time())
    except Exception as err:  # noqa: BLE001 - the source failing is a finding
        return {"error": f"{type(err).__name__}: {err}"}
    finally:
        source.close()
    return {
        t.device: {
            "uuid": t.mig_uuid or t.gpu_uuid,
            "first": first[t.key].utilization if t.key in first else None,
            "second": second[t.key].utilization if t.key in second else None,
            "memory_used_bytes": second[t.key].memory_used_bytes if t.key in second else None,
        }
        for t in targets
    }


def cdi() -> dict[str, Any]:
    """The device nodes a claim's CDI spec names, and whether each exists."""
    from dra_driver.core.prepare import CONTROL_DEVICE_NODES

    nodes = sorted({*map(str, Path("/dev").glob("nvidia[0-9]*")), *CONTROL_DEVICE_NODES})
    caps = sorted(map(str, Path("/dev/nvidia-caps").glob("*"))) if Path("/dev/nvidia-caps").exists() else []
    return {
        "nodes": {p: Path(p).exists() for p in nodes},
        "nvidia-caps": caps,
        "proc-caps": sorted(map(str, Path("/proc/driver/nvidia/capabilities").rglob("*")))[:40],
        "toolkit-cdi": [str(p) for d in ("/etc/cdi", "/var/run/cdi") for p in sorted(Path(d).glob("*"))],
    }


def main() -> int:
    """Run every check into the folder named by the first argument."""
    from dra_driver.obs.logs import configure_logging

    configure_logging("info")  # dra-gpu's log lines on stderr: stdout is the timings line only
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    refused = _guard()
    (out / "guarded.json").write_text(json.dumps(refused, indent=1))
    timings = inventory(out)
    t0 = time.perf_counter()
    timings["second_none"] = inventory(out).get("none", 0.0)  # warm (libnvidia-ml loaded, pages cached)
    timings["second_run_total"] = round(time.perf_counter() - t0, 4)
    (out / "timings.json").write_text(json.dumps(timings, indent=1))
    pynvml.nvmlInit()
    try:
        (out / "nvml-mig-profiles.json").write_text(json.dumps(profiles(pynvml), indent=1, default=str))
        (out / "nvml-calls.json").write_text(json.dumps(calls(pynvml), indent=1, default=str))
        (out / "nvml-gpm.json").write_text(json.dumps(gpm(pynvml), indent=1, default=str))
    finally:
        pynvml.nvmlShutdown()
    (out / "cdi.json").write_text(json.dumps(cdi(), indent=1))
    smi = shutil.which("nvidia-smi")
    if smi:
        (out / "nvidia-smi-q.xml").write_text(
            subprocess.run([smi, "-q", "-x"], check=False, capture_output=True, text=True, timeout=60).stdout
        )
        fields = "name,uuid,pci.bus_id,memory.total,driver_version,compute_cap,mig.mode.current,mig.mode.pending"
        q = subprocess.run(
            [smi, f"--query-gpu={fields}", "--format=csv"], check=False, capture_output=True, text=True, timeout=60
        )
        (out / "nvidia-smi-query.csv").write_text(q.stdout + q.stderr)
    print(json.dumps(timings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
