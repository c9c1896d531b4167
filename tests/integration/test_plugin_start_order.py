"""The real plugin serves its sockets before it has recovered its state: the kubelet can register it at once,
and the calls it makes meanwhile wait for recovery instead of failing (a failed prepare waits for the kubelet's
60-90 s resync).

Recovery is made slow on purpose: dynamic MIG instances no claim owns, left on two fake GPUs, which the
start-up sweep destroys at the simulator's realistic latencies (about 3 s a GPU: the instances, then MIG mode).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dra_driver.mig_backends.sim import load_instances
from dra_driver.sources.fake import FakeGpuSource
from proto.dra.v1 import api_pb2 as v1
from proto.dra.v1 import api_pb2_grpc as v1_grpc
from proto.pluginregistration import api_pb2 as reg
from proto.pluginregistration import api_pb2_grpc as reg_grpc
from testkit.claimdata import DRIVER
from testkit.claims import create_allocated_claim
from testkit.cluster import LocalCluster
from testkit.plugin_process import ROOT, PluginProcess

GPUS = FakeGpuSource("h100x8", "node-a").gpus()
SLOW_MIG = ("--mig", "dynamic", "--fake-mig-latency", "realistic", "--gc-interval", "0")
LEFTOVER_GPUS = ("6", "7")


def _leave_instances(p: PluginProcess) -> None:
    """Carve an instance on each of LEFTOVER_GPUS behind the plugin's back (same boot): no claim owns them."""
    p.sim_state.parent.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "dra_driver.mig_backends.sim", "--state", str(p.sim_state), "--fake-gpus", "h100x8"]
    base += ["--node-name", "node-a", "--boot-id", p.boot_id.read_text().strip()]
    for gpu in LEFTOVER_GPUS:
        for args in (("mode", "--gpu", gpu, "on"), ("carve", "--gpu", gpu, "--profile", "3g.40gb")):
            subprocess.run([*base, *args], cwd=ROOT, check=True, capture_output=True, timeout=60)


def _wait_for_registration_socket(p: PluginProcess, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return p.get_info()
        except grpc.RpcError:
            if time.monotonic() > deadline or (p.proc is not None and p.proc.poll() is not None):
                raise
            time.sleep(0.02)


def _get_info(registration: Path) -> Any:
    with grpc.insecure_channel(f"unix://{registration}") as ch:
        return reg_grpc.RegistrationStub(ch).GetInfo(reg.InfoRequest(), timeout=10)


def _readiness(p: PluginProcess, service: str = "readiness") -> int:
    deadline = time.monotonic() + 30
    while not (ports := [e["port"] for e in p.logs() if e.get("event") == "health_listening"]):
        assert time.monotonic() < deadline, "no health_listening"
        time.sleep(0.02)
    port = ports[-1]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        return int(health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status)


def _events(p: PluginProcess) -> list[str]:
    return [e.get("event", "") for e in p.logs()] if p.log.exists() else []


def test_registration_answers_during_recovery_and_a_prepare_sent_then_waits_for_it(
    tmp_path: Path, apiserver: LocalCluster
) -> None:
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=SLOW_MIG)
    p.plugin_dir.mkdir(parents=True, exist_ok=True)
    _leave_instances(p)
    ref = create_allocated_claim(apiserver, name=f"start-{uuid.uuid4().hex[:8]}", devices=["gpu-1"])
    starter = threading.Thread(target=p.start, kwargs={"timeout": 120}, daemon=True)
    starter.start()
    try:
        info = _wait_for_registration_socket(p)
        assert str(p.dra_socket) == info.endpoint
        assert "calls_accepted" not in _events(p), "registration must answer before recovery ends"
        p.notify(True)  # the kubelet accepts it; readiness still waits for recovery
        assert health_pb2.HealthCheckResponse.NOT_SERVING == _readiness(p)
        assert "calls_accepted" not in _events(p)

        resp = p.prepare([ref])  # held at the start gate

        assert "" == resp.claims[ref[1]].error
        assert ["gpu-1"] == [d.device_name for d in resp.claims[ref[1]].devices]
        events = _events(p)
        destroyed = [i for i, e in enumerate(events) if e == "mig_leftover_destroyed"]
        assert len(destroyed) >= len(LEFTOVER_GPUS)
        assert events.index("sockets_listening") < destroyed[0] and destroyed[-1] < events.index("calls_accepted")
        starter.join(120)
        assert health_pb2.HealthCheckResponse.SERVING == _readiness(p)
        left = load_instances(p.sim_state)
        assert all(not left.get(GPUS[int(g)].uuid) for g in LEFTOVER_GPUS)
    finally:
        p.stop()


