"""What a node publishes, MIG included: devices in first-fit order, counter sets, and what each name means.

Pure. Called by the kubelet plugin (to publish and to know what an allocated name stands
for), the standalone controller and ``dra-gpu inventory`` (to print the same thing).

Per GPU, by ``--mig`` strategy:

* ``none``: the full GPU. A GPU with MIG mode on is left out (CUDA cannot use it whole).
* ``static``: a GPU with MIG mode on publishes its existing instances (``type: mig`` with their
  MIG ``uuid``); the GPU itself is not published. MIG mode off: the full GPU.
* ``dynamic``: a MIG-capable GPU publishes one device per (profile, placement) plus, when the
  full GPU is usable, the full GPU, all consuming the GPU's counter set ``gpu-<minor>-counters``:
  one ``memory-slice-<i>`` counter per memory slice (value 1; a placement consumes the slices it
  covers) and the engines and multiprocessors the largest profile has (each placement consumes
  its profile's). The full GPU consumes every counter whole. So the scheduler never hands out
  overlapping placements, never the full GPU while a slice is in use (or the reverse), and only
  one ``+me`` instance at a time. An engine or multiprocessor counter that the published
  placements cannot exhaust (no set of them without a memory slice in common takes more than the
  GPU has) is left out of the set and of every consumption (``published_counters``): it refuses
  nothing the memory slices allow, and the scheduler walks every consumed counter of every device
  of each node it filters. Every profile of an H100 keeps ``ofa-engines`` alone (the ``+me``
  instances share one engine); ``1g.10gb,3g.40gb,7g.80gb`` keeps the memory slices alone.
  Hopper and newer toggle MIG mode at prepare, so both the full GPU and its placements are
  published. Ampere never toggles at run time: MIG off publishes the full GPU only, MIG on the
  placements only.

Order (the scheduler takes the first fit in the driver's order): GPUs by minor, so slices pack
onto the lowest GPU before touching the next one and whole GPUs stay free; within a GPU, the
smallest profile first (compute slices, then memory, ``+me`` after its plain twin), so a
request matching several sizes gets the smallest that fits; within a profile, placements from
the highest start down, so small instances fill memory from the top and the placement at 0 —
the only one the 4g and 7g profiles have — stays free longest. The full GPU comes last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import (
    MigCatalog,
    MigInstance,
    MigMode,
    MigProfile,
    MigStrategy,
    Placement,
    can_toggle_mig_mode,
)
from dra_driver.core.mig_profiles import profile_selected, unmatched
from dra_driver.core.schema import CAPACITY_MEMORY, DeviceSpec, gpu_device, gpu_device_name, mig_device
from dra_driver.core.sharing import CAPACITY_COMPUTE_SHARE

GIB = 1 << 30

COUNTER_MULTIPROCESSORS = "multiprocessors"
COUNTER_COPY_ENGINES = "copy-engines"
COUNTER_DECODERS = "decoders"
COUNTER_ENCODERS = "encoders"
COUNTER_JPEG_ENGINES = "jpeg-engines"
COUNTER_OFA_ENGINES = "ofa-engines"
MEMORY_SLICE = "memory-slice-"
"""The prefix of a GPU's memory-slice counters (``memory-slice-0`` ...)."""


