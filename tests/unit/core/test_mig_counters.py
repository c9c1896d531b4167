"""Dynamic MIG's counter sets hold only the counters that can bind (``published_counters``), and allow
exactly the allocations the whole set (``gpu_counters``) allows: for every catalog the fake GPUs
have, every profile selection tried, and every set of the published placements."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pytest

from dra_driver.core.mig import MigCatalog, MigProfile, MigStrategy, Placement
from dra_driver.core.mig_profiles import profile_selected
from dra_driver.core.mig_publish import (
    MEMORY_SLICE,
    GpuMigState,
    gpu_counters,
    placement_consumption,
    placement_order,
    publish_node,
    published_counters,
)
from dra_driver.mig_backends.select import make_mig_backend
from dra_driver.sources.fake import PROFILES, FakeGpuSource

SELECTIONS: tuple[tuple[str, ...], ...] = (
    (),
    ("1g", "3g", "7g"),
    ("1g.10gb", "3g.40gb", "7g.80gb"),
    ("1g.5gb", "1g.5gb+me", "4g"),
    ("1g.10gb+me", "2g"),
)


def _catalogs() -> list[tuple[str, MigCatalog]]:
    out = []
    for name in sorted(PROFILES):
        gpus = FakeGpuSource(name, "node").gpus()
        catalog = make_mig_backend(fake=True, gpus=gpus).catalog(gpus[0])
        if catalog is not None:
            out.append((name, catalog))
    return out


CATALOGS = _catalogs()


def _disjoint_sets(placed: Sequence[tuple[MigProfile, Placement]]) -> Iterator[list[tuple[MigProfile, Placement]]]:
    """Every set of ``placed`` with no memory slice in common (any other set fits under neither)."""

    def walk(i: int, held: int, chosen: list[tuple[MigProfile, Placement]]) -> Iterator[list[tuple[MigProfile, Placement]]]:
        if i == len(placed):
            yield chosen
            return
        yield from walk(i + 1, held, chosen)
        mask = sum(1 << s for s in placed[i][1].slices())
        if not held & mask:
            yield from walk(i + 1, held | mask, [*chosen, placed[i]])

    yield from walk(0, 0, [])


def _fits(chosen: Sequence[tuple[MigProfile, Placement]], totals: Mapping[str, int]) -> bool:
    used: dict[str, int] = {}
    for p, pl in chosen:
        for k, v in placement_consumption(p, pl).items():
            if k in totals:
                used[k] = used.get(k, 0) + v
    return all(v <= totals[k] for k, v in used.items())


@pytest.mark.parametrize("selection", SELECTIONS, ids=lambda s: ",".join(s) or "all")
@pytest.mark.parametrize(("product", "catalog"), CATALOGS, ids=[n for n, _ in CATALOGS])
def test_published_counters_allow_exactly_what_every_counter_allows(
    product: str, catalog: MigCatalog, selection: tuple[str, ...]
) -> None:
    placed = [(p, pl) for p, pl in placement_order(catalog) if profile_selected(p, selection)]
    every, kept = gpu_counters(catalog), published_counters(catalog, placed)
    assert {k for k in every if k.startswith(MEMORY_SLICE)} <= kept.keys() <= every.keys()
    assert all(kept[k] == every[k] for k in kept)
    sets = 0
    for chosen in _disjoint_sets(placed):
        assert _fits(chosen, every) == _fits(chosen, kept), (product, selection, chosen)
        sets += 1
    assert sets >= 1 + len(placed)


def _h100_states() -> list[GpuMigState]:
    gpus = FakeGpuSource("h100x8", "node").gpus()[:1]
    backend = make_mig_backend(fake=True, gpus=gpus)
    return [
        GpuMigState(gpu=g, catalog=backend.catalog(g), mode=backend.mode(g), instances=tuple(backend.instances(g))) for g in gpus
    ]


def test_recommended_profiles_on_an_h100_consume_memory_slices_only() -> None:
    pub = publish_node(_h100_states(), MigStrategy.DYNAMIC, mig_profiles=("1g.10gb", "3g.40gb", "7g.80gb"))
    (counter_set,) = pub.counter_sets
    assert sorted(counter_set["counters"]) == [f"{MEMORY_SLICE}{i}" for i in range(8)]
    by_name = {d.name: d.extra["consumesCounters"][0]["counters"] for d in pub.devices}
    assert by_name["gpu-0-mig-1g10gb-6"] == {f"{MEMORY_SLICE}6": {"value": "1"}}
    assert by_name["gpu-0"] == counter_set["counters"]  # the full GPU still takes everything


def test_every_profile_on_an_h100_keeps_the_one_optical_flow_engine_the_me_instances_share() -> None:
    pub = publish_node(_h100_states(), MigStrategy.DYNAMIC)
    (counter_set,) = pub.counter_sets
    engines = sorted(k for k in counter_set["counters"] if not k.startswith(MEMORY_SLICE))
    assert engines == ["ofa-engines"]
    me = [d for d in pub.devices if "-me-" in d.name]
    assert me and all("ofa-engines" in d.extra["consumesCounters"][0]["counters"] for d in me)
