"""Dynamic and static MIG through the real plugin process, its sockets and the real API server.

The GPUs are fake H100s whose MIG side is the simulator, reached through the same NVML backend
real GPUs use; its state file is what a real GPU's state is to the plugin: it outlives the
process. Each crash test kills the plugin with SIGKILL right after one side effect and checks
that the next start converges: no leaked instance, no placement carved twice, the same answer,
the CDI spec present — and, after unprepare, nothing left at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from dra_driver.core.mig import MigInstance
from dra_driver.mig_backends.sim import load_instances, load_modes
from dra_driver.sources.fake import FakeGpuSource
from kubelet_plugin.prepare.faults import PREPARE_POINTS, UNPREPARE_POINTS
from testkit.claimdata import DRIVER
from testkit.claims import create_allocated_claim
from testkit.cluster import LocalCluster
from testkit.plugin_process import ROOT, PluginProcess

GPUS = FakeGpuSource("h100x8", "node-a").gpus()
MIG_ARGS = ("--mig", "dynamic", "--fake-mig-latency", "zero", "--gc-interval", "0")


def name() -> str:
    return f"mig-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def mig_plugin(tmp_path: Path, apiserver: LocalCluster) -> Iterator[PluginProcess]:
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=MIG_ARGS)
    p.start()
    yield p
    p.stop()


def instances(p: PluginProcess, minor: int = 0) -> list[MigInstance]:
    if not p.sim_state.exists():
        return []
    return load_instances(p.sim_state).get(GPUS[minor].uuid, [])


def mig_mode(p: PluginProcess, minor: int = 0) -> bool:
    modes = load_modes(p.sim_state) if p.sim_state.exists() else {}
    m = modes.get(GPUS[minor].uuid)
    return bool(m and m.current)


def answer(resp: Any, uid: str) -> tuple[str, list[tuple[list[str], str, str, list[str]]]]:
    r = resp.claims[uid]
    return r.error, [(list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids)) for d in r.devices]


def spec_env(p: PluginProcess, uid: str) -> dict[str, str]:
    spec = json.loads((p.cdi / f"k8s.{DRIVER}-claim_{uid}.json").read_text())
    env = spec["devices"][0]["containerEdits"]["env"]
    return dict(e.split("=", 1) for e in env)


def migsim(p: PluginProcess, *args: str) -> str:
    """Change the fake GPUs behind the plugin's back, as an admin with mig-parted would (same boot)."""
    p.sim_state.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "dra_driver.mig_backends.sim", "--state", str(p.sim_state), "--fake-gpus", "h100x8"]
    cmd += ["--node-name", "node-a", "--boot-id", p.boot_id.read_text().strip(), *args]
    return subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True, timeout=60).stdout


def test_prepare_carves_exactly_the_allocated_placement_and_unprepare_destroys_it(
    mig_plugin: PluginProcess, apiserver: LocalCluster
) -> None:
    ref = create_allocated_claim(apiserver, name=name(), devices=["gpu-0-mig-1g10gb-6"])
    err, devices = answer(mig_plugin.prepare([ref]), ref[1])
    assert "" == err
    assert [(["gpu"], "node-a", "gpu-0-mig-1g10gb-6", [f"k8s.{DRIVER}/claim={ref[1]}-gpu-0-mig-1g10gb-6"])] == devices
    [inst] = instances(mig_plugin)
    assert ("1g.10gb", 6, 1) == (inst.profile_name, inst.placement.start, inst.placement.size)
    assert inst.ci_id is not None and inst.uuid and inst.uuid.startswith("MIG-")
    env = spec_env(mig_plugin, ref[1])
    assert inst.uuid == env["GPU_DEVICE_GPU_0_MIG_1G10GB_6_UUID"]
    assert GPUS[0].uuid == env["GPU_DEVICE_GPU_0_MIG_1G10GB_6_PARENT_UUID"]
    assert "1g.10gb" == env["GPU_DEVICE_GPU_0_MIG_1G10GB_6_MIG_PROFILE"]
    assert mig_mode(mig_plugin)  # Hopper: switched on for the carve
    assert "" == mig_plugin.unprepare([ref]).claims[ref[1]].error
    assert [] == instances(mig_plugin)
    assert not mig_mode(mig_plugin)  # and off again: nothing is left on the GPU
    assert [] == mig_plugin.cdi_files()
    events = [e["event"] for e in mig_plugin.logs()]
    assert events.index("gpu_instance_created") < events.index("compute_instance_created") < events.index("device_prepared")


