"""Fake GPUs: named node profiles with realistic attribute values and deterministic UUIDs.

First-class, not a test double: unit, integration, e2e tests and the demo all run on it. A
profile is plain data; UUIDs are derived from the node name, so a node keeps its GPUs across
restarts and two nodes never share one. Selected with ``--fake-gpus PROFILE``.

Topology is that of a two-socket server: each GPU sits on its own PCIe root complex
(``pci0000:<bus & 0xf0>``), and socket 0 owns the buses below 0x80, socket 1 the rest, so an
8-GPU node has GPUs 0-3 on NUMA node 0 and 4-7 on NUMA node 1 (l4x4: 0-1 and 2-3).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from dra_driver.core.gpu import GpuInfo

_UUID_NAMESPACE = uuid.UUID("6d1f4c2e-2b7a-4f0e-9a51-1f3f5d0c8e21")

_DGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
_L4_BUSES = (0x01, 0x41, 0x81, 0xC1)
_MIB = 1 << 20
_SOCKET_1_FIRST_BUS = 0x80  # buses from here on hang off the second socket's root complexes


def fake_pcie_root(bus: int) -> str:
    """The root complex above a fake GPU on ``bus``: ``pci0000:<bus rounded down to 16>``."""
    return f"pci0000:{bus & 0xF0:02x}"


def fake_numa_node(bus: int) -> int:
    """The NUMA node of a fake GPU on ``bus``: 0 below bus 0x80, else 1 (the root complex's socket)."""
    return 0 if bus < _SOCKET_1_FIRST_BUS else 1


@dataclass(frozen=True, slots=True)
class GpuModel:
    """The attributes every GPU of one product shares."""

    product_name: str
    brand: str
    architecture: str
    cuda_compute_capability: str
    memory_mib: int
    mig_capable: bool


@dataclass(frozen=True, slots=True)
class FakeProfile:
    """A node's worth of identical fake GPUs."""

    name: str
    model: GpuModel
    buses: tuple[int, ...]
    driver_version: str = "580.95.05"
    cuda_driver_version: str = "13.0"


H100_80GB = GpuModel("NVIDIA H100 80GB HBM3", "Nvidia", "Hopper", "9.0", 81559, True)
A100_40GB = GpuModel("NVIDIA A100-SXM4-40GB", "Nvidia", "Ampere", "8.0", 40960, True)
A100_80GB = GpuModel("NVIDIA A100-SXM4-80GB", "Nvidia", "Ampere", "8.0", 81920, True)
H200_141GB = GpuModel("NVIDIA H200", "Nvidia", "Hopper", "9.0", 143771, True)
B200 = GpuModel("NVIDIA B200", "Nvidia", "Blackwell", "10.0", 183359, True)
L4 = GpuModel("NVIDIA L4", "Nvidia", "Ada Lovelace", "8.9", 23034, False)

PROFILES: dict[str, FakeProfile] = {
    p.name: p
    for p in (
        FakeProfile("h100x8", H100_80GB, _DGX_BUSES),
        FakeProfile("a100x8", A100_40GB, _DGX_BUSES),
        FakeProfile("a100-80x8", A100_80GB, _DGX_BUSES),
        FakeProfile("a100-80x1", A100_80GB, _DGX_BUSES[:1]),  # one GPU: sharing by capacity runs out visibly
        FakeProfile("h200x8", H200_141GB, _DGX_BUSES),
        FakeProfile("b200x8", B200, _DGX_BUSES),
        FakeProfile("l4x4", L4, _L4_BUSES),
    )
}


def fake_uuid(node_name: str, profile: str, minor: int) -> str:
    """Deterministic NVML-style GPU UUID (``GPU-xxxxxxxx-...``) for one fake GPU of one node."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node_name}/{profile}/{minor}')}"


class FakeGpuSource:
    """A GpuSource serving one named profile for one node."""

    def __init__(self, profile: str, node_name: str) -> None:
        if profile not in PROFILES:
            known = ", ".join(sorted(PROFILES))
            raise ValueError(f"unknown fake GPU profile {profile!r}; known profiles: {known}")
        if not node_name:
            raise ValueError("fake GPUs need a node name (their UUIDs derive from it)")
        self._profile = PROFILES[profile]
        self._node = node_name

    def describe(self) -> str:
        """``fake:<profile>``."""
        return f"fake:{self._profile.name}"

    def gpus(self) -> list[GpuInfo]:
        """The profile's GPUs, minor 0..N-1."""
        p = self._profile
        m = p.model
        return [
            GpuInfo(
                minor=minor,
                uuid=fake_uuid(self._node, p.name, minor),
                product_name=m.product_name,
                brand=m.brand,
                architecture=m.architecture,
                cuda_compute_capability=m.cuda_compute_capability,
                driver_version=p.driver_version,
                cuda_driver_version=p.cuda_driver_version,
                memory_bytes=m.memory_mib * _MIB,
                pci_bus_id=f"0000:{bus:02x}:00.0",
                pcie_root=fake_pcie_root(bus),
                numa_node=fake_numa_node(bus),
                mig_capable=m.mig_capable,
                mig_enabled=False,
            )
            for minor, bus in enumerate(p.buses)
        ]
