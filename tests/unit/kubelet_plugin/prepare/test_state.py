"""Prepare/unprepare state transitions, in process, with real files in a temp dir."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from dra_driver.appkit.inventory import node_publication
from dra_driver.core.cdi import FAKE_DEVICE_NODE_HOST, validate_spec
from dra_driver.core.checkpoint import ClaimEntry, ClaimState
from dra_driver.core.config import API_VERSION
from dra_driver.core.mig import MigStrategy
from dra_driver.files.checkpoint_store import CheckpointStore
from dra_driver.sharing_backends.sim import SimulatedSharing, read_sharing_state
from dra_driver.sources.fake import FakeGpuSource
from kubelet_plugin.prepare.requests import ClaimRef
from kubelet_plugin.prepare.state import DeviceState
from testkit.claimdata import DRIVER, allocated_claim, new_uid
from tests.unit.kubelet_plugin.device_states import Claims, DeviceStateFactory, new_device_state


def make_state(
    tmp_path: Path, claims: Claims, boot: str = "boot-1", profile: str = "h100x8", *, sharing: bool = True
) -> DeviceState:
    return new_device_state(tmp_path, claims, boot=boot, profile=profile, sharing=sharing)


def cdi_files(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "cdi").iterdir())


def test_prepare_answers_devices_and_writes_a_valid_cdi_spec(tmp_path: Path) -> None:
    """A good claim gets its devices with CDI ids that resolve in the spec written for it."""
    claims = Claims()
    ref = claims.add(allocated_claim(devices=["gpu-1", "gpu-2"], requests=["gpu/big", "gpu/big"]))
    out = make_state(tmp_path, claims).prepare([ref])
    assert "" == out[ref.uid].error
    devices = out[ref.uid].devices
    assert ["gpu-1", "gpu-2"] == [d.device_name for d in devices]
    assert [("gpu",), ("gpu",)] == [d.request_names for d in devices]  # subrequest suffix stripped
    spec = json.loads((tmp_path / "cdi" / f"k8s.{DRIVER}-claim_{ref.uid}.json").read_text())
    validate_spec(spec)
    names = {f"{spec['kind']}={d['name']}" for d in spec["devices"]}
    assert {i for d in devices for i in d.cdi_device_ids} == names
    env = spec["devices"][0]["containerEdits"]["env"]
    assert "GPU_DEVICE_GPU_1=gpu-1" in env
    assert f"GPU_DEVICE_GPU_1_RESOURCE_CLAIM={ref.uid}" in env


def test_prepare_twice_returns_the_same_answer_and_restores_a_lost_cdi_file(tmp_path: Path) -> None:
    """Idempotent; a reboot-emptied CDI dir is refilled on the repeat call."""
    claims = Claims()
    ref = claims.add(allocated_claim())
    state = make_state(tmp_path, claims)
    first = state.prepare([ref])[ref.uid]
    spec = tmp_path / "cdi" / f"k8s.{DRIVER}-claim_{ref.uid}.json"
    before = spec.read_bytes()
    spec.unlink()
    with capture_logs() as logs:
        second = state.prepare([ref])[ref.uid]
    assert first == second
    assert before == spec.read_bytes()
    assert any(e["event"] == "cdi_spec_recreated" and e["claim_uid"] == ref.uid for e in logs)


TIME_SLICED = [
    {
        "source": "FromClaim",
        "requests": [],
        "opaque": {
            "driver": DRIVER,
            "parameters": {
                "apiVersion": API_VERSION,
                "kind": "GpuConfig",
                "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
            },
        },
    }
]


def test_time_slicing_without_a_sharing_backend_is_a_clear_claim_error(tmp_path: Path) -> None:
    claims = Claims()
    ref = claims.add(allocated_claim(config=TIME_SLICED))
    err = make_state(tmp_path, claims, sharing=False).prepare([ref])[ref.uid].error
    assert "the claim asks for GPU sharing, but this plugin runs without a sharing backend" == err
    assert [] == cdi_files(tmp_path)


def test_time_slicing_config_is_recorded_and_exposed(tmp_path: Path) -> None:
    """The interval reaches the container's env and the GPU, and is reset at unprepare."""
    claims = Claims()
    ref = claims.add(allocated_claim(config=TIME_SLICED))
    state = make_state(tmp_path, claims)
    state.prepare([ref])
    env = json.loads(next((tmp_path / "cdi").iterdir()).read_text())["devices"][0]["containerEdits"]["env"]
    assert {"GPU_DEVICE_GPU_0_SHARING_STRATEGY=TimeSlicing", "GPU_DEVICE_GPU_0_TIMESLICE_INTERVAL=Long"} <= set(env)
    gpu0 = FakeGpuSource("h100x8", "node-a").gpus()[0].uuid
    assert {gpu0: "Long"} == read_sharing_state(tmp_path / "fake-gpus" / "sharing-state.json")["timeSlices"]
    assert "" == state.unprepare([ref])[ref.uid]
    assert {} == read_sharing_state(tmp_path / "fake-gpus" / "sharing-state.json")["timeSlices"]


