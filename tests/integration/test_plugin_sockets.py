"""The real plugin daemon, driven over its unix sockets the way the kubelet drives it.

Claims live in a real kube-apiserver (built from source); the client is generated from proto/.
"""

from __future__ import annotations

import json
import stat
import time
import uuid
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kubelet_plugin.prepare.faults import POINTS
from proto.dra.v1 import api_pb2 as v1
from proto.dra.v1beta1 import api_pb2 as v1beta1
from testkit.claimdata import DRIVER
from testkit.claims import create_allocated_claim
from testkit.cluster import LocalCluster
from testkit.plugin_process import PluginProcess


def name() -> str:
    return f"c-{uuid.uuid4().hex[:8]}"


def answer(
    resp: v1.NodePrepareResourcesResponse | v1beta1.NodePrepareResourcesResponse, uid: str
) -> tuple[str, list[tuple[list[str], str, str, list[str]]]]:
    c = resp.claims[uid]
    return c.error, [(list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids)) for d in c.devices]


def test_registration_info_names_the_dra_socket_and_versions(plugin: PluginProcess) -> None:
    """GetInfo: type DRAPlugin, our driver, the absolute DRA socket, v1 listed before v1beta1."""
    info = plugin.get_info()
    assert ("DRAPlugin", DRIVER, str(plugin.dra_socket)) == (info.type, info.name, info.endpoint)
    # The DRA services first (the kubelet takes the first it supports), then the health stream's.
    assert ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"] == list(
        info.supported_versions
    )
    plugin.notify(True)
    plugin.notify(False, "test rejection")
    events = [e["event"] for e in plugin.logs()]
    assert "plugin_registered" in events and "plugin_registration_failed" in events


def test_sockets_are_owner_only(plugin: PluginProcess) -> None:
    """Nobody but the owner (root on a node) can talk to the plugin."""
    for sock in (plugin.reg_socket, plugin.dra_socket):
        mode = sock.stat().st_mode
        assert stat.S_ISSOCK(mode)
        assert 0o600 == mode & 0o777


def test_kubelet_sequence_over_v1_and_v1beta1(plugin: PluginProcess, apiserver: LocalCluster) -> None:
    """prepare, prepare again, unprepare, unprepare again; both API versions at the upstream paths."""
    ns, uid, n = create_allocated_claim(apiserver, name=name(), devices=["gpu-2", "gpu-5"], requests=["gpus", "gpus"])
    err, devices = answer(plugin.prepare([(ns, uid, n)]), uid)
    assert "" == err
    expected = [
        (["gpus"], "node-a", "gpu-2", [f"k8s.{DRIVER}/claim={uid}-gpu-2"]),
        (["gpus"], "node-a", "gpu-5", [f"k8s.{DRIVER}/claim={uid}-gpu-5"]),
    ]
    assert expected == devices
    assert (err, devices) == answer(plugin.prepare([(ns, uid, n)], version="v1beta1"), uid)
    spec = json.loads((plugin.cdi / f"k8s.{DRIVER}-claim_{uid}.json").read_text())
    assert {f"{uid}-gpu-2", f"{uid}-gpu-5"} == {d["name"] for d in spec["devices"]}
    assert "" == plugin.unprepare([(ns, uid, n)]).claims[uid].error
    assert [] == plugin.cdi_files()
    assert "" == plugin.unprepare([(ns, uid, n)], version="v1beta1").claims[uid].error


def test_bad_inputs_get_per_claim_errors_and_leave_no_state(plugin: PluginProcess, apiserver: LocalCluster) -> None:
    """Unknown claim, malformed UID, other node, other driver, garbage config: clear errors, nothing written."""
    bad_cfg = [
        {
            "source": "FromClaim",
            "requests": [],
            "opaque": {
                "driver": DRIVER,
                "parameters": {
                    "apiVersion": "resource.dra-gpu.dev/v1alpha1",
                    "kind": "GpuConfig",
                    "sharing": {"strategy": "Magic"},
                },
            },
        }
    ]
    cases = {
        "garbage-config": create_allocated_claim(apiserver, name=name(), config=bad_cfg),
        "other-node": create_allocated_claim(apiserver, name=name(), node="node-b"),
        "other-driver": create_allocated_claim(apiserver, name=name(), driver="gpu.nvidia.com"),
        "unknown-claim": ("default", str(uuid.uuid4()), "does-not-exist"),
        "malformed-uid": ("default", "../../../etc", "whatever"),
    }
    resp = plugin.prepare(list(cases.values()))
    errors = {k: resp.claims[v[1]].error for k, v in cases.items()}
    assert "sharing.strategy: unknown value 'Magic'" in errors["garbage-config"]
    assert "not this node's pool 'node-a'" in errors["other-node"]
    assert "no allocation results for driver" in errors["other-driver"]
    assert "not found" in errors["unknown-claim"]
    assert "not a valid Kubernetes UID" in errors["malformed-uid"]
    assert [] == plugin.cdi_files()
    ckpt = (
        json.loads((plugin.plugin_dir / "checkpoint.json").read_text())
        if (plugin.plugin_dir / "checkpoint.json").exists()
        else {"data": {"claims": {}}}
    )
    assert {} == ckpt["data"]["claims"]
    assert plugin.proc is not None and plugin.proc.poll() is None  # the daemon is still up


