"""Device status (KEP-4817): the pure entry builder, and the reporter that writes it off the prepare path."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from structlog.testing import capture_logs

from dra_driver.appkit.inventory import node_publication
from dra_driver.core.api_errors import ApiError
from dra_driver.core.cdi import DeviceEdits, cdi_device_id, claim_spec
from dra_driver.core.checkpoint import MigRecord, PreparedDevice
from dra_driver.core.device_status import (
    DATA_MAX_BYTES,
    MAX_CONDITIONS,
    DeviceStatus,
    DeviceStatusError,
    apply_configuration,
    check_limits,
    device_statuses,
    entries_of,
)
from dra_driver.core.mig import MigStrategy
from dra_driver.sources.fake import FakeGpuSource
from kubelet_plugin.monitoring.device_status import DeviceStatusReporter, StatusWriter
from kubelet_plugin.prepare.requests import ClaimRef, Outcome
from kubelet_plugin.servicer import DraV1Servicer
from kubelet_plugin.start_gate import StartGate
from proto.dra.v1 import api_pb2 as v1
from testkit.claimdata import DRIVER, allocated_claim, new_uid
from tests.unit.kubelet_plugin.device_states import Claims, DeviceStateFactory

NOW = "2026-11-25T10:00:00Z"
UID = "6f1c0d1e-1111-4222-8333-444455556666"
GPU_UUID = "GPU-30134652-662c-56d2-8e63-df5dff4ab8a9"
MIG_UUID = "MIG-b7b481ff-ed78-53ce-baea-63e6e38517ce"
NO_CONTEXT = cast(grpc.ServicerContext, object())


def prepared(
    device: str, *, share_id: str | None = None, mig: MigRecord | None = None, requests: tuple[str, ...] = ("gpu",)
) -> PreparedDevice:
    return PreparedDevice(requests, "node-a", device, (cdi_device_id(DRIVER, UID, device, share_id),), share_id, mig=mig)


def spec(*edits: DeviceEdits) -> dict[str, Any]:
    return claim_spec(DRIVER, UID, list(edits))


def build(devices: list[PreparedDevice], cdi: dict[str, Any] | None) -> tuple[DeviceStatus, ...]:
    return device_statuses(driver=DRIVER, claim_uid=UID, devices=devices, cdi_spec=cdi, node_name="node-a", now=NOW)


# -- the pure builder ---------------------------------------------------------------------------


def test_full_gpu_entry_reports_the_uuid_its_containers_get_and_a_ready_condition() -> None:
    cdi = spec(DeviceEdits("gpu-3", env={"GPU_DEVICE_GPU_3": "gpu-3", "GPU_DEVICE_GPU_3_UUID": GPU_UUID}))
    (status,) = build([prepared("gpu-3")], cdi)
    assert status.to_json() == {
        "driver": DRIVER,
        "pool": "node-a",
        "device": "gpu-3",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Prepared",
                "message": "prepared on node node-a",
                "lastTransitionTime": NOW,
            }
        ],
        "data": {"uuid": GPU_UUID, "requests": ["gpu"], "cdiDeviceIDs": [f"k8s.{DRIVER}/claim={UID}-gpu-3"]},
    }


def test_mig_entry_reports_mig_uuid_parent_profile_and_placement() -> None:
    rec = MigRecord(GPU_UUID, 19, "1g.10gb", 6, 1, gi_id=13, ci_id=0, mig_uuid=MIG_UUID)
    env = {
        "GPU_DEVICE_GPU_0_MIG_1G10GB_6_UUID": MIG_UUID,
        "GPU_DEVICE_GPU_0_MIG_1G10GB_6_PARENT_UUID": GPU_UUID,
        "GPU_DEVICE_GPU_0_MIG_1G10GB_6_MIG_PROFILE": "1g.10gb",
    }
    (status,) = build([prepared("gpu-0-mig-1g10gb-6", mig=rec)], spec(DeviceEdits("gpu-0-mig-1g10gb-6", env=env)))
    assert {k: v for k, v in status.data.items() if k not in ("requests", "cdiDeviceIDs")} == {
        "uuid": MIG_UUID,
        "parentUUID": GPU_UUID,
        "profile": "1g.10gb",
        "placement": {"start": 6, "size": 1},
    }


def test_without_a_cdi_spec_only_what_the_checkpoint_knows_is_reported() -> None:
    """A claim rebuilt after a lost checkpoint may have no spec: the MIG record still names the device; no guesses."""
    rec = MigRecord(GPU_UUID, 19, "1g.10gb", 6, 1, mig_uuid=MIG_UUID)
    mig, full = build([prepared("gpu-0-mig-1g10gb-6", mig=rec), prepared("gpu-1")], None)
    assert (mig.data["uuid"], mig.data["parentUUID"], mig.data["profile"]) == (MIG_UUID, GPU_UUID, "1g.10gb")
    assert "uuid" not in full.data and "sharing" not in full.data


def test_a_malformed_cdi_spec_yields_what_is_certain_and_never_raises() -> None:
    """The spec comes back from the checkpoint file: any shape is tolerated, odd values are left out."""
    p = "GPU_DEVICE_GPU_0_0000"
    odd: list[Any] = [{"devices": "x"}, {"devices": [{"name": f"{UID}-gpu-0", "containerEdits": {"env": [1, None]}}]}, []]
    for cdi in odd:
        (status,) = build([prepared("gpu-0")], cdi)
        assert set(status.data) == {"requests", "cdiDeviceIDs"}
    share = "0000"
    env = {f"{p}_MEMORY_LIMIT": "9" * 5000, f"{p}_COMPUTE_SHARE": "²"}
    (status,) = build([prepared("gpu-0", share_id=share)], spec(DeviceEdits("gpu-0", share, env=env)))
    assert "sharing" not in status.data


def test_a_share_is_keyed_by_share_id_and_reports_its_grant() -> None:
    share = new_uid()
    p = f"GPU_DEVICE_GPU_0_{share.upper().replace('-', '_')}"
    env = {f"{p}_UUID": GPU_UUID, f"{p}_SHARING_STRATEGY": "ConsumableCapacity", f"{p}_MEMORY_LIMIT": str(20 << 30)}
    (status,) = build([prepared("gpu-0", share_id=share)], spec(DeviceEdits("gpu-0", share, env=env)))
    assert status.to_json()["shareID"] == share
    assert status.data["sharing"] == {"strategy": "ConsumableCapacity", "memoryBytes": 20 << 30}
    assert status.data["uuid"] == GPU_UUID


def test_time_slicing_config_is_reported_and_one_device_for_two_requests_is_one_entry() -> None:
    env = {
        "GPU_DEVICE_GPU_1_UUID": GPU_UUID,
        "GPU_DEVICE_GPU_1_SHARING_STRATEGY": "TimeSlicing",
        "GPU_DEVICE_GPU_1_TIMESLICE_INTERVAL": "Long",
    }
    both = [prepared("gpu-1", requests=("a",)), prepared("gpu-1", requests=("b",))]
    (status,) = build(both, spec(DeviceEdits("gpu-1", env=env)))
    assert status.data["sharing"] == {"strategy": "TimeSlicing", "interval": "Long"}
    assert "shareID" not in status.to_json()


def test_data_over_10_kib_or_more_than_8_conditions_is_refused_before_sending() -> None:
    ids = tuple(f"k8s.{DRIVER}/claim={UID}-{i:04d}-{'x' * 40}" for i in range(200))
    big = PreparedDevice(("gpu",), "node-a", "gpu-0", ids)
    with pytest.raises(DeviceStatusError, match=f"device gpu-0: data is [0-9]+ bytes of JSON, the API allows {DATA_MAX_BYTES}"):
        build([big], None)
    ready = {"type": "Ready", "status": "True", "reason": "Prepared", "message": "", "lastTransitionTime": NOW}
    conditions = tuple({**ready, "type": f"T{i}"} for i in range(MAX_CONDITIONS + 1))
    with pytest.raises(DeviceStatusError, match="9 conditions, the API allows 8"):
        check_limits(DeviceStatus(DRIVER, "node-a", "gpu-0", None, {}, conditions))
    check_limits(DeviceStatus(DRIVER, "node-a", "gpu-0", None, {}, conditions[:MAX_CONDITIONS]))  # 8 is fine


def test_apply_body_carries_the_uid_and_only_our_entries_and_an_empty_status_to_remove_them() -> None:
    (status,) = build([prepared("gpu-3")], None)
    body = apply_configuration(namespace="ns", name="c", uid=UID, statuses=[status])
    assert body["metadata"] == {"name": "c", "namespace": "ns", "uid": UID}
    assert [d["device"] for d in body["status"]["devices"]] == ["gpu-3"]
    assert apply_configuration(namespace="ns", name="c", uid=UID, statuses=[])["status"] == {}
    claim = {"status": {"devices": [{"driver": "net.example.com", "device": "eth1"}, status.to_json()]}}
    assert [e["device"] for e in entries_of(claim, DRIVER)] == ["gpu-3"]
    assert entries_of({"status": {"devices": "garbage"}}, DRIVER) == []


# -- the reporter ---------------------------------------------------------------------------------


class Writer:
    """A StatusWriter that records bodies and answers from a script (an exception or a claim)."""

    def __init__(self, *answers: ApiError | dict[str, Any]) -> None:
        self.answers = list(answers)
        self.calls: list[dict[str, Any]] = []
        self.gate = threading.Event()
        self.gate.set()

    def apply_status(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.gate.wait(10)
        self.calls.append(body)
        answer = self.answers.pop(0) if self.answers else {"status": body.get("status", {})}
        if isinstance(answer, ApiError):
            raise answer
        return answer


def reporter(writer: StatusWriter, **kwargs: Any) -> DeviceStatusReporter:
    return DeviceStatusReporter(driver=DRIVER, node_name="node-a", writer=lambda: writer, first_delay_s=0.01, **kwargs)


REF = ClaimRef("default", UID, "claim-a")
OUTCOME = Outcome(devices=(prepared("gpu-3"),))


def events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == name]


def test_reporter_writes_then_removes_with_claim_uid_in_every_log_event() -> None:
    w = Writer()
    r = reporter(w)
    with capture_logs() as logs:
        r.prepared(REF, OUTCOME)
        assert r.idle(5)
        r.unprepared(REF)
        assert r.idle(5)
    r.stop()
    assert [len(c["status"].get("devices", [])) for c in w.calls] == [1, 0]
    assert [e["event"] for e in logs] == ["device_status_written", "device_status_removed"]
    assert all(e["claim_uid"] == UID for e in logs)


def test_a_repeated_prepare_applies_the_same_entry_and_a_new_prepare_after_unprepare_a_new_time() -> None:
    """The kubelet prepares a claim again after its restart: the same body (the API server stores nothing new)."""
    w = Writer()
    r = reporter(w)
    r.prepared(REF, OUTCOME)
    assert r.idle(5)
    time.sleep(1.1)  # the condition's time has a resolution of one second
    r.prepared(REF, OUTCOME)
    assert r.idle(5)
    r.unprepared(REF)
    assert r.idle(5)
    r.prepared(REF, OUTCOME)
    assert r.idle(5)
    r.stop()
    first, again, _, later = (c["status"].get("devices") for c in w.calls)
    assert again == first
    assert later is not None and first is not None
    assert later[0]["conditions"][0]["lastTransitionTime"] > first[0]["conditions"][0]["lastTransitionTime"]


def test_an_unprepare_queued_behind_its_prepare_replaces_it() -> None:
    w = Writer()
    w.gate.clear()  # the worker is stuck writing another claim
    r = reporter(w)
    other = ClaimRef("default", new_uid(), "other")
    r.prepared(other, OUTCOME)
    time.sleep(0.05)
    r.prepared(REF, OUTCOME)
    r.unprepared(REF)
    w.gate.set()
    assert r.idle(5)
    r.stop()
    assert [c["metadata"]["uid"] for c in w.calls] == [other.uid, UID]
    assert w.calls[1]["status"] == {}  # only the removal was written


def test_forbidden_is_logged_once_with_the_rbac_to_grant_and_never_retried() -> None:
    """403 from the authorizer, and the 1.36+ per-driver check's 422 (a Forbidden cause) alike."""
    driver_check = (
        'ResourceClaim.resource.k8s.io "b" is invalid: status.devices: Forbidden: changing status.devices requires '
        'resource="resourceclaims/driver", verb="[arbitrary-node:patch]" permission'
    )
    rbac = 'cannot patch resource "resourceclaims/status"'
    w = Writer(ApiError(403, "Forbidden", rbac), ApiError(422, "Invalid", driver_check))
    r = reporter(w)
    with capture_logs() as logs:
        r.prepared(REF, OUTCOME)
        r.prepared(ClaimRef("default", new_uid(), "b"), OUTCOME)
        assert r.idle(5)
    r.stop()
    assert len(w.calls) == 2  # one attempt per claim
    forbidden = events(logs, "device_status_forbidden")
    assert [e["log_level"] for e in forbidden] == ["error", "debug"]
    assert "associated-node:patch on resourceclaims/driver" in forbidden[0]["hint"]