@pytest.mark.parametrize(
    ("claim_kwargs", "ref_override", "message"),
    [
        (
            {"config": [{"source": "FromClaim", "requests": [], "opaque": {"driver": DRIVER, "parameters": {"junk": 1}}}]},
            {},
            "parameters.junk: unknown field",
        ),
        ({"devices": ["gpu-9"]}, {}, "gpu-9' does not exist on this node"),
        ({"pool": "node-b"}, {}, "in pool 'node-b', not this node's pool 'node-a'"),
        ({"driver": "gpu.nvidia.com"}, {}, "no allocation results for driver gpu.dra-gpu.dev"),
        ({}, {"uid": "../../etc/passwd"}, "is not a valid Kubernetes UID"),
        ({}, {"uid": "0a1b2c3d-0000-4000-8000-00000000000f"}, "was replaced"),
        ({}, {"name": "missing"}, "not found"),
    ],
    ids=["garbage-config", "unknown-device", "other-node", "other-driver", "malformed-uid", "replaced-claim", "unknown-claim"],
)
def test_bad_claims_get_a_clear_error_and_change_nothing(
    tmp_path: Path, claim_kwargs: dict[str, Any], ref_override: dict[str, str], message: str
) -> None:
    """Each bad input is that claim's error; no CDI file and no checkpoint entry are left."""
    claims = Claims()
    good = claims.add(allocated_claim(name="good", devices=["gpu-3"]))
    bad = claims.add(allocated_claim(name="bad", **claim_kwargs))
    bad = ClaimRef(
        ref_override.get("namespace", bad.namespace), ref_override.get("uid", bad.uid), ref_override.get("name", bad.name)
    )
    state = make_state(tmp_path, claims)
    out = state.prepare([good, bad])
    assert message in out[bad.uid].error
    assert "" == out[good.uid].error
    assert [f"k8s.{DRIVER}-claim_{good.uid}.json"] == cdi_files(tmp_path)
    assert [good.uid] == list(state.prepared_claims())


def test_a_device_held_by_another_claim_is_refused(tmp_path: Path) -> None:
    """The driver is the last line of defence against handing one GPU to two claims."""
    claims = Claims()
    a = claims.add(allocated_claim(name="a"))
    b = claims.add(allocated_claim(name="b"))
    state = make_state(tmp_path, claims)
    assert "" == state.prepare([a])[a.uid].error
    assert "already prepared for claim default/a" in state.prepare([b])[b.uid].error


def test_unprepare_removes_everything_and_unknown_claims_succeed(tmp_path: Path) -> None:
    """Unprepare is idempotent and tolerant of claims it never saw."""
    claims = Claims()
    ref = claims.add(allocated_claim())
    state = make_state(tmp_path, claims)
    state.prepare([ref])
    unknown = ClaimRef("default", new_uid(), "gone")
    assert {ref.uid: "", unknown.uid: ""} == state.unprepare([ref, unknown])
    assert [] == cdi_files(tmp_path)
    assert {} == dict(state.prepared_claims())
    assert {ref.uid: ""} == state.unprepare([ref])


def test_a_started_prepare_is_rolled_back_and_redone(tmp_path: Path) -> None:
    """A kill between PrepareStarted and PrepareCompleted leaves state the next call cleans."""
    claims = Claims()
    ref = claims.add(allocated_claim())
    state = make_state(tmp_path, claims)
    store = CheckpointStore(tmp_path / "plugin", "boot-1")
    store.save(store.load().checkpoint.with_claim(ref.uid, ClaimEntry(ClaimState.PREPARE_STARTED, "default", "claim-a")))
    out = state.prepare([ref])[ref.uid]
    assert ["gpu-0"] == [d.device_name for d in out.devices]
    assert ClaimState.PREPARE_COMPLETED == state.prepared_claims()[ref.uid].state


def test_reboot_drops_state_and_orphaned_cdi_files(tmp_path: Path) -> None:
    """A boot id change forgets prepared claims and removes their (persisted) CDI files."""
    claims = Claims()
    ref = claims.add(allocated_claim())
    make_state(tmp_path, claims).prepare([ref])
    state = make_state(tmp_path, claims, boot="boot-2")
    assert {} == dict(state.prepared_claims())
    assert [] == cdi_files(tmp_path)
    assert ["gpu-0"] == [d.device_name for d in state.prepare([ref])[ref.uid].devices]


