"""The device model: what a GPU source reports about one GPU, and the GpuSource protocol.

Written by the GPU sources (``dra_driver.sources.fake``, ``dra_driver.sources.nvml``); read by
the attribute schema (``dra_driver.core.schema``) and the kubelet plugin's prepare logic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One physical GPU as seen by a GPU source. Plain data, no handles."""

    minor: int
    """The device minor number (``/dev/nvidia<minor>``); names the device ``gpu-<minor>``."""
    uuid: str
    product_name: str
    brand: str
    architecture: str
    cuda_compute_capability: str
    """``major.minor``, e.g. ``9.0``."""
    driver_version: str
    """As the driver reports it, e.g. ``570.124.06``."""
    cuda_driver_version: str
    """``major.minor``, e.g. ``12.8``."""
    memory_bytes: int
    pci_bus_id: str
    """Full BDF, ``0000:1b:00.0`` (lower case)."""
    pcie_root: str | None
    """The PCIe root complex, ``pci<domain>:<bus>``; None when the source cannot tell."""
    numa_node: int | None
    """The NUMA node the GPU is attached to (sysfs ``numa_node``); None when the platform reports none (-1) or the
    source cannot tell."""
    mig_capable: bool
    mig_enabled: bool


class GpuSource(Protocol):
    """Enumerates the GPUs of this node. Implementations must be read-only towards the GPUs."""

    def gpus(self) -> list[GpuInfo]:
        """Return every GPU of the node, ordered by minor number."""
        ...

    def describe(self) -> str:
        """A short human description of the source, for logs (``fake:h100x8``, ``nvml``)."""
        ...


def nvml_text(value: Any) -> str:
    """A string NVML returned, as text: pynvml hands bytes or str depending on its version and the call.

    Used by the NVML adapters (``dra_driver.sources.nvml``, ``dra_driver.sources.nvml_health``,
    ``dra_driver.mig_backends.nvml``).
    """
    return value.decode() if isinstance(value, bytes) else str(value)
