"""The NVML GPU source: reads each GPU's identity through pynvml, strictly read-only.

With ``dra_driver.mig_backends.nvml``, the only module of dra-gpu that imports ``pynvml`` (import-linter
enforces it). It calls query functions only: it never sets MIG mode, compute mode, clocks, power
or anything else.
Where each GPU sits (PCIe root, NUMA node) comes from sysfs through ``dra_driver.sources.sysfs``.
Called through ``dra_driver.sources.select.make_source`` by the apps on real GPU nodes.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import structlog

from dra_driver.core.gpu import GpuInfo, nvml_text
from dra_driver.sources.sysfs import SYSFS, numa_node, pcie_root

log = structlog.get_logger(__name__)

# NVML architecture ids (nvmlDeviceArchitecture_t) to the names NVIDIA's tools print.
_ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
}

# NVML brand constant names (NVML_BRAND_<X>) to display strings.
_BRANDS = {
    "NVIDIA": "Nvidia",
    "TESLA": "Tesla",
    "QUADRO": "Quadro",
    "QUADRO_RTX": "QuadroRTX",
    "GEFORCE": "GeForce",
    "GEFORCE_RTX": "GeForceRTX",
    "TITAN": "Titan",
    "TITAN_RTX": "TitanRTX",
    "NVIDIA_RTX": "NvidiaRTX",
    "GRID": "Grid",
    "NVS": "NVS",
}


def normalize_bus_id(raw: str) -> str:
    """NVML's ``00000000:1B:00.0`` → the sysfs/Kubernetes form ``0000:1b:00.0``."""
    raw = raw.strip().lower()
    domain, _, rest = raw.partition(":")
    if not rest:
        raise ValueError(f"PCI bus id {raw!r} has no domain")
    return f"{int(domain, 16):04x}:{rest}"


class NvmlGpuSource:
    """A GpuSource backed by NVML, with topology from sysfs. ``nvml`` and ``sysfs`` are injectable for tests."""

    def __init__(self, *, nvml: ModuleType | None = None, sysfs: Path = SYSFS) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        self._nvml = nvml
        self._sysfs = sysfs
        self._numa_told: set[str] = set()  # bus ids whose missing NUMA node was logged (once each, not every resync)

    def describe(self) -> str:
        """``nvml``."""
        return "nvml"

    def gpus(self) -> list[GpuInfo]:
        """Every GPU NVML reports, ordered by minor; NVML is initialised and shut down around it."""
        n = self._nvml
        n.nvmlInit()
        try:
            driver = nvml_text(n.nvmlSystemGetDriverVersion())
            cuda = int(n.nvmlSystemGetCudaDriverVersion_v2())
            cuda_version = f"{cuda // 1000}.{(cuda % 1000) // 10}"
            out = [self._one(n.nvmlDeviceGetHandleByIndex(i), driver, cuda_version) for i in range(n.nvmlDeviceGetCount())]
        finally:
            n.nvmlShutdown()
        return sorted(out, key=lambda g: g.minor)

    def _brand(self, value: int) -> str:
        for name in dir(self._nvml):
            if name.startswith("NVML_BRAND_") and getattr(self._nvml, name) == value and name != "NVML_BRAND_COUNT":
                key = name.removeprefix("NVML_BRAND_")
                return _BRANDS.get(key, key.title())
        return "Unknown"

    def _mig(self, handle: Any) -> tuple[bool, bool]:
        n = self._nvml
        try:
            current, _pending = n.nvmlDeviceGetMigMode(handle)
        except n.NVMLError as err:  # NOT_SUPPORTED: not MIG capable
            log.debug("mig_mode_unsupported", error=str(err))
            return False, False
        return True, bool(current == n.NVML_DEVICE_MIG_ENABLE)

    def _numa_node(self, bus_id: str) -> int | None:
        reading = numa_node(bus_id, self._sysfs)
        if reading.node is None and bus_id not in self._numa_told:
            self._numa_told.add(bus_id)
            log.info("numa_node_omitted", bus_id=bus_id, reason=reading.reason)
        return reading.node

    def _one(self, handle: Any, driver: str, cuda_version: str) -> GpuInfo:
        n = self._nvml
        major, minor_cc = n.nvmlDeviceGetCudaComputeCapability(handle)
        bus_id = normalize_bus_id(nvml_text(n.nvmlDeviceGetPciInfo(handle).busId))
        arch = int(n.nvmlDeviceGetArchitecture(handle))
        mig_capable, mig_enabled = self._mig(handle)
        return GpuInfo(
            minor=int(n.nvmlDeviceGetMinorNumber(handle)),
            uuid=nvml_text(n.nvmlDeviceGetUUID(handle)),
            product_name=nvml_text(n.nvmlDeviceGetName(handle)),
            brand=self._brand(int(n.nvmlDeviceGetBrand(handle))),
            architecture=_ARCHITECTURES.get(arch, f"Unknown({arch})"),
            cuda_compute_capability=f"{major}.{minor_cc}",
            driver_version=driver,
            cuda_driver_version=cuda_version,
            memory_bytes=int(n.nvmlDeviceGetMemoryInfo(handle).total),
            pci_bus_id=bus_id,
            pcie_root=pcie_root(bus_id, self._sysfs),
            numa_node=self._numa_node(bus_id),
            mig_capable=mig_capable,
            mig_enabled=mig_enabled,
        )
