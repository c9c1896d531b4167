"""The MIG simulator: profile data, NVML's MIG rules, latency, persistence, reboots, procfs and the CLI.

Every error case the simulator models is checked with the NVML code real NVML gives; the property
test walks every layout of the H100 and A100-40GB catalogs and checks that the simulator carves a
placement exactly when it overlaps nothing, the profile has an instance left and the engines fit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import MigMode, Placement
from dra_driver.sources import fake
from dra_driver.sources.fake import FakeGpuSource
from dra_driver.sources.migsim import (
    REALISTIC_LATENCY,
    ZERO_LATENCY,
    Latency,
    MigSimulator,
    NvmlCode,
    SimError,
    latency_from_name,
    load_instances,
    load_modes,
    product_data,
    products,
)
from dra_driver.sources.migsim.catalog import GiProfileData, ProductData
from dra_driver.sources.migsim.simulator import caps_minor, engine_budget_holds

REPO = Path(__file__).resolve().parents[2]


def gpus(profile: str = "h100x8", node: str = "node-a") -> list[GpuInfo]:
    return FakeGpuSource(profile, node).gpus()


def sim_on(profile: str = "h100x8", **kwargs: object) -> tuple[MigSimulator, GpuInfo]:
    gs = gpus(profile)
    sim = MigSimulator(gs, state_file=kwargs.pop("state_file", None), **kwargs)  # type: ignore[arg-type]
    return sim, gs[0]


def mig_on(sim: MigSimulator, gpu: GpuInfo) -> None:
    sim.set_initial_mode(gpu.uuid, True)


def code_of(excinfo: pytest.ExceptionInfo[SimError]) -> NvmlCode:
    return excinfo.value.code


def profile(gpu: GpuInfo, name: str) -> GiProfileData:
    data = product_data(gpu.product_name)
    assert data is not None
    p = data.gi_by_name(name)
    assert p is not None
    return p


def full_ci(sim: MigSimulator, gpu: GpuInfo, gi_id: int) -> int:
    gi_profile, offered = sim.ci_profiles(gpu.uuid, gi_id)
    return next(c.profile_id for c in offered if c.slices == gi_profile.slices and c.creatable)


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


# --- persistence and reboots -----------------------------------------------------------------


def test_instances_survive_a_process_restart(tmp_path: Path) -> None:
    state = tmp_path / "mig.json"
    gs = gpus()
    first = MigSimulator(gs, state_file=state, boot_id="b1")
    mig_on(first, gs[0])
    gi = first.create_gpu_instance(gs[0].uuid, 14, 2)
    ci = first.create_compute_instance(gs[0].uuid, gi, 1)
    second = MigSimulator(gs, state_file=state, boot_id="b1")
    [inst] = second.instances(gs[0].uuid)
    assert (inst.placement, inst.gi_id, inst.uuid) == (Placement(2, 2), gi, ci.uuid)


def test_two_simulators_on_one_file_see_each_others_changes(tmp_path: Path) -> None:
    state = tmp_path / "mig.json"
    gs = gpus()
    a = MigSimulator(gs, state_file=state, boot_id="b1")
    b = MigSimulator(gs, state_file=state, boot_id="b1")
    mig_on(a, gs[0])
    a.create_gpu_instance(gs[0].uuid, 19, 0)
    with pytest.raises(SimError) as e:
        b.create_gpu_instance(gs[0].uuid, 19, 0)
    assert code_of(e) == NvmlCode.INSUFFICIENT_RESOURCES
    assert b.create_gpu_instance(gs[0].uuid, 19, 1) == 2
    assert [i.placement.start for i in a.instances(gs[0].uuid)] == [0, 1]


def test_reboot_drops_instances_but_keeps_mig_mode(tmp_path: Path) -> None:
    state = tmp_path / "mig.json"
    gs = gpus()
    before = MigSimulator(gs, state_file=state, boot_id="b1")
    before.set_mig_mode(gs[0].uuid, True)
    before.create_gpu_instance(gs[0].uuid, 0, 0)
    after = MigSimulator(gs, state_file=state, boot_id="b2")
    assert after.instances(gs[0].uuid) == []
    assert after.mode(gs[0].uuid) == MigMode(current=True, pending=True)


def test_load_helpers_read_the_state_file(tmp_path: Path) -> None:
    state = tmp_path / "mig.json"
    gs = gpus()
    sim = MigSimulator(gs, state_file=state, boot_id="b1")
    mig_on(sim, gs[1])
    gi = sim.create_gpu_instance(gs[1].uuid, 5, 0)
    ci = sim.create_compute_instance(gs[1].uuid, gi, 3)
    [inst] = load_instances(state)[gs[1].uuid]
    assert (inst.profile_name, inst.ci_id, inst.uuid) == ("4g.40gb", 0, ci.uuid)
    assert load_instances(state)[gs[0].uuid] == []
    modes = load_modes(state)
    assert modes[gs[1].uuid] == MigMode(True, True)
    assert modes[gs[0].uuid] == MigMode(False, False)
    assert load_instances(tmp_path / "absent.json") == {}


def cli(state: Path, *args: str, proc_root: Path | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "dra_driver.sources.migsim", "--state", str(state), "--fake-gpus", "h100x8"]
    cmd += ["--node-name", "node-a", "--boot-id", "b1"]
    if proc_root is not None:
        cmd += ["--proc-root", str(proc_root)]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, cwd=REPO, timeout=60, check=False)


def test_concurrent_processes_share_the_state(tmp_path: Path) -> None:
    state = tmp_path / "mig.json"
    gs = gpus()
    sim = MigSimulator(gs, state_file=state, boot_id="b1")
    mig_on(sim, gs[0])
    base = [sys.executable, "-m", "dra_driver.sources.migsim", "--state", str(state), "--fake-gpus", "h100x8"]
    base += ["--node-name", "node-a", "--boot-id", "b1", "carve", "--gpu", "0", "--profile", "1g.10gb"]
    procs = [subprocess.Popen(base, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    starts = sorted(i.placement.start for i in load_instances(state)[gs[0].uuid])
    assert starts == [4, 5, 6]  # each process saw the others' instances and took the next free start
    assert len({i.uuid for i in sim.instances(gs[0].uuid)}) == 3


# --- procfs ----------------------------------------------------------------------------------


def test_procfs_capability_files_follow_instances(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    gs = gpus()
    sim = MigSimulator(gs, state_file=None, proc_root=proc)
    mig_on(sim, gs[2])
    gi = sim.create_gpu_instance(gs[2].uuid, 19, 3)
    sim.create_compute_instance(gs[2].uuid, gi, 0)
    gi_dir = proc / "driver/nvidia/capabilities/gpu2/mig" / f"gi{gi}"
    gi_text = (gi_dir / "access").read_text()
    assert gi_text.splitlines() == [f"DeviceFileMinor: {caps_minor(2, gi)}", "DeviceFileMode: 292", "DeviceFileModify: 1"]
    assert f"DeviceFileMinor: {caps_minor(2, gi, 0)}" in (gi_dir / "ci0" / "access").read_text()
    sim.destroy_compute_instance(gs[2].uuid, gi, 0)
    assert not (gi_dir / "ci0").exists()
    sim.destroy_gpu_instance(gs[2].uuid, gi)
    assert not gi_dir.exists()


def test_procfs_follows_instances_made_by_another_process_and_reboots(tmp_path: Path) -> None:
    state = tmp_path / "mig.json"
    proc = tmp_path / "proc"
    gs = gpus()
    admin = MigSimulator(gs, state_file=state, boot_id="b1")  # no procfs, like the CLI without --proc-root
    mig_on(admin, gs[0])
    gi = admin.create_gpu_instance(gs[0].uuid, 19, 0)
    admin.create_compute_instance(gs[0].uuid, gi, 0)
    plugin = MigSimulator(gs, state_file=state, boot_id="b1", proc_root=proc)
    access = proc / "driver/nvidia/capabilities/gpu0/mig" / f"gi{gi}" / "ci0" / "access"
    assert access.read_text().startswith(f"DeviceFileMinor: {caps_minor(0, gi, 0)}")
    MigSimulator(gs, state_file=state, boot_id="b2", proc_root=proc)
    assert not access.parent.parent.exists()
    assert plugin.instances(gs[0].uuid) == []


def test_capability_minors_are_unique_per_node() -> None:
    minors = [caps_minor(g, gi) for g in range(8) for gi in range(15)]
    minors += [caps_minor(g, gi, ci) for g in range(8) for gi in range(15) for ci in range(8)]
    assert len(minors) == len(set(minors))


# --- CLI -------------------------------------------------------------------------------------


def test_cli_sets_mode_carves_at_the_highest_free_start_and_lists(tmp_path: Path) -> None:
    state = tmp_path / "mig.json"
    proc = tmp_path / "proc"
    assert json.loads(cli(state, "mode", "--gpu", "1", "on").stdout)["mode"] == {"current": True, "pending": True}
    carved = json.loads(cli(state, "carve", "--gpu", "1", "--profile", "2g.20gb", proc_root=proc).stdout)
    assert (carved["start"], carved["giId"], carved["ciId"]) == (4, 1, 0)
    assert (proc / "driver/nvidia/capabilities/gpu1/mig/gi1/ci0/access").exists()
    explicit = json.loads(cli(state, "carve", "--gpu", "1", "--profile", "1g.10gb", "--start", "0").stdout)
    assert explicit["start"] == 0
    listing = json.loads(cli(state, "list").stdout)
    gpu1 = next(g for g in listing if g["gpu"] == 1)
    assert [(i["profile_name"], i["placement"]["start"]) for i in gpu1["instances"]] == [("2g.20gb", 4), ("1g.10gb", 0)]
    refused = cli(state, "carve", "--gpu", "1", "--profile", "2g.20gb", "--start", "4")
    assert refused.returncode == 1
    assert "INSUFFICIENT_RESOURCES" in refused.stderr


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