def test_a_refusal_by_the_charts_claim_status_policy_names_the_policy_not_rbac() -> None:
    """Before 1.36 the chart's ValidatingAdmissionPolicy is what refuses a write to another node's claim: a 403."""
    policy = (
        "resourceclaims.resource.k8s.io \"a\" is forbidden: ValidatingAdmissionPolicy 'dra-gpu-resourceclaim-status' "
        "with binding 'dra-gpu-resourceclaim-status' denied request: the dra-gpu kubelet plugin may only change "
        "status.devices of ResourceClaims allocated to its own node (node-a); denied: ResourceClaim default/a is "
        "allocated to node node-b"
    )
    w = Writer(ApiError(403, "Forbidden", policy))
    r = reporter(w)
    with capture_logs() as logs:
        r.prepared(REF, OUTCOME)
        assert r.idle(5)
    r.stop()
    assert len(w.calls) == 1  # a refusal is final: not retried
    (forbidden,) = events(logs, "device_status_forbidden")
    assert "claim status admission policy" in forbidden["hint"]
    assert "associated-node:patch" not in forbidden["hint"]


def test_server_errors_are_retried_with_backoff_then_given_up() -> None:
    w = Writer(*[ApiError(503, "ServiceUnavailable", "etcd")] * 10)
    r = reporter(w, attempts=3)
    with capture_logs() as logs:
        r.prepared(REF, OUTCOME)
        assert r.idle(5)
    r.stop()
    assert len(w.calls) == 3
    assert [e["delay_s"] for e in events(logs, "device_status_retry")] == [0.01, 0.02]
    (gave_up,) = events(logs, "device_status_gave_up")
    assert (gave_up["attempts"], gave_up["status"], gave_up["claim_uid"]) == (3, 503, UID)


