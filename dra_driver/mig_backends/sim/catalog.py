"""The MIG profile data of real GPU products, loaded from ``profiles/<slug>.json``.

One JSON file per product holds what NVML reports for it: the GPU-instance profiles (NVML profile
index, the profile id ``nvidia-smi`` prints, resources, possible placements) and the compute-instance
profiles offered per GI size. Each file names its sources and the figures that could not be
confirmed. GI profiles are parsed once, straight into the core's ``MigProfile``. Read by the MIG
simulator (``dra_driver.mig_backends.sim.simulator``) and by tests that compare a backend's catalog
with the data.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.core.mig import MigCatalog, MigProfile, Placement

PROFILE_DIR = Path(__file__).parent / "profiles"

# NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1: offered next to the plain 1-slice CI, never the right choice.
CI_PROFILE_1_SLICE_REV1 = 7


@dataclass(frozen=True, slots=True)
class CiProfileData:
    """A compute-instance profile offered inside a GI of a given size."""

    index: int
    """The NVML CI profile index (``NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE`` = 0, ...)."""
    profile_id: int
    slices: int
    instance_count: int
    creatable: bool
    """False for profiles the driver reports but refuses to create (modelled driver bug)."""


@dataclass(frozen=True, slots=True)
class ProductData:
    """Everything the simulator knows about one GPU product's MIG support."""

    product: str
    architecture: str
    source: str
    unconfirmed: tuple[str, ...]
    memory_slices: int
    gi_profiles: tuple[MigProfile, ...]
    """In the data file's order, each with its NVML profile index."""
    ci_profiles: dict[int, tuple[CiProfileData, ...]]
    """Keyed by the slice count of the GI they are offered in."""

    def gi_by_id(self, profile_id: int) -> MigProfile | None:
        """The GI profile with this profile id, if the product has one."""
        return next((p for p in self.gi_profiles if p.profile_id == profile_id), None)

    def gi_by_index(self, index: int) -> MigProfile | None:
        """The GI profile at this NVML profile index, if the product has one."""
        return next((p for p in self.gi_profiles if p.index == index), None)

    def gi_by_name(self, name: str) -> MigProfile | None:
        """The GI profile named ``name`` (``1g.10gb``), if the product has one."""
        return next((p for p in self.gi_profiles if p.name == name), None)

    @property
    def full(self) -> MigProfile:
        """The largest profile (the whole GPU): its resources are the GPU's engine budget."""
        return max(self.gi_profiles, key=lambda p: (p.slices, p.memory_mib))

    @property
    def sm_per_slice(self) -> int:
        """SMs of one compute slice (the plain 1-slice profile's SM count)."""
        return min(p.multiprocessors for p in self.gi_profiles if p.slices == 1)

    def ci_profiles_for(self, gi: MigProfile) -> tuple[CiProfileData, ...]:
        """The CI profiles offered inside a GI of profile ``gi``."""
        return self.ci_profiles.get(gi.slices, ())

    def ci_multiprocessors(self, gi: MigProfile, ci: CiProfileData) -> int:
        """SMs of a CI: the whole GI's for the full-size CI, a slice's worth per slice otherwise."""
        return gi.multiprocessors if ci.slices == gi.slices else ci.slices * self.sm_per_slice

    def mig_catalog(self) -> MigCatalog:
        """The core model's catalog, profiles in NVML profile-index order (the order NVML enumerates)."""
        return MigCatalog(memory_slices=self.memory_slices, profiles=tuple(sorted(self.gi_profiles, key=lambda p: p.index)))


def _gi(raw: dict[str, Any]) -> MigProfile:
    return MigProfile(
        name=str(raw["name"]),
        profile_id=int(raw["id"]),
        slices=int(raw["sliceCount"]),
        instance_count=int(raw["instanceCount"]),
        memory_mib=int(raw["memorySizeMB"]),
        multiprocessors=int(raw["multiprocessorCount"]),
        copy_engines=int(raw["copyEngineCount"]),
        decoders=int(raw["decoderCount"]),
        encoders=int(raw["encoderCount"]),
        jpeg_engines=int(raw["jpegCount"]),
        ofa_engines=int(raw["ofaCount"]),
        placements=tuple(Placement(int(p["start"]), int(p["size"])) for p in raw["placements"]),
        index=int(raw["index"]),
    )


def parse_product(raw: dict[str, Any]) -> ProductData:
    """A product from its JSON document; ValueError when it is inconsistent."""
    gis = tuple(_gi(g) for g in raw["gpuInstanceProfiles"])
    cis = {
        int(group["giSlices"]): tuple(
            CiProfileData(
                index=int(c["index"]),
                profile_id=int(c["id"]),
                slices=int(c["sliceCount"]),
                instance_count=int(c["instanceCount"]),
                creatable=bool(c.get("creatable", True)),
            )
            for c in group["profiles"]
        )
        for group in raw["computeInstanceProfiles"]
    }
    data = ProductData(
        product=str(raw["product"]),
        architecture=str(raw["architecture"]),
        source=str(raw["source"]),
        unconfirmed=tuple(str(u) for u in raw.get("unconfirmed", ())),
        memory_slices=int(raw["memorySlices"]),
        gi_profiles=gis,
        ci_profiles=cis,
    )
    for p in gis:
        if not any(c.slices == p.slices and c.creatable for c in data.ci_profiles_for(p)):
            raise ValueError(f"{data.product}: no full-size compute instance profile for {p.name}")
        for pl in p.placements:
            if pl.start + pl.size > data.memory_slices:
                raise ValueError(f"{data.product}: placement {pl} of {p.name} is off the GPU")
    if len({p.profile_id for p in gis}) != len(gis) or len({p.index for p in gis}) != len(gis):
        raise ValueError(f"{data.product}: duplicate profile ids or indices")
    return data


@functools.cache
def products() -> dict[str, ProductData]:
    """Every product with a data file, by product name (``NVIDIA H100 80GB HBM3``)."""
    out: dict[str, ProductData] = {}
    for path in sorted(PROFILE_DIR.glob("*.json")):
        data = parse_product(json.loads(path.read_text()))
        out[data.product] = data
    return out


def product_data(product_name: str) -> ProductData | None:
    """The MIG data of a product, None when there is no data file for it."""
    return products().get(product_name)
