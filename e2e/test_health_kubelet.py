"""GPU health end to end: the real kubelet shows it in pod status, the real controller-manager evicts.

Control plane (etcd, apiserver, scheduler, controller-manager) and the kubelet are upstream
binaries built by testkit/go/build.sh (fake container runtime); the plugin is our daemon with 8 fake H100s,
``--health-evict true``. A ReplicaSet runs one GPU pod. A degraded cause on its GPU (an XID nobody
classified) taints NoSchedule: the pod keeps running and its status shows the device Unhealthy,
with the cause, through the kubelet's DRAResourceHealth stream. Then a fatal XID on the same GPU
taints NoExecute: the device-taint eviction controller evicts the pod, and its replacement lands on
a healthy GPU. A repair clears the taints.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from e2e.test_kubelet_node import PODS, RESOURCE, harness, wait_until
from testkit.claimdata import DRIVER
from testkit.plugin_process import ROOT

RS = "/apis/apps/v1/namespaces/default/replicasets"


def _rs(replicas: int = 1) -> dict[str, Any]:
    labels = {"app": "trainer"}
    container = {"name": "cuda", "image": "registry.example/cuda:12", "resources": {"claims": [{"name": "gpu"}]}}
    return {
        "metadata": {"name": "trainer"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [container], "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]},
            },
        },
    }


def test_health_reaches_pod_status_and_a_fatal_xid_evicts_the_pod_to_a_healthy_gpu(tmp_path: Path) -> None:
    with harness(tmp_path, "node-a") as h:
        node = h.nodes["node-a"]
        plugin = h.start_plugin(node, ("--health-evict", "true", "--health-check-interval", "0.5"))
        h.create_class_and_template()
        h.c.api("POST", RS, _rs())

        def running_pods() -> list[dict[str, Any]]:
            pods = h.c.api("GET", f"{PODS}?labelSelector=app=trainer")["items"]
            return [
                p for p in pods if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
            ]

        (pod,) = wait_until("the trainer pod to run", running_pods, h.diagnostics)
        name = pod["metadata"]["name"]
        (claim_status,) = pod["status"]["resourceClaimStatuses"]
        claim = h.c.api("GET", f"{RESOURCE}/namespaces/default/resourceclaims/{claim_status['resourceClaimName']}")
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        device = result["device"]
        minor = device.removeprefix("gpu-")

        # 1. Degraded (an XID not in the catalog): NoSchedule, the pod stays, its status says why.
        plugin.fault("xid", "--gpu", minor, "--xid", "4242")

        def unhealthy_in_status() -> list[dict[str, Any]]:
            p = h.c.api("GET", f"{PODS}/{name}")
            return [
                r
                for cs in p.get("status", {}).get("containerStatuses", [])
                for a in cs.get("allocatedResourcesStatus") or []
                for r in a.get("resources") or []
                # The kubelet names the device by the CDI id our prepare answered: <kind>=<claim uid>-<device>.
                if r.get("resourceID") == f"k8s.{DRIVER}/claim={claim['metadata']['uid']}-{device}"
                and r.get("health") == "Unhealthy"
            ]

        (entry,) = wait_until("the pod status to show the device Unhealthy", unhealthy_in_status, h.diagnostics)
        assert "XID 4242" in entry.get("message", ""), entry
        assert [p["metadata"]["name"] for p in running_pods()] == [name]  # NoSchedule evicts nothing

        # 2. Fatal (fallen off the bus): NoExecute; the controller-manager evicts, the replacement avoids the GPU.
        plugin.fault("xid", "--gpu", minor, "--xid", "79")

        def replacement() -> dict[str, Any] | None:
            pods = [p for p in running_pods() if p["metadata"]["name"] != name]
            return pods[0] if pods else None

        new = wait_until("the pod to be evicted and replaced", replacement, h.diagnostics, timeout=120)
        (new_claim_status,) = new["status"]["resourceClaimStatuses"]
        new_claim = h.c.api("GET", f"{RESOURCE}/namespaces/default/resourceclaims/{new_claim_status['resourceClaimName']}")
        (new_result,) = new_claim["status"]["allocation"]["devices"]["results"]
        assert new_result["device"] != device, f"the replacement got the failed GPU {device}"
        old = h.c.api("GET", f"{PODS}?fieldSelector=metadata.name={name}")["items"]
        assert not old or old[0]["metadata"].get("deletionTimestamp"), "the pod on the failed GPU was not evicted"

        # 3. Repaired: the taints go, the GPU can be allocated again.
        subprocess.run(
            [
                sys.executable,
                "-m",
                "dra_driver.cli.main",
                "health",
                "repair",
                f"gpu-{minor}",
                "--plugin-dir",
                str(plugin.plugin_dir),
            ],
            check=True,
            cwd=ROOT,
            capture_output=True,
        )
        slices = f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName=node-a"

        def untainted() -> bool:
            devs = [d for s in h.c.api("GET", slices)["items"] for d in s["spec"].get("devices") or [] if d["name"] == device]
            return bool(devs) and not devs[0].get("taints")

        wait_until(f"the taints of {device} to go", untainted, h.diagnostics)
