"""The NVML source, against a stand-in pynvml module (no GPU on CI machines).

What it checks: the records it builds from NVML's answers, and that it only ever calls query
functions (any setter raises). The real-GPU check is a read-only run of ``dra-gpu inventory
--nvml`` on a GPU machine.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from dra_driver.core.schema import node_devices
from dra_driver.sources.nvml import NvmlGpuSource, normalize_bus_id, pcie_root


class NVMLError(Exception):
    pass


class FakeNvml:
    """Answers like NVML for two GPUs: an H100 (MIG capable) and an L4 (not)."""

    NVMLError = NVMLError
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_BRAND_NVIDIA = 14
    NVML_BRAND_COUNT = 18

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.inits = 0
        self.shutdowns = 0

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("nvmlDeviceSet", "nvmlSet", "nvmlDeviceCreate")) or "Reset" in name:
            raise AssertionError(f"the NVML source must not call {name}")
        raise AttributeError(name)

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"570.124.06"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 12080

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetMinorNumber(self, h: int) -> int:
        return [1, 0][h]

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h}"

    def nvmlDeviceGetName(self, h: int) -> str:
        return ["NVIDIA H100 80GB HBM3", "NVIDIA L4"][h]

    def nvmlDeviceGetBrand(self, h: int) -> int:
        return 14

    def nvmlDeviceGetArchitecture(self, h: int) -> int:
        return [9, 8][h]

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return [(9, 0), (8, 9)][h]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(total=[85520809984, 24152899584][h])

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=[b"00000000:1B:00.0", b"00000000:41:00.0"][h])

    def nvmlDeviceGetMigMode(self, h: int) -> tuple[int, int]:
        if h == 1:
            raise NVMLError("Not Supported")
        return (0, 0)


def test_records_are_built_from_nvml_answers(tmp_path: Path) -> None:
    """Versions, bus ids, architecture names and MIG capability come out right; NVML is shut down."""
    nvml = FakeNvml()
    sysfs = tmp_path / "sys"
    real = sysfs / "devices" / "pci0000:17" / "0000:17:01.0" / "0000:1b:00.0"
    real.mkdir(parents=True)
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    (sysfs / "bus" / "pci" / "devices" / "0000:1b:00.0").symlink_to(real)
    gpus = NvmlGpuSource(nvml=nvml, sysfs=sysfs).gpus()  # type: ignore[arg-type]
    assert (1, 1) == (nvml.inits, nvml.shutdowns)
    l4, h100 = gpus
    assert (0, "NVIDIA L4", "Ada Lovelace", "8.9", False, None) == (
        l4.minor,
        l4.product_name,
        l4.architecture,
        l4.cuda_compute_capability,
        l4.mig_capable,
        l4.pcie_root,
    )
    assert (1, "Hopper", True, False, "0000:1b:00.0", "pci0000:17") == (
        h100.minor,
        h100.architecture,
        h100.mig_capable,
        h100.mig_enabled,
        h100.pci_bus_id,
        h100.pcie_root,
    )
    assert ("570.124.06", "12.8", "Nvidia") == (h100.driver_version, h100.cuda_driver_version, h100.brand)
    devs = node_devices(gpus)
    assert ["gpu-0", "gpu-1"] == [d.name for d in devs]
    assert "570.124.6" == devs[1].attributes["driverVersion"].value


def test_bus_id_normalization() -> None:
    """NVML's 8-digit upper-case domain becomes the 4-digit lower-case sysfs form."""
    assert "0000:1b:00.0" == normalize_bus_id("00000000:1B:00.0")
    assert "0001:c1:00.0" == normalize_bus_id("00000001:C1:00.0")


def test_pcie_root_unknown_without_sysfs(tmp_path: Path) -> None:
    """No sysfs entry: the attribute is left out rather than guessed."""
    assert pcie_root("0000:1b:00.0", tmp_path) is None