def test_restart_between_prepare_and_unprepare_keeps_the_answer(plugin: PluginProcess, apiserver: LocalCluster) -> None:
    """A restarted plugin answers a repeated prepare identically and unprepares what the old one prepared."""
    ref = create_allocated_claim(apiserver, name=name(), devices=["gpu-1"])
    first = answer(plugin.prepare([ref]), ref[1])
    assert 0 == plugin.stop()
    assert not plugin.reg_socket.exists() and not plugin.dra_socket.exists()  # removed on SIGTERM
    plugin.start()
    assert first == answer(plugin.prepare([ref]), ref[1])
    assert "" == plugin.unprepare([ref]).claims[ref[1]].error
    plugin.stop()
    plugin.start()
    assert [] == plugin.cdi_files()
    assert "" == plugin.unprepare([ref]).claims[ref[1]].error


@pytest.mark.parametrize("point", [p for p in POINTS if "prepare" in p and "unprepare" not in p])
def test_kill_9_during_prepare_then_restart_gives_the_same_answer(
    plugin: PluginProcess, apiserver: LocalCluster, point: str
) -> None:
    """kill -9 at each step of prepare; after restart the answer is the same and exactly one CDI file exists."""
    ref = create_allocated_claim(apiserver, name=name(), devices=["gpu-4"])
    reference = answer(plugin.prepare([ref]), ref[1])
    plugin.unprepare([ref])
    plugin.stop()
    plugin.start(crash_at=point)
    with pytest.raises(grpc.RpcError):
        plugin.prepare([ref])
    assert -9 == plugin.wait_exit()
    plugin.start()
    assert reference == answer(plugin.prepare([ref]), ref[1])
    assert [f"k8s.{DRIVER}-claim_{ref[1]}.json"] == plugin.cdi_files()  # no duplicate, no temp file
    assert "" == plugin.unprepare([ref]).claims[ref[1]].error
    assert [] == plugin.cdi_files()


def test_kill_9_during_unprepare_then_restart_finishes_it(plugin: PluginProcess, apiserver: LocalCluster) -> None:
    """A kill between removing the CDI file and forgetting the claim is finished by the next unprepare."""
    ref = create_allocated_claim(apiserver, name=name(), devices=["gpu-6"])
    plugin.stop()
    plugin.start(crash_at="after_unprepare_cdi_removed")
    assert "" == answer(plugin.prepare([ref]), ref[1])[0]
    with pytest.raises(grpc.RpcError):
        plugin.unprepare([ref])
    plugin.wait_exit()
    plugin.start()
    assert "" == plugin.unprepare([ref]).claims[ref[1]].error
    assert [] == plugin.cdi_files()
    assert {} == json.loads((plugin.plugin_dir / "checkpoint.json").read_text())["data"]["claims"]


def test_corrupt_checkpoint_is_recovered_not_crash_looped(plugin: PluginProcess, apiserver: LocalCluster) -> None:
    """The plugin starts on a corrupt checkpoint, recovers the last good generation, and says so."""
    ref = create_allocated_claim(apiserver, name=name(), devices=["gpu-7"])
    first = answer(plugin.prepare([ref]), ref[1])
    other = create_allocated_claim(apiserver, name=name(), devices=["gpu-0"])
    plugin.prepare([other])  # one more generation, so .prev holds the first claim
    plugin.stop()
    (plugin.plugin_dir / "checkpoint.json").write_text('{"apiVersion": "checkpoint.dra-gpu.dev/v1", "data": 1')
    plugin.start()
    assert first == answer(plugin.prepare([ref]), ref[1])
    notices = [e for e in plugin.logs() if e["event"] == "checkpoint_notice"]
    assert ["CheckpointRecovered", "CheckpointRebuilt"] == [e["reason"] for e in notices]
    events = apiserver.api("GET", "/api/v1/namespaces/default/events")["items"]
    for reason in ("CheckpointRecovered", "CheckpointRebuilt"):
        assert any(e["reason"] == reason and e["involvedObject"]["name"] == "node-a" for e in events)
    # the newest claim, lost with the torn generation, was adopted from its CDI spec: still prepared
    assert f"k8s.{DRIVER}-claim_{other[1]}.json" in plugin.cdi_files()
    assert "" == answer(plugin.prepare([other]), other[1])[0]


def test_health_probe_exercises_the_sockets(plugin: PluginProcess) -> None:
    """The liveness service answers SERVING through a real probe of both sockets."""
    port = next(e["port"] for e in plugin.logs() if e["event"] == "health_listening")
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="liveness"), timeout=10)
    assert health_pb2.HealthCheckResponse.SERVING == resp.status


