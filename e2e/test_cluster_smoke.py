"""Smoke test of the source-built control plane: Node + resource.k8s.io/v1 ResourceSlice."""

from __future__ import annotations

import os
from typing import Any

import pytest

from dra_driver.kube.client import load_api_client
from dra_driver.kube.rest import RestApi
from testkit.cluster import K8S_VERSION, ApiError, LocalCluster

DRIVER = "gpu.dra-gpu.example.org"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def gpu_slice(node: str, device: str, **device_fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{device.lower()}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": device,
                    "attributes": {"model": {"string": "H100"}, "index": {"int": 0}},
                    "capacity": {"memory": {"value": "80Gi"}},
                    **device_fields,
                }
            ],
        },
    }


def test_version_and_kubeconfig(cluster: LocalCluster) -> None:
    assert cluster.api("GET", "/version")["gitVersion"] == K8S_VERSION
    # The kubeconfig works with the driver's own connection loader, CA verification included.
    rest = RestApi(load_api_client(str(cluster.kubeconfig)))
    assert rest.call("GET", "/api/v1/namespaces/default")["metadata"]["name"] == "default"


def test_node_and_resource_slice_round_trip(cluster: LocalCluster) -> None:
    node = cluster.add_node("node-a", labels={"gpu": "true"})
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert ready["Ready"] == "True"
    assert node["status"]["allocatable"]["pods"] == "110"
    assert node["metadata"]["labels"]["gpu"] == "true"

    cluster.api("POST", SLICES, gpu_slice("node-a", "gpu-0"))
    got = cluster.api("GET", f"{SLICES}/node-a-gpu-0")
    assert got["spec"]["driver"] == DRIVER
    assert got["spec"]["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 1}
    (device,) = got["spec"]["devices"]
    assert device["name"] == "gpu-0"
    assert device["attributes"]["model"] == {"string": "H100"}
    assert device["capacity"]["memory"]["value"] == "80Gi"


def test_dra_gate_fields_are_kept(cluster: LocalCluster) -> None:
    """The apiserver silently drops fields of disabled gates: check beta and alpha ones survive."""
    taint = {"key": "dra-gpu.example.org/unhealthy", "value": "xid-79", "effect": "NoSchedule"}  # DRADeviceTaints (beta)
    numa = {"ints": [0, 1]}  # DRAListTypeAttributes (alpha)
    cluster.api("POST", SLICES, gpu_slice("node-a", "gpu-1", taints=[taint], attributes={"numaNodes": numa}))
    (device,) = cluster.api("GET", f"{SLICES}/node-a-gpu-1")["spec"]["devices"]
    assert device["taints"][0]["key"] == taint["key"]
    assert "timeAdded" in device["taints"][0]
    assert device["attributes"]["numaNodes"] == numa


def test_invalid_slice_is_rejected_with_422(cluster: LocalCluster) -> None:
    with pytest.raises(ApiError) as err:
        cluster.api("POST", SLICES, gpu_slice("node-a", "GPU-0"))
    assert err.value.status == 422
    assert err.value.body["reason"] == "Invalid"
    assert "spec.devices[0].name" in err.value.body["message"]


def test_stop_leaves_nothing_running() -> None:
    with LocalCluster() as c:
        pids, workdir = c.pids, c.workdir
        assert sorted(pids) == ["etcd", "kube-apiserver"]
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not workdir.exists()
