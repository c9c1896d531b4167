"""The real plugin reports prepared devices in the ResourceClaim's ``status.devices`` (KEP-4817) on a real API server.

The plugin is driven over its sockets as the kubelet drives it; the claims live in a real
kube-apiserver, which validates every entry it is sent (allocated device, data ≤ 10 KiB,
conditions) and merges it by server-side apply. What the status says is checked against what the
plugin prepared: the CDI spec the containers get and the checkpoint.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from dra_driver.sources.fake import FakeGpuSource
from testkit.claimdata import DRIVER, allocated_claim
from testkit.cluster import LocalCluster
from testkit.plugin_process import PluginProcess

RESOURCE = "/apis/resource.k8s.io/v1"
OTHER_DRIVER = "nic.example.com"
APPLY = "application/apply-patch+yaml"
GPUS = FakeGpuSource("h100x8", "node-a").gpus()


def name() -> str:
    return f"st-{uuid.uuid4().hex[:8]}"


def claim_path(ns: str, n: str) -> str:
    return f"{RESOURCE}/namespaces/{ns}/resourceclaims/{n}"


def create_claim(cluster: LocalCluster, devices: list[str], *, other_driver_device: str | None = None) -> tuple[str, str, str]:
    """An allocated claim on node-a (plus, optionally, a device of another driver in the same allocation)."""
    obj = allocated_claim(name=name(), devices=devices)
    status = obj.pop("status")
    obj["metadata"].pop("uid")
    if other_driver_device is not None:
        obj["spec"]["devices"]["requests"].append({"name": "nic", "exactly": {"deviceClassName": "nic.example.com"}})
        result = {"request": "nic", "driver": OTHER_DRIVER, "pool": "node-a", "device": other_driver_device}
        status["allocation"]["devices"]["results"].append(result)
    created = cluster.api("POST", f"{RESOURCE}/namespaces/default/resourceclaims", obj)
    created["status"] = status
    n = created["metadata"]["name"]
    stored = cluster.api("PUT", claim_path("default", n) + "/status", created)
    return "default", stored["metadata"]["uid"], n


def ours(claim: dict[str, Any], driver: str = DRIVER) -> list[dict[str, Any]]:
    return [d for d in claim.get("status", {}).get("devices", []) if d["driver"] == driver]


def wait_for(what: str, probe: Callable[[], Any], plugin: PluginProcess, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; plugin log:\n{plugin.log.read_text()[-3000:]}")
        time.sleep(0.1)


def claim_when(c: LocalCluster, ns: str, n: str, what: str, ok: Callable[[dict[str, Any]], bool], plugin: PluginProcess) -> Any:
    """The claim once ``ok(claim)`` holds."""

    def probe() -> dict[str, Any] | None:
        claim = c.api("GET", claim_path(ns, n))
        return claim if ok(claim) else None

    return wait_for(what, probe, plugin)


def cdi_env(plugin: PluginProcess, uid: str, device: str) -> dict[str, str]:
    spec = json.loads((plugin.cdi / f"k8s.{DRIVER}-claim_{uid}.json").read_text())
    (dev,) = [d for d in spec["devices"] if d["name"] == f"{uid}-{device}"]
    return dict(e.split("=", 1) for e in dev["containerEdits"]["env"])


def status_events(plugin: PluginProcess, uid: str) -> list[str]:
    return [e["event"] for e in plugin.logs() if e.get("event", "").startswith("device_status") and e.get("claim_uid") == uid]


def test_prepared_gpu_appears_in_claim_status_and_unprepare_removes_only_our_entry(
    plugin: PluginProcess, apiserver: LocalCluster
) -> None:
    c = apiserver
    ns, uid, n = create_claim(c, ["gpu-2"], other_driver_device="nic-0")
    # Another driver's entry, written by its own field manager before ours.
    nic = {"driver": OTHER_DRIVER, "pool": "node-a", "device": "nic-0", "data": {"mac": "02:00:00:00:00:01"}}
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": n}, "status": {"devices": [nic]}}
    c.api("PATCH", claim_path(ns, n) + f"/status?fieldManager={OTHER_DRIVER}", body, APPLY)
    before = c.api("GET", claim_path(ns, n))
    allocation, (nic_entry,) = before["status"]["allocation"], ours(before, OTHER_DRIVER)
    assert nic_entry["data"] == nic["data"]

    answer = plugin.prepare([(ns, uid, n)]).claims[uid]
    assert answer.error == ""
    (prepared,) = answer.devices

    claim = claim_when(c, ns, n, "our status.devices entry", lambda cl: bool(ours(cl)), plugin)
    (entry,) = ours(claim)
    env = cdi_env(plugin, uid, "gpu-2")
    assert (entry["pool"], entry["device"], "shareID" in entry) == ("node-a", "gpu-2", False)
    assert entry["data"] == {
        "uuid": env["GPU_DEVICE_GPU_2_UUID"],
        "requests": ["gpu"],
        "cdiDeviceIDs": list(prepared.cdi_device_ids),
    }
    assert entry["data"]["uuid"] == GPUS[2].uuid
    (ready,) = entry["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Prepared")
    assert ours(claim, OTHER_DRIVER) == [nic_entry]  # merged, not replaced
    assert claim["status"]["allocation"] == allocation
    managers = {(m["manager"], m["operation"], m.get("subresource")) for m in claim["metadata"]["managedFields"]}
    assert (DRIVER, "Apply", "status") in managers

    assert plugin.unprepare([(ns, uid, n)]).claims[uid].error == ""
    claim = claim_when(c, ns, n, "our entry removed", lambda cl: not ours(cl), plugin)
    assert ours(claim, OTHER_DRIVER) == [nic_entry]
    assert claim["status"]["allocation"] == allocation
    wait_for("the removal logged", lambda: len(status_events(plugin, uid)) == 2, plugin)  # the answer may be seen first
    assert status_events(plugin, uid) == ["device_status_written", "device_status_removed"]


def test_dynamic_mig_status_names_the_mig_device_carved_at_prepare(tmp_path: Any, apiserver: LocalCluster) -> None:
    c = apiserver
    plugin = PluginProcess(
        tmp_path, kubeconfig=c.kubeconfig, extra_args=("--mig", "dynamic", "--fake-mig-latency", "zero", "--gc-interval", "0")
    )
    plugin.start()
    try:
        ns, uid, n = create_claim(c, ["gpu-0-mig-1g10gb-6"])
        assert plugin.prepare([(ns, uid, n)]).claims[uid].error == ""
        (entry,) = wait_for("the MIG device's entry", lambda: ours(c.api("GET", claim_path(ns, n))), plugin)
        checkpoint = json.loads((plugin.plugin_dir / "checkpoint.json").read_text())
        (device,) = checkpoint["data"]["claims"][uid]["devices"]
        env = cdi_env(plugin, uid, "gpu-0-mig-1g10gb-6")
        p = "GPU_DEVICE_GPU_0_MIG_1G10GB_6"
        assert device["mig"]["migUUID"].startswith("MIG-")
        assert entry["data"]["uuid"] == device["mig"]["migUUID"] == env[f"{p}_UUID"]
        assert entry["data"]["parentUUID"] == GPUS[0].uuid == env[f"{p}_PARENT_UUID"]
        assert (entry["data"]["profile"], entry["data"]["placement"]) == ("1g.10gb", {"start": 6, "size": 1})

        assert plugin.unprepare([(ns, uid, n)]).claims[uid].error == ""
        wait_for("the MIG entry removed", lambda: not ours(c.api("GET", claim_path(ns, n))), plugin)
    finally:
        plugin.stop()


def test_device_status_off_writes_nothing(tmp_path: Any, apiserver: LocalCluster) -> None:
    c = apiserver
    plugin = PluginProcess(tmp_path, kubeconfig=c.kubeconfig, extra_args=("--device-status", "false"))
    plugin.start()
    try:
        ns, uid, n = create_claim(c, ["gpu-4"])
        assert plugin.prepare([(ns, uid, n)]).claims[uid].error == ""
        time.sleep(1.0)  # what an enabled plugin needs to write it (well under: see the test above)
        assert c.api("GET", claim_path(ns, n))["status"].get("devices") is None
        assert plugin.unprepare([(ns, uid, n)]).claims[uid].error == ""
    finally:
        plugin.stop()
    assert "device_status_disabled" in [e.get("event") for e in plugin.logs()]
    assert status_events(plugin, uid) == []
