"""The MIG simulator's state: persistence across processes, reboots, procfs capability files and the CLI.

State shared through one file by several simulators and processes, reboots that drop instances but
keep the MIG mode, the capability files that follow instances, and ``python -m
dra_driver.mig_backends.sim`` (the mig-parted stand-in).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dra_driver.core.mig import MigMode, Placement
from dra_driver.mig_backends.sim import MigSimulator, NvmlCode, SimError, load_instances, load_modes
from dra_driver.mig_backends.sim.rules import caps_minor
from tests.unit.mig_backends.mig_sim_helpers import code_of, gpus, mig_on

REPO = Path(__file__).resolve().parents[3]


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
    cmd = [sys.executable, "-m", "dra_driver.mig_backends.sim", "--state", str(state), "--fake-gpus", "h100x8"]
    cmd += ["--node-name", "node-a", "--boot-id", "b1"]
    if proc_root is not None:
        cmd += ["--proc-root", str(proc_root)]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, cwd=REPO, timeout=60, check=False)


def test_concurrent_processes_share_the_state(tmp_path: Path) -> None:
    state = tmp_path / "mig.json"
    gs = gpus()
    sim = MigSimulator(gs, state_file=state, boot_id="b1")
    mig_on(sim, gs[0])
    base = [sys.executable, "-m", "dra_driver.mig_backends.sim", "--state", str(state), "--fake-gpus", "h100x8"]
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
