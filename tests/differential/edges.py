"""Allocation cases written by hand, outside the generator: where `dra-gpu explain` once disagreed with the scheduler.

Each builder returns a celdiff ``allocate`` case (``tests.differential.oracle.allocate_case``) and
the allocation the scheduler makes for it, as (request, pool, device) triples. Used by
``tests/unit/test_allocator_edges.py`` (the simulator alone: expected devices) and
``tests/differential/test_allocation_edges.py`` (the same cases through the Go allocator).
"""

from __future__ import annotations

from typing import Any

from tests.differential.oracle import allocate_case

GPU = "gpu.dra-gpu.dev"
NIC = "nic.example.com"
NODE = "node-a"
LABELS = {"kubernetes.io/hostname": NODE, "topology.example.com/rack": "r1"}
Expected = list[tuple[str, str, str]]


def device_class(driver: str) -> dict[str, Any]:
    """A class selecting every device of ``driver``."""
    return {"metadata": {"name": driver}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


def one_slice(driver: str, pool: str, devices: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    """A pool of one slice (``spec``: its node selection)."""
    return {
        "metadata": {"name": f"{pool}-{driver}"},
        "spec": {"driver": driver, "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1}, "devices": devices, **spec},
    }


def claim(*requests: dict[str, Any]) -> dict[str, Any]:
    """A pending claim with these requests."""
    return {"metadata": {"name": "c", "namespace": "ns", "uid": "uid-c"}, "spec": {"devices": {"requests": list(requests)}}}


def exactly(name: str, driver: str, count: int = 1) -> dict[str, Any]:
    """An ``ExactCount`` request of the driver's class, with the fields the API server defaults."""
    return {"name": name, "exactly": {"deviceClassName": driver, "allocationMode": "ExactCount", "count": count}}


def _selector(key: str, value: str) -> dict[str, Any]:
    expr = {"key": key, "operator": "In", "values": [value]}
    return {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}


def per_device_node_selection(*, mixed: bool) -> tuple[dict[str, Any], Expected]:
    """Devices that each select their node (by label, by name, all nodes); ``mixed``: with another driver's devices."""
    devices: list[dict[str, Any]] = [
        {"name": "gpu-elsewhere", "nodeSelector": _selector("topology.example.com/rack", "r2")},
        {"name": "gpu-rack", "nodeSelector": _selector("topology.example.com/rack", "r1")},
        {"name": "gpu-named", "nodeName": NODE},
        {"name": "gpu-all", "allNodes": True},
    ]
    slices = [one_slice(GPU, "fabric", devices, perDeviceNodeSelection=True)]
    classes = [device_class(GPU)]
    requests = [exactly("gpus", GPU, count=3)]
    expected = [("gpus", "fabric", "gpu-rack"), ("gpus", "fabric", "gpu-named"), ("gpus", "fabric", "gpu-all")]
    if mixed:
        slices.append(one_slice(NIC, NODE, [{"name": "nic-0"}], nodeName=NODE))
        classes.append(device_class(NIC))
        requests.append(exactly("nic", NIC))
        expected.append(("nic", NODE, "nic-0"))
    case = allocate_case(node=NODE, slices=slices, classes=classes, claims=[claim(*requests)], node_labels=LABELS)
    return case, expected


def binding_conditions_last() -> tuple[dict[str, Any], Expected]:
    """Pool "a" needs a binding step (its device has binding conditions), pool "b" does not: "b" goes first."""
    bound = {"name": "gpu-0", "bindingConditions": ["example.com/attached"], "bindingFailureConditions": ["example.com/failed"]}
    slices = [one_slice(GPU, "a", [bound], nodeName=NODE), one_slice(GPU, "b", [{"name": "gpu-0"}], nodeName=NODE)]
    case = allocate_case(node=NODE, slices=slices, classes=[device_class(GPU)], claims=[claim(exactly("one", GPU, count=2))])
    return case, [("one", "b", "gpu-0"), ("one", "a", "gpu-0")]


def prioritized_list_over_the_claim_limit() -> tuple[dict[str, Any], Expected]:
    """First choice 30 devices, then a request for 10 more: over the 32-device limit, so the second choice (1) is taken.

    Walking every 30-of-64 combination before giving up on the first choice would never end.
    """
    slices = [one_slice(GPU, NODE, [{"name": f"gpu-{i:02d}"} for i in range(64)], nodeName=NODE)]
    sub = [
        {"name": "many", "deviceClassName": GPU, "allocationMode": "ExactCount", "count": 30},
        {"name": "one", "deviceClassName": GPU, "allocationMode": "ExactCount", "count": 1},
    ]
    c = claim({"name": "first", "firstAvailable": sub}, exactly("more", GPU, count=10))
    case = allocate_case(node=NODE, slices=slices, classes=[device_class(GPU)], claims=[c])
    expected = [("first/one", NODE, "gpu-00")] + [("more", NODE, f"gpu-{i:02d}") for i in range(1, 11)]
    return case, expected


CASES = {
    "per-device node selection": lambda: per_device_node_selection(mixed=False),
    "per-device node selection beside another driver": lambda: per_device_node_selection(mixed=True),
    "binding conditions last": binding_conditions_last,
    "prioritized list over the claim limit": prioritized_list_over_the_claim_limit,
}
