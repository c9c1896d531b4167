"""The seed cluster and workloads the ``dra-gpu explain`` fuzzers mutate, shared by their test files.

Used by ``test_fuzz_explain.py`` (the fuzzers) and ``test_fuzz_explain_findings.py`` (the crashes
the fuzzer found). Full H100s on node-a, shareable L4s (consumable capacity) on node-b, a
partitionable A100 (dynamic MIG) on node-c, a network pool selected by node labels with per-device
node selection and taints, the chart's DeviceClasses, pods from ``demo/``, a claim with
constraints, tolerations and admin access, and a claim already allocated in the cluster.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from dra_driver.cli.explain import load_objects
from dra_driver.cli.main import inventory_slices
from dra_driver.core.mig import MigStrategy
from testkit.oracle.corpus import chart_classes

DRIVER = "gpu.dra-gpu.dev"
NET = "net.example.com"
DEMO = Path(__file__).resolve().parents[2] / "demo"
Docs = list[dict[str, Any]]


def net_slice() -> dict[str, Any]:
    """A pool for nodes labelled ``rack=r1``, with per-device node selection and a tainted device."""
    devices: list[dict[str, Any]] = [
        {
            "name": f"nic-{i}",
            "attributes": {"speed": {"int": 100 * (i + 1)}, "rack": {"string": "r1"}, "fw": {"version": "1.2.3"}},
            "capacity": {"bandwidth": {"value": "100G"}},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1", "r2"]}]}]
            },
        }
        for i in range(3)
    ]
    devices[2]["taints"] = [{"key": "example.com/maint", "value": "true", "effect": "NoSchedule"}]
    devices[1]["nodeName"] = "node-b"
    del devices[1]["nodeSelector"]
    devices[0]["allNodes"] = True
    del devices[0]["nodeSelector"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "net-0"},
        "spec": {
            "driver": NET,
            "pool": {"name": "net", "generation": 2, "resourceSliceCount": 1},
            "perDeviceNodeSelection": True,
            "devices": devices,
        },
    }


def net_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": NET},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{NET}" && device.attributes["{NET}"].speed >= 100'}}]},
    }


def special_claims() -> Docs:
    """A claim with constraints, tolerations, admin access and a capacity request, and its pod."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "special", "namespace": "dra-demo", "uid": "uid-special"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {
                            "deviceClassName": DRIVER,
                            "allocationMode": "ExactCount",
                            "count": 2,
                            "selectors": [
                                {"cel": {"expression": f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) > 0'}}
                            ],
                        },
                    },
                    {
                        "name": "nic",
                        "exactly": {"deviceClassName": NET, "tolerations": [{"key": "example.com/maint", "operator": "Exists"}]},
                    },
                    {"name": "all", "exactly": {"deviceClassName": NET, "allocationMode": "All", "adminAccess": True}},
                    {
                        "name": "share",
                        "exactly": {"deviceClassName": f"shared.{DRIVER}", "capacity": {"requests": {"memory": "12Gi"}}},
                    },
                ],
                "constraints": [
                    {"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/pcieRoot"},
                    {"distinctAttribute": f"{DRIVER}/uuid"},
                ],
            }
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "special", "namespace": "dra-demo"},
        "spec": {"resourceClaims": [{"name": "main", "resourceClaimName": "special"}]},
    }
    return [claim, pod]


def allocated_claims() -> Docs:
    """Claims the cluster already allocated: a dedicated GPU, a share of an L4, an admin-access NIC."""
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "busy", "namespace": "other", "uid": "uid-busy"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-3"},
                            {
                                "request": "gpu",
                                "driver": DRIVER,
                                "pool": "node-b",
                                "device": "gpu-0",
                                "shareID": "0a1b2c3d-0000-4000-8000-000000000001",
                                "consumedCapacity": {"memory": "4Gi"},
                            },
                            {"request": "gpu", "driver": NET, "pool": "net", "device": "nic-0", "adminAccess": True},
                        ]
                    },
                    "nodeSelector": {
                        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]
                    },
                }
            },
        }
    ]


@functools.cache
def _seed_json() -> str:
    slices = (
        inventory_slices(fake_gpus="h100x8", node_name="node-a", driver=DRIVER)
        + inventory_slices(fake_gpus="l4x4", node_name="node-b", driver=DRIVER, consumable=True)
        + inventory_slices(fake_gpus="a100-80x1", node_name="node-c", driver=DRIVER, mig=MigStrategy.DYNAMIC)
        + [net_slice()]
    )
    manifests = [
        *load_objects(str(DEMO / "mig-or-full.yaml")),
        *load_objects(str(DEMO / "consumable-20gi.yaml"))[:2],
        *load_objects(str(DEMO / "two-gpus.yaml")),
        *special_claims(),
    ]
    return json.dumps(
        {"manifests": manifests, "slices": slices, "classes": [*chart_classes(), net_class()], "allocated": allocated_claims()}
    )


def seed() -> dict[str, Docs]:
    """A fresh copy of the seed cluster and workloads (each group: a list of documents)."""
    docs: dict[str, Docs] = json.loads(_seed_json())
    return docs
