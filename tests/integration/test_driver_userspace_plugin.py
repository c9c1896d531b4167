"""The driver's user space in the claim, through the real plugin process, its sockets and a real API server.

The plugin runs with fake GPUs and ``--driver-root`` (which makes fake GPUs need a driver): one
driver root holds a fake driver built with gcc, another none. What the kubelet would get back
(the answer over the DRA socket), what the runtime would read (the CDI spec on disk), what the
node shows (the Node Event) and what the plugin keeps (the checkpoint) are all checked.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dra_driver.sources.fake import FakeGpuSource
from testkit.claimdata import DRIVER
from testkit.claims import create_allocated_claim
from testkit.cluster import LocalCluster
from testkit.fake_driver import HOST_DEBIAN, VERSION, Builder, install_driver
from testkit.plugin_process import PluginProcess

GPUS = FakeGpuSource("h100x8", "node-a").gpus()
READ_ONLY = ["ro", "nosuid", "nodev", "bind"]


def name() -> str:
    return f"c-{uuid.uuid4().hex[:8]}"


def wait_for(what: str, probe: Callable[[], Any], plugin: PluginProcess, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{plugin.log.read_text()[-3000:]}")
        time.sleep(0.1)
    return value


def checkpoint_claims(plugin: PluginProcess) -> dict[str, Any]:
    path = plugin.plugin_dir / "checkpoint.json"
    claims: dict[str, Any] = json.loads(path.read_text())["data"]["claims"] if path.exists() else {}
    return claims


def test_a_claim_gets_the_drivers_files_by_host_path_read_only(tmp_path: Path, apiserver: LocalCluster) -> None:
    install_driver(Builder(tmp_path / "elf-cache"), tmp_path / "driver-root", HOST_DEBIAN)
    plugin = PluginProcess(
        tmp_path,
        kubeconfig=apiserver.kubeconfig,
        extra_args=("--driver-root", str(tmp_path / "driver-root"), "--driver-root-host-path", "/run/nvidia/driver"),
    )
    plugin.start()
    try:
        (found,) = [e for e in plugin.logs() if e.get("event") == "driver_userspace_found"]
        assert (VERSION, "host", "/run/nvidia/driver") == (found["driver_version"], found["layout"], found["host_root"])
        ref = create_allocated_claim(apiserver, name=name(), devices=["gpu-4"])
        resp = plugin.prepare([ref]).claims[ref[1]]
        assert "" == resp.error
        assert [f"k8s.{DRIVER}/claim={ref[1]}-gpu-4"] == list(resp.devices[0].cdi_device_ids)
        spec = json.loads((plugin.cdi / f"k8s.{DRIVER}-claim_{ref[1]}.json").read_text())
        lib = "/run/nvidia/driver/usr/lib/x86_64-linux-gnu"
        assert [
            {"hostPath": f"{lib}/libcuda.so.{VERSION}", "containerPath": "/usr/local/nvidia/lib64/libcuda.so.1"},
            {"hostPath": f"{lib}/libnvidia-ml.so.{VERSION}", "containerPath": "/usr/local/nvidia/lib64/libnvidia-ml.so.1"},
            {
                "hostPath": "/run/nvidia/driver/usr/bin/nvidia-cuda-mps-control",
                "containerPath": "/usr/local/nvidia/bin/nvidia-cuda-mps-control",
            },
            {"hostPath": "/run/nvidia/driver/usr/bin/nvidia-smi", "containerPath": "/usr/local/nvidia/bin/nvidia-smi"},
        ] == [{k: m[k] for k in ("hostPath", "containerPath")} for m in spec["containerEdits"]["mounts"]]
        assert {tuple(READ_ONLY)} == {tuple(m["options"]) for m in spec["containerEdits"]["mounts"]}
        assert "" == plugin.unprepare([ref]).claims[ref[1]].error
        assert [] == plugin.cdi_files()
    finally:
        plugin.stop()


def test_without_a_driver_the_node_is_told_once_and_claims_are_refused_leaving_nothing(
    tmp_path: Path, apiserver: LocalCluster
) -> None:
    """An empty driver root and a toolkit spec listing gpu-3 only: gpu-3 is prepared through it, gpu-0 is refused."""
    (tmp_path / "empty-root").mkdir()
    plugin = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=("--driver-root", str(tmp_path / "empty-root")))
    plugin.cdi.mkdir(parents=True)
    toolkit = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": GPUS[3].uuid, "containerEdits": {"env": ["A=1"]}}],
    }
    (plugin.cdi / "nvidia.yaml").write_text(json.dumps(toolkit))
    plugin.start()
    try:
        (line,) = [e for e in plugin.logs() if e.get("event") == "driver_userspace_missing"]
        message = line["message"]
        assert message.startswith("no NVIDIA driver user space for containers on this node")
        assert str(tmp_path / "empty-root") in message and f"libcuda.so.{VERSION}" in message

        def node_event() -> list[dict[str, Any]]:
            items = apiserver.api("GET", "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name=node-a")["items"]
            return [e for e in items if e["reason"] == "DriverUserspaceMissing" and e["message"] == message]

        (event,) = wait_for("the DriverUserspaceMissing Node Event", node_event, plugin)
        assert ("Warning", "Node") == (event["type"], event["involvedObject"]["kind"])

        refused = create_allocated_claim(apiserver, name=name(), devices=["gpu-0"])
        listed = create_allocated_claim(apiserver, name=name(), devices=["gpu-3"])
        resp = plugin.prepare([refused, listed])
        assert (message, []) == (resp.claims[refused[1]].error, list(resp.claims[refused[1]].devices))
        assert "" == resp.claims[listed[1]].error
        assert [f"k8s.{DRIVER}/claim={listed[1]}-gpu-3", f"nvidia.com/gpu={GPUS[3].uuid}"] == list(
            resp.claims[listed[1]].devices[0].cdi_device_ids
        )
        assert refused[1] not in checkpoint_claims(plugin) and listed[1] in checkpoint_claims(plugin)
        assert sorted(["nvidia.yaml", f"k8s.{DRIVER}-claim_{listed[1]}.json"]) == plugin.cdi_files()
        assert message == plugin.prepare([refused]).claims[refused[1]].error  # the kubelet's retry: the same
        assert 1 == len(node_event())  # said once, at start-up
    finally:
        plugin.stop()


@pytest.fixture(autouse=True)
def _no_leftover_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin reads DRIVER_ROOT from its environment: a value set outside the test must not change it."""
    monkeypatch.delenv("DRIVER_ROOT", raising=False)
    monkeypatch.delenv("DRIVER_ROOT_HOST_PATH", raising=False)