def test_readiness_waits_for_the_kubelet_to_accept_the_registration(plugin: PluginProcess) -> None:
    """readiness (the chart's readinessProbe) is SERVING only while the kubelet has accepted us;
    liveness does not care (a kubelet that is slow to register us is no reason to restart)."""
    port = next(e["port"] for e in plugin.logs() if e["event"] == "health_listening")

    def check(service: str) -> int:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            req = health_pb2.HealthCheckRequest(service=service)
            return int(health_pb2_grpc.HealthStub(ch).Check(req, timeout=10).status)

    serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
    assert (not_serving, serving) == (check("readiness"), check("liveness"))
    plugin.notify(True)
    assert (serving, serving) == (check("readiness"), check("liveness"))
    plugin.notify(False, error="kubelet says no")
    assert (not_serving, serving) == (check("readiness"), check("liveness"))


def test_methods_answer_at_the_upstream_paths(plugin: PluginProcess, apiserver: LocalCluster) -> None:
    """The kubelet dials fixed method paths; call them by name, not through our generated stubs."""
    from proto.pluginregistration import api_pb2 as reg

    ref = create_allocated_claim(apiserver, name=name())
    with grpc.insecure_channel(f"unix://{plugin.reg_socket}") as ch:
        info = ch.unary_unary(
            "/pluginregistration.Registration/GetInfo",
            request_serializer=reg.InfoRequest.SerializeToString,
            response_deserializer=reg.PluginInfo.FromString,
        )(reg.InfoRequest(), timeout=10)
    assert "DRAPlugin" == info.type
    with grpc.insecure_channel(f"unix://{plugin.dra_socket}") as ch:
        for pb, pkg in ((v1, "k8s.io.kubelet.pkg.apis.dra.v1"), (v1beta1, "k8s.io.kubelet.pkg.apis.dra.v1beta1")):
            call = ch.unary_unary(
                f"/{pkg}.DRAPlugin/NodePrepareResources",
                request_serializer=pb.NodePrepareResourcesRequest.SerializeToString,
                response_deserializer=pb.NodePrepareResourcesResponse.FromString,
            )
            resp = call(pb.NodePrepareResourcesRequest(claims=[pb.Claim(namespace=ref[0], uid=ref[1], name=ref[2])]), timeout=10)
            assert ["gpu-0"] == [d.device_name for d in resp.claims[ref[1]].devices]
    plugin.unprepare([ref])


def test_plugin_publishes_its_nodes_slices(tmp_path_factory: pytest.TempPathFactory, apiserver: LocalCluster) -> None:
    """The plugin runs the publisher for its own node's pool; the API server accepts the slices."""
    apiserver.add_node("node-pub")
    p = PluginProcess(
        tmp_path_factory.mktemp("pub"), kubeconfig=apiserver.kubeconfig, node="node-pub", profile="l4x4", publish=True
    )
    p.start()
    try:
        deadline = time.monotonic() + 20
        items: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not items:
            items = apiserver.api("GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName=node-pub")["items"]
            time.sleep(0.2)
        assert 1 == len(items)
        spec = items[0]["spec"]
        assert ["gpu-0", "gpu-1", "gpu-2", "gpu-3"] == [d["name"] for d in spec["devices"]]
        assert {"name": "node-pub", "generation": 1, "resourceSliceCount": 1} == spec["pool"]
    finally:
        assert 0 == p.stop()


def test_a_bad_kubeconfig_still_fails_start_up_and_leaves_no_sockets(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The API client loads while the sockets come up; a kubeconfig it cannot load still stops the plugin."""
    base = tmp_path_factory.mktemp("bad-kubeconfig")
    bad = base / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    p = PluginProcess(base, kubeconfig=bad)
    with pytest.raises(RuntimeError, match="plugin exited with 1"):
        p.start()
    failed = [e for e in p.logs() if e["event"] == "plugin_failed"]
    assert len(failed) == 1 and "KubeConfigError" in failed[0].get("exception", "")
    assert "has no current-context" in failed[0]["exception"]
    assert not p.plugin_dir.joinpath("dra.sock").exists()
    assert list(p.registrar.glob("*.sock")) == []


@pytest.mark.parametrize("content", [None, "", "\n"], ids=["missing", "empty", "blank"])
def test_an_unreadable_or_empty_boot_id_stops_start_up_with_one_line_naming_the_file(
    tmp_path_factory: pytest.TempPathFactory, content: str | None
) -> None:
    """An empty boot id would make every start look like a reboot (claims dropped): refuse it."""
    base = tmp_path_factory.mktemp("boot-id")
    p = PluginProcess(base, kubeconfig=base / "kubeconfig")  # never read: the boot id is checked first
    p.boot_id.parent.mkdir(parents=True, exist_ok=True)
    if content is None:
        p.boot_id.unlink(missing_ok=True)
        p.boot_id.mkdir()  # exists (so PluginProcess does not write one) but cannot be read as a file
    else:
        p.boot_id.write_text(content)
    with pytest.raises(RuntimeError, match="plugin exited with 2"):
        p.start()
    (line,) = [e for e in p.logs() if e["event"] == "boot_id_unreadable"]
    assert str(p.boot_id) in line["error"] and "BOOT_ID_FILE" in line["hint"]
    assert not [e for e in p.logs() if e["event"] == "plugin_failed"]
    assert list(p.registrar.glob("*.sock")) == []
