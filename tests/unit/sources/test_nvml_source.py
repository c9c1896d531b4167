"""The NVML source, against a stand-in pynvml module (no GPU on CI machines).

What it checks: the records it builds from NVML's answers, and that it only ever calls query
functions (any setter raises). The real-GPU check is a read-only run of ``dra-gpu inventory
--nvml`` on a GPU machine.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import structlog

from dra_driver.core.schema import ATTR_NUMA_NODE, node_devices
from dra_driver.sources.nvml import NvmlGpuSource, normalize_bus_id
from dra_driver.sources.sysfs import NUMA_FILE_MAX_BYTES, numa_node, pcie_root


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
    (real / "numa_node").write_text("1\n")
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    (sysfs / "bus" / "pci" / "devices" / "0000:1b:00.0").symlink_to(real)
    gpus = NvmlGpuSource(nvml=nvml, sysfs=sysfs).gpus()  # type: ignore[arg-type]
    assert (1, 1) == (nvml.inits, nvml.shutdowns)
    l4, h100 = gpus
    assert (0, "NVIDIA L4", "Ada Lovelace", "8.9", False, None, None) == (
        l4.minor,
        l4.product_name,
        l4.architecture,
        l4.cuda_compute_capability,
        l4.mig_capable,
        l4.pcie_root,
        l4.numa_node,
    )
    assert (1, "Hopper", True, False, "0000:1b:00.0", "pci0000:17", 1) == (
        h100.minor,
        h100.architecture,
        h100.mig_capable,
        h100.mig_enabled,
        h100.pci_bus_id,
        h100.pcie_root,
        h100.numa_node,
    )
    assert ("570.124.06", "12.8", "Nvidia") == (h100.driver_version, h100.cuda_driver_version, h100.brand)
    devs = node_devices(gpus)
    assert ["gpu-0", "gpu-1"] == [d.name for d in devs]
    assert "570.124.6" == devs[1].attributes["driverVersion"].value
    assert ("int", 1) == (devs[1].attributes[ATTR_NUMA_NODE].kind, devs[1].attributes[ATTR_NUMA_NODE].value)
    assert ATTR_NUMA_NODE not in devs[0].attributes  # no sysfs entry for the L4: left out, not guessed


def test_bus_id_normalization() -> None:
    """NVML's 8-digit upper-case domain becomes the 4-digit lower-case sysfs form."""
    assert "0000:1b:00.0" == normalize_bus_id("00000000:1B:00.0")
    assert "0001:c1:00.0" == normalize_bus_id("00000001:C1:00.0")


def test_pcie_root_unknown_without_sysfs(tmp_path: Path) -> None:
    """No sysfs entry: the attribute is left out rather than guessed."""
    assert pcie_root("0000:1b:00.0", tmp_path) is None


def _numa_file(sysfs: Path, bus_id: str, content: bytes) -> None:
    dev = sysfs / "bus" / "pci" / "devices" / bus_id
    dev.mkdir(parents=True, exist_ok=True)
    (dev / "numa_node").write_bytes(content)


def test_numa_node_is_read_from_the_devices_sysfs_entry(tmp_path: Path) -> None:
    """``numa_node`` under the lower-case, 4-digit-domain bus id gives the node number."""
    _numa_file(tmp_path, "0000:9a:00.0", b"1\n")
    _numa_file(tmp_path, "0000:18:00.0", b"0\n")
    assert (1, None) == (numa_node("0000:9a:00.0", tmp_path).node, numa_node("0000:9a:00.0", tmp_path).reason)
    assert 0 == numa_node("0000:18:00.0", tmp_path).node


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"-1\n", "no NUMA affinity"),
        (b"", "not a NUMA node number"),
        (b"one\n", "not a NUMA node number"),
        (b"7" * NUMA_FILE_MAX_BYTES, "not a NUMA node number"),
        (b"4096\n", "outside 0..1023"),
    ],
    ids=["minus-one", "empty", "word", "overlong", "too-large"],
)
def test_numa_node_is_omitted_with_a_reason_when_the_kernel_gives_none(tmp_path: Path, content: bytes, why: str) -> None:
    """-1, an empty or overlong file, or a value no kernel uses: no node, and the reason names the file."""
    _numa_file(tmp_path, "0000:1b:00.0", content)
    got = numa_node("0000:1b:00.0", tmp_path)
    assert got.node is None
    assert got.reason is not None and why in got.reason and "0000:1b:00.0/numa_node" in got.reason


def test_numa_node_of_a_missing_device_or_malformed_bus_id_is_unknown(tmp_path: Path) -> None:
    """No sysfs entry, or a bus id that is not in sysfs form (NVML's 8-digit upper case): no path is read."""
    assert "unreadable" in (numa_node("0000:1b:00.0", tmp_path).reason or "")
    assert numa_node("00000000:1B:00.0", tmp_path).node is None
    assert numa_node("../../etc/passwd", tmp_path).node is None
    assert pcie_root("../../etc", tmp_path) is None


def test_a_missing_numa_node_is_logged_once_per_gpu_however_often_gpus_are_read(tmp_path: Path) -> None:
    """Unknown NUMA nodes (here: no sysfs at all) are logged once per GPU, not on every enumeration."""
    # FakeNvml stands in for the pynvml module (duck-typed), as in the tests above.
    source = NvmlGpuSource(nvml=FakeNvml(), sysfs=tmp_path)  # type: ignore[arg-type]
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            assert [None, None] == [g.numa_node for g in source.gpus()]
    told = [e for e in logs if e["event"] == "numa_node_omitted"]
    assert ["0000:1b:00.0", "0000:41:00.0"] == [e["bus_id"] for e in told]  # in NVML index order
    assert all("unreadable" in e["reason"] for e in told)