def test_overlapping_devices_are_refused_and_change_nothing(mig_plugin: PluginProcess, apiserver: LocalCluster) -> None:
    held = create_allocated_claim(apiserver, name=name(), devices=["gpu-1-mig-3g40gb-4"])
    assert "" == answer(mig_plugin.prepare([held]), held[1])[0]
    full = create_allocated_claim(apiserver, name=name(), devices=["gpu-1"])
    overlap = create_allocated_claim(apiserver, name=name(), devices=["gpu-1-mig-1g10gb-5"])
    fine = create_allocated_claim(apiserver, name=name(), devices=["gpu-1-mig-1g10gb-3"])
    resp = mig_plugin.prepare([full, overlap, fine])
    assert f"device gpu-1 overlaps device gpu-1-mig-3g40gb-4, which is prepared for claim default/{held[2]}" in (
        resp.claims[full[1]].error
    )
    assert "overlaps device gpu-1-mig-3g40gb-4" in resp.claims[overlap[1]].error
    assert "" == resp.claims[fine[1]].error
    assert sorted((i.profile_name, i.placement.start) for i in instances(mig_plugin, 1)) == [("1g.10gb", 3), ("3g.40gb", 4)]
    assert sorted(mig_plugin.cdi_files()) == sorted(f"k8s.{DRIVER}-claim_{u}.json" for u in (held[1], fine[1]))
    for r in (held, fine, full, overlap):
        assert "" == mig_plugin.unprepare([r]).claims[r[1]].error
    assert [] == instances(mig_plugin, 1)


def _reference(p: PluginProcess, ref: tuple[str, str, str]) -> tuple[str, list[Any]]:
    out = answer(p.prepare([ref]), ref[1])
    assert "" == out[0]
    assert "" == p.unprepare([ref]).claims[ref[1]].error
    return out


SHARING_POINTS = {"after_mps_started", "after_time_slice_set", "after_unprepare_mps_stopped", "after_unprepare_time_slice_reset"}
# Every point a MIG claim without sharing passes (sharing points: tests/integration/test_sharing_plugin.py;
# switching MIG off for a full GPU: its own test below).
MIG_PREPARE_POINTS = [p for p in PREPARE_POINTS if p not in SHARING_POINTS and p != "after_mig_mode_disabled"]
MIG_UNPREPARE_POINTS = [p for p in UNPREPARE_POINTS if p not in SHARING_POINTS]


def test_every_fault_point_is_covered_by_a_crash_test() -> None:
    covered = {*MIG_PREPARE_POINTS, *MIG_UNPREPARE_POINTS, "after_mig_mode_disabled", *SHARING_POINTS}
    assert covered == set(PREPARE_POINTS) | set(UNPREPARE_POINTS)


@pytest.mark.parametrize("point", MIG_PREPARE_POINTS)
def test_kill_9_after_each_prepare_step_converges(mig_plugin: PluginProcess, apiserver: LocalCluster, point: str) -> None:
    ref = create_allocated_claim(apiserver, name=name(), devices=["gpu-2-mig-2g20gb-4"])
    reference = _reference(mig_plugin, ref)
    assert [] == instances(mig_plugin, 2) and not mig_mode(mig_plugin, 2)
    mig_plugin.stop()
    mig_plugin.start(crash_at=point)
    with pytest.raises(grpc.RpcError):
        mig_plugin.prepare([ref])
    assert -9 == mig_plugin.wait_exit()
    mig_plugin.start()
    # Whatever the dead attempt carved is destroyed at start unless a completed claim owns it.
    owned = point == "after_prepare_completed"
    assert len(instances(mig_plugin, 2)) == (1 if owned else 0)
    assert reference == answer(mig_plugin.prepare([ref]), ref[1])
    [inst] = instances(mig_plugin, 2)  # carved once, at exactly the allocated placement
    assert ("2g.20gb", 4) == (inst.profile_name, inst.placement.start)
    assert [f"k8s.{DRIVER}-claim_{ref[1]}.json"] == mig_plugin.cdi_files()
    assert inst.uuid == spec_env(mig_plugin, ref[1])["GPU_DEVICE_GPU_2_MIG_2G20GB_4_UUID"]
    assert "" == mig_plugin.unprepare([ref]).claims[ref[1]].error
    assert [] == instances(mig_plugin, 2) and not mig_mode(mig_plugin, 2)
    assert [] == mig_plugin.cdi_files()


