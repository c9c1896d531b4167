"""The attribute schema: names, types and values a user's CEL selectors depend on."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dra_driver.cli.main import inventory_slices
from dra_driver.core.gpu import GpuInfo
from dra_driver.core.schema import ATTR_NUMA_NODE, ATTR_PCIE_ROOT, gpu_device, node_devices, to_semver
from dra_driver.sources.fake import PROFILES, FakeGpuSource

SNAPSHOTS = Path(__file__).parent / "snapshots"


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_inventory_matches_snapshot(profile: str) -> None:
    """Every fake profile publishes exactly the pinned slices (set UPDATE_SNAPSHOTS=1 to re-pin)."""
    got = inventory_slices(fake_gpus=profile, node_name="node-a", driver="gpu.dra-gpu.dev")
    path = SNAPSHOTS / f"inventory-{profile}.json"
    text = json.dumps(got, indent=1, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.write_text(text)
    assert path.read_text() == text


def test_gpu_attributes_are_named_and_typed_like_nvidias_driver() -> None:
    """Selectors port from gpu.nvidia.com by changing only the domain: same names, same kinds."""
    dev = gpu_device(FakeGpuSource("h100x8", "n").gpus()[3]).to_api()
    kinds = {name: next(iter(v)) for name, v in dev["attributes"].items()}
    assert {
        "type": "string",
        "uuid": "string",
        "productName": "string",
        "brand": "string",
        "architecture": "string",
        "cudaComputeCapability": "version",
        "driverVersion": "version",
        "cudaDriverVersion": "version",
        "migCapable": "bool",
        "resource.kubernetes.io/pciBusID": "string",
        "resource.kubernetes.io/pcieRoot": "string",
        "resource.kubernetes.io/numaNode": "int",
    } == kinds
    assert "gpu-3" == dev["name"]
    assert {"memory": {"value": "81559Mi"}} == dev["capacity"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("570.124.06", "570.124.6"), ("9.0", "9.0.0"), ("12", "12.0.0"), ("13.0", "13.0.0"), (" 580.95.05 ", "580.95.5")],
)
def test_versions_become_valid_semver(raw: str, expected: str) -> None:
    """Driver versions with leading zeros and short CUDA versions are normalized, not rejected."""
    assert expected == to_semver(raw)


@pytest.mark.parametrize("raw", ["", "r570", "1.2.3.4", "1..2", "v12.8"])
def test_non_numeric_versions_are_rejected(raw: str) -> None:
    """A version the API would reject never reaches a slice."""
    with pytest.raises(ValueError, match="not a dotted numeric version"):
        to_semver(raw)


def test_uuids_are_deterministic_per_node_and_distinct_across_nodes() -> None:
    """A node keeps its fake GPUs across restarts; two nodes never share a UUID."""
    a1 = [g.uuid for g in FakeGpuSource("a100x8", "node-a").gpus()]
    a2 = [g.uuid for g in FakeGpuSource("a100x8", "node-a").gpus()]
    b = [g.uuid for g in FakeGpuSource("a100x8", "node-b").gpus()]
    assert a1 == a2
    assert not set(a1) & set(b)
    assert len(set(a1)) == 8


@pytest.mark.parametrize(
    ("profile", "numa"),
    [
        ("h100x8", [0, 0, 0, 0, 1, 1, 1, 1]),
        ("b200x8", [0, 0, 0, 0, 1, 1, 1, 1]),
        ("a100-80x1", [0]),
        ("l4x4", [0, 0, 1, 1]),
    ],
)
def test_fake_gpus_sit_on_two_numa_nodes_each_root_complex_on_one(profile: str, numa: list[int]) -> None:
    """Two sockets: the first half of the GPUs on NUMA node 0, the rest on 1; a PCIe root never spans two nodes."""
    devs = [d.to_api()["attributes"] for d in node_devices(FakeGpuSource(profile, "n").gpus())]
    assert numa == [a[ATTR_NUMA_NODE]["int"] for a in devs]
    roots = [a[ATTR_PCIE_ROOT]["string"] for a in devs]
    assert len(set(roots)) == len(roots)  # one GPU per root complex, as on a DGX
    assert all((int(r.removeprefix("pci0000:"), 16) >= 0x80) == bool(n) for r, n in zip(roots, numa, strict=True))


def test_a_negative_numa_node_never_reaches_a_slice() -> None:
    """-1 means "unknown" in sysfs; a source must say None, and the schema refuses a negative node."""
    g = FakeGpuSource("l4x4", "n").gpus()[0]
    with pytest.raises(ValueError, match="numaNode"):
        gpu_device(GpuInfo(**{**{f: getattr(g, f) for f in g.__slots__}, "numa_node": -1}))
    unknown = gpu_device(GpuInfo(**{**{f: getattr(g, f) for f in g.__slots__}, "numa_node": None}))
    assert ATTR_NUMA_NODE not in unknown.attributes


def test_l4_is_not_mig_capable_and_has_four_gpus() -> None:
    """The l4x4 profile is the non-MIG case."""
    devs = node_devices(FakeGpuSource("l4x4", "n").gpus())
    assert ["gpu-0", "gpu-1", "gpu-2", "gpu-3"] == [d.name for d in devs]
    assert all(d.attributes["migCapable"].value is False for d in devs)


def test_duplicate_minor_numbers_are_refused() -> None:
    """Two GPUs with one minor would publish one device name twice; the schema refuses."""
    g = FakeGpuSource("l4x4", "n").gpus()[0]
    twin = GpuInfo(**{**{f: getattr(g, f) for f in g.__slots__}, "uuid": "GPU-other"})
    with pytest.raises(ValueError, match="minor number 0"):
        node_devices([g, twin])


def test_overlong_string_attribute_is_refused() -> None:
    """The API limits string attributes to 64 characters; the schema says which one is too long."""
    g = FakeGpuSource("l4x4", "n").gpus()[0]
    long = GpuInfo(**{**{f: getattr(g, f) for f in g.__slots__}, "product_name": "X" * 65})
    with pytest.raises(ValueError, match="productName"):
        gpu_device(long)
