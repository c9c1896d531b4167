"""`dra-gpu explain`'s selector outcomes, shared by device shape, give each device its own answer.

The allocator keeps each request's compiled selectors once (class then request) and each
outcome once per device view, and every selector's answer once per projection of a device onto
what it reads. Fleets whose devices differ only in a UUID (or in what a selector reads: a
value, a missing key, the order of a map) must still get, device by device, what evaluating the
selectors on that device alone gives: the same verdict, the same selector, the same error.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from dra_driver.schedsim.allocator import explain
from dra_driver.schedsim.cel import CelError, DeviceView, compile_selector

DRIVER = "gpu.dra-gpu.dev"
A = f'device.attributes["{DRIVER}"]'
CLASS_SELECTORS = [f'device.driver == "{DRIVER}"', f'{A}.type != "nic"']
REQUEST_SELECTORS = [
    "true",
    f'{A}.profile == "1g"',
    f'{A}.uuid.startsWith("GPU-1")',  # reads the one attribute that tells the devices apart
    f'{A}.ver.isGreaterThan(semver("1.0.0"))',  # a runtime error where the version is missing
    f'has({A}.ver) && {A}.ver.isGreaterThan(semver("1.0.0"))',
    f"{A}.size() > 4",  # the whole domain, its size
    f'{A}.exists(k, k == "ver")',  # its keys
    f'{A}.map(k, k)[0] == "type"',  # its order
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("20Gi")) >= 0',
    f'{A}.profile == "1g" && {A}.index < 2',
]


def _device(rng: random.Random, node: int, i: int) -> dict[str, Any]:
    attrs: dict[str, Any] = {"type": {"string": rng.choice(["gpu", "mig", "nic"])}, "index": {"int": i % 3}}
    if rng.random() < 0.7:
        attrs["profile"] = {"string": rng.choice(["1g", "2g"])}
    if rng.random() < 0.6:
        attrs["ver"] = {"version": rng.choice(["1.0.0", "1.2.0"])}
    attrs["uuid"] = {"string": f"GPU-{node}-{i}"}
    if rng.random() < 0.2:  # the same entries in another order
        attrs = dict(reversed(list(attrs.items())))
    return {"name": f"dev-{i}", "attributes": attrs, "capacity": {"memory": {"value": rng.choice(["10Gi", "40Gi"])}}}


def _fleet(rng: random.Random, nodes: int) -> list[dict[str, Any]]:
    shapes = [_device(rng, 0, i) for i in range(8)]  # every node publishes these, each with its own UUIDs
    slices = []
    for n in range(nodes):
        devices = []
        for i, d in enumerate(shapes):
            dev = {**d, "attributes": {k: ({"string": f"GPU-{n}-{i}"} if k == "uuid" else v) for k, v in d["attributes"].items()}}
            devices.append(dev if rng.random() < 0.9 else _device(rng, n, i))
        slices.append(
            {
                "metadata": {"name": f"node-{n}-slice"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": f"node-{n}",
                    "pool": {"name": f"node-{n}", "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    return slices


def _own_verdict(d: dict[str, Any], selectors: list[tuple[str, int, str]]) -> tuple[str, str] | None:
    """The first selector that rejects the device, evaluated on it alone (no view, no cache): (verdict, detail)."""
    for where, i, expr in selectors:
        try:
            ok = compile_selector(expr).matches(d, driver=DRIVER)
        except CelError as err:
            return "error", f"{where} selector #{i}: CEL runtime error: {err.message}"
        if not ok:
            return "no-match", f"{where} selector #{i} is false: {expr}"
    return None


@pytest.mark.parametrize("seed", range(12))
def test_every_device_gets_its_own_selector_outcome(seed: int) -> None:
    rng = random.Random(seed)
    slices = _fleet(rng, nodes=6)
    request = rng.sample(REQUEST_SELECTORS, rng.randrange(1, 4))
    claim = {
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "r",
                        "exactly": {"deviceClassName": "gpu", "selectors": [{"cel": {"expression": e}} for e in request]},
                    }
                ]
            }
        },
    }
    classes = {"gpu": {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": e}} for e in CLASS_SELECTORS]}}}
    got = explain([claim], slices, classes, []).to_json()
    candidates = {(c["node"], c["device"]): c for r in got["requests"] for c in r["candidates"]}
    order = [("class gpu", i, e) for i, e in enumerate(CLASS_SELECTORS)] + [("request r", i, e) for i, e in enumerate(request)]
    seen = 0
    for s in slices:
        node = s["spec"]["nodeName"]
        for d in s["spec"]["devices"]:
            c = candidates[(node, f"{node}/{d['name']}")]
            want = _own_verdict(d, order)
            if want is None:
                assert "selector #" not in c["detail"], (request, d, c)
            else:
                assert (c["verdict"], c["detail"]) == want, (request, d)
            seen += 1
    assert seen == len(candidates)


def test_a_map_read_in_order_is_not_shared_between_orders() -> None:
    sel = compile_selector(f'{A}.map(k, k)[0] == "a"')
    first = {"name": "x", "attributes": {"a": {"int": 1}, "b": {"int": 2}}}
    second = {"name": "y", "attributes": {"b": {"int": 2}, "a": {"int": 1}}}
    assert [sel.matches_view(DeviceView.of(d, DRIVER)) for d in (first, second)] == [True, False]
