"""Publication rules for MIG: what each strategy publishes, counters, first-fit order, limits."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import (
    MigCatalog,
    MigInstance,
    MigMode,
    MigProfile,
    MigStrategy,
    Placement,
    mig_device_name,
    parse_mig_device_name,
    profile_slug,
)
from dra_driver.core.mig_publish import (
    GpuMigState,
    counter_set_name,
    gpu_counters,
    placement_consumption,
    placement_order,
    publish_node,
)
from dra_driver.core.slices import split_pool
from dra_driver.sources.fake import FakeGpuSource


def _p(
    name: str, pid: int, slices: int, mem: int, sms: int, dec: int, jpeg: int, ofa: int, starts: list[int], size: int
) -> MigProfile:
    return MigProfile(
        name=name,
        profile_id=pid,
        slices=slices,
        instance_count=len(starts) if not name.endswith("+me") else 1,
        memory_mib=mem,
        multiprocessors=sms,
        copy_engines=slices,
        decoders=dec,
        encoders=0,
        jpeg_engines=jpeg,
        ofa_engines=ofa,
        placements=tuple(Placement(s, size) for s in starts),
    )


# A100-SXM4-40GB as the MIG user guide lists it (hand-written here so the rules are tested
# independently of the simulator's data files).
A100 = MigCatalog(
    memory_slices=8,
    profiles=(
        _p("1g.5gb", 19, 1, 4864, 14, 0, 0, 0, list(range(7)), 1),
        _p("1g.5gb+me", 20, 1, 4864, 14, 1, 1, 1, list(range(7)), 1),
        _p("1g.10gb", 15, 1, 9856, 14, 1, 0, 0, [0, 2, 4, 6], 2),
        _p("2g.10gb", 14, 2, 9856, 28, 1, 0, 0, [0, 2, 4], 2),
        _p("3g.20gb", 9, 3, 19968, 42, 2, 0, 0, [0, 4], 4),
        _p("4g.20gb", 5, 4, 19968, 56, 2, 0, 0, [0], 4),
        _p("7g.40gb", 0, 7, 40192, 98, 5, 1, 1, [0], 8),
    ),
)


def gpus(profile: str = "h100x8") -> list[GpuInfo]:
    return FakeGpuSource(profile, "node-a").gpus()


def states(gs: list[GpuInfo], mode_on: bool = False) -> list[GpuMigState]:
    return [GpuMigState(gpu=g, catalog=A100, mode=MigMode(mode_on, mode_on)) for g in gs]


def test_profile_slugs_and_device_names_round_trip() -> None:
    assert profile_slug("1g.10gb+me") == "1g10gb-me"
    name = mig_device_name(3, "1g.10gb+me", 6)
    assert name == "gpu-3-mig-1g10gb-me-6"
    parsed = parse_mig_device_name(name)
    assert parsed is not None and (parsed.minor, parsed.slug, parsed.start) == (3, "1g10gb-me", 6)
    assert parse_mig_device_name("gpu-3") is None
    assert parse_mig_device_name("gpu-03-mig-1g5gb-0") is None


def test_dynamic_hopper_publishes_every_placement_and_the_full_gpu_sharing_one_counter_set() -> None:
    pub = publish_node(states(gpus()[:1]), MigStrategy.DYNAMIC)
    names = [d.name for d in pub.devices]
    assert len(names) == 7 + 7 + 4 + 3 + 2 + 1 + 1 + 1  # every placement, then the full GPU
    assert names[-1] == "gpu-0"
    assert [cs["name"] for cs in pub.counter_sets] == [counter_set_name(0)]
    for dev in pub.devices:
        uses = dev.extra["consumesCounters"]
        assert [u["counterSet"] for u in uses] == ["gpu-0-counters"]
    full = pub.devices[-1].extra["consumesCounters"][0]["counters"]
    assert full == pub.counter_sets[0]["counters"]  # the full GPU takes everything


def test_dynamic_counters_make_overlapping_placements_and_two_media_extensions_exclusive() -> None:
    total = gpu_counters(A100)

    def fits(chosen: list[tuple[MigProfile, Placement]]) -> bool:
        used: dict[str, int] = {}
        for p, pl in chosen:
            for k, v in placement_consumption(p, pl).items():
                used[k] = used.get(k, 0) + v
        return all(used[k] <= total[k] for k in used)

    every = placement_order(A100)
    for a, b in itertools.combinations(every, 2):
        overlap = a[1].overlaps(b[1])
        both_me = a[0].media_extensions and b[0].media_extensions
        assert fits([a, b]) == (not overlap and not both_me), (a, b)
    seven = [(p, pl) for p, pl in every if p.name == "1g.5gb"]
    assert fits(seven)
    assert fits([(A100.by_id(5), Placement(0, 4)), (A100.by_id(9), Placement(4, 4))])  # 4g + 3g


def test_first_fit_order_prefers_small_profiles_and_high_placements() -> None:
    order = [(p.name, pl.start) for p, pl in placement_order(A100)]
    assert order[:7] == [("1g.5gb", s) for s in (6, 5, 4, 3, 2, 1, 0)]
    assert order[7] == ("1g.5gb+me", 6)
    assert order.index(("1g.10gb", 6)) < order.index(("2g.10gb", 4)) < order.index(("3g.20gb", 4))
    assert order[-1] == ("7g.40gb", 0)
    # Filling 1g slices in this order keeps the 4g placement (slices 0-3) free for 3 slices.
    first_three = [Placement(s, 1) for s in (6, 5, 4)]
    assert not any(Placement(0, 4).overlaps(p) for p in first_three)


def test_ampere_never_toggles_mig_mode_so_publishes_either_the_gpu_or_its_placements() -> None:
    a100 = gpus("a100x8")[:1]
    off = publish_node(states(a100, mode_on=False), MigStrategy.DYNAMIC)
    assert [d.name for d in off.devices] == ["gpu-0"]
    on = publish_node(states(a100, mode_on=True), MigStrategy.DYNAMIC)
    assert "gpu-0" not in [d.name for d in on.devices]
    assert len(on.devices) == 25


def test_static_publishes_existing_instances_and_not_their_parent() -> None:
    g = gpus()[0]
    inst = (
        MigInstance(g.uuid, 9, "3g.20gb", Placement(4, 4), gi_id=2, ci_id=0, uuid="MIG-aaaa"),
        MigInstance(g.uuid, 19, "1g.5gb", Placement(0, 1), gi_id=7, ci_id=None, uuid=None),
    )
    pub = publish_node([GpuMigState(g, A100, MigMode(True, True), inst)], MigStrategy.STATIC)
    assert [d.name for d in pub.devices] == ["gpu-0-mig-3g20gb-4"]
    dev = pub.devices[0].to_api()
    assert dev["attributes"]["uuid"] == {"string": "MIG-aaaa"}
    assert dev["attributes"]["parentUUID"] == {"string": g.uuid}
    assert dev["attributes"]["profile"] == {"string": "3g.20gb"}
    assert dev["capacity"]["memory"] == {"value": "19968Mi"}
    assert "consumesCounters" not in dev
    assert any("without a compute instance" in n for n in pub.notes)
    target = pub.targets["gpu-0-mig-3g20gb-4"]
    assert target.instance == inst[0] and not target.dynamic


def test_mig_mode_on_without_mig_strategy_is_not_published_and_says_why() -> None:
    g = gpus()[0]
    pub = publish_node([GpuMigState(g, A100, MigMode(True, True))], MigStrategy.NONE)
    assert pub.devices == ()
    assert pub.notes == ("gpu-0: MIG mode is on and --mig is none: not published",)


def test_non_mig_gpus_publish_plainly_under_dynamic() -> None:
    l4 = gpus("l4x4")
    pub = publish_node([GpuMigState(g) for g in l4], MigStrategy.DYNAMIC)
    assert [d.name for d in pub.devices] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert pub.counter_sets == ()


def test_eight_gpu_node_splits_within_api_limits_and_keeps_order() -> None:
    pub = publish_node(states(gpus()), MigStrategy.DYNAMIC)
    assert len(pub.devices) == 8 * 26
    contents = split_pool(list(pub.devices), list(pub.counter_sets))
    counter_slices = [c for c in contents if c.shared_counters]
    device_slices = [c for c in contents if c.devices]
    assert len(counter_slices) == 1 and len(counter_slices[0].shared_counters) == 8
    assert all(len(c.devices) <= 64 for c in device_slices)
    assert len(device_slices) == 4
    flat = [d["name"] for c in device_slices for d in c.devices]
    assert flat == [d.name for d in pub.devices]
    for cs in pub.counter_sets:
        assert len(cs["counters"]) <= 32
    for d in pub.devices:
        api = d.to_api()
        assert len(api.get("attributes", {})) + len(api.get("capacity", {})) <= 32
        assert len(api["consumesCounters"]) <= 2 and len(api["consumesCounters"][0]["counters"]) <= 32


@pytest.mark.parametrize("strategy", [MigStrategy.STATIC, MigStrategy.DYNAMIC])
def test_mig_devices_carry_their_gpus_pcie_root_and_numa_node(strategy: MigStrategy) -> None:
    """A slice of gpu-5 says gpu-5's topology, so a claim can pair it with a NIC on the same root or NUMA node."""
    g = gpus()[5]
    inst = (MigInstance(g.uuid, 9, "3g.20gb", Placement(4, 4), gi_id=2, ci_id=0, uuid="MIG-aaaa"),)
    on = strategy is MigStrategy.STATIC
    pub = publish_node([GpuMigState(g, A100, MigMode(on, on), inst if on else ())], strategy)
    migs = [d.to_api() for d in pub.devices if d.attributes["type"].value == "mig"]
    assert migs
    for dev in migs:
        assert dev["attributes"]["resource.kubernetes.io/numaNode"] == {"int": 1}
        assert dev["attributes"]["resource.kubernetes.io/pcieRoot"] == {"string": g.pcie_root}
        assert dev["attributes"]["resource.kubernetes.io/pciBusID"] == {"string": g.pci_bus_id}


def test_a_placement_outside_the_gpu_is_refused() -> None:
    bad = MigCatalog(8, (replace(A100.profiles[0], placements=(Placement(7, 2),)),))
    with pytest.raises(ValueError, match="outside the GPU's 8 memory slices"):
        publish_node([GpuMigState(gpus()[0], bad)], MigStrategy.DYNAMIC)
