"""Splitting a pool's devices and counter sets into ResourceSlice contents, within API limits.

Pure. Called by the ResourceSlice publisher (``dra_driver.appkit.publisher``) and by
``dra-gpu inventory``. Names, owners, generation and ``resourceSliceCount`` are added by
``slice_objects`` so the CLI prints exactly what the publisher would write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dra_driver.core.schema import MAX_ATTRS_AND_CAPACITIES, DeviceSpec

MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_WITH_COUNTERS_OR_TAINTS = 64
MAX_COUNTER_SETS_PER_SLICE = 8
MAX_COUNTERS_PER_SET = 32

API_VERSION = "resource.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class SliceContent:
    """What one slice carries besides pool bookkeeping: devices or counter sets, never both."""

    devices: tuple[dict[str, Any], ...] = ()
    shared_counters: tuple[dict[str, Any], ...] = ()

    def spec_fields(self) -> dict[str, Any]:
        """The ``spec`` fields of this slice's payload, in API JSON."""
        if self.shared_counters:
            return {"sharedCounters": list(self.shared_counters)}
        return {"devices": list(self.devices)}


def split_pool(devices: list[DeviceSpec], counter_sets: list[dict[str, Any]] | None = None) -> list[SliceContent]:
    """Split a pool into slice contents: counter sets first (own slices), then devices in order.

    Device order is kept, because the scheduler's first-fit walk follows it. A chunk of devices
    closes at 128 devices, or at 64 once it holds a device with counters or taints. An empty
    pool is one empty slice, so the pool still exists (and stays complete) with no devices. A device
    with more than 32 attributes and capacities together is refused (the API server would reject it).
    """
    counter_sets = counter_sets or []
    out: list[SliceContent] = []
    names: set[str] = set()
    for cs in counter_sets:
        name = cs.get("name", "")
        if name in names:
            raise ValueError(f"counter set {name!r} is defined twice in the pool")
        names.add(name)
        if len(cs.get("counters", {})) > MAX_COUNTERS_PER_SET:
            raise ValueError(f"counter set {name!r} has more than {MAX_COUNTERS_PER_SET} counters")
    for i in range(0, len(counter_sets), MAX_COUNTER_SETS_PER_SLICE):
        out.append(SliceContent(shared_counters=tuple(counter_sets[i : i + MAX_COUNTER_SETS_PER_SLICE])))

    seen: set[str] = set()
    chunk: list[DeviceSpec] = []
    for dev in devices:
        if dev.name in seen:
            raise ValueError(f"device {dev.name!r} is defined twice in the pool")
        seen.add(dev.name)
        entries = len(dev.attributes) + len(dev.capacity)
        if entries > MAX_ATTRS_AND_CAPACITIES:
            raise ValueError(
                f"device {dev.name!r} has {entries} attributes and capacities; the API allows {MAX_ATTRS_AND_CAPACITIES}"
            )
        limited = any(d.uses_counters_or_taints for d in chunk) or dev.uses_counters_or_taints
        limit = MAX_DEVICES_PER_SLICE_WITH_COUNTERS_OR_TAINTS if limited else MAX_DEVICES_PER_SLICE
        if len(chunk) >= limit:
            out.append(SliceContent(devices=tuple(d.to_api() for d in chunk)))
            chunk = []
        chunk.append(dev)
    if chunk or not out:
        out.append(SliceContent(devices=tuple(d.to_api() for d in chunk)))
    return out


def slice_objects(
    *,
    driver: str,
    node_name: str,
    contents: list[SliceContent],
    generation: int = 1,
    node_uid: str | None = None,
) -> list[dict[str, Any]]:
    """Full ResourceSlice objects for a node-local pool (pool name = node name), as the API takes them.

    Names are deterministic (``<node>-<driver>-<index:03d>``), so the printed inventory equals what
    the publisher creates. The owner reference to the Node is added when its UID is known.
    """
    objs: list[dict[str, Any]] = []
    for index, content in enumerate(contents):
        metadata: dict[str, Any] = {"name": slice_name(node_name, driver, index)}
        if node_uid:
            metadata["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}
            ]
        spec: dict[str, Any] = {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": len(contents)},
        }
        spec.update(content.spec_fields())
        objs.append({"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": metadata, "spec": spec})
    return objs


def slice_name(node_name: str, driver: str, index: int) -> str:
    """Deterministic slice name ``<node>-<driver>-<index>``, shortened to the 253-char name limit.

    The index is zero-padded to three digits: the scheduler walks a pool's slices sorted by
    name, so names must sort in index order for the driver's device order to hold (``-10``
    would otherwise come before ``-2``).
    """
    if not 0 <= index < 1000:
        raise ValueError(f"slice index {index} is out of range (a node never needs 1000 slices)")
    base = f"{node_name}-{driver}"
    suffix = f"-{index:03d}"
    return base[: 253 - len(suffix)] + suffix
