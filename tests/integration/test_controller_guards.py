"""The standalone controller behind the kubelet plugin's guards, against a real kube-apiserver.

``dra-gpu-controller`` publishes a node's slices that a kubelet plugin started with
``--publish-slices=false`` prepares, so the same two guards stand in front of its publisher
(``dra_driver.appkit.local_cordon``, ``dra_driver.appkit.device_plugin_guard``): a GPU cordoned
locally on the Node (its annotation) is not published, and while the Node's allocatable lists the
device plugin's ``nvidia.com/gpu`` nothing is; each comes back when the cause goes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from dra_driver.core.local_cordon import annotation_key
from testkit.cluster import LocalCluster

REPO = Path(__file__).resolve().parents[2]
NODE = "controller-node"
MERGE = "application/merge-patch+json"


def _devices(c: LocalCluster) -> list[str]:
    items = c.api("GET", f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName={NODE}")["items"]
    return sorted(d["name"] for s in items for d in s["spec"].get("devices") or [])


def _wait(what: str, cond: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_controller_withholds_cordoned_gpus_and_yields_to_a_device_plugin(tmp_path: Path) -> None:
    with LocalCluster(log_dir=tmp_path / "logs") as c:
        c.add_node(NODE)
        key = annotation_key(DEFAULT_DRIVER_NAME)
        c.api("PATCH", f"/api/v1/nodes/{NODE}", {"metadata": {"annotations": {key: '{"gpu-1": "fan"}'}}}, MERGE)
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "NODE_NAME": NODE,
            "FAKE_GPUS": "l4x4",
            "KUBECONFIG": str(c.kubeconfig),
            "METRICS_PORT": "-1",
            "DEVICE_PLUGIN_CHECK_INTERVAL": "0.2",
            "LOCAL_CORDON_CHECK_INTERVAL": "0.2",
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "controller.main"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            all4 = [f"gpu-{i}" for i in range(4)]
            _wait("gpu-1 withheld", lambda: _devices(c) == ["gpu-0", "gpu-2", "gpu-3"])
            c.api("PATCH", f"/api/v1/nodes/{NODE}", {"metadata": {"annotations": {key: None}}}, MERGE)
            _wait("gpu-1 back", lambda: _devices(c) == all4)
            status: dict[str, Any] = {"status": {"allocatable": {"nvidia.com/gpu": "4"}, "capacity": {"nvidia.com/gpu": "4"}}}
            c.api("PATCH", f"/api/v1/nodes/{NODE}/status", status, MERGE)
            _wait("no device beside the device plugin", lambda: _devices(c) == [])
            gone = {"status": {"allocatable": {"nvidia.com/gpu": None}, "capacity": {"nvidia.com/gpu": None}}}
            c.api("PATCH", f"/api/v1/nodes/{NODE}/status", gone, MERGE)
            _wait("the devices back once the device plugin is gone", lambda: _devices(c) == all4)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, err[-2000:]
        logged = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
        reasons = [e.get("reason") for e in logged if e.get("event") == "node_event_not_sent"]
        assert reasons == ["DevicesWithheld", "DevicesWithheld", "DevicePluginConflict", "DevicePluginConflictCleared"], reasons
