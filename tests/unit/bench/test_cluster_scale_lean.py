"""bench.cluster_scale's layouts: the recommended profiles, and ``lean`` (counters that never bind left out)
allowing exactly the allocations the full counters allow, per GPU, for every set of its devices."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from bench.cluster_scale.fleet import LAYOUTS, publication
from bench.cluster_scale.lean import MEMORY, lean
from bench.cluster_scale.report import Scenario, table
from dra_driver.core.mig_publish import Publication


def _uses(pub: Publication, counter_set: str) -> list[tuple[str, dict[str, int]]]:
    out = []
    for d in pub.devices:
        for c in d.extra.get("consumesCounters") or []:
            if c["counterSet"] == counter_set:
                out.append((d.name, {k: int(v["value"]) for k, v in c["counters"].items()}))
    return out


def _totals(pub: Publication, counter_set: str) -> dict[str, int]:
    cs = next(c for c in pub.counter_sets if c["name"] == counter_set)
    return {k: int(v["value"]) for k, v in cs["counters"].items()}


def _fits(uses: Sequence[dict[str, int]], totals: dict[str, int]) -> bool:
    taken: dict[str, int] = {}
    for u in uses:
        for k, v in u.items():
            taken[k] = taken.get(k, 0) + v
    return all(v <= totals[k] for k, v in taken.items())


def _memory_disjoint_sets(uses: list[tuple[str, dict[str, int]]]) -> Iterator[tuple[str, ...]]:
    """Every set of devices whose memory slices do not overlap (any other set fits neither way)."""

    def walk(i: int, held: frozenset[str], names: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        if i == len(uses):
            yield names
            return
        yield from walk(i + 1, held, names)
        name, use = uses[i]
        mine = frozenset(k for k in use if k.startswith(MEMORY))
        if not held & mine:
            yield from walk(i + 1, held | mine, (*names, name))

    yield from walk(0, frozenset(), ())


@pytest.mark.parametrize("layout", ["mig-rec", "mig-families", "mig"])
def test_lean_allows_exactly_the_same_allocations(layout: str) -> None:
    full = publication("node-0000", layout)
    slim = lean(full)
    assert [d.name for d in slim.devices] == [d.name for d in full.devices]
    for cs in full.counter_sets:
        name = cs["name"]
        before, after = dict(_uses(full, name)), dict(_uses(slim, name))
        totals_before, totals_after = _totals(full, name), _totals(slim, name)
        checked = 0
        for names in _memory_disjoint_sets(_uses(full, name)):
            assert _fits([before[n] for n in names], totals_before) == _fits([after[n] for n in names], totals_after), names
            checked += 1
        assert checked > 100


def test_lean_recommended_keeps_only_memory_slices() -> None:
    slim = lean(publication("node-0000", "mig-rec"))
    for cs in slim.counter_sets:
        assert all(k.startswith(MEMORY) for k in cs["counters"])
    one = next(d for d in slim.devices if d.name == "gpu-0-mig-1g10gb-6")
    assert one.extra["consumesCounters"][0]["counters"] == {"memory-slice-6": {"value": "1"}}


def test_lean_keeps_a_counter_that_binds() -> None:
    # every profile: the +me placements share the GPU's one optical-flow engine
    slim = lean(publication("node-0000", "mig"))
    assert "ofa-engines" in _totals(slim, "gpu-0-counters")


def test_recommended_layout_publishes_three_profiles_every_placement() -> None:
    assert LAYOUTS["mig-rec"][1] == ("1g.10gb", "3g.40gb", "7g.80gb")
    pub = publication("node-0000", "mig-rec")
    gpu0 = [d.name for d in pub.devices if d.name.startswith("gpu-0-")]
    assert len(gpu0) == 7 + 2 + 1  # 1g.10gb x7, 3g.40gb x2, 7g.80gb x1
    assert len(pub.devices) == 8 * 11  # and the 8 full GPUs


def test_table_ratio_against_full_at_same_node_count() -> None:
    full, rec = Scenario("full", 100, bound=10), Scenario("mig-rec", 100, bound=10)
    full.cpu_sched, rec.cpu_sched = {"kube-scheduler": 0.2}, {"kube-scheduler": 0.5}
    row = table([full, rec]).splitlines()[3].split()
    assert row[0] == "mig-rec" and row[7] == "50" and row[8] == "2.5"
