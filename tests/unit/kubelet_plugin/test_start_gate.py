"""Calls that reach the DRA socket while the plugin still recovers wait for it, and are refused if it never does."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from kubelet_plugin.servicer import DraV1beta1Servicer, DraV1Servicer
from kubelet_plugin.start_gate import NotReady, Parts, StartGate
from proto.dra.v1 import api_pb2 as v1
from proto.dra.v1beta1 import api_pb2 as v1beta1
from testkit.claimdata import allocated_claim
from tests.unit.kubelet_plugin.device_states import Claims, DeviceStateFactory

NO_CONTEXT = cast(grpc.ServicerContext, object())


def _in_thread(call: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(call()), daemon=True)
    t.start()
    return t, out


def test_a_prepare_that_arrives_during_recovery_waits_and_is_answered_from_the_recovered_state(
    tmp_path: Path, device_state: DeviceStateFactory
) -> None:
    claims = Claims()
    ref = claims.add(allocated_claim(devices=["gpu-3"]))
    gate = StartGate()
    request = v1.NodePrepareResourcesRequest(claims=[v1.Claim(namespace=ref.namespace, uid=ref.uid, name=ref.name)])
    t, out = _in_thread(lambda: DraV1Servicer(gate).NodePrepareResources(request, NO_CONTEXT))
    t.join(0.3)
    assert t.is_alive(), "the call must wait for start-up, not answer from no state"
    state = device_state(tmp_path, claims)
    gate.open(Parts(state))
    t.join(10)
    [resp] = out
    assert "" == resp.claims[ref.uid].error
    assert ["gpu-3"] == [d.device_name for d in resp.claims[ref.uid].devices]
    assert ref.uid in state.prepared_snapshot()


def test_an_empty_call_is_answered_at_once_while_recovery_runs() -> None:
    gate = StartGate()
    assert 0 == len(DraV1Servicer(gate).NodePrepareResources(v1.NodePrepareResourcesRequest(), NO_CONTEXT).claims)
    assert 0 == len(DraV1beta1Servicer(gate).NodeUnprepareResources(v1beta1.NodeUnprepareResourcesRequest(), NO_CONTEXT).claims)
    assert not gate.is_open


@pytest.mark.parametrize("operation", ["prepare", "unprepare"])
def test_a_failed_start_up_refuses_every_held_claim_naming_why(operation: str) -> None:
    gate = StartGate()
    wanted = [v1.Claim(namespace="default", uid=f"uid-{i}", name=f"claim-{i}") for i in range(3)]
    servicer = DraV1Servicer(gate)

    def call() -> Any:
        if operation == "prepare":
            return servicer.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=wanted), NO_CONTEXT)
        return servicer.NodeUnprepareResources(v1.NodeUnprepareResourcesRequest(claims=wanted), NO_CONTEXT)

    t, out = _in_thread(call)
    t.join(0.2)
    assert t.is_alive()
    gate.fail("RuntimeError: NVML is not loaded")
    t.join(10)
    [resp] = out
    assert {c.uid for c in wanted} == set(resp.claims)
    for c in wanted:
        assert "the plugin failed to start: RuntimeError: NVML is not loaded" == resp.claims[c.uid].error
    if operation == "prepare":
        assert all(not resp.claims[c.uid].devices for c in wanted)


def test_a_start_up_that_outlasts_the_hold_says_the_plugin_is_still_recovering() -> None:
    with pytest.raises(NotReady, match=r"still recovering its state after 0\.05s; retry"):
        StartGate().wait(0.05)


def test_the_gate_opens_once_and_a_later_failure_changes_nothing(tmp_path: Path, device_state: DeviceStateFactory) -> None:
    gate = StartGate()
    parts = Parts(device_state(tmp_path, Claims()))
    gate.open(parts)
    gate.fail("stopping")
    assert gate.wait(0) is parts
    with pytest.raises(RuntimeError, match="already opened or failed"):
        gate.open(parts)


def test_a_gate_failed_first_is_never_opened_after(tmp_path: Path, device_state: DeviceStateFactory) -> None:
    gate = StartGate()
    gate.fail("SIGTERM during start-up")
    with pytest.raises(RuntimeError, match="already opened or failed"):
        gate.open(Parts(device_state(tmp_path, Claims())))
    with pytest.raises(NotReady, match="failed to start: SIGTERM during start-up"):
        gate.wait(0)


def test_calls_beyond_the_held_limit_are_refused_at_once_so_workers_stay_free(
    tmp_path: Path, device_state: DeviceStateFactory
) -> None:
    gate = StartGate(max_held=2)
    held = [threading.Thread(target=lambda: gate.wait(10), daemon=True) for _ in range(2)]
    for t in held:
        t.start()
    time.sleep(0.2)
    start = time.monotonic()
    with pytest.raises(NotReady, match="2 calls already wait for it; retry"):
        gate.wait(10)
    assert time.monotonic() - start < 1.0
    gate.open(Parts(device_state(tmp_path, Claims())))
    for t in held:
        t.join(5)
        assert not t.is_alive()
    assert gate.wait(0) is gate.parts  # open: no limit


def test_listeners_run_when_the_gate_opens_and_never_when_it_fails(tmp_path: Path, device_state: DeviceStateFactory) -> None:
    opened, failed = StartGate(), StartGate()
    heard: list[str] = []
    opened.when_open(lambda: heard.append("opened"))
    failed.when_open(lambda: heard.append("failed"))
    assert [] == heard
    opened.open(Parts(device_state(tmp_path, Claims())))
    failed.fail("boom")
    assert ["opened"] == heard
