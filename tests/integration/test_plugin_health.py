"""GPU health through the real plugin process: fault CLI -> taints in the API server -> kubelet health stream.

The plugin publishes 8 fake H100s to a real kube-apiserver; faults are injected with the fake GPUs'
CLI (``python -m dra_driver.sources.fake_health``), repairs made with ``dra-gpu health repair``,
and the health stream read over the DRA socket as the kubelet reads it (both API versions).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from testkit.claimdata import DRIVER
from testkit.cluster import LocalCluster
from testkit.plugin_process import ROOT, PluginProcess

HEALTH_ARGS = ("--health-check-interval", "0.3", "--gc-interval", "0")
SLICES = "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName={node}"
HEALTHY, UNHEALTHY = 1, 2


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def devices(c: LocalCluster, node: str) -> dict[str, dict[str, Any]]:
    items = c.api("GET", SLICES.format(node=node))["items"]
    return {d["name"]: d for s in items for d in s["spec"].get("devices") or []}


def taints(c: LocalCluster, node: str, device: str) -> list[tuple[str, str, str]]:
    d = devices(c, node).get(device) or {}
    return [(t["key"], t.get("value", ""), t["effect"]) for t in d.get("taints") or []]


def health_of(msg: Any) -> dict[str, tuple[int, str]]:
    return {d.device.device_name: (d.health, d.message) for d in msg.devices}


def repair(p: PluginProcess, gpu: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "dra_driver.cli.main", "health", "repair", gpu, "--plugin-dir", str(p.plugin_dir)],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )


@pytest.fixture
def node(apiserver: LocalCluster, request: pytest.FixtureRequest) -> str:
    name = f"health-{abs(hash(request.node.name)) % 100000}"
    apiserver.add_node(name)
    return name


@pytest.fixture
def plugin(tmp_path: Path, apiserver: LocalCluster, node: str) -> Iterator[PluginProcess]:
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, node=node, publish=True, extra_args=HEALTH_ARGS)
    p.start()
    wait_for("the slices", lambda: len(devices(apiserver, node)) == 8)
    yield p
    p.stop()


def test_a_fatal_xid_taints_the_gpu_tells_the_kubelet_and_a_repair_clears_both(
    apiserver: LocalCluster, plugin: PluginProcess, node: str
) -> None:
    assert "v1alpha1.DRAResourceHealth" in plugin.get_info().supported_versions
    first = health_of(plugin.health_updates("v1alpha1")[0])
    assert {HEALTHY} == {h for h, _ in first.values()} and len(first) == 8

    plugin.fault("xid", "--gpu", "0", "--xid", "79")
    assert wait_for("the taint", lambda: taints(apiserver, node, "gpu-0")) == [(f"{DRIVER}/xid", "79", "NoSchedule")]
    assert [] == taints(apiserver, node, "gpu-1")  # only the GPU that failed
    for version in ("v1alpha1", "v1"):
        msg = plugin.health_updates(version, until=lambda m: health_of(m)["gpu-0"][0] == UNHEALTHY)[-1]
        _, message = health_of(msg)["gpu-0"]
        assert "XID 79" in message and "fallen off the bus" in message
        assert HEALTHY == health_of(msg)["gpu-1"][0]
        assert all(d.health_check_timeout_seconds > 0 and d.device.pool_name == node for d in msg.devices)
    assert any(e.get("event") == "gpu_condition_raised" and e.get("device") == "gpu-0" for e in plugin.logs())

    repair(plugin, "gpu-0")
    wait_for("the taint to go", lambda: taints(apiserver, node, "gpu-0") == [])
    plugin.health_updates("v1", until=lambda m: health_of(m)["gpu-0"][0] == HEALTHY)
    assert any(e.get("event") == "gpu_repaired" and e.get("cleared") == ["xid"] for e in plugin.logs())


def test_a_fatal_condition_survives_a_plugin_restart_and_a_reset_clears_it(
    apiserver: LocalCluster, plugin: PluginProcess, node: str
) -> None:
    plugin.fault("ecc", "--gpu", "2")
    wait_for("the taint", lambda: taints(apiserver, node, "gpu-2") == [(f"{DRIVER}/ecc", "double-bit", "NoSchedule")])
    assert 0 == plugin.stop()
    plugin.start()
    # Restored from health.json before the first publication: the GPU is never offered in between.
    assert any(e.get("event") == "gpu_condition_restored" and e.get("device") == "gpu-2" for e in plugin.logs())
    assert [(f"{DRIVER}/ecc", "double-bit", "NoSchedule")] == taints(apiserver, node, "gpu-2")
    time.sleep(1.0)  # the old event is not replayed after the restart: still one condition, not re-raised
    assert 1 == sum(1 for e in plugin.logs() if e.get("event") == "gpu_condition_raised" and e.get("device") == "gpu-2")
    plugin.fault("recover", "--gpu", "2")
    wait_for("the reset to clear it", lambda: taints(apiserver, node, "gpu-2") == [])


def test_eviction_on_taints_fatal_causes_noexecute_and_informational_ones_effect_none(
    tmp_path: Path, apiserver: LocalCluster, node: str
) -> None:
    p = PluginProcess(
        tmp_path, kubeconfig=apiserver.kubeconfig, node=node, publish=True, extra_args=(*HEALTH_ARGS, "--health-evict", "true")
    )
    p.start()
    try:
        wait_for("the slices", lambda: len(devices(apiserver, node)) == 8)
        p.fault("xid", "--gpu", "1", "--xid", "48")
        p.fault("xid", "--gpu", "3", "--xid", "13")  # an application's fault: the GPU is fine
        p.fault("xid", "--gpu", "4", "--xid", "4242")  # not in the catalog: degraded, never evicting
        wait_for("the taints", lambda: taints(apiserver, node, "gpu-4"))
        assert [(f"{DRIVER}/xid", "48", "NoExecute")] == taints(apiserver, node, "gpu-1")
        assert [(f"{DRIVER}/xid", "13", "None")] == wait_for("gpu-3", lambda: taints(apiserver, node, "gpu-3"))
        assert [(f"{DRIVER}/xid", "4242", "NoSchedule")] == taints(apiserver, node, "gpu-4")
        assert any(e.get("event") == "xid_unknown" and e.get("xid") == 4242 for e in p.logs())
        health = health_of(p.health_updates("v1", until=lambda m: health_of(m)["gpu-4"][0] == UNHEALTHY)[-1])
        assert HEALTHY == health["gpu-3"][0] and "XID 13" in health["gpu-3"][1]  # informational: healthy, said
    finally:
        p.stop()


def test_checks_taint_a_pending_memory_repair_and_clear_it_when_the_check_no_longer_sees_it(
    apiserver: LocalCluster, plugin: PluginProcess, node: str
) -> None:
    plugin.fault("memory", "--gpu", "5", "--remap-pending")
    assert [(f"{DRIVER}/memory-repair", "remap-pending", "NoSchedule")] == wait_for(
        "the taint", lambda: taints(apiserver, node, "gpu-5")
    )
    repair(plugin, "gpu-5")  # a repair cannot clear what the check still sees
    time.sleep(1.5)
    assert [(f"{DRIVER}/memory-repair", "remap-pending", "NoSchedule")] == taints(apiserver, node, "gpu-5")
    plugin.fault("memory", "--gpu", "5", "--clear")
    wait_for("the taint to go", lambda: taints(apiserver, node, "gpu-5") == [])


def test_every_mig_placement_of_a_failed_gpu_inherits_its_taint(tmp_path: Path, apiserver: LocalCluster, node: str) -> None:
    args = (*HEALTH_ARGS, "--mig", "dynamic", "--fake-mig-latency", "zero")
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, node=node, publish=True, extra_args=args)
    p.start()
    try:
        wait_for("the slices", lambda: len(devices(apiserver, node)) > 100)
        p.fault("lose", "--gpu", "1")
        wait_for("the taints", lambda: taints(apiserver, node, "gpu-1"))
        devs = devices(apiserver, node)
        on_gpu1 = [n for n in devs if n == "gpu-1" or n.startswith("gpu-1-mig-")]
        assert len(on_gpu1) > 10
        for name in on_gpu1:
            assert (f"{DRIVER}/gpu-lost", "lost", "NoSchedule") in taints(apiserver, node, name), name
        assert not any(devs[n].get("taints") for n in devs if n not in on_gpu1)
        health = health_of(p.health_updates("v1", until=lambda m: health_of(m)["gpu-1"][0] == UNHEALTHY)[-1])
        assert all(health[n][0] == UNHEALTHY for n in on_gpu1)
    finally:
        p.stop()


def test_a_broken_fault_file_and_hung_up_health_streams_never_stop_prepare(plugin: PluginProcess) -> None:
    (plugin.plugin_dir / "fake-gpus" / "gpu-faults.json").write_text('{"version": 1, "events": [{"seq": "x"}]}')
    wait_for("the complaint", lambda: any(e.get("event") == "fake_faults_unreadable" for e in plugin.logs()))
    # Ten streams opened and dropped: at most two are served at once, and prepare still answers at once.
    for _ in range(10):
        with grpc.insecure_channel(f"unix://{plugin.dra_socket}") as ch:
            from proto.health.v1alpha1 import api_pb2 as pb
            from proto.health.v1alpha1 import api_pb2_grpc as pb_grpc

            stream = pb_grpc.DRAResourceHealthStub(ch).NodeWatchResources(pb.NodeWatchResourcesRequest(), timeout=30)
            next(iter(stream))
    started = time.monotonic()
    resp = plugin.prepare([("default", "uid-none", "no-such-claim")])
    assert time.monotonic() - started < 5
    assert resp.claims["uid-none"].error  # answered (the claim does not exist), not blocked
    assert plugin.proc is not None and plugin.proc.poll() is None


def test_streams_held_open_never_starve_prepare_nor_hold_up_shutdown(plugin: PluginProcess) -> None:
    from proto.health.v1 import api_pb2 as pb
    from proto.health.v1 import api_pb2_grpc as pb_grpc

    channels = [grpc.insecure_channel(f"unix://{plugin.dra_socket}") for _ in range(8)]
    try:
        # Eight kubelets' worth of streams, all kept open: each new one ends the oldest at once (at most
        # two are served), so the DRA server's eight workers stay free for prepare.
        streams = [
            pb_grpc.DRAResourceHealthStub(ch).NodeWatchResources(pb.NodeWatchResourcesRequest(), timeout=60) for ch in channels
        ]
        for st in streams:
            next(iter(st))
        started = time.monotonic()
        resp = plugin.prepare([("default", "uid-none", "no-such-claim")])
        assert time.monotonic() - started < 3, "prepare waited for workers held by health streams"
        assert resp.claims["uid-none"].error
        started = time.monotonic()
        assert 0 == plugin.stop()
        assert time.monotonic() - started < 8, "open health streams held up the shutdown grace period"
    finally:
        for ch in channels:
            ch.close()
