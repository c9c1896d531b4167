"""The one attribute schema: how a GPU becomes a ResourceSlice device.

Attribute names and types follow NVIDIA's DRA driver (only the domain differs), so users' CEL
selectors port by changing ``gpu.nvidia.com`` to this driver's name. Called by the inventory
CLI, the ResourceSlice publisher and the kubelet plugin (to know which devices exist).
Pinned by the snapshot tests in ``tests/unit/core/test_schema.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import MigProfile, Placement, mig_device_name
from dra_driver.core.quantity import format_bytes

AttrKind = Literal["string", "int", "bool", "version"]

# Standard attribute domain (k8s.io/dynamic-resource-allocation/deviceattribute).
STANDARD_DOMAIN = "resource.kubernetes.io"

# Attribute names, unqualified ones live under the driver's own domain.
ATTR_TYPE = "type"
ATTR_UUID = "uuid"
ATTR_PRODUCT_NAME = "productName"
ATTR_BRAND = "brand"
ATTR_ARCHITECTURE = "architecture"
ATTR_CUDA_COMPUTE_CAPABILITY = "cudaComputeCapability"
ATTR_DRIVER_VERSION = "driverVersion"
ATTR_CUDA_DRIVER_VERSION = "cudaDriverVersion"
ATTR_MIG_CAPABLE = "migCapable"
ATTR_PCI_BUS_ID = f"{STANDARD_DOMAIN}/pciBusID"
ATTR_PCIE_ROOT = f"{STANDARD_DOMAIN}/pcieRoot"
ATTR_NUMA_NODE = f"{STANDARD_DOMAIN}/numaNode"  # int; a standard attribute since Kubernetes 1.37 (KEP-6072)
ATTR_PARENT_UUID = "parentUUID"
ATTR_PROFILE = "profile"
CAPACITY_MEMORY = "memory"
CAPACITY_MULTIPROCESSORS = "multiprocessors"
CAPACITY_COPY_ENGINES = "copyEngines"
CAPACITY_DECODERS = "decoders"
CAPACITY_ENCODERS = "encoders"
CAPACITY_JPEG_ENGINES = "jpegEngines"
CAPACITY_OFA_ENGINES = "ofaEngines"

DEVICE_TYPE_GPU = "gpu"
DEVICE_TYPE_MIG = "mig"

MAX_STRING_LEN = 64  # API limit for string and version attribute values
MAX_ATTRS_AND_CAPACITIES = 32  # API limit per device

_GPU_NAME = re.compile(r"^gpu-(0|[1-9][0-9]*)\Z")


@dataclass(frozen=True, slots=True)
class Attr:
    """One typed attribute value, as the API's DeviceAttribute (exactly one of four kinds)."""

    kind: AttrKind
    value: str | int | bool

    def to_api(self) -> dict[str, Any]:
        """The ``resource.k8s.io/v1`` JSON form, e.g. ``{"version": "9.0.0"}``."""
        return {self.kind: self.value}


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """A device as published in a ResourceSlice: name, attributes, capacity (quantity strings)."""

    name: str
    attributes: dict[str, Attr]
    capacity: dict[str, str]
    extra: dict[str, Any] = field(default_factory=dict)
    """Further Device fields later features add (consumesCounters, taints, ...), in API JSON."""
    request_policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Capacity name → ``requestPolicy`` JSON (consumable capacity)."""

    def to_api(self) -> dict[str, Any]:
        """The ``resource.k8s.io/v1`` Device JSON."""
        out: dict[str, Any] = {"name": self.name}
        if self.attributes:
            out["attributes"] = {k: v.to_api() for k, v in sorted(self.attributes.items())}
        if self.capacity:
            out["capacity"] = {
                k: {"value": v, **({"requestPolicy": self.request_policies[k]} if k in self.request_policies else {})}
                for k, v in sorted(self.capacity.items())
            }
        out.update(self.extra)
        return out

    @property
    def uses_counters_or_taints(self) -> bool:
        """True when the 64-devices-per-slice limit applies to a slice holding this device."""
        return bool(self.extra.get("consumesCounters") or self.extra.get("taints"))


def gpu_device_name(minor: int) -> str:
    """The canonical device name of a full GPU: ``gpu-<minor>``."""
    if minor < 0:
        raise ValueError(f"GPU minor number must not be negative, got {minor}")
    return f"gpu-{minor}"


def is_gpu_device_name(name: str) -> bool:
    """True for names of the form ``gpu-<minor>``."""
    return bool(_GPU_NAME.match(name))


def to_semver(raw: str) -> str:
    """Normalize a dotted numeric version (``570.124.06``, ``9.0``, ``12``) to semver 2.0.0.

    Leading zeros are dropped and missing components become 0; anything else raises ValueError.
    Three non-negative integers joined by dots are a SemVer 2.0.0 version as they stand (no
    library needed: the plugin's start-up does not pay for one).
    """
    parts = raw.strip().split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"version {raw!r} is not a dotted numeric version")
    nums = [int(p) for p in parts] + [0] * (3 - len(parts))
    return f"{nums[0]}.{nums[1]}.{nums[2]}"


def _string(value: str, what: str) -> Attr:
    if not value:
        raise ValueError(f"{what} must not be empty")
    if len(value) > MAX_STRING_LEN:
        raise ValueError(f"{what} {value!r} is longer than {MAX_STRING_LEN} characters")
    return Attr("string", value)


def _parent_attributes(gpu: GpuInfo) -> dict[str, Attr]:
    """What a full GPU and each of its MIG devices both say about the physical GPU.

    Topology included, so a constraint pairing a MIG slice with another driver's device on one
    PCIe root or NUMA node works as it does for a full GPU.
    """
    attrs: dict[str, Attr] = {
        ATTR_PRODUCT_NAME: _string(gpu.product_name, "productName"),
        ATTR_BRAND: _string(gpu.brand, "brand"),
        ATTR_ARCHITECTURE: _string(gpu.architecture, "architecture"),
        ATTR_CUDA_COMPUTE_CAPABILITY: Attr("version", to_semver(gpu.cuda_compute_capability)),
        ATTR_DRIVER_VERSION: Attr("version", to_semver(gpu.driver_version)),
        ATTR_CUDA_DRIVER_VERSION: Attr("version", to_semver(gpu.cuda_driver_version)),
        ATTR_PCI_BUS_ID: _string(gpu.pci_bus_id, "pciBusID"),
    }
    if gpu.pcie_root:
        attrs[ATTR_PCIE_ROOT] = _string(gpu.pcie_root, "pcieRoot")
    if gpu.numa_node is not None:
        if gpu.numa_node < 0:
            raise ValueError(f"numaNode must not be negative, got {gpu.numa_node} (a source reports -1 as unknown)")
        attrs[ATTR_NUMA_NODE] = Attr("int", gpu.numa_node)
    return attrs


def gpu_device(gpu: GpuInfo) -> DeviceSpec:
    """Map one full GPU to its ResourceSlice device. Pure and deterministic."""
    attrs: dict[str, Attr] = {
        ATTR_TYPE: Attr("string", DEVICE_TYPE_GPU),
        ATTR_UUID: _string(gpu.uuid, "uuid"),
        **_parent_attributes(gpu),
        ATTR_MIG_CAPABLE: Attr("bool", gpu.mig_capable),
    }
    return DeviceSpec(
        name=gpu_device_name(gpu.minor),
        attributes=attrs,
        capacity={CAPACITY_MEMORY: format_bytes(gpu.memory_bytes)},
    )


def mig_device(gpu: GpuInfo, profile: MigProfile, placement: Placement, mig_uuid: str | None) -> DeviceSpec:
    """Map one MIG placement of a GPU to its device. Pure.

    The placement holds an instance that exists (static, published with its ``uuid``) or one
    the driver carves at prepare (dynamic, no ``uuid`` yet). Capacities are the profile's
    resources as NVML reports them, so selectors can ask for memory or multiprocessors
    without knowing profile names.
    """
    attrs: dict[str, Attr] = {
        ATTR_TYPE: Attr("string", DEVICE_TYPE_MIG),
        ATTR_PARENT_UUID: _string(gpu.uuid, "parentUUID"),
        ATTR_PROFILE: _string(profile.name, "profile"),
        **_parent_attributes(gpu),
    }
    if mig_uuid:
        attrs[ATTR_UUID] = _string(mig_uuid, "uuid")
    return DeviceSpec(
        name=mig_device_name(gpu.minor, profile.name, placement.start),
        attributes=attrs,
        capacity={
            CAPACITY_MEMORY: format_bytes(profile.memory_mib << 20),
            CAPACITY_MULTIPROCESSORS: str(profile.multiprocessors),
            CAPACITY_COPY_ENGINES: str(profile.copy_engines),
            CAPACITY_DECODERS: str(profile.decoders),
            CAPACITY_ENCODERS: str(profile.encoders),
            CAPACITY_JPEG_ENGINES: str(profile.jpeg_engines),
            CAPACITY_OFA_ENGINES: str(profile.ofa_engines),
        },
    )


def node_devices(gpus: list[GpuInfo]) -> list[DeviceSpec]:
    """All devices a node publishes for its full GPUs, in minor order (the allocator's order).

    Raises ValueError on duplicate minors or UUIDs: publishing them would break the pool.
    """
    seen_minor: set[int] = set()
    seen_uuid: set[str] = set()
    for gpu in gpus:
        if gpu.minor in seen_minor:
            raise ValueError(f"two GPUs report minor number {gpu.minor}")
        if gpu.uuid in seen_uuid:
            raise ValueError(f"two GPUs report uuid {gpu.uuid}")
        seen_minor.add(gpu.minor)
        seen_uuid.add(gpu.uuid)
    return [gpu_device(g) for g in sorted(gpus, key=lambda g: g.minor)]
