"""`dra-gpu explain`: attributes read from another node's map share its outcome only where no selector reads what differs.

The reader (``fastread._attributes_like``) records which names of a new attributes map differ from
the map of the last device of the same name (``DeviceMemo.derived``); the allocator gives a device
the outcome of the same device with the other map where its request's selectors read none of those
names (``NodeAllocator.selector_outcome``). Checked against the same explanation with that shortcut
off, and against inputs that share nothing (``json.loads``), on random clusters whose devices differ
from node to node in a UUID, a serial, a number or a version, with selectors that read those or not.
Also: a counter set's counters read once and their quantities shared between pools.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from dra_driver.schedsim.allocator import NodeAllocator, explain
from dra_driver.schedsim.allocator.fastread import DeviceMemo, read_device
from dra_driver.schedsim.allocator.objects import read_slice
from dra_driver.schedsim.shared_json import SharedDecoder

DRIVER = "gpu.dra-gpu.dev"
SELECTORS = [
    "true",
    f'device.attributes["{DRIVER}"].profile == "p1"',
    f'device.attributes["{DRIVER}"].uuid.startsWith("GPU-1")',  # reads the name that differs between nodes
    'device.attributes["gpu.dra-gpu.dev"].serial == "s-0"',
    f'device.attributes["{DRIVER}"].numa == 1',
    f'device.attributes["{DRIVER}"].version.isGreaterThan(semver("1.0.0"))',
    f'"uuid" in device.attributes["{DRIVER}"]',
    f'device.attributes["{DRIVER}"].exists(k, k == "uuid")',  # reads the whole domain
    f'device.attributes["{DRIVER}"].profile == "p0" && device.attributes["{DRIVER}"].uuid != "GPU-2-0"',
    'device.attributes["other.example.com"].uuid == "GPU-0-0"',
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("30Gi")) >= 0',
    "device.attributes.size() > 0",  # the whole map
    'device.attributes["gpu.dra-gpu.dev"].uuid',  # not a bool: a runtime error
]
CLASS_SELECTORS = [f'device.driver == "{DRIVER}"', f'device.attributes["{DRIVER}"].profile != "p9"', "true"]


def _slices(rng: random.Random, nodes: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in range(nodes):
        devices = []
        for k in range(rng.randrange(1, 8)):
            attrs: dict[str, Any] = {
                "profile": {"string": f"p{k % 3}"},
                "uuid": {"string": f"GPU-{n}-{k % 2}"},  # another string on every node
                # The same on every node, but now and then (another string, number or version).
                "serial": {"string": f"s-{k % 2 if rng.random() < 0.8 else rng.randrange(2)}"},
                "numa": {"int": k % 2 if rng.random() < 0.8 else rng.randrange(2)},
                "version": {"version": ["1.2.3", "0.9.0", "not-a-version"][k % 3 if rng.random() < 0.8 else rng.randrange(3)]},
            }
            if rng.random() < 0.2:
                attrs["other.example.com/uuid"] = {"string": f"GPU-{n}-{k}"}
            if rng.random() < 0.1:
                attrs["gpu.dra-gpu.dev/uuid"] = {"string": "both"}  # published bare and with the domain
            if rng.random() < 0.1:
                attrs["numa"] = rng.choice([{"bool": True}, {"string": "1"}, {"int": 2}])  # another kind or number
            if rng.random() < 0.1:
                attrs = dict(reversed(list(attrs.items())))  # another order
            caps = {"memory": {"value": rng.choice(["80Gi", "20Gi"])}}
            d: dict[str, Any] = {"name": f"dev-{k}", "attributes": attrs, "capacity": caps}
            if rng.random() < 0.1:
                d["allowMultipleAllocations"] = True
            devices.append(d)
        out.append(
            {
                "kind": "ResourceSlice",
                "metadata": {"name": f"node-{n}-devices"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": f"node-{n}",
                    "pool": {"name": f"node-{n}", "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    return out


def _claims(rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for i in range(rng.randrange(1, 3)):
        sels = [{"cel": {"expression": rng.choice(SELECTORS)}} for _ in range(rng.randrange(1, 3))]
        req = {"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": rng.randrange(1, 3), "selectors": sels}}
        out.append({"metadata": {"name": f"c{i}", "namespace": "ns"}, "spec": {"devices": {"requests": [req]}}})
    return out


def _answer(claims: Any, slices: Any, classes: Any) -> Any:
    return explain(claims, slices, classes, []).to_json()


def _no_names(self: NodeAllocator, ci: int, req: Any, chain: Any, driver: str) -> None:
    return None  # the shortcut off: every new map's outcome found as before


@pytest.mark.parametrize("seed", range(40))
def test_derived_outcomes_answer_as_without_them(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    slices = _slices(rng, nodes=rng.randrange(2, 8))
    text = json.dumps({"kind": "List", "items": slices}).encode()
    shared = SharedDecoder().decode(text)
    assert shared == json.loads(text)
    selector = {"cel": {"expression": rng.choice(CLASS_SELECTORS)}}
    classes = {"gpu": {"metadata": {"name": "gpu"}, "spec": {"selectors": [selector]}}}
    claims = _claims(rng)
    got = _answer(claims, shared["items"], classes)
    assert got == _answer(claims, json.loads(text)["items"], classes)  # nothing shared: nothing derived
    monkeypatch.setattr(NodeAllocator, "_names_read", _no_names)
    assert got == _answer(claims, shared["items"], classes)


def _decoded_devices(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    text = json.dumps({"items": [{"spec": {"devices": devices}}]}).encode()
    out: list[dict[str, Any]] = SharedDecoder().decode(text)["items"][0]["spec"]["devices"]
    return out


def test_reader_records_the_names_that_differ() -> None:
    base = {"profile": {"string": "p0"}, "uuid": {"string": "GPU-a"}, "numa": {"int": 0}}
    devices = _decoded_devices(
        [
            {"name": "d", "attributes": base},
            {"name": "d", "attributes": {**base, "uuid": {"string": "GPU-b"}}},  # one string for another
            {"name": "d", "attributes": {**base, "uuid": {"string": "GPU-c"}, "numa": {"int": 1}}},  # a number too
            {"name": "d", "attributes": {**base, "uuid": {"version": "1.0.0"}}},  # another kind
            {"name": "e", "attributes": {**base, "uuid": {"string": "GPU-d"}}},  # another name: read whole
        ]
    )
    memo = DeviceMemo()
    read = [read_device(d, memo) for d in devices]
    assert all(r is not None for r in read)
    first, second, third, fourth, fifth = (r["attributes"] for r in read if r is not None)
    assert memo.derived[id(second)] == (second, first, ("uuid",))
    for other in (first, third, fourth, fifth):
        assert id(other) not in memo.derived
    assert [r for r in read] == [_plain_copy(d) for d in devices]


def _plain_copy(d: dict[str, Any]) -> dict[str, Any]:
    got = read_device(json.loads(json.dumps(d)), DeviceMemo())
    assert got is not None
    return got


def _counter_slices(nodes: int, counter_sets: list[dict[str, Any]]) -> bytes:
    """A slices list: one slice per node, each publishing ``counter_sets``."""
    items = [
        {
            "kind": "ResourceSlice",
            "metadata": {"name": f"s{i}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": f"n{i}",
                "pool": {"name": f"n{i}", "generation": 1, "resourceSliceCount": 1},
                "sharedCounters": counter_sets,
            },
        }
        for i in range(nodes)
    ]
    return json.dumps({"items": items}).encode()


def test_counter_sets_read_once_and_shared() -> None:
    counters = {"mem": {"value": "8"}, "sm": {"value": "1.5"}}
    text = _counter_slices(3, [{"name": "cs", "counters": counters}, {"name": "cs2", "counters": counters}])
    shared = SharedDecoder().decode(text)["items"]
    memo = DeviceMemo()
    read = [read_slice(s, i, memo) for i, s in enumerate(shared)]
    plain = [read_slice(s, i) for i, s in enumerate(json.loads(text)["items"])]
    assert read == plain
    copies = {id(cs["counters"]) for r in read for cs in r["spec"]["sharedCounters"]}
    assert len(copies) == 1  # one input object, read once


@pytest.mark.parametrize("bad", [{"mem": {"value": "x"}}, {"mem": 1}, [1], "str"])
def test_counter_sets_shared_still_refused(bad: Any) -> None:
    from dra_driver.schedsim.allocator.validate import InvalidObject

    text = _counter_slices(2, [{"name": "cs", "counters": bad}])
    shared = SharedDecoder().decode(text)["items"]
    memo = DeviceMemo()
    with pytest.raises(InvalidObject) as got:
        read_slice(shared[1], 1, memo)
    with pytest.raises(InvalidObject) as want:
        read_slice(json.loads(text)["items"][1], 1)
    assert str(got.value) == str(want.value)


def test_equal_string_of_another_text_reads_as_before() -> None:
    # "GPU-\u0061" is "GPU-a" written otherwise: the decoder gives it an object of its own.
    text = (
        b'{"items": [{"spec": {"devices": ['
        b'{"name": "d", "attributes": {"uuid": {"string": "GPU-a"}, "n": {"int": 1}}},'
        b'{"name": "d", "attributes": {"uuid": {"string": "GPU-\\u0061"}, "n": {"int": 1}}},'
        b'{"name": "d", "attributes": {"uuid": {"string": "GPU-b"}, "n": {"int": 1}}}'
        b"]}}]}"
    )
    devices = SharedDecoder().decode(text)["items"][0]["spec"]["devices"]
    assert devices[0]["attributes"] is not devices[1]["attributes"]
    memo = DeviceMemo()
    read = [read_device(d, memo) for d in devices]
    assert read == [read_device(d, DeviceMemo()) for d in json.loads(text)["items"][0]["spec"]["devices"]]
    first, second, third = (r["attributes"] for r in read if r is not None)
    assert second is first  # the same content: the same copy, nothing derived
    assert not memo.derived.get(id(first))
    assert memo.derived[id(third)] == (third, first, ("uuid",))
