"""Hypothesis strategies: small random clusters and one pod's claims, for the allocation differential.

A case is what ``e2e/cmd/celdiff`` takes as ``{"kind": "allocate", ...}``: ResourceSlices (pools
on the target node, on another node, for all nodes; several slices per pool, sometimes a missing
or extra one, a stale or newer generation, a duplicate device name; counter sets in their own
slice with devices consuming them; taints; shareable devices with consumable capacity),
DeviceClasses (selector-free, driver, attribute and capacity selectors, rarely a failing one),
already-allocated claims (dedicated, shared with consumed capacity, admin access) and the pod's
claims (``ExactCount`` 1-3, ``All``, ``firstAvailable``, selectors, tolerations, capacity
requests, ``matchAttribute``/``distinctAttribute`` constraints). Every object carries the fields
the API server would default (allocation mode, count, toleration operator).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.differential.devices import Draw
from tests.differential.oracle import allocate_case

NODE = "node-a"
OTHER_NODE = "node-b"
DRIVERS = ("gpu.dra-gpu.dev", "net.example.com")
MODELS = ("H100", "A100", "L4")
MEMORY = ("16Gi", "40Gi", "80Gi")
REQUEST_SELECTORS = (
    'device.attributes["{d}"].model == "H100"',
    'device.attributes["{d}"].model != "L4"',
    'device.capacity["{d}"].memory.compareTo(quantity("40Gi")) >= 0',
    'device.attributes["{d}"].index % 2 == 0',
    'device.attributes["{d}"].?numa.orValue(0) == 1',
    'has(device.attributes["{d}"].numa)',
    "device.allowMultipleAllocations",
    'device.attributes["{d}"].?migCapable.orValue(false)',
    'device.attributes["{d}"].?driverVersion.orValue(semver("0.0.0")).compareTo(semver("570.0.0")) >= 0',
    "true",
)
ERRORING_SELECTORS = (
    'device.attributes["{d}"].coolingType == "liquid"',  # runtime error: no such key
    'device.attributes["{d}"].model > 1',  # runtime error: no such overload
    "device.nope",  # compile error
)


def _device(draw: Draw[Any], driver: str, name: str, index: int, counter_sets: list[str]) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "model": {"string": draw(st.sampled_from(MODELS))},
        "index": {"int": index},
    }
    if draw(st.integers(0, 3)) > 0:
        attrs["numa"] = {"int": draw(st.integers(0, 1))}
    if draw(st.integers(0, 3)) > 0:
        attrs["migCapable"] = {"bool": draw(st.booleans())}
    if draw(st.integers(0, 3)) > 0:
        attrs["driverVersion"] = {"version": draw(st.sampled_from(("550.1.0", "570.0.0", "580.95.5")))}
    if draw(st.integers(0, 4)) == 0:
        attrs[f"{driver}/pcieRoot"] = {"string": draw(st.sampled_from(("pci0", "pci1")))}
    dev: dict[str, Any] = {"name": name, "attributes": attrs}
    cap: dict[str, Any] = {"memory": {"value": draw(st.sampled_from(MEMORY))}}
    shared = draw(st.integers(0, 5)) == 0
    if shared:
        dev["allowMultipleAllocations"] = True
        policy = draw(
            st.sampled_from(
                (
                    None,
                    {"default": "10Gi", "validRange": {"min": "10Gi", "step": "10Gi"}},
                    {"default": "8Gi", "validValues": ["8Gi", "16Gi", "32Gi"]},
                    {"validRange": {"min": "1Gi", "max": "20Gi"}},
                )
            )
        )
        if policy is not None:
            cap["memory"]["requestPolicy"] = policy
    dev["capacity"] = cap
    if counter_sets and draw(st.integers(0, 2)) > 0:
        cs = draw(st.sampled_from(counter_sets))
        dev["consumesCounters"] = [
            {"counterSet": cs, "counters": {"memory": {"value": draw(st.sampled_from(("10Gi", "20Gi", "40Gi")))}}}
        ]
        if draw(st.integers(0, 30)) == 0:
            dev["consumesCounters"][0]["counters"]["bogus"] = {"value": "1"}  # invalid pool
    if draw(st.integers(0, 5)) == 0:
        dev["taints"] = [
            {
                "key": draw(st.sampled_from(("example.com/broken", "example.com/maint"))),
                "value": draw(st.sampled_from(("", "true"))),
                "effect": draw(st.sampled_from(("NoSchedule", "NoExecute", "None"))),
            }
        ]
    return dev


def _pool(draw: Draw[Any], driver: str, pool: str, node: str | None, slice_prefix: str) -> list[dict[str, Any]]:
    n_slices = draw(st.integers(1, 2))
    generation = draw(st.integers(1, 2))
    counter_sets = [f"cs-{i}" for i in range(draw(st.sampled_from((0, 0, 1, 2))))]
    has_counter_slice = bool(counter_sets)
    total = n_slices + (1 if has_counter_slice else 0)
    count = total + (1 if draw(st.integers(0, 12)) == 0 else 0)  # sometimes a slice is missing: incomplete
    slices: list[dict[str, Any]] = []
    index = 0
    names: list[str] = []
    for si in range(n_slices):
        devs = []
        for _ in range(draw(st.integers(1, 4))):
            name = f"dev-{index}"
            if names and draw(st.integers(0, 40)) == 0:
                name = names[0]  # duplicate name: invalid pool
            names.append(name)
            devs.append(_device(draw, driver, name, index, counter_sets))
            index += 1
        spec: dict[str, Any] = {
            "driver": driver,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            "devices": devs,
        }
        if node is None:
            spec["allNodes"] = True
        else:
            spec["nodeName"] = node
        slices.append({"metadata": {"name": f"{slice_prefix}-{si}"}, "spec": spec})
    if has_counter_slice:
        spec = {
            "driver": driver,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            "sharedCounters": [
                {"name": cs, "counters": {"memory": {"value": draw(st.sampled_from(("40Gi", "80Gi")))}}} for cs in counter_sets
            ],
        }
        if node is None:
            spec["allNodes"] = True
        else:
            spec["nodeName"] = node
        slices.append({"metadata": {"name": f"{slice_prefix}-counters"}, "spec": spec})
    if draw(st.integers(0, 6)) == 0:
        # A stale slice of an older generation: ignored.
        old = dict(slices[0])
        old_spec = dict(old["spec"])
        old_spec["pool"] = {**old_spec["pool"], "generation": generation - 1}
        slices.append({"metadata": {"name": f"{slice_prefix}-old"}, "spec": old_spec})
    return slices


def _request(draw: Draw[Any], name: str, driver: str, classes: list[str], *, sub: bool = False) -> dict[str, Any]:
    mode = "ExactCount" if sub or draw(st.integers(0, 7)) > 0 else "All"
    r: dict[str, Any] = {"deviceClassName": draw(st.sampled_from(classes)), "allocationMode": mode}
    if mode == "ExactCount":
        r["count"] = draw(st.sampled_from((1, 1, 1, 2, 2, 3)))
    sels = draw(st.lists(st.sampled_from(REQUEST_SELECTORS), max_size=1 if sub else 2))
    if draw(st.integers(0, 25)) == 0:
        sels.append(draw(st.sampled_from(ERRORING_SELECTORS)))
    if sels:
        r["selectors"] = [{"cel": {"expression": s.format(d=driver)}} for s in sels]
    if draw(st.integers(0, 3)) == 0:
        r["tolerations"] = [
            draw(
                st.sampled_from(
                    (
                        {"key": "example.com/broken", "operator": "Exists"},
                        {"key": "example.com/maint", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
                        {"operator": "Exists"},
                        {"key": "example.com/broken", "operator": "Equal", "value": ""},
                    )
                )
            )
        ]
    if draw(st.integers(0, 4)) == 0:
        r["capacity"] = {"requests": {"memory": draw(st.sampled_from(("5Gi", "12Gi", "30Gi", "100Gi")))}}
    if not sub and draw(st.integers(0, 15)) == 0:
        r["adminAccess"] = True
    return {"name": name, "exactly": r} if not sub else {"name": name, **r}


def _claim(draw: Draw[Any], name: str, driver: str, classes: list[str]) -> dict[str, Any]:
    requests = []
    for i in range(draw(st.integers(1, 2))):
        rname = f"req-{i}"
        if draw(st.integers(0, 3)) == 0:
            subs = [_request(draw, f"sub-{j}", driver, classes, sub=True) for j in range(draw(st.integers(1, 3)))]
            requests.append({"name": rname, "firstAvailable": subs})
        else:
            requests.append(_request(draw, rname, driver, classes))
    devices: dict[str, Any] = {"requests": requests}
    if draw(st.integers(0, 2)) == 0:
        attr = draw(st.sampled_from(("model", "numa", "pcieRoot", "index", "driverVersion")))
        kind = draw(st.sampled_from(("matchAttribute", "distinctAttribute")))
        c: dict[str, Any] = {kind: f"{driver}/{attr}"}
        if draw(st.booleans()):
            c["requests"] = draw(st.sampled_from((["req-0"], ["req-0", "req-1"], ["req-0/sub-0"])))
        devices["constraints"] = [c]
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}, "spec": {"devices": devices}}


def _allocated(draw: Draw[Any], slices: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    devices = [(s["spec"]["driver"], s["spec"]["pool"]["name"], d) for s in slices for d in s["spec"].get("devices") or []]
    out = []
    for i in range(n):
        if not devices:
            break
        driver, pool, d = draw(st.sampled_from(devices))
        result: dict[str, Any] = {"request": "gpu", "driver": driver, "pool": pool, "device": d["name"]}
        how = draw(st.sampled_from(("dedicated", "dedicated", "shared", "admin")))
        if how == "shared":
            result["shareID"] = f"00000000-0000-0000-0000-00000000000{i}"
            if draw(st.integers(0, 3)) > 0:
                result["consumedCapacity"] = {"memory": draw(st.sampled_from(("8Gi", "10Gi", "16Gi", "40Gi")))}
        elif how == "admin":
            result["adminAccess"] = True
        out.append(
            {
                "metadata": {"name": f"taken-{i}", "namespace": "ns", "uid": f"uid-taken-{i}"},
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "gpu", "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}}
                        ]
                    }
                },
                "status": {"allocation": {"devices": {"results": [result]}}},
            }
        )
    return out


@st.composite
def allocation_cases(draw: Draw[Any]) -> dict[str, Any]:
    """One ``allocate`` case for celdiff (and :func:`tests.differential.oracle.python_allocate`)."""
    drivers = list(DRIVERS[: draw(st.integers(1, 2))])
    slices: list[dict[str, Any]] = []
    for di, driver in enumerate(drivers):
        for pi in range(draw(st.integers(1, 2))):
            node = draw(st.sampled_from((NODE, NODE, NODE, OTHER_NODE, None)))
            slices += _pool(draw, driver, f"pool-{pi}", node, f"{di}-{pi}")
    classes: list[dict[str, Any]] = [{"metadata": {"name": "gpu"}, "spec": {}}]
    classes.append(
        {
            "metadata": {"name": "first-driver"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{drivers[0]}"'}}]},
        }
    )
    classes.append(
        {
            "metadata": {"name": "big"},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f'device.capacity["{drivers[0]}"].?memory.orValue(quantity("0"))'
                            '.compareTo(quantity("40Gi")) >= 0'
                        }
                    }
                ]
            },
        }
    )
    class_names = ["gpu", "first-driver", "first-driver", "first-driver", "big"]
    if draw(st.integers(0, 30)) == 0:
        classes.append(
            {"metadata": {"name": "broken"}, "spec": {"selectors": [{"cel": {"expression": 'device.attributes["x"].y'}}]}}
        )
        class_names.append("broken")
    claims = [_claim(draw, f"claim-{i}", drivers[0], class_names) for i in range(draw(st.integers(1, 2)))]
    allocated = _allocated(draw, slices, draw(st.integers(0, 3)))
    return allocate_case(node=NODE, slices=slices, classes=classes, claims=claims, allocated=allocated)