@pytest.mark.parametrize("point", MIG_UNPREPARE_POINTS)
def test_kill_9_after_each_unprepare_step_converges(mig_plugin: PluginProcess, apiserver: LocalCluster, point: str) -> None:
    ref = create_allocated_claim(apiserver, name=name(), devices=["gpu-3-mig-1g20gb-6"])
    mig_plugin.stop()
    mig_plugin.start(crash_at=point)
    assert "" == answer(mig_plugin.prepare([ref]), ref[1])[0]
    with pytest.raises(grpc.RpcError):
        mig_plugin.unprepare([ref])
    assert -9 == mig_plugin.wait_exit()
    mig_plugin.start()
    assert "" == mig_plugin.unprepare([ref]).claims[ref[1]].error
    assert [] == instances(mig_plugin, 3) and not mig_mode(mig_plugin, 3)
    assert [] == mig_plugin.cdi_files()
    assert {} == json.loads((mig_plugin.plugin_dir / "checkpoint.json").read_text())["data"]["claims"]


def test_kill_9_after_switching_mig_off_for_a_full_gpu_converges(mig_plugin: PluginProcess, apiserver: LocalCluster) -> None:
    ref = create_allocated_claim(apiserver, name=name(), devices=["gpu-4"])
    mig_plugin.stop()
    mig_plugin.start(crash_at="after_mig_mode_disabled")
    migsim(mig_plugin, "mode", "--gpu", "4", "on")  # an admin turned MIG on behind the plugin's back
    with pytest.raises(grpc.RpcError):
        mig_plugin.prepare([ref])
    assert -9 == mig_plugin.wait_exit()
    mig_plugin.start()
    err, devices = answer(mig_plugin.prepare([ref]), ref[1])
    assert "" == err and ["gpu-4"] == [d[2] for d in devices]
    assert not mig_mode(mig_plugin, 4)
    assert "" == mig_plugin.unprepare([ref]).claims[ref[1]].error


def test_start_destroys_instances_no_prepared_claim_owns(tmp_path: Path, apiserver: LocalCluster) -> None:
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=MIG_ARGS)
    migsim(p, "mode", "--gpu", "5", "on")
    migsim(p, "carve", "--gpu", "5", "--profile", "3g.40gb")
    assert 1 == len(instances(p, 5))
    p.start()
    try:
        assert [] == instances(p, 5)
        assert not mig_mode(p, 5)
        assert any(e["event"] == "mig_leftover_destroyed" for e in p.logs())
    finally:
        p.stop()


def test_claims_whose_resourceclaim_is_gone_are_cleaned_up(tmp_path: Path, apiserver: LocalCluster) -> None:
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=(*MIG_ARGS[:-1], "0.5"))
    p.start(crash_at="after_gi_created")
    started = create_allocated_claim(apiserver, name=name(), devices=["gpu-6-mig-1g10gb-0"])
    with pytest.raises(grpc.RpcError):
        p.prepare([started])
    p.wait_exit()
    p.start()
    completed = create_allocated_claim(apiserver, name=name(), devices=["gpu-6-mig-1g10gb-2"])
    assert "" == answer(p.prepare([completed]), completed[1])[0]
    try:
        for ns, _, n in (started, completed):
            apiserver.api("DELETE", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{n}")
        deadline = time.monotonic() + 30
        claims: dict[str, Any] = {"x": 1}
        while time.monotonic() < deadline:
            claims = json.loads((p.plugin_dir / "checkpoint.json").read_text())["data"]["claims"]
            if not claims:
                break
            time.sleep(0.2)
        assert {} == claims
        assert [] == instances(p, 6)
        gone = [e for e in p.logs() if e["event"] == "claim_gone_unprepared"]
        assert {(started[1], "PrepareStarted"), (completed[1], "PrepareCompleted")} == {
            (e["claim_uid"], e["state"]) for e in gone
        }
    finally:
        p.stop()


def test_static_mig_prepares_existing_instances_and_never_destroys_them(tmp_path: Path, apiserver: LocalCluster) -> None:
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=("--mig", "static", "--fake-mig-latency", "zero"))
    migsim(p, "mode", "--gpu", "7", "on")
    migsim(p, "carve", "--gpu", "7", "--profile", "3g.40gb")
    [inst] = instances(p, 7)
    p.start()
    try:
        ref = create_allocated_claim(apiserver, name=name(), devices=[f"gpu-7-mig-3g40gb-{inst.placement.start}"])
        assert "" == answer(p.prepare([ref]), ref[1])[0]
        assert inst.uuid == spec_env(p, ref[1])[f"GPU_DEVICE_GPU_7_MIG_3G40GB_{inst.placement.start}_UUID"]
        full = create_allocated_claim(apiserver, name=name(), devices=["gpu-7"])
        assert "does not exist on this node" in p.prepare([full]).claims[full[1]].error  # MIG on: no full GPU
        assert "" == p.unprepare([ref]).claims[ref[1]].error
        assert [inst] == instances(p, 7)  # made out of band: left alone
    finally:
        p.stop()
