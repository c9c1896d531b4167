"""The real plugin process's /metrics: scraped over HTTP while the kubelet's calls go over its real socket.

Claims live in a real kube-apiserver; the plugin runs with 8 fake H100s and dynamic MIG, so a
prepare carves a real (simulated) MIG instance. A metrics port already taken stops the plugin at
start-up with exit code 2 and one log line, never a traceback. The standalone controller's
publisher metrics are scraped the same way, from its own process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from testkit.claims import create_allocated_claim
from testkit.cluster import LocalCluster
from testkit.plugin_process import ROOT, PluginProcess

MIG_ARGS = ("--mig", "dynamic", "--fake-mig-latency", "zero", "--gc-interval", "0")

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(plugin: PluginProcess | str) -> Series:
    """Every sample of one scrape (of a plugin, or a /metrics URL), by name and labels."""
    url = plugin if isinstance(plugin, str) else plugin.metrics_url()
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value for family in text_string_to_metric_families(text) for s in family.samples
    }


def at(series: Series, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    assert key in series, f"no series {name}{labels}"
    return series[key]


def name() -> str:
    return f"m-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def mig_plugin(tmp_path: Path, apiserver: LocalCluster) -> Iterator[PluginProcess]:
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=MIG_ARGS)
    p.start()
    yield p
    p.stop()


def test_calls_over_the_socket_move_the_counters_and_the_gauges_show_what_is_prepared(
    mig_plugin: PluginProcess, apiserver: LocalCluster
) -> None:
    before = scrape(mig_plugin)
    assert 1.0 == at(before, "dra_gpu_checkpoint_recoveries_total", kind="fresh")  # a new node
    assert 0.0 == at(before, "dra_gpu_prepared_claims")
    full = create_allocated_claim(apiserver, name=name(), devices=["gpu-1", "gpu-2"])
    carved = create_allocated_claim(apiserver, name=name(), devices=["gpu-0-mig-1g10gb-6"])
    missing = ("default", str(uuid.uuid4()), "not-there")
    resp = mig_plugin.prepare([full, carved, missing])
    assert "" == resp.claims[full[1]].error and "" == resp.claims[carved[1]].error
    assert "not found" in resp.claims[missing[1]].error

    prepared = scrape(mig_plugin)
    assert 1.0 == at(prepared, "dra_gpu_requests_total", operation="prepare", api="v1")
    assert 1.0 == at(prepared, "dra_gpu_request_duration_seconds_count", operation="prepare")
    assert 0.0 < at(prepared, "dra_gpu_request_duration_seconds_sum", operation="prepare") < 45.0
    assert 0.0 == at(prepared, "dra_gpu_requests_in_flight", operation="prepare")
    assert 2.0 == at(prepared, "dra_gpu_claim_operations_total", operation="prepare", result="success")
    assert 1.0 == at(prepared, "dra_gpu_claim_operations_total", operation="prepare", result="error")
    assert 1.0 == at(prepared, "dra_gpu_claim_errors_total", operation="prepare", reason="claim_lookup")
    assert 2.0 == at(prepared, "dra_gpu_prepared_claims")
    assert (2.0, 1.0, 0.0) == tuple(at(prepared, "dra_gpu_prepared_devices", kind=k) for k in ("gpu", "mig", "share"))
    assert 1.0 == at(prepared, "dra_gpu_mig_instances")
    assert 0.0 == at(prepared, "dra_gpu_sharing_daemons")
    assert 0.0 < at(prepared, "process_resident_memory_bytes")

    for ref in (full, carved):
        assert "" == mig_plugin.unprepare([ref], version="v1beta1").claims[ref[1]].error
    after = scrape(mig_plugin)
    assert 2.0 == at(after, "dra_gpu_requests_total", operation="unprepare", api="v1beta1")
    assert 2.0 == at(after, "dra_gpu_claim_operations_total", operation="unprepare", result="success")
    assert 0.0 == at(after, "dra_gpu_prepared_claims")
    assert 0.0 == at(after, "dra_gpu_mig_instances")
    assert 0.0 == at(after, "dra_gpu_prepared_devices", kind="mig")


def test_a_metrics_port_already_taken_stops_the_plugin_with_exit_code_2_and_one_clear_line(
    tmp_path: Path, apiserver: LocalCluster
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        plugin = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=("--metrics-port", str(port)))
        with pytest.raises(RuntimeError, match="plugin exited with 2"):
            plugin.start()
    events = plugin.logs()
    (line,) = [e for e in events if e.get("event") == "metrics_port_unavailable"]
    assert port == line["port"]
    for part in (str(port), "127.0.0.1", "--metrics-port", "METRICS_PORT"):
        assert part in line["error"], line["error"]
    assert "plugin_failed" not in {e.get("event") for e in events}
    assert "Traceback" not in plugin.log.read_text()
    assert not plugin.reg_socket.exists() and not plugin.dra_socket.exists()  # the kubelet is not left a dead socket
    assert "sockets_listening" not in {e.get("event") for e in events}  # found before the kubelet could register it


def test_the_controller_counts_its_slice_writes_on_its_metrics_port(tmp_path: Path, apiserver: LocalCluster) -> None:
    node = "node-metrics"
    apiserver.add_node(node)
    log = tmp_path / "controller.log"
    env = {**os.environ, "NODE_NAME": node, "FAKE_GPUS": "l4x4", "KUBECONFIG": str(apiserver.kubeconfig)}
    env |= {"METRICS_PORT": "0", "METRICS_ADDRESS": "127.0.0.1", "PYTHONUNBUFFERED": "1"}
    selector = f"?fieldSelector=spec.driver%3D{DEFAULT_DRIVER_NAME}%2Cspec.nodeName%3D{node}"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "controller.main"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 30
        while not apiserver.api("GET", "/apis/resource.k8s.io/v1/resourceslices" + selector)["items"]:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        (port,) = [e["port"] for e in events if e["event"] == "metrics_listening"]
        series = scrape(f"http://127.0.0.1:{port}/metrics")
        assert 1.0 == at(series, "dra_gpu_slice_writes_total", action="create")  # l4x4: one slice
        assert 0.0 == at(series, "dra_gpu_slice_reconcile_errors_total")
        assert 0.0 == at(series, "dra_gpu_slice_write_conflicts_total")
        assert not any(name.startswith("dra_gpu_request") for name, _ in series)  # the plugin's calls are not its
        proc.send_signal(signal.SIGTERM)
        assert 0 == proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for item in apiserver.api("GET", "/apis/resource.k8s.io/v1/resourceslices" + selector)["items"]:
            apiserver.api("DELETE", f"/apis/resource.k8s.io/v1/resourceslices/{item['metadata']['name']}")