def test_a_conflict_is_retried_and_then_written() -> None:
    w = Writer(ApiError(409, "Conflict", "try again"))
    r = reporter(w)
    with capture_logs() as logs:
        r.prepared(REF, OUTCOME)
        assert r.idle(5)
    r.stop()
    assert len(w.calls) == 2
    assert [e["event"] for e in logs] == ["device_status_retry", "device_status_written"]


def test_a_deleted_claim_or_a_refused_entry_is_done_after_one_attempt() -> None:
    w = Writer(ApiError(404, "NotFound", "gone"), ApiError(422, "Invalid", "metadata.uid: field is immutable"))
    r = reporter(w)
    with capture_logs() as logs:
        r.prepared(REF, OUTCOME)
        assert r.idle(5)
        r.prepared(ClaimRef("default", new_uid(), "replaced"), OUTCOME)
        assert r.idle(5)
    r.stop()
    assert len(w.calls) == 2
    assert [e["event"] for e in logs] == ["device_status_claim_gone", "device_status_rejected"]
    assert events(logs, "device_status_rejected")[0]["status"] == 422


def test_a_server_that_drops_the_field_is_reported_once() -> None:
    w = Writer({"status": {}}, {"status": {}})
    r = reporter(w)
    with capture_logs() as logs:
        r.prepared(REF, OUTCOME)
        r.prepared(ClaimRef("default", new_uid(), "b"), OUTCOME)
        assert r.idle(5)
    r.stop()
    assert [e["log_level"] for e in events(logs, "device_status_not_stored")] == ["warning", "debug"]


