"""Hand-written cases of issue 28, for every release: list-typed attributes, non-scalar constraint values,
compatibility groups, derived attributes and fractional capacity ranges with the gate off and on.

Each function returns celdiff cases (``allocate`` or ``selector``). ``e2e/test_feature_gates.py``
runs them through each release's celdiff and ``oracle.python_allocate``/``python_selector``, which
must agree; ``tests/unit/schedsim/test_allocator_list_attributes.py`` holds the answers themselves. The
cases use a class without selectors: before 1.37 every selector fails on a device with a
list-typed attribute ("unsupported attribute value").
"""

from __future__ import annotations

from typing import Any

from testkit.oracle.oracle import allocate_case, selector_case

DRIVER = "gpu.dra-gpu.dev"
NODE = "node-a"
CLASS = {"metadata": {"name": "any"}, "spec": {}}
NUMA = f"{DRIVER}/numa"


def device(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


def numa_device(name: str, value: dict[str, Any]) -> dict[str, Any]:
    return device(name, attributes={"numa": value})


def slice_(name: str, devices: list[dict[str, Any]], *, count: int = 1, **spec: Any) -> dict[str, Any]:
    body = {"driver": DRIVER, "nodeName": NODE, "pool": {"name": "p", "generation": 1, "resourceSliceCount": count}}
    return {"metadata": {"name": name}, "spec": {**body, **({"devices": devices} if devices else {}), **spec}}


def request(
    name: str = "gpu", count: int = 1, *, mode: str = "ExactCount", selectors: tuple[str, ...] = (), **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": "any", "allocationMode": mode, **extra}
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if mode == "ExactCount":
        body["count"] = count
    return {"name": name, "exactly": body}


def claim(*requests: dict[str, Any], constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return {"metadata": {"name": "c", "namespace": "ns", "uid": "uid-c"}, "spec": {"devices": devices}}


def case(slices: list[dict[str, Any]], *claims: dict[str, Any], gates: str = "") -> dict[str, Any]:
    out = allocate_case(node=NODE, slices=slices, classes=[CLASS], claims=list(claims))
    if gates:
        out["featureGates"] = gates
    return out


# One list-typed attribute per device: before 1.37 it fails conversion, and Go names the first failing one in random order.
LIST_VALUES = {
    "numa": {"ints": [0, 1]},
    "names": {"strings": ["gpu-a", "gpu-b"]},
    "drivers": {"versions": ["550.1.0", "580.95.5"]},
    "flags": {"bools": [True, False]},
}
LIST_SELECTORS = (
    ("numa", f'device.attributes["{DRIVER}"].numa.includes(1)'),
    ("numa", f'1 in device.attributes["{DRIVER}"].numa'),
    ("numa", f'device.attributes["{DRIVER}"].numa.size() == 2'),
    ("numa", f'device.attributes["{DRIVER}"].numa.exists(n, n > 1)'),
    ("names", f'device.attributes["{DRIVER}"].names.all(n, n.startsWith("gpu"))'),
    ("drivers", f'device.attributes["{DRIVER}"].drivers.exists(v, v.compareTo(semver("570.0.0")) >= 0)'),
    ("flags", f'device.attributes["{DRIVER}"].flags[1]'),
    ("numa", "true"),
)


def selector_cases() -> list[dict[str, Any]]:
    """Selectors over list-typed attributes, and a list of versions one of which does not parse."""
    out = []
    for name, expression in LIST_SELECTORS:
        d = device("gpu-0", attributes={name: LIST_VALUES[name], "model": {"string": "H100"}})
        out.append(selector_case(DRIVER, d, expression))
    return [*out, selector_case(DRIVER, numa_device("gpu-1", {"versions": ["1.2.3", "1.2"]}), "true")]


def allocation_cases() -> dict[str, dict[str, Any]]:
    """Allocation cases by name."""
    out: dict[str, dict[str, Any]] = {}
    picks = [slice_("s", [numa_device("gpu-0", {"ints": [0]}), numa_device("gpu-1", {"ints": [1, 2]})])]
    out["selector over a list"] = case(picks, claim(request(selectors=(f'device.attributes["{DRIVER}"].numa.includes(2)',))))
    first_list = [slice_("s", [numa_device("gpu-0", {"ints": [0, 1]})])]
    out["match: a first device with a list"] = case(first_list, claim(request(), constraints=[{"matchAttribute": NUMA}]))
    listed: dict[str, Any] = {"ints": [0]}
    scalar: dict[str, Any] = {"int": 0}
    pairs = {"list, list": (listed, listed), "list, scalar": (listed, scalar)}
    pairs["scalar, list"] = (scalar, listed)
    pairs["scalar, equal scalar"] = (scalar, scalar)
    for label, (a, b) in pairs.items():
        two = [slice_("s", [numa_device("gpu-0", a), numa_device("gpu-1", b)])]
        for kind in ("matchAttribute", "distinctAttribute"):
            out[f"{kind}: {label}"] = case(two, claim(request(count=2), constraints=[{kind: NUMA}]))
    counters = slice_("p-counters", [], count=3, sharedCounters=[{"name": "cs", "counters": {"mem": {"value": "2"}}}])

    def consumer(name: str, **extra: Any) -> dict[str, Any]:
        return device(name, consumesCounters=[{"counterSet": "cs", "counters": {"mem": {"value": "1"}}, **extra}])

    grouped = [counters, slice_("p-plain", [consumer("gpu-0")], count=3)]
    grouped.append(slice_("p-grouped", [consumer("gpu-1", compatibilityGroups=["a"])], count=3))
    out["compatibility groups"] = case(grouped, claim(request()))
    out["compatibility groups, All"] = case(grouped, claim(request(mode="All")))
    derived = [{"name": "derived/numa", "expression": "1"}]
    plain = [slice_("s", [device("gpu-0")])]
    out["derived attributes"] = case(
        plain, claim(request(derivedAttributes=derived), constraints=[{"matchAttribute": "derived/numa"}])
    )
    one = {"name": "one", "deviceClassName": "any", "allocationMode": "ExactCount", "count": 1, "derivedAttributes": derived}
    sub = {"name": "gpu", "firstAvailable": [one]}
    out["derived attributes of a subrequest"] = case(plain, claim(sub))
    for label, cores, policy in (
        ("milli rounding", "250m", {"default": "1", "validRange": {"min": "100m", "step": "100m"}}),
        ("not a milli value", "150100u", {"default": "100m", "validRange": {"min": "100m", "step": "100m"}}),
    ):
        shared = device("gpu-0", allowMultipleAllocations=True, capacity={"cores": {"value": "1", "requestPolicy": policy}})
        c = claim(request(capacity={"requests": {"cores": cores}}))
        out[f"fractional range, {label}"] = case([slice_("s", [shared])], c)
        out[f"fractional range, {label}, gate on"] = case([slice_("s", [shared])], c, gates="DRAFractionalCapacityRange=true")
    # The gates 1.34 and 1.35 have off: taints, binding conditions, partitionable devices; and two quirks.
    tainted = device("gpu-0", taints=[{"key": "example.com/broken", "value": "", "effect": "NoSchedule"}])
    out["an untolerated taint"] = case([slice_("s", [tainted, device("gpu-1")])], claim(request()))
    binding = device("gpu-0", bindingConditions=["example.com/ready"], bindingFailureConditions=["example.com/failed"])
    out["binding conditions"] = case([slice_("s", [binding, device("gpu-1")])], claim(request()))
    consuming = device("gpu-0", consumesCounters=[{"counterSet": "cs", "counters": {"mem": {"value": "1"}}}])
    counted = [
        slice_("s", [consuming, device("gpu-1")], count=2),
        slice_("t", [], count=2, sharedCounters=counters["spec"]["sharedCounters"]),
    ]
    out["a device that consumes counters"] = case(counted, claim(request()))
    out["a device that consumes counters, All"] = case(counted, claim(request(mode="All")))
    four = [slice_("s", [device(f"gpu-{i}") for i in range(4)])]
    first = {
        "name": "one",
        "deviceClassName": "any",
        "allocationMode": "ExactCount",
        "count": 1,
        "selectors": [{"cel": {"expression": "false"}}],
    }
    every = {"name": "every", "deviceClassName": "any", "allocationMode": "All"}
    out["All after another subrequest"] = case(four, claim({"name": "gpu", "firstAvailable": [first, every]}))
    by_input = [slice_("b", [device("gpu-1")], count=2), slice_("a", [device("gpu-0")], count=2)]
    out["slices in input order"] = case(by_input, claim(request()))
    return out
