"""GPU sharing through the real plugin process: time slices, MPS daemons, consumable-capacity shares.

Fake GPUs record what real ones would get from ``nvidia-smi`` and ``nvidia-cuda-mps-control``
in the simulator's sharing state (``<plugin dir>/fake-gpus/sharing-state.json``). Every test
checks what was applied at prepare and that unprepare restored it; the crash tests kill the
plugin right after each sharing side effect and check the next start converges.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from dra_driver.sharing_backends.sim import read_sharing_state
from dra_driver.sources.fake import FakeGpuSource
from testkit.claimdata import DRIVER
from testkit.claims import create_allocated_claim
from testkit.cluster import LocalCluster
from testkit.plugin_process import PluginProcess

GPUS = FakeGpuSource("h100x8", "node-a").gpus()
ARGS = ("--gc-interval", "0")


def name() -> str:
    return f"share-{uuid.uuid4().hex[:8]}"


def opaque(sharing: dict[str, Any], requests: list[str] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "source": "FromClaim",
        "opaque": {
            "driver": DRIVER,
            "parameters": {"apiVersion": "resource.dra-gpu.dev/v1alpha1", "kind": "GpuConfig", "sharing": sharing},
        },
    }
    entry["requests"] = requests or []
    return entry


@pytest.fixture
def plugin(tmp_path: Path, apiserver: LocalCluster) -> Iterator[PluginProcess]:
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=ARGS)
    p.start()
    yield p
    p.stop()


def state(p: PluginProcess) -> dict[str, Any]:
    """What is applied to the fake GPUs (the records' boot id aside)."""
    recorded = read_sharing_state(p.plugin_dir / "fake-gpus" / "sharing-state.json")
    return {k: recorded[k] for k in ("timeSlices", "mps")}


def spec(p: PluginProcess, uid: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((p.cdi / f"k8s.{DRIVER}-claim_{uid}.json").read_text())
    return doc


def env_of(device_spec: dict[str, Any]) -> dict[str, str]:
    return dict(e.split("=", 1) for e in device_spec["containerEdits"]["env"])


def ok(resp: Any, uid: str) -> None:
    assert "" == resp.claims[uid].error, resp.claims[uid].error


def test_time_slicing_is_applied_at_prepare_and_restored_at_unprepare(plugin: PluginProcess, apiserver: LocalCluster) -> None:
    cfg = [opaque({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})]
    ref = create_allocated_claim(apiserver, name=name(), devices=["gpu-0"], config=cfg)
    ok(plugin.prepare([ref]), ref[1])
    assert {GPUS[0].uuid: "Long"} == state(plugin)["timeSlices"]
    env = env_of(spec(plugin, ref[1])["devices"][0])
    assert ("TimeSlicing", "Long") == (env["GPU_DEVICE_GPU_0_SHARING_STRATEGY"], env["GPU_DEVICE_GPU_0_TIMESLICE_INTERVAL"])
    ok(plugin.prepare([ref]), ref[1])  # a repeat changes nothing
    assert "" == plugin.unprepare([ref]).claims[ref[1]].error
    assert {} == state(plugin)["timeSlices"]


def test_no_config_means_no_sharing_applied(plugin: PluginProcess, apiserver: LocalCluster) -> None:
    ref = create_allocated_claim(apiserver, name=name(), devices=["gpu-5"])
    ok(plugin.prepare([ref]), ref[1])
    assert {"timeSlices": {}, "mps": {}} == state(plugin)
    plugin.unprepare([ref])


def test_mps_claim_gets_one_daemon_with_its_limits_which_survives_a_restart(
    plugin: PluginProcess, apiserver: LocalCluster
) -> None:
    mps = {
        "strategy": "MPS",
        "mpsConfig": {
            "defaultActiveThreadPercentage": 50,
            "defaultPinnedDeviceMemoryLimit": "10Gi",
            "defaultPerDevicePinnedMemoryLimit": {"gpu-2": "20Gi"},
        },
    }
    ref = create_allocated_claim(apiserver, name=name(), devices=["gpu-1", "gpu-2"], config=[opaque(mps)])
    ok(plugin.prepare([ref]), ref[1])
    [(daemon_id, daemon)] = state(plugin)["mps"].items()
    assert daemon_id.startswith(ref[1])
    assert [GPUS[1].uuid, GPUS[2].uuid] == daemon["gpuUUIDs"] == daemon["exclusiveGPUs"]
    assert 50 == daemon["activeThreadPercentage"]
    assert {GPUS[1].uuid: 10 << 30, GPUS[2].uuid: 20 << 30} == daemon["pinnedMemoryLimits"]
    pipe = plugin.plugin_dir / "mps" / daemon_id / "pipe"
    assert pipe.is_dir()
    for dev in spec(plugin, ref[1])["devices"]:
        assert "/tmp/nvidia-mps" == env_of(dev)["CUDA_MPS_PIPE_DIRECTORY"]
        mounts = {m["containerPath"]: m["hostPath"] for m in dev["containerEdits"]["mounts"]}
        assert {"/tmp/nvidia-mps": str(pipe), "/dev/shm": str(pipe.parent / "shm")} == mounts
    plugin.stop()
    plugin.start()
    assert [daemon_id] == list(state(plugin)["mps"])  # still there: the daemon outlives the plugin
    assert not any(e["event"] == "mps_restarted" for e in plugin.logs())
    assert "" == plugin.unprepare([ref]).claims[ref[1]].error
    assert {} == state(plugin)["mps"]
    assert not pipe.parent.exists()


def test_a_dead_mps_daemon_is_restarted_at_start(plugin: PluginProcess, apiserver: LocalCluster) -> None:
    ref = create_allocated_claim(apiserver, name=name(), devices=["gpu-3"], config=[opaque({"strategy": "MPS"})])
    ok(plugin.prepare([ref]), ref[1])
    [daemon_id] = state(plugin)["mps"]
    plugin.stop()
    # The node lost the daemon (say, the container holding it restarted).
    path = plugin.plugin_dir / "fake-gpus" / "sharing-state.json"
    raw = json.loads(path.read_text())
    raw["mps"] = {}
    path.write_text(json.dumps(raw))
    plugin.start()
    assert [daemon_id] == list(state(plugin)["mps"])
    assert any(e["event"] == "mps_restarted" and e["daemon"] == daemon_id for e in plugin.logs())
    assert "" == plugin.unprepare([ref]).claims[ref[1]].error


def test_consumable_shares_get_their_limits_and_share_one_daemon_until_the_last_goes(
    tmp_path: Path, apiserver: LocalCluster
) -> None:
    p = PluginProcess(
        tmp_path, kubeconfig=apiserver.kubeconfig, profile="a100-80x8", extra_args=(*ARGS, "--sharing", "consumable")
    )
    p.start()
    try:
        gpu = FakeGpuSource("a100-80x8", "node-a").gpus()[0]
        refs = []
        for mem, compute in (("20Gi", "0"), ("30Gi", "25")):
            share = str(uuid.uuid4())
            fields = [{"shareID": share, "consumedCapacity": {"memory": mem, "computeShare": compute}}]
            refs.append((create_allocated_claim(apiserver, name=name(), devices=["gpu-0"], result_fields=fields), share))
        for ref, _share in refs:
            ok(p.prepare([ref]), ref[1])
        (first, share1), (second, _) = refs
        env1 = env_of(spec(p, first[1])["devices"][0])
        env2 = env_of(spec(p, second[1])["devices"][0])
        assert f"{gpu.uuid}=20480M" == env1["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env1  # computeShare 0: no cap
        assert (f"{gpu.uuid}=30720M", "25") == (
            env2["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"],
            env2["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"],
        )
        assert str(20 << 30) == env1[f"GPU_DEVICE_GPU_0_{share1.upper().replace('-', '_')}_MEMORY_LIMIT"]
        assert spec(p, first[1])["devices"][0]["name"] == f"{first[1]}-gpu-0-{share1}"
        assert ["gpu-0-shared"] == list(state(p)["mps"])
        assert state(p)["mps"]["gpu-0-shared"]["shared"] is True
        assert "" == p.unprepare([first]).claims[first[1]].error
        assert ["gpu-0-shared"] == list(state(p)["mps"])  # the other share still uses it
        assert "" == p.unprepare([second]).claims[second[1]].error
        assert {} == state(p)["mps"]
    finally:
        p.stop()


def test_a_sharing_config_on_a_consumable_share_is_refused(tmp_path: Path, apiserver: LocalCluster) -> None:
    p = PluginProcess(
        tmp_path, kubeconfig=apiserver.kubeconfig, profile="a100-80x8", extra_args=(*ARGS, "--sharing", "consumable")
    )
    p.start()
    try:
        fields = [{"shareID": str(uuid.uuid4()), "consumedCapacity": {"memory": "10Gi"}}]
        cfg = [opaque({"strategy": "TimeSlicing"})]
        ref = create_allocated_claim(apiserver, name=name(), devices=["gpu-1"], result_fields=fields, config=cfg)
        err = p.prepare([ref]).claims[ref[1]].error
        assert "a TimeSlicing config does not apply to a share of a GPU shared by capacity" in err
        assert {"timeSlices": {}, "mps": {}} == state(p)
        assert [] == p.cdi_files()
    finally:
        p.stop()


@pytest.mark.parametrize("point", ["after_mps_started", "after_time_slice_set"])
def test_kill_9_after_a_sharing_step_of_prepare_converges(plugin: PluginProcess, apiserver: LocalCluster, point: str) -> None:
    sharing = {"strategy": "MPS"} if point == "after_mps_started" else {"strategy": "TimeSlicing"}
    ref = create_allocated_claim(apiserver, name=name(), devices=["gpu-6"], config=[opaque(sharing)])
    plugin.stop()
    plugin.start(crash_at=point)
    with pytest.raises(grpc.RpcError):
        plugin.prepare([ref])
    assert -9 == plugin.wait_exit()
    plugin.start()
    ok(plugin.prepare([ref]), ref[1])  # rolled back and redone
    assert [f"k8s.{DRIVER}-claim_{ref[1]}.json"] == plugin.cdi_files()
    assert "" == plugin.unprepare([ref]).claims[ref[1]].error
    assert {"timeSlices": {}, "mps": {}} == state(plugin)


@pytest.mark.parametrize("point", ["after_unprepare_mps_stopped", "after_unprepare_time_slice_reset"])
def test_kill_9_after_a_sharing_step_of_unprepare_converges(plugin: PluginProcess, apiserver: LocalCluster, point: str) -> None:
    sharing = {"strategy": "MPS"} if point == "after_unprepare_mps_stopped" else {"strategy": "TimeSlicing"}
    ref = create_allocated_claim(apiserver, name=name(), devices=["gpu-7"], config=[opaque(sharing)])
    plugin.stop()
    plugin.start(crash_at=point)
    ok(plugin.prepare([ref]), ref[1])
    with pytest.raises(grpc.RpcError):
        plugin.unprepare([ref])
    assert -9 == plugin.wait_exit()
    plugin.start()
    assert "" == plugin.unprepare([ref]).claims[ref[1]].error
    assert {"timeSlices": {}, "mps": {}} == state(plugin)
    assert [] == plugin.cdi_files()