def test_the_queue_is_bounded_and_drops_what_does_not_fit() -> None:
    w = Writer()
    w.gate.clear()
    r = reporter(w, max_pending=2)
    with capture_logs() as logs:
        r.prepared(ClaimRef("default", new_uid(), "in-flight"), OUTCOME)
        time.sleep(0.05)  # taken by the worker
        refs = [ClaimRef("default", new_uid(), f"c{i}") for i in range(3)]
        for ref in refs:
            r.prepared(ref, OUTCOME)
        w.gate.set()
        assert r.idle(5)
    r.stop()
    assert [c["metadata"]["name"] for c in w.calls] == ["in-flight", "c0", "c1"]
    (dropped,) = events(logs, "device_status_dropped")
    assert dropped["claim_uid"] == refs[2].uid


def test_no_api_client_turns_status_off_without_blocking_callers() -> None:
    def broken() -> StatusWriter:
        raise RuntimeError("bad kubeconfig")

    with capture_logs() as logs:
        r = DeviceStatusReporter(driver=DRIVER, node_name="node-a", writer=broken)
        assert r.idle(5)
        r.prepared(REF, OUTCOME)  # ignored, does not block
        assert r.idle(1)
    assert events(logs, "device_status_off")[0]["error"] == "RuntimeError: bad kubeconfig"


