"""docs/reference/attributes.md: every attribute and capacity a device is published with, and what it means.

Called by ``scripts/gen_reference.py attributes``. The names, types and which devices carry them
are what the product publishes: every fake GPU profile (``dra_driver.sources.fake``) goes through
``dra_driver.core.mig_publish.publish_node`` under each MIG strategy and with sharing by capacity,
static MIG with one existing instance per profile (the simulator's MIG catalog), and every device
of every publication is looked at. The meanings come from ``dra_driver.core.attribute_docs``; a
published name without one, or one naming nothing published, is a ``ReferenceError``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from dra_driver.core.attribute_docs import ATTRIBUTE_MEANINGS, CAPACITY_MEANINGS
from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import MigCatalog, MigInstance, MigMode, MigStrategy
from dra_driver.core.mig_publish import GpuMigState, publish_node
from dra_driver.core.schema import STANDARD_DOMAIN, DeviceSpec
from dra_driver.mig_backends.sim.catalog import product_data
from dra_driver.sources.fake import PROFILES, FakeGpuSource
from refdocs.markdown import cell, check_described, code, header, table

DEVICE_KINDS = ("GPU", "GPU shared by capacity", "MIG (static)", "MIG (dynamic)")
"""The kinds of device a node publishes, in the order the page names them."""


@dataclass(slots=True)
class Seen:
    """One attribute or capacity as published: its value types, the kinds of device that had it, an example."""

    types: set[str] = field(default_factory=set)
    kinds: set[str] = field(default_factory=set)
    example: str = ""


def _static_instances(gpu: GpuInfo, catalog: MigCatalog) -> tuple[MigInstance, ...]:
    return tuple(
        MigInstance(gpu.uuid, p.profile_id, p.name, p.placements[0], gi_id=i, ci_id=0, uuid=f"MIG-{i:08x}-doc")
        for i, p in enumerate(catalog.profiles)
        if p.placements
    )


def _publications(gpu: GpuInfo) -> Iterator[tuple[str, tuple[DeviceSpec, ...]]]:
    """(kind of device, the devices) for one GPU under every way the node can publish it."""
    off = MigMode(current=False, pending=False)
    yield "GPU", publish_node([GpuMigState(gpu, mode=off)], MigStrategy.NONE).devices
    yield "GPU shared by capacity", publish_node([GpuMigState(gpu, mode=off)], MigStrategy.NONE, consumable=True).devices
    data = product_data(gpu.product_name)
    if data is None or not gpu.mig_capable:
        return
    catalog = data.mig_catalog()
    dynamic = publish_node([GpuMigState(gpu, catalog, off)], MigStrategy.DYNAMIC).devices
    yield "MIG (dynamic)", tuple(d for d in dynamic if d.attributes["type"].value == "mig")
    on = MigMode(current=True, pending=True)
    static = GpuMigState(gpu, catalog, on, _static_instances(gpu, catalog))
    yield "MIG (static)", publish_node([static], MigStrategy.STATIC).devices


def observe() -> tuple[dict[str, Seen], dict[str, Seen]]:
    """Every attribute and capacity published for the fake GPU profiles, by name."""
    attrs: dict[str, Seen] = {}
    caps: dict[str, Seen] = {}
    for profile in sorted(PROFILES):
        gpu = FakeGpuSource(profile, "node-a").gpus()[0]
        for kind, devices in _publications(gpu):
            for dev in devices:
                for name, attr in dev.attributes.items():
                    seen = attrs.setdefault(name, Seen())
                    seen.types.add(attr.kind)
                    seen.kinds.add(kind)
                    value = str(attr.value).lower() if attr.kind == "bool" else str(attr.value)
                    seen.example = seen.example or value
                for name, value in dev.capacity.items():
                    seen = caps.setdefault(name, Seen())
                    seen.types.add("quantity")
                    seen.kinds.add(kind)
                    seen.example = seen.example or value
    return attrs, caps


def _carried_by(kinds: set[str]) -> str:
    if kinds == set(DEVICE_KINDS):
        return "every device"
    return ", ".join(k for k in DEVICE_KINDS if k in kinds)


def _rows(seen: Mapping[str, Seen], meanings: Mapping[str, str]) -> list[tuple[str, str, str, str, str]]:
    order = sorted(seen, key=lambda n: (n.startswith(STANDARD_DOMAIN), n.lower()))
    return [
        (code(n), " or ".join(sorted(seen[n].types)), _carried_by(seen[n].kinds), code(seen[n].example), cell(meanings[n]))
        for n in order
    ]


def render() -> str:
    """The page."""
    attrs, caps = observe()
    table_path = "dra_driver/core/attribute_docs.py"
    check_described(attrs, ATTRIBUTE_MEANINGS, table_path=table_path, what="published attributes", done="publishes")
    check_described(caps, CAPACITY_MEANINGS, table_path=table_path, what="published capacities", done="publishes")
    intro = (
        "What every device of a node's ResourceSlices carries, as CEL selectors see it: "
        '`device.attributes["<driver name>"].<name>` (the chart\'s `driverName`, `gpu.dra-gpu.dev` by default), '
        f'`device.attributes["{STANDARD_DOMAIN}"].<name>` for the standard ones written with their domain below, '
        '`device.capacity["<driver name>"].<name>`. The names and types follow NVIDIA\'s DRA driver, so its '
        "selectors work after changing the domain. Examples are from the fake GPU profiles "
        "(`--fake-gpus`). Devices: a GPU (`--mig none`, or MIG off), a GPU shared by capacity "
        "(`--sharing consumable`), an existing MIG device (`--mig static`), a MIG placement carved at "
        "prepare (`--mig dynamic`)."
    )
    columns = ("Name", "Type", "Published on", "Example", "Meaning")
    return (
        header("Device attributes and capacities", "attributes", intro)
        + f"\n## Attributes\n\n{table(columns, _rows(attrs, ATTRIBUTE_MEANINGS))}"
        + '\n## Capacities\n\nQuantities, compared with `.compareTo(quantity("40Gi"))` in CEL.\n\n'
        + table(columns, _rows(caps, CAPACITY_MEANINGS))
    )
