"""What each published attribute and capacity means, in a sentence: the attribute schema's documentation.

Keyed by the names ``dra_driver.core.schema`` (and ``dra_driver.core.sharing`` for
``computeShare``) publishes. Read by ``scripts/gen_reference.py attributes``, which renders
docs/reference/attributes.md from the devices the schema builds and fails when a published name has
no entry here, or an entry names nothing published. Pure data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from dra_driver.core import schema
from dra_driver.core.sharing import CAPACITY_COMPUTE_SHARE

ATTRIBUTE_MEANINGS: Final[Mapping[str, str]] = {
    schema.ATTR_TYPE: "What the device is: `gpu` (a whole GPU) or `mig` (a MIG device, existing or carved at prepare).",
    schema.ATTR_UUID: "The NVML UUID: `GPU-...` of a GPU, `MIG-...` of an existing MIG device (a MIG device carved at "
    "prepare has none until then).",
    schema.ATTR_PRODUCT_NAME: "The product name NVML reports, e.g. `NVIDIA H100 80GB HBM3`.",
    schema.ATTR_BRAND: "The brand NVML reports, e.g. `Nvidia`, `Tesla`.",
    schema.ATTR_ARCHITECTURE: "The GPU architecture, e.g. `Ampere`, `Hopper`, `Blackwell`.",
    schema.ATTR_CUDA_COMPUTE_CAPABILITY: "The CUDA compute capability as a version (`9.0.0` for 9.0): compare with "
    '`.compareTo(semver("8.0.0"))`.',
    schema.ATTR_DRIVER_VERSION: "The NVIDIA kernel driver's version as a semantic version (`570.124.6` for 570.124.06).",
    schema.ATTR_CUDA_DRIVER_VERSION: "The highest CUDA version the driver supports, as a version (`12.8.0`).",
    schema.ATTR_MIG_CAPABLE: "Whether the GPU can be partitioned into MIG devices.",
    schema.ATTR_PCI_BUS_ID: "The GPU's PCI address (`0000:18:00.0`); a standard attribute, so constraints can match it "
    "against other drivers' devices.",
    schema.ATTR_PCIE_ROOT: "The PCIe root complex above the GPU (`pci0000:10`); absent when unknown. Standard: "
    "`matchAttribute` puts a GPU and a NIC under one root.",
    schema.ATTR_NUMA_NODE: "The NUMA node the GPU is attached to; absent when unknown. Standard (Kubernetes 1.37, KEP-6072): "
    "`matchAttribute` puts devices of several drivers on one NUMA node.",
    schema.ATTR_PARENT_UUID: "The NVML UUID of the GPU a MIG device is part of.",
    schema.ATTR_PROFILE: "The MIG profile, e.g. `1g.10gb`, `3g.40gb`, `1g.10gb+me`.",
}
"""Attribute name (qualified names carry their domain) -> what it means."""

CAPACITY_MEANINGS: Final[Mapping[str, str]] = {
    schema.CAPACITY_MEMORY: "Device memory. On a GPU shared by capacity (`--sharing consumable`) a claim requests whole "
    "GiB of it (at least 1Gi; none asked: all of it).",
    schema.CAPACITY_MULTIPROCESSORS: "Streaming multiprocessors of the MIG profile.",
    schema.CAPACITY_COPY_ENGINES: "Copy engines of the MIG profile.",
    schema.CAPACITY_DECODERS: "Video decoders (NVDEC) of the MIG profile.",
    schema.CAPACITY_ENCODERS: "Video encoders (NVENC) of the MIG profile.",
    schema.CAPACITY_JPEG_ENGINES: "JPEG decoders (NVJPG) of the MIG profile.",
    schema.CAPACITY_OFA_ENGINES: "Optical flow accelerators (OFA) of the MIG profile.",
    CAPACITY_COMPUTE_SHARE: "On a GPU shared by capacity: the percentage of its SMs a claim's MPS clients may use "
    "(0-100; 0, the default, sets no cap and reserves nothing).",
}
"""Capacity name -> what it means."""