def test_prepare_answers_while_the_status_write_hangs_and_the_entry_matches_the_cdi_spec(
    tmp_path: Path, device_state: DeviceStateFactory
) -> None:
    """The servicer's answer does not wait for the API server; what is written later is what the CDI spec says."""
    claims = Claims()
    share = new_uid()
    ref = claims.add(allocated_claim(result_fields=[{"shareID": share, "consumedCapacity": {"memory": "20Gi"}}]))
    gpus = FakeGpuSource("a100-80x1", "node-a").gpus()
    state = device_state(
        tmp_path, claims, publication=node_publication(gpus, MigStrategy.NONE, None, consumable=True), sharing=True
    )
    w = Writer()
    w.gate.clear()  # the API server hangs
    r = reporter(w)
    servicer = DraV1Servicer(StartGate.opened(state, r))
    claim = v1.Claim(namespace=ref.namespace, uid=ref.uid, name=ref.name)
    start = time.monotonic()
    resp = servicer.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=[claim]), NO_CONTEXT)
    assert time.monotonic() - start < 2.0 and resp.claims[ref.uid].error == ""
    assert not w.calls
    w.gate.set()
    assert r.idle(5)
    (entry,) = w.calls[0]["status"]["devices"]
    spec_file = tmp_path / "cdi" / f"k8s.{DRIVER}-claim_{ref.uid}.json"
    (cdi_device,) = json.loads(spec_file.read_text())["devices"]
    env = dict(e.split("=", 1) for e in cdi_device["containerEdits"]["env"])
    assert (entry["device"], entry["shareID"]) == ("gpu-0", share)
    assert entry["data"]["uuid"] in env.values() and entry["data"]["uuid"].startswith("GPU-")
    assert entry["data"]["sharing"] == {"strategy": "ConsumableCapacity", "memoryBytes": 20 << 30}
    assert entry["data"]["cdiDeviceIDs"] == list(resp.claims[ref.uid].devices[0].cdi_device_ids)

    servicer.NodeUnprepareResources(v1.NodeUnprepareResourcesRequest(claims=[claim]), NO_CONTEXT)
    assert r.idle(5)
    r.stop()
    assert w.calls[-1]["status"] == {} and w.calls[-1]["metadata"]["uid"] == ref.uid


def test_writes_wait_while_dra_calls_are_in_flight_and_go_out_once_they_quiet_down() -> None:
    """The kubelet's calls come first: nothing is written during a call, the write follows its end."""
    w = Writer()
    r = reporter(w)
    r.call_started()
    r.prepared(REF, OUTCOME)
    time.sleep(0.3)  # far past QUIET_S, well below MAX_DEFER_S
    assert w.calls == []
    r.call_finished()
    assert r.idle(5)
    r.stop()
    assert len(w.calls) == 1


def test_a_write_waits_at_most_max_defer_under_calls_that_never_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    from kubelet_plugin.monitoring import device_status

    monkeypatch.setattr(device_status, "MAX_DEFER_S", 0.4)
    w = Writer()
    r = reporter(w)
    r.call_started()  # never finishes
    t0 = time.monotonic()
    r.prepared(REF, OUTCOME)
    assert r.idle(5)
    waited = time.monotonic() - t0
    r.stop()
    assert len(w.calls) == 1
    assert 0.35 <= waited < 3.0
