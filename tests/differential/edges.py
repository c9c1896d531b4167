"""Allocation cases written by hand, outside the generator: where `dra-gpu explain` once disagreed with the scheduler.

Each builder returns a celdiff ``allocate`` case (``testkit.oracle.oracle.allocate_case``) and
the scheduler's answer to it: the allocation as (request, pool, device) triples, or its error
(``{"outcome": "error", "class": ..., "message": ...}``); :func:`shape` puts an answer in that
form. Used by ``tests/unit/schedsim/test_allocator_edges.py`` (the simulator alone) and
``tests/differential/test_allocation_edges.py`` (the same cases through the Go allocator).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dra_driver.core.schema import ATTR_NUMA_NODE, ATTR_PCIE_ROOT, node_devices
from dra_driver.sources.fake import FakeGpuSource
from testkit.oracle.oracle import allocate_case

GPU = "gpu.dra-gpu.dev"
NIC = "nic.example.com"
NODE = "node-a"
LABELS = {"kubernetes.io/hostname": NODE, "topology.example.com/rack": "r1"}
Expected = list[tuple[str, str, str]] | dict[str, Any]  # the devices allocated, or the error


def shape(answer: dict[str, Any]) -> Expected:
    """A celdiff answer (or ``python_allocate``'s) as an expectation: the triples, or the answer itself."""
    if answer["outcome"] == "allocated":
        return [(d["request"], d["pool"], d["device"]) for claim in answer["claims"] for d in claim]
    return answer


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


def _term(key: str, op: str, *values: str) -> dict[str, Any]:
    expr: dict[str, Any] = {"key": key, "operator": op}
    if values:
        expr["values"] = list(values)
    return {"matchExpressions": [expr]}


def node_selector_comparisons() -> tuple[dict[str, Any], Expected]:
    """Slices selecting the node by a label compared as an integer (``Gt``/``Lt``); a label that is no integer never matches."""
    labels = {**LABELS, "example.com/slots": "8"}
    by = {
        "a-lt": _term("example.com/slots", "Lt", "16"),  # 8 < 16
        "b-gt": _term("example.com/slots", "Gt", "8"),  # 8 > 8: no
        "c-word": _term("topology.example.com/rack", "Gt", "0"),  # "r1" is no integer
        "d-gt": _term("example.com/slots", "Gt", "2"),  # 8 > 2
    }
    slices = [one_slice(GPU, pool, [{"name": "gpu-0"}], nodeSelector={"nodeSelectorTerms": [t]}) for pool, t in by.items()]
    case = allocate_case(
        node=NODE, slices=slices, classes=[device_class(GPU)], claims=[claim(exactly("gpus", GPU, 2))], node_labels=labels
    )
    return case, [("gpus", "a-lt", "gpu-0"), ("gpus", "d-gt", "gpu-0")]


def subrequest_named_alone_in_errors() -> tuple[dict[str, Any], Expected]:
    """An ``All`` subrequest on an incomplete pool: the scheduler's error names the subrequest without its request."""
    pool = one_slice(GPU, "a", [{"name": "gpu-0"}], nodeName=NODE)
    pool["spec"]["pool"]["resourceSliceCount"] = 2  # the other slice is missing
    subs = [
        {"name": "every", "deviceClassName": GPU, "allocationMode": "All"},
        {"name": "one", "deviceClassName": GPU, "allocationMode": "ExactCount", "count": 1},
    ]
    case = allocate_case(
        node=NODE, slices=[pool], classes=[device_class(GPU)], claims=[claim({"name": "gpus", "firstAvailable": subs})]
    )
    message = f"claim ns/c, request every: asks for all devices, but resource pool {GPU}/a is currently being updated"
    return case, {"outcome": "error", "class": "abort", "message": message}


def all_over_the_claim_limit_gives_way() -> tuple[dict[str, Any], Expected]:
    """24 devices, then ``All`` of 10 others: 34 is over the 32-device limit, so the small first choice is taken instead."""
    devices = [{"name": f"gpu-{i:02d}", "attributes": {"index": {"int": i}}} for i in range(40)]
    low, high = (f'device.attributes["{GPU}"].index {op} 10' for op in ("<", ">="))

    def body(count: int, selector: str) -> dict[str, Any]:
        mode = {"allocationMode": "All"} if count == 0 else {"allocationMode": "ExactCount", "count": count}
        return {"deviceClassName": GPU, **mode, "selectors": [{"cel": {"expression": selector}}]}

    first = {"name": "first", "firstAvailable": [{"name": "many", **body(24, high)}, {"name": "few", **body(1, high)}]}
    c = claim(first, {"name": "rest", "exactly": body(0, low)})
    case = allocate_case(
        node=NODE, slices=[one_slice(GPU, NODE, devices, nodeName=NODE)], classes=[device_class(GPU)], claims=[c]
    )
    return case, [("first/few", NODE, "gpu-10")] + [("rest", NODE, f"gpu-{i:02d}") for i in range(10)]


def node_selector_of_several_terms(*, pinned: str | None) -> tuple[dict[str, Any], Expected]:
    """A device selecting its nodes with two terms: the claim's node selector cannot be built, after the allocation.

    ``pinned`` ("nodeName" or "bindsToNode"): a device allocated before it pins the claim to the node, and the merge stops there.
    """
    either = {
        "nodeSelectorTerms": [_term("topology.example.com/rack", "In", "r1"), _term("topology.example.com/rack", "In", "r2")]
    }
    slices = [one_slice(GPU, "fabric", [{"name": "gpu-0", "nodeSelector": either}], perDeviceNodeSelection=True)]
    classes, requests = [device_class(GPU)], [exactly("gpu", GPU)]
    if pinned == "nodeName":
        slices.append(one_slice(NIC, NODE, [{"name": "nic-0"}], nodeName=NODE))
    elif pinned == "bindsToNode":
        slices.append(
            one_slice(NIC, "fabric", [{"name": "nic-0", "allNodes": True, "bindsToNode": True}], perDeviceNodeSelection=True)
        )
    if pinned is not None:
        classes.append(device_class(NIC))
        requests.insert(0, exactly("nic", NIC))
    case = allocate_case(node=NODE, slices=slices, classes=classes, claims=[claim(*requests)], node_labels=LABELS)
    if pinned is None:
        return case, {
            "outcome": "error",
            "class": "abort",
            "message": "create NodeSelector for claim c: unsupported ResourceSlice.NodeSelector with 2 terms",
        }
    return case, [("nic", NODE if pinned == "nodeName" else "fabric", "nic-0"), ("gpu", "fabric", "gpu-0")]


def slice_count_from_the_nodes_own_slice() -> tuple[dict[str, Any], Expected]:
    """Two slices of a pool disagree on its slice count: the scheduler reads the node's own slice (gathered first).

    The input order does not matter: the slice for all nodes comes first here.
    """
    everywhere = one_slice(GPU, "a", [{"name": "gpu-0"}], allNodes=True)
    everywhere["metadata"]["name"] = "a-0"
    mine = one_slice(GPU, "a", [{"name": "gpu-1"}], nodeName=NODE)
    mine["metadata"]["name"] = "a-1"
    mine["spec"]["pool"]["resourceSliceCount"] = 2  # right: the pool has two slices ("a-0" says one)
    case = allocate_case(node=NODE, slices=[everywhere, mine], classes=[device_class(GPU)], claims=[claim(exactly("gpu", GPU))])
    return case, [("gpu", "a", "gpu-0")]


def invalid_pool_keeps_its_place() -> tuple[dict[str, Any], Expected]:
    """An invalid pool is not put last for its devices' binding conditions (the scheduler keeps none of its devices)."""
    bound = {"name": "gpu-0", "bindingConditions": ["example.com/attached"], "bindingFailureConditions": ["example.com/failed"]}
    invalid = one_slice(GPU, "a", [bound, {"name": "gpu-0"}], nodeName=NODE)  # a device name twice
    incomplete = one_slice(GPU, "b", [{"name": "gpu-0"}], nodeName=NODE)
    incomplete["spec"]["pool"]["resourceSliceCount"] = 2
    every = {"name": "all", "exactly": {"deviceClassName": GPU, "allocationMode": "All"}}
    case = allocate_case(node=NODE, slices=[incomplete, invalid], classes=[device_class(GPU)], claims=[claim(every)])
    message = f"claim ns/c, request all: asks for all devices, but resource pool {GPU}/a is currently invalid"
    return case, {"outcome": "error", "class": "abort", "message": message}


def gpu_beside_nic(
    attribute: str, nic: dict[str, Any], *, held: tuple[int, ...] = (), gpu: int | None
) -> tuple[dict[str, Any], Expected]:
    """One GPU and one NIC of another driver, ``matchAttribute`` on a standard topology attribute.

    The GPUs are what dra-gpu publishes for 8 fake H100s (gpu-0..3 on NUMA node 0, gpu-4..7 on
    1, one PCIe root each); the NIC sits where ``nic`` says; ``held``: GPUs another claim holds.
    First fit takes gpu-0, the NIC does not match it, so the allocator walks on to the first GPU
    it does match (``gpu``), or finds none (None: unsatisfiable).
    """
    gpus = [d.to_api() for d in node_devices(FakeGpuSource("h100x8", NODE).gpus())]
    slices = [one_slice(GPU, NODE, gpus, nodeName=NODE), one_slice(NIC, NODE, [{"name": "nic-0", **nic}], nodeName=NODE)]
    c = claim(exactly("gpu", GPU), exactly("nic", NIC))
    c["spec"]["devices"]["constraints"] = [{"requests": ["gpu", "nic"], "matchAttribute": attribute}]
    results = [{"request": "gpu", "driver": GPU, "pool": NODE, "device": f"gpu-{i}"} for i in held]
    allocated = [
        {
            "metadata": {"name": "held", "namespace": "ns", "uid": "uid-held"},
            "spec": {"devices": {"requests": [exactly("gpu", GPU, count=len(held))]}},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    ]
    case = allocate_case(
        node=NODE, slices=slices, classes=[device_class(GPU), device_class(NIC)], claims=[c], allocated=allocated if held else []
    )
    if gpu is None:
        return case, {"outcome": "unsatisfiable"}
    return case, [("gpu", NODE, f"gpu-{gpu}"), ("nic", NODE, "nic-0")]


_NIC_ON_NUMA_1 = {"attributes": {ATTR_NUMA_NODE: {"int": 1}, ATTR_PCIE_ROOT: {"string": "pci0000:a0"}}}


CASES: dict[str, Callable[[], tuple[dict[str, Any], Expected]]] = {
    "per-device node selection": lambda: per_device_node_selection(mixed=False),
    "per-device node selection beside another driver": lambda: per_device_node_selection(mixed=True),
    "binding conditions last": binding_conditions_last,
    "prioritized list over the claim limit": prioritized_list_over_the_claim_limit,
    "node selector Gt/Lt": node_selector_comparisons,
    "subrequest named alone in errors": subrequest_named_alone_in_errors,
    "All over the claim limit gives way": all_over_the_claim_limit_gives_way,
    "node selector of several terms": lambda: node_selector_of_several_terms(pinned=None),
    "node selector of several terms after a node-local device": lambda: node_selector_of_several_terms(pinned="nodeName"),
    "node selector of several terms after a bindsToNode device": lambda: node_selector_of_several_terms(pinned="bindsToNode"),
    "slice count from the node's own slice": slice_count_from_the_nodes_own_slice,
    "invalid pool keeps its place": invalid_pool_keeps_its_place,
    "GPU and NIC on one NUMA node": lambda: gpu_beside_nic(ATTR_NUMA_NODE, _NIC_ON_NUMA_1, gpu=4),
    "GPU and NIC on one NUMA node, its first GPU held": lambda: gpu_beside_nic(ATTR_NUMA_NODE, _NIC_ON_NUMA_1, held=(4,), gpu=5),
    "GPU and NIC on one NUMA node, all its GPUs held": lambda: gpu_beside_nic(
        ATTR_NUMA_NODE, _NIC_ON_NUMA_1, held=(4, 5, 6, 7), gpu=None
    ),
    "GPU and NIC on one PCIe root": lambda: gpu_beside_nic(ATTR_PCIE_ROOT, _NIC_ON_NUMA_1, gpu=5),
    "GPU and NIC on one PCIe root, its GPU held": lambda: gpu_beside_nic(ATTR_PCIE_ROOT, _NIC_ON_NUMA_1, held=(5,), gpu=None),
    "GPU and NIC on one NUMA node, the NIC without one": lambda: gpu_beside_nic(
        ATTR_NUMA_NODE, {"attributes": {ATTR_PCIE_ROOT: {"string": "pci0000:a0"}}}, gpu=None
    ),
    "GPU and NIC on one NUMA node, the NIC's a string": lambda: gpu_beside_nic(
        ATTR_NUMA_NODE, {"attributes": {ATTR_NUMA_NODE: {"string": "1"}}}, gpu=None
    ),
}
