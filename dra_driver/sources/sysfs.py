"""Where a PCI device sits, from sysfs: its PCIe root complex and its NUMA node.

An adapter (it reads files the kernel exports); no NVML here. Called by the NVML GPU source
(``dra_driver.sources.nvml``) for every GPU it reports, with the sysfs root as a parameter so
tests point it at a temporary tree. Answers None when the kernel cannot tell, never a guess:
the attribute is then left out of the ResourceSlice.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

SYSFS = Path("/sys")

# The sysfs form of a bus id: domain of at least 4 digits (Intel VMD's are 5), lower case
# (normalize_bus_id in sources.nvml makes it from NVML's).
_BUS_ID = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
# A numa_node file holds one small integer and a newline; more than this is not one.
NUMA_FILE_MAX_BYTES = 16
# The kernel's MAX_NUMNODES is at most 1 << 10; anything above is not a node number.
MAX_NUMA_NODE = 1023


@dataclass(frozen=True, slots=True)
class NumaReading:
    """A device's NUMA node, or None with why (``reason``) when there is none to publish."""

    node: int | None
    reason: str | None = None


def _device_path(bus_id: str, sysfs: Path) -> Path:
    if not _BUS_ID.match(bus_id):
        raise ValueError(f"PCI bus id {bus_id!r} is not of the form 0000:1b:00.0")
    return sysfs / "bus" / "pci" / "devices" / bus_id


def pcie_root(bus_id: str, sysfs: Path = SYSFS) -> str | None:
    """The PCIe root complex (``pci<domain>:<bus>``) above a device, from sysfs; None if unknown."""
    try:
        real = os.path.realpath(_device_path(bus_id, sysfs))
    except (OSError, ValueError):
        return None
    for part in Path(real).parts:
        if part.startswith("pci") and ":" in part:
            return part
    return None


def numa_node(bus_id: str, sysfs: Path = SYSFS) -> NumaReading:
    """The NUMA node of a device from ``<sysfs>/bus/pci/devices/<bus_id>/numa_node`` (at most 16 bytes read).

    -1 (no affinity: one-node machines, some VMs), an unreadable file or anything that is not
    a node number give ``node=None`` and the reason.
    """
    try:
        path = _device_path(bus_id, sysfs) / "numa_node"
    except ValueError as err:
        return NumaReading(None, str(err))
    try:
        with path.open("rb") as f:
            raw = f.read(NUMA_FILE_MAX_BYTES)
    except OSError as err:
        return NumaReading(None, f"{path} is unreadable: {err.strerror or err}")
    text = raw.decode("ascii", errors="replace").strip()
    if len(raw) >= NUMA_FILE_MAX_BYTES or not re.fullmatch(r"-?[0-9]+", text):
        return NumaReading(None, f"{path} holds {text[:NUMA_FILE_MAX_BYTES]!r}, not a NUMA node number")
    value = int(text)
    if value == -1:
        return NumaReading(None, f"{path} is -1: the platform reports no NUMA affinity")
    if not 0 <= value <= MAX_NUMA_NODE:
        return NumaReading(None, f"{path} holds {value}, outside 0..{MAX_NUMA_NODE}")
    return NumaReading(value)