@dataclass(frozen=True, slots=True)
class GpuMigState:
    """One GPU with what its MIG backend reports (catalog None: not MIG capable)."""

    gpu: GpuInfo
    catalog: MigCatalog | None = None
    mode: MigMode = field(default_factory=lambda: MigMode(current=False, pending=False))
    instances: tuple[MigInstance, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceTarget:
    """What a published device name stands for on this node."""

    name: str
    gpu: GpuInfo
    profile: MigProfile | None = None
    """None for the full GPU."""
    placement: Placement | None = None
    instance: MigInstance | None = None
    """Static MIG: the instance that already exists. Dynamic MIG: None (carved at prepare)."""
    dynamic: bool = False
    """True when preparing this device carves (or, for a full GPU, may switch MIG mode)."""

    @property
    def is_mig(self) -> bool:
        """True for MIG devices."""
        return self.profile is not None


@dataclass(frozen=True, slots=True)
class Publication:
    """A node's devices (in order), its counter sets, the name → target map, and notes to log."""

    devices: tuple[DeviceSpec, ...]
    counter_sets: tuple[dict[str, Any], ...]
    targets: Mapping[str, DeviceTarget]
    notes: tuple[str, ...] = ()


def counter_set_name(minor: int) -> str:
    """The counter set of one GPU: ``gpu-<minor>-counters``."""
    return f"{gpu_device_name(minor)}-counters"


def _engine_counters(p: MigProfile) -> dict[str, int]:
    return {
        COUNTER_MULTIPROCESSORS: p.multiprocessors,
        COUNTER_COPY_ENGINES: p.copy_engines,
        COUNTER_DECODERS: p.decoders,
        COUNTER_ENCODERS: p.encoders,
        COUNTER_JPEG_ENGINES: p.jpeg_engines,
        COUNTER_OFA_ENGINES: p.ofa_engines,
    }


def gpu_counters(catalog: MigCatalog) -> dict[str, int]:
    """The whole GPU's counters: every memory slice, and the engines the largest profile has."""
    totals: dict[str, int] = {f"{MEMORY_SLICE}{i}": 1 for i in range(catalog.memory_slices)}
    for p in catalog.profiles:
        for k, v in _engine_counters(p).items():
            totals[k] = max(totals.get(k, 0), v)
    return totals


def _most_taken(published: Sequence[tuple[MigProfile, Placement]], counter: str) -> int:
    """The most of ``counter`` that placements of ``published`` with no memory slice in common take together."""
    best = {0: 0}  # the memory slices held (a bit mask) -> the most of the counter taken with them
    for profile, placement in published:
        mask = sum(1 << i for i in placement.slices())
        take = _engine_counters(profile)[counter]
        for held, taken in list(best.items()):  # a snapshot: each placement counted once
            if not held & mask and taken + take > best.get(held | mask, -1):
                best[held | mask] = taken + take
    return max(best.values())


def published_counters(catalog: MigCatalog, published: Sequence[tuple[MigProfile, Placement]]) -> dict[str, int]:
    """The GPU's counter set when ``published`` are its placements: ``gpu_counters`` less what can never bind.

    Every memory slice stays. An engine counter that no set of non-overlapping published
    placements can exhaust refuses nothing the memory slices allow, so it is left out (of the set
    and of every consumption): the same allocations stay possible, and the scheduler, which walks
    every consumed counter of every device of each node it filters, walks fewer.
    """
    totals = gpu_counters(catalog)
    return {k: v for k, v in totals.items() if k.startswith(MEMORY_SLICE) or _most_taken(published, k) > v}


def placement_consumption(profile: MigProfile, placement: Placement) -> dict[str, int]:
    """What carving ``profile`` at ``placement`` takes from the GPU's counters (zeros left out)."""
    used = {f"{MEMORY_SLICE}{i}": 1 for i in placement.slices()}
    used.update({k: v for k, v in _engine_counters(profile).items() if v > 0})
    return used


def _counters_json(values: Mapping[str, int]) -> dict[str, dict[str, str]]:
    return {k: {"value": str(v)} for k, v in sorted(values.items())}


def _consumes(minor: int, values: Mapping[str, int]) -> dict[str, Any]:
    return {"consumesCounters": [{"counterSet": counter_set_name(minor), "counters": _counters_json(values)}]}


def _with_extra(dev: DeviceSpec, extra: dict[str, Any]) -> DeviceSpec:
    return replace(dev, extra={**dev.extra, **extra})


def consumable_gpu_device(gpu: GpuInfo) -> DeviceSpec:
    """A full GPU that several claims share by consuming its capacity (``allowMultipleAllocations``).

    ``memory`` is requested in whole GiB (at least 1Gi); a claim that asks for no memory gets all
    of it (every whole GiB), so sharing only ever happens when claims ask for it. ``computeShare``
    (0-100, the percentage of SMs an MPS client may use) defaults to 0: no cap, no reservation.
    """
    dev = gpu_device(gpu)
    whole = (gpu.memory_bytes // GIB) * GIB
    if whole < GIB:
        raise ValueError(f"{gpu_device_name(gpu.minor)} has less than 1Gi of memory and cannot be shared by capacity")
    return replace(
        dev,
        capacity={**dev.capacity, CAPACITY_COMPUTE_SHARE: "100"},
        request_policies={
            CAPACITY_MEMORY: {"default": f"{whole // GIB}Gi", "validRange": {"min": "1Gi", "step": "1Gi"}},
            CAPACITY_COMPUTE_SHARE: {"default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}},
        },
        extra={**dev.extra, "allowMultipleAllocations": True},
    )


def placement_order(catalog: MigCatalog) -> list[tuple[MigProfile, Placement]]:
    """A GPU's placements in publication order (see the module docstring for the rule)."""
    profiles = sorted(catalog.profiles, key=lambda p: (p.slices, p.memory_mib, p.media_extensions, p.profile_id))
    return [(p, pl) for p in profiles for pl in sorted(p.placements, key=lambda pl: -pl.start)]


def _validate_catalog(gpu: GpuInfo, catalog: MigCatalog) -> None:
    for p in catalog.profiles:
        for pl in p.placements:
            if pl.start < 0 or pl.size <= 0 or pl.start + pl.size > catalog.memory_slices:
                raise ValueError(
                    f"{gpu_device_name(gpu.minor)}: MIG profile {p.name} placement {pl.start}:{pl.size} "
                    f"is outside the GPU's {catalog.memory_slices} memory slices"
                )


def _dynamic(
    state: GpuMigState,
    catalog: MigCatalog,
    out: list[tuple[DeviceSpec, DeviceTarget]],
    sets: list[dict[str, Any]],
    *,
    profiles: Sequence[str],
    notes: list[str],
) -> None:
    gpu = state.gpu
    _validate_catalog(gpu, catalog)
    toggles = can_toggle_mig_mode(gpu)
    full_usable = toggles or not state.mode.current
    slices_usable = toggles or state.mode.current
    order = [(p, pl) for p, pl in placement_order(catalog) if profile_selected(p, profiles)]
    counters = published_counters(catalog, order if slices_usable else [])
    sets.append({"name": counter_set_name(gpu.minor), "counters": _counters_json(counters)})
    if slices_usable and profiles and not order:
        known = ", ".join(p.name for p in catalog.profiles)
        what = "only the full GPU is published" if full_usable else "nothing of this GPU is published"
        notes.append(f"{gpu_device_name(gpu.minor)}: no MIG profile of {gpu.product_name} ({known}) is in --mig-profiles: {what}")
    if slices_usable:
        for profile, placement in order:
            dev = _with_extra(
                mig_device(gpu, profile, placement, None),
                _consumes(gpu.minor, {k: v for k, v in placement_consumption(profile, placement).items() if k in counters}),
            )
            out.append((dev, DeviceTarget(dev.name, gpu, profile, placement, None, dynamic=True)))
    if full_usable:
        dev = _with_extra(gpu_device(gpu), _consumes(gpu.minor, counters))
        out.append((dev, DeviceTarget(dev.name, gpu, dynamic=True)))


def _static(state: GpuMigState, catalog: MigCatalog, out: list[tuple[DeviceSpec, DeviceTarget]], notes: list[str]) -> None:
    gpu = state.gpu
    name = gpu_device_name(gpu.minor)
    done = [i for i in state.instances if i.uuid is not None]
    if len(done) < len(state.instances):
        notes.append(f"{name}: {len(state.instances) - len(done)} GPU instance(s) without a compute instance are not published")
    if not done:
        notes.append(f"{name}: MIG mode is on but no MIG instance exists: nothing of this GPU is published")
    for inst in sorted(done, key=lambda i: (-i.placement.start, i.gi_id)):
        try:
            profile = catalog.by_id(inst.profile_id)
        except KeyError:
            notes.append(f"{name}: MIG instance {inst.uuid} has unknown profile id {inst.profile_id}: not published")
            continue
        dev = mig_device(gpu, profile, inst.placement, inst.uuid)
        out.append((dev, DeviceTarget(dev.name, gpu, profile, inst.placement, inst, dynamic=False)))


def publish_node(
    states: Sequence[GpuMigState], strategy: MigStrategy, *, consumable: bool = False, mig_profiles: Sequence[str] = ()
) -> Publication:
    """Everything a node publishes under ``strategy``; raises ValueError on inconsistent input.

    ``consumable`` publishes full GPUs for sharing by capacity (see ``consumable_gpu_device``);
    it cannot be combined with dynamic MIG, whose full GPUs consume partition counters.
    ``mig_profiles`` (``dra_driver.core.mig_profiles``) limits dynamic MIG to those profiles (empty: all).
    """
    if consumable and strategy is MigStrategy.DYNAMIC:
        raise ValueError("sharing by consumable capacity cannot be combined with dynamic MIG (choose one)")
    seen_minor: set[int] = set()
    seen_uuid: set[str] = set()
    for s in states:
        if s.gpu.minor in seen_minor:
            raise ValueError(f"two GPUs report minor number {s.gpu.minor}")
        if s.gpu.uuid in seen_uuid:
            raise ValueError(f"two GPUs report uuid {s.gpu.uuid}")
        seen_minor.add(s.gpu.minor)
        seen_uuid.add(s.gpu.uuid)
    out: list[tuple[DeviceSpec, DeviceTarget]] = []
    sets: list[dict[str, Any]] = []
    notes: list[str] = []
    for state in sorted(states, key=lambda s: s.gpu.minor):
        gpu = state.gpu
        if strategy is MigStrategy.DYNAMIC and state.catalog is not None:
            _dynamic(state, state.catalog, out, sets, profiles=mig_profiles, notes=notes)
        elif strategy is MigStrategy.STATIC and state.catalog is not None and state.mode.current:
            _static(state, state.catalog, out, notes)
        elif state.mode.current:
            notes.append(f"{gpu_device_name(gpu.minor)}: MIG mode is on and --mig is {strategy.value}: not published")
        else:
            dev = consumable_gpu_device(gpu) if consumable else gpu_device(gpu)
            out.append((dev, DeviceTarget(dev.name, gpu)))
    if strategy is MigStrategy.DYNAMIC and mig_profiles:
        catalogs = [p for s in states if s.catalog is not None for p in s.catalog.profiles]
        for entry in unmatched(mig_profiles, catalogs):
            notes.append(f"--mig-profiles {entry}: no MIG-capable GPU of this node has such a profile")
    return Publication(
        devices=tuple(d for d, _ in out),
        counter_sets=tuple(sets),
        targets={t.name: t for _, t in out},
        notes=tuple(notes),
    )


def full_gpu_states(gpus: Sequence[GpuInfo]) -> list[GpuMigState]:
    """States for GPUs whose MIG side is not looked at (``--mig none`` needs no backend)."""
    return [GpuMigState(gpu=g, mode=MigMode(current=g.mig_enabled, pending=g.mig_enabled)) for g in gpus]
