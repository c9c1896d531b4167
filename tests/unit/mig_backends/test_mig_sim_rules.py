"""The MIG simulator's profile data and NVML's MIG rules: modes, GPU and compute instances, latency.

Every error case the simulator models is checked with the NVML code real NVML gives; the property
test walks every layout of the H100 and A100-40GB catalogs and checks that the simulator carves a
placement exactly when it overlaps nothing, the profile has an instance left and the engines fit.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dra_driver.core.mig import MigMode, Placement
from dra_driver.core.mig import MigProfile as GiProfileData
from dra_driver.mig_backends.sim import (
    REALISTIC_LATENCY,
    ZERO_LATENCY,
    Latency,
    MigSimulator,
    NvmlCode,
    SimError,
    latency_from_name,
    product_data,
    products,
)
from dra_driver.mig_backends.sim.catalog import ProductData
from dra_driver.mig_backends.sim.rules import engine_budget_holds
from dra_driver.sources import fake
from tests.unit.mig_backends.mig_sim_helpers import code_of, full_ci, gpus, mig_on, sim_on

# --- profile data ----------------------------------------------------------------------------


def test_data_files_cover_the_five_products_each_with_its_source() -> None:
    names = set(products())
    assert names == {
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H200",
        "NVIDIA B200",
    }
    for data in products().values():
        assert "MIG User Guide" in data.source or "nvidia-smi" in data.source
        assert data.memory_slices == 8


def test_every_mig_capable_fake_model_has_a_data_file() -> None:
    for p in fake.PROFILES.values():
        if p.model.mig_capable:
            assert product_data(p.model.product_name) is not None, p.model.product_name
    assert fake.PROFILES["a100-80x8"].model.memory_mib == 81920


def test_a100_40gb_matches_nvidia_smi_lgip_and_lgipp() -> None:
    data = products()["NVIDIA A100-SXM4-40GB"]
    ids = {p.name: p.profile_id for p in data.gi_profiles}
    assert ids == {"1g.5gb": 19, "1g.5gb+me": 20, "1g.10gb": 15, "2g.10gb": 14, "3g.20gb": 9, "4g.20gb": 5, "7g.40gb": 0}
    lgipp = {p.profile_id: ({pl.start for pl in p.placements}, {pl.size for pl in p.placements}) for p in data.gi_profiles}
    assert lgipp == {
        19: ({0, 1, 2, 3, 4, 5, 6}, {1}),
        20: ({0, 1, 2, 3, 4, 5, 6}, {1}),
        15: ({0, 2, 4, 6}, {2}),
        14: ({0, 2, 4}, {2}),
        9: ({0, 4}, {4}),
        5: ({0}, {4}),
        0: ({0}, {8}),
    }
    indices = {p.name: p.index for p in data.gi_profiles}
    assert indices == {"1g.5gb": 0, "1g.5gb+me": 7, "1g.10gb": 9, "2g.10gb": 1, "3g.20gb": 2, "4g.20gb": 3, "7g.40gb": 4}


def test_h100_engine_figures_match_the_lgip_transcript() -> None:
    data = products()["NVIDIA H100 80GB HBM3"]
    sms = {p.name: p.multiprocessors for p in data.gi_profiles}
    assert sms == {"1g.10gb": 16, "1g.10gb+me": 16, "1g.20gb": 26, "2g.20gb": 32, "3g.40gb": 60, "4g.40gb": 64, "7g.80gb": 132}
    assert (data.full.copy_engines, data.full.decoders, data.full.jpeg_engines, data.full.ofa_engines) == (8, 7, 7, 1)


# --- MIG mode --------------------------------------------------------------------------------


def test_mode_starts_off() -> None:
    sim, gpu = sim_on()
    assert sim.mode(gpu.uuid) == MigMode(current=False, pending=False)


def test_hopper_mode_change_applies_at_once() -> None:
    sim, gpu = sim_on("h100x8")
    assert sim.set_mig_mode(gpu.uuid, True) == NvmlCode.SUCCESS
    assert sim.mode(gpu.uuid) == MigMode(current=True, pending=True)


def test_hopper_refuses_to_disable_with_instances() -> None:
    sim, gpu = sim_on("h100x8")
    sim.set_mig_mode(gpu.uuid, True)
    sim.create_gpu_instance(gpu.uuid, 19, 0)
    with pytest.raises(SimError) as e:
        sim.set_mig_mode(gpu.uuid, False)
    assert code_of(e) == NvmlCode.IN_USE
    assert sim.mode(gpu.uuid).current is True


def test_ampere_mode_change_is_pending_and_reports_reset_required() -> None:
    sim, gpu = sim_on("a100x8")
    assert sim.set_mig_mode(gpu.uuid, True) == NvmlCode.RESET_REQUIRED
    assert sim.mode(gpu.uuid) == MigMode(current=False, pending=True)
    with pytest.raises(SimError) as e:
        sim.create_gpu_instance(gpu.uuid, 19, 0)
    assert code_of(e) == NvmlCode.NOT_SUPPORTED


def test_ampere_pending_mode_becomes_current_at_a_new_boot(tmp_path: Path) -> None:
    state = tmp_path / "mig.json"
    gs = gpus("a100x8")
    first = MigSimulator(gs, state_file=state, boot_id="boot-1")
    first.set_mig_mode(gs[0].uuid, True)
    same_boot = MigSimulator(gs, state_file=state, boot_id="boot-1")
    assert same_boot.mode(gs[0].uuid) == MigMode(current=False, pending=True)
    rebooted = MigSimulator(gs, state_file=state, boot_id="boot-2")
    assert rebooted.mode(gs[0].uuid) == MigMode(current=True, pending=True)


def test_gpu_without_mig_is_not_supported() -> None:
    sim, gpu = sim_on("l4x4")
    assert sim.product(gpu.uuid) is None
    for call in (
        lambda: sim.mode(gpu.uuid),
        lambda: sim.set_mig_mode(gpu.uuid, True),
        lambda: sim.create_gpu_instance(gpu.uuid, 19, 0),
    ):
        with pytest.raises(SimError) as e:
            call()
        assert code_of(e) == NvmlCode.NOT_SUPPORTED


def test_unknown_gpu_is_not_found() -> None:
    sim, _ = sim_on()
    with pytest.raises(SimError) as e:
        sim.mode("GPU-nope")
    assert code_of(e) == NvmlCode.NOT_FOUND


# --- GPU instances ---------------------------------------------------------------------------


def test_gi_needs_mig_mode_on() -> None:
    sim, gpu = sim_on()
    with pytest.raises(SimError) as e:
        sim.create_gpu_instance(gpu.uuid, 19, 0)
    assert code_of(e) == NvmlCode.NOT_SUPPORTED


@pytest.mark.parametrize(("profile_id", "start", "size"), [(14, 1, 2), (9, 2, 4), (0, 0, 7), (19, 7, 1), (15, 0, 1)])
def test_placement_not_offered_is_invalid_argument(profile_id: int, start: int, size: int) -> None:
    sim, gpu = sim_on()
    mig_on(sim, gpu)
    with pytest.raises(SimError) as e:
        sim.create_gpu_instance(gpu.uuid, profile_id, start, size)
    assert code_of(e) == NvmlCode.INVALID_ARGUMENT


def test_unknown_profile_id_is_invalid_argument() -> None:
    sim, gpu = sim_on()
    mig_on(sim, gpu)
    with pytest.raises(SimError) as e:
        sim.create_gpu_instance(gpu.uuid, 42, 0)
    assert code_of(e) == NvmlCode.INVALID_ARGUMENT


def test_overlap_is_insufficient_resources_never_already_exists() -> None:
    sim, gpu = sim_on()
    mig_on(sim, gpu)
    sim.create_gpu_instance(gpu.uuid, 9, 4)  # 3g.40gb on slices 4..7
    for profile_id, start in ((9, 4), (19, 5), (14, 4), (0, 0)):
        with pytest.raises(SimError) as e:
            sim.create_gpu_instance(gpu.uuid, profile_id, start)
        assert code_of(e) == NvmlCode.INSUFFICIENT_RESOURCES


def test_second_media_extension_instance_is_insufficient_resources() -> None:
    sim, gpu = sim_on("a100x8")
    mig_on(sim, gpu)
    sim.create_gpu_instance(gpu.uuid, 20, 0)
    with pytest.raises(SimError) as e:
        sim.create_gpu_instance(gpu.uuid, 20, 1)
    assert code_of(e) == NvmlCode.INSUFFICIENT_RESOURCES


def test_engine_budget_allows_one_media_extension_set() -> None:
    data = products()["NVIDIA H100 80GB HBM3"]
    me = data.gi_by_name("1g.10gb+me")
    plain = data.gi_by_name("1g.10gb")
    assert me is not None and plain is not None
    assert engine_budget_holds(data, [me, *[plain] * 6])
    assert not engine_budget_holds(data, [me, me])  # two OFAs on a GPU with one


def test_engine_budget_is_enforced_when_instance_counts_would_allow() -> None:
    """A product whose +me profile allowed two instances still gets only one (one OFA)."""
    real = products()["NVIDIA H100 80GB HBM3"]
    me = real.gi_by_name("1g.10gb+me")
    assert me is not None
    loose = ProductData(
        **{
            **{f: getattr(real, f) for f in ProductData.__slots__},
            "gi_profiles": tuple(
                GiProfileData(**{**{f: getattr(p, f) for f in GiProfileData.__slots__}, "instance_count": 7}) if p is me else p
                for p in real.gi_profiles
            ),
        }
    )
    gpu = gpus("h100x8")[0]
    sim = MigSimulator([gpu], state_file=None)
    sim._products[gpu.uuid] = loose  # the data under test
    mig_on(sim, gpu)
    sim.create_gpu_instance(gpu.uuid, 20, 0)
    with pytest.raises(SimError) as e:
        sim.create_gpu_instance(gpu.uuid, 20, 1)
    assert code_of(e) == NvmlCode.INSUFFICIENT_RESOURCES


def test_gi_ids_are_the_lowest_unused_from_one() -> None:
    sim, gpu = sim_on()
    mig_on(sim, gpu)
    assert [sim.create_gpu_instance(gpu.uuid, 19, s) for s in (6, 5, 4)] == [1, 2, 3]
    sim.destroy_gpu_instance(gpu.uuid, 2)
    assert sim.create_gpu_instance(gpu.uuid, 19, 0) == 2


def test_possible_placements_ignore_occupancy() -> None:
    sim, gpu = sim_on()
    mig_on(sim, gpu)
    before = sim.possible_placements(gpu.uuid, 19)
    sim.create_gpu_instance(gpu.uuid, 0, 0)
    assert sim.possible_placements(gpu.uuid, 19) == before
    assert len(before) == 7


def test_destroying_an_absent_gi_is_not_found() -> None:
    sim, gpu = sim_on()
    mig_on(sim, gpu)
    with pytest.raises(SimError) as e:
        sim.destroy_gpu_instance(gpu.uuid, 3)
    assert code_of(e) == NvmlCode.NOT_FOUND


# --- compute instances -----------------------------------------------------------------------


def test_ci_ids_from_zero_and_a_new_mig_uuid_on_every_creation() -> None:
    sim, gpu = sim_on()
    mig_on(sim, gpu)
    gi = sim.create_gpu_instance(gpu.uuid, 0, 0)
    first = sim.create_compute_instance(gpu.uuid, gi, full_ci(sim, gpu, gi))
    assert first.ci_id == 0
    assert first.uuid.startswith("MIG-")
    sim.destroy_compute_instance(gpu.uuid, gi, 0)
    again = sim.create_compute_instance(gpu.uuid, gi, full_ci(sim, gpu, gi))
    assert again.ci_id == 0
    assert again.uuid != first.uuid


def test_smaller_cis_fill_a_gi_then_run_out() -> None:
    sim, gpu = sim_on()
    mig_on(sim, gpu)
    gi = sim.create_gpu_instance(gpu.uuid, 9, 0)  # 3 compute slices
    ids = [sim.create_compute_instance(gpu.uuid, gi, 0).ci_id for _ in range(3)]
    assert ids == [0, 1, 2]
    with pytest.raises(SimError) as e:
        sim.create_compute_instance(gpu.uuid, gi, 0)
    assert code_of(e) == NvmlCode.INSUFFICIENT_RESOURCES


def test_rev1_ci_profile_is_offered_but_not_creatable() -> None:
    sim, gpu = sim_on()
    mig_on(sim, gpu)
    gi = sim.create_gpu_instance(gpu.uuid, 19, 0)
    _, offered = sim.ci_profiles(gpu.uuid, gi)
    assert {c.index for c in offered} == {0, 7}
    with pytest.raises(SimError) as e:
        sim.create_compute_instance(gpu.uuid, gi, 7)
    assert code_of(e) == NvmlCode.NOT_SUPPORTED


def test_destroying_a_gi_with_a_ci_is_in_use() -> None:
    sim, gpu = sim_on()
    mig_on(sim, gpu)
    gi = sim.create_gpu_instance(gpu.uuid, 19, 0)
    sim.create_compute_instance(gpu.uuid, gi, 0)
    with pytest.raises(SimError) as e:
        sim.destroy_gpu_instance(gpu.uuid, gi)
    assert code_of(e) == NvmlCode.IN_USE


def test_busy_mig_device_cannot_be_destroyed_until_freed() -> None:
    sim, gpu = sim_on()
    mig_on(sim, gpu)
    gi = sim.create_gpu_instance(gpu.uuid, 19, 0)
    ci = sim.create_compute_instance(gpu.uuid, gi, 0)
    sim.mark_busy(ci.uuid)
    with pytest.raises(SimError) as e:
        sim.destroy_compute_instance(gpu.uuid, gi, ci.ci_id)
    assert code_of(e) == NvmlCode.IN_USE
    sim.mark_busy(ci.uuid, busy=False)
    sim.destroy_compute_instance(gpu.uuid, gi, ci.ci_id)
    assert sim.instances(gpu.uuid)[0].ci_id is None


def test_destroying_an_absent_ci_is_not_found() -> None:
    sim, gpu = sim_on()
    mig_on(sim, gpu)
    gi = sim.create_gpu_instance(gpu.uuid, 19, 0)
    with pytest.raises(SimError) as e:
        sim.destroy_compute_instance(gpu.uuid, gi, 0)
    assert code_of(e) == NvmlCode.NOT_FOUND


def test_fail_next_fails_exactly_one_call() -> None:
    sim, gpu = sim_on()
    mig_on(sim, gpu)
    sim.fail_next("create_gi", NvmlCode.UNKNOWN)
    with pytest.raises(SimError) as e:
        sim.create_gpu_instance(gpu.uuid, 19, 0)
    assert code_of(e) == NvmlCode.UNKNOWN
    assert sim.create_gpu_instance(gpu.uuid, 19, 0) == 1
    with pytest.raises(ValueError, match="unknown MIG operation"):
        sim.fail_next("reset", NvmlCode.UNKNOWN)


# --- latency ---------------------------------------------------------------------------------


def test_latency_is_applied_per_operation() -> None:
    def timed(latency: Latency) -> float:
        sim, gpu = sim_on(latency=latency)
        mig_on(sim, gpu)
        t = time.monotonic()
        gi = sim.create_gpu_instance(gpu.uuid, 19, 0)
        sim.destroy_gpu_instance(gpu.uuid, gi)
        return time.monotonic() - t

    assert timed(Latency(create_gi=0.15, destroy_gi=0.15)) >= 0.3
    assert timed(ZERO_LATENCY) < 0.15


def test_latency_from_name() -> None:
    assert latency_from_name("zero") == ZERO_LATENCY
    assert latency_from_name("realistic") == REALISTIC_LATENCY
    assert REALISTIC_LATENCY.destroy_gi == 1.0
    with pytest.raises(ValueError, match="unknown MIG latency"):
        latency_from_name("slow")


# --- property: carving is possible iff placements fit ----------------------------------------


@pytest.mark.parametrize("fake_profile", ["h100x8", "a100x8"])
def test_carving_succeeds_exactly_when_placements_fit(fake_profile: str) -> None:
    """DFS over every reachable layout; at each, every placement of every profile is tried."""
    sim, gpu = sim_on(fake_profile)
    mig_on(sim, gpu)
    data = product_data(gpu.product_name)
    assert data is not None
    candidates = [(p, pl) for p in data.gi_profiles for pl in p.placements]

    def fits(chosen: list[tuple[GiProfileData, Placement]], p: GiProfileData, pl: Placement) -> bool:
        if any(pl.overlaps(q) for _, q in chosen):
            return False
        if sum(1 for c, _ in chosen if c.profile_id == p.profile_id) >= p.instance_count:
            return False
        return engine_budget_holds(data, [c for c, _ in chosen] + [p])

    layouts = 0
    full_layouts = 0

    def walk(chosen: list[tuple[GiProfileData, Placement]], first: int) -> None:
        nonlocal layouts, full_layouts
        layouts += 1
        full_layouts += sum(pl.size for _, pl in chosen) == 8
        for i, (p, pl) in enumerate(candidates):
            try:
                gi = sim.create_gpu_instance(gpu.uuid, p.profile_id, pl.start, pl.size)
            except SimError as err:
                assert err.code == NvmlCode.INSUFFICIENT_RESOURCES
                assert not fits(chosen, p, pl), (chosen, p.name, pl)
                continue
            assert fits(chosen, p, pl), (chosen, p.name, pl)
            if i >= first:
                walk([*chosen, (p, pl)], i + 1)
            sim.destroy_gpu_instance(gpu.uuid, gi)

    walk([], 0)
    assert layouts > 1000
    assert full_layouts > 0
    assert sim.instances(gpu.uuid) == []