def test_a_start_up_that_fails_behind_serving_sockets_removes_them_and_exits_non_zero(
    tmp_path: Path, apiserver: LocalCluster
) -> None:
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=SLOW_MIG)
    p.plugin_dir.mkdir(parents=True, exist_ok=True)
    p.sim_state.parent.mkdir(parents=True, exist_ok=True)
    p.sim_state.write_text("{ not the simulator's state")
    try:
        p.start(timeout=60)
    except RuntimeError as err:
        assert "plugin exited with 1" in str(err)
    else:
        raise AssertionError("the plugin started over an unreadable MIG state")
    events = _events(p)
    assert events.index("sockets_listening") < events.index("plugin_failed")
    assert "calls_accepted" not in events
    assert not p.reg_socket.exists() and not p.dra_socket.exists()


def test_a_rolling_updates_new_pod_registers_only_once_recovered_while_the_old_pod_answers(
    tmp_path: Path, apiserver: LocalCluster
) -> None:
    """The kubelet calls the newest registration: a new pod registered while recovering would hold calls the old one answers."""
    shared: dict[str, Any] = {
        "registrar_dir": tmp_path / "registry",
        "plugins_dir": tmp_path / "plugins",
        "cdi_root": tmp_path / "cdi",
    }
    old = PluginProcess(
        tmp_path / "old", kubeconfig=apiserver.kubeconfig, extra_args=(*SLOW_MIG, "--pod-uid", "old-pod"), **shared
    )
    new = PluginProcess(
        tmp_path / "new", kubeconfig=apiserver.kubeconfig, extra_args=(*SLOW_MIG, "--pod-uid", "new-pod"), **shared
    )
    new_reg = new.registrar / f"{DRIVER}-new-pod-reg.sock"
    old.start(timeout=60)
    try:
        _leave_instances(new)  # behind both: only the new pod's start-up sweep meets them
        starter = threading.Thread(target=new.start, kwargs={"timeout": 120}, daemon=True)
        starter.start()
        deadline = time.monotonic() + 60
        while "registration_deferred" not in _events(new):
            assert time.monotonic() < deadline, "the new pod never logged registration_deferred"
            time.sleep(0.02)
        assert not new_reg.exists()
        ref = create_allocated_claim(apiserver, name=f"rolling-{uuid.uuid4().hex[:8]}", devices=["gpu-2"])
        with grpc.insecure_channel(f"unix://{old.plugin_dir / 'dra-old-pod.sock'}") as ch:
            req = v1.NodePrepareResourcesRequest(claims=[v1.Claim(namespace=ref[0], uid=ref[1], name=ref[2])])
            answered = v1_grpc.DRAPluginStub(ch).NodePrepareResources(req, timeout=10)
        assert "" == answered.claims[ref[1]].error  # the old pod answers while the new one recovers
        assert "calls_accepted" not in _events(new) and not new_reg.exists()
        serving = health_pb2.HealthCheckResponse.SERVING
        assert serving == _readiness(new, "liveness")  # alive without its registration socket: it is not served yet
        starter.join(120)
        events = _events(new)
        destroyed = [i for i, e in enumerate(events) if e == "mig_leftover_destroyed"]
        assert len(destroyed) >= len(LEFTOVER_GPUS)
        assert destroyed[-1] < events.index("registration_listening") and "calls_accepted" in events
        assert str(new.plugin_dir / "dra-new-pod.sock") == _get_info(new_reg).endpoint
    finally:
        new.stop()
        old.stop()
