"""Full control plane without kubelets: the scheduler allocates a GPU from a ResourceSlice."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from e2e.test_cluster_smoke import DRIVER, SLICES, gpu_slice
from testkit.cluster import LocalCluster

RESOURCE = "/apis/resource.k8s.io/v1"
PODS = "/api/v1/namespaces/default/pods"


def wait_for(get: Callable[[], dict[str, Any]], ok: Callable[[dict[str, Any]], bool]) -> Any:
    deadline = time.monotonic() + 30
    while not ok(obj := get()):
        assert time.monotonic() < deadline, f"timed out; last object: {obj}"
        time.sleep(0.2)
    return obj


def test_scheduler_allocates_device_and_binds_pod() -> None:
    with LocalCluster(with_scheduler=True, with_controller_manager=True) as c:
        c.add_node("node-a")
        c.api("POST", SLICES, gpu_slice("node-a", "gpu-0"))
        c.api(
            "POST",
            f"{RESOURCE}/deviceclasses",
            {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}},
        )
        claim = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}
        c.api("POST", f"{RESOURCE}/namespaces/default/resourceclaims", {"metadata": {"name": "one-gpu"}, "spec": claim})
        c.api(
            "POST",
            PODS,
            {
                "metadata": {"name": "cuda"},
                "spec": {
                    "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "one-gpu"}],
                },
            },
        )

        pod = wait_for(lambda: c.api("GET", f"{PODS}/cuda"), lambda p: "nodeName" in p["spec"])
        assert pod["spec"]["nodeName"] == "node-a"
        got = c.api("GET", f"{RESOURCE}/namespaces/default/resourceclaims/one-gpu")
        (result,) = got["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"], result["device"]) == (DRIVER, "node-a", "gpu-0")
        assert got["status"]["reservedFor"][0]["name"] == "cuda"