def test_prepare_waits_for_the_cross_process_lock_and_fails_clearly(tmp_path: Path) -> None:
    """While another process holds serialize.lock, prepare times out with a claim error, changing nothing."""
    from dra_driver.files.lock import file_lock

    claims = Claims()
    ref = claims.add(allocated_claim())
    state = make_state(tmp_path, claims)
    state._lock_timeout = 0.2
    with file_lock(tmp_path / "serialize.lock"):
        out = state.prepare([ref])
    assert "timed out" in out[ref.uid].error
    assert [] == cdi_files(tmp_path)


def test_real_gpus_get_device_nodes_and_the_toolkit_device(tmp_path: Path, device_state: DeviceStateFactory) -> None:
    """On NVML GPUs the spec carries /dev/nvidia<minor> plus control nodes, and the toolkit id is added."""
    claims = Claims()
    ref = claims.add(allocated_claim(devices=["gpu-2"]))
    gpus = FakeGpuSource("h100x8", "node-a").gpus()
    state = device_state(tmp_path, claims, boot="b", gpus=gpus, device_nodes=True, toolkit_devices=frozenset({gpus[2].uuid}))
    dev = state.prepare([ref])[ref.uid].devices[0]
    assert (f"k8s.{DRIVER}/claim={ref.uid}-gpu-2", f"nvidia.com/gpu={gpus[2].uuid}") == dev.cdi_device_ids
    spec = json.loads(next((tmp_path / "cdi").iterdir()).read_text())
    nodes = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert ["/dev/nvidia2", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"] == nodes


def test_fake_gpus_get_the_same_device_nodes_backed_by_a_host_device_every_node_has(
    tmp_path: Path, device_state: DeviceStateFactory
) -> None:
    """Fake GPUs: /dev/nvidia<minor> and the control nodes, each with hostPath /dev/null, no toolkit id."""
    claims = Claims()
    ref = claims.add(allocated_claim(devices=["gpu-3"]))
    state = device_state(tmp_path, claims, boot="b", device_nodes=True, device_node_host=FAKE_DEVICE_NODE_HOST)
    dev = state.prepare([ref])[ref.uid].devices[0]
    assert (f"k8s.{DRIVER}/claim={ref.uid}-gpu-3",) == dev.cdi_device_ids
    spec = json.loads(next((tmp_path / "cdi").iterdir()).read_text())
    nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]
    assert ["/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"] == [n["path"] for n in nodes]
    assert {"/dev/null"} == {n["hostPath"] for n in nodes}


def test_admin_access_claims_do_not_block_and_are_not_blocked(tmp_path: Path) -> None:
    """adminAccess results may use a device another claim holds (monitoring), in either order."""
    claims = Claims()
    admin_obj = allocated_claim(name="admin")
    admin_obj["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    admin = claims.add(admin_obj)
    user = claims.add(allocated_claim(name="user"))
    state = make_state(tmp_path, claims)
    assert "" == state.prepare([admin])[admin.uid].error
    assert "" == state.prepare([user])[user.uid].error
    assert state.prepared_claims()[admin.uid].devices[0].admin_access


def test_a_lost_checkpoint_forgets_an_unprepared_share_while_its_shared_daemon_runs_for_another(
    tmp_path: Path, device_state: DeviceStateFactory
) -> None:
    """Consumable shares of one GPU run under one MPS daemon: that it runs says nothing of a share already gone.

    (Found in review: the running daemon kept the unprepared share's entry, which then kept the
    daemon from stopping with the last real share.)
    """
    gpus = FakeGpuSource("a100-80x1", "node-a").gpus()
    claims = Claims()

    def start() -> DeviceState:
        return device_state(
            tmp_path, claims, publication=node_publication(gpus, MigStrategy.NONE, None, consumable=True), sharing=True
        )

    def share(name: str) -> ClaimRef:
        fields = [{"shareID": new_uid(), "consumedCapacity": {"memory": "20Gi"}}]
        return claims.add(allocated_claim(name=name, result_fields=fields))

    state = start()
    gone, kept = share("gone"), share("kept")
    for ref in (gone, kept):
        assert "" == state.prepare([ref])[ref.uid].error
    [daemon] = {d.daemon_id for e in state.prepared_claims().values() for d in e.mps_daemons}
    assert {gone.uid: ""} == state.unprepare([gone])
    (tmp_path / "plugin" / "checkpoint.json").unlink()  # the previous generation still holds `gone`
    state = start()
    assert {kept.uid} == set(state.prepared_claims())
    sharing = SimulatedSharing(tmp_path / "fake-gpus", tmp_path / "mps")
    assert sharing.mps_running(daemon)
    assert {kept.uid: ""} == state.unprepare([kept])
    assert not sharing.mps_running(daemon)  # stopped with the last share
