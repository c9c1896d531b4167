"""`dra-gpu explain` on a large cluster: fast device reader, per-shape sharing, summary report, shipped parser tables."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import lark
import pytest

from dra_driver.cli.explain_text import MAX_DEVICE_LINES, render_text
from dra_driver.schedsim.allocator import AllocatedState, Explanation, NodeAllocator, RequestExplanation, explain, explain_request
from dra_driver.schedsim.allocator.fastread import DeviceMemo
from dra_driver.schedsim.allocator.model import Candidate, claim_requests
from dra_driver.schedsim.allocator.objects import _device, read_slice
from dra_driver.schedsim.allocator.pools import gather_pools
from dra_driver.schedsim.allocator.shapes import ShapeCache
from dra_driver.schedsim.allocator.validate import InvalidObject, Reader
from dra_driver.schedsim.cel import parser_tables, syntax
from dra_driver.schedsim.shared_json import SharedDecoder

DRIVER = "gpu.dra-gpu.dev"


# -- the fast reader gives what the field-by-field reader gives ------------------------------------
def _variant(rng: random.Random, base: dict[str, Any]) -> dict[str, Any]:
    """``base`` with zero or more changes the readers must tell apart (types, order, limits, bad values)."""
    d = copy.deepcopy(base)
    for _ in range(rng.randrange(3)):
        attrs, caps = d["attributes"], d["capacity"]
        change = rng.randrange(12)
        if change == 0:
            attrs["numa"] = {"int": rng.choice([1, True, 1.0, 2**63, "1"])}
        elif change == 1:
            attrs["flag"] = {"bool": rng.choice([True, 1, "true"])}
        elif change == 2:
            d["attributes"] = dict(reversed(list(attrs.items())))
        elif change == 3:
            d["capacity"] = dict(reversed(list(caps.items())))
        elif change == 4:
            caps["memory"] = {"value": rng.choice(["80Gi", 80, "eighty", "1e40", None])}
        elif change == 5:
            attrs["profile"] = {"string": "x" * rng.choice([64, 65])}
        elif change == 6:
            attrs["odd"] = {"string": "a", "int": 1}
        elif change == 7:
            d["taints"] = [{"key": "k", "effect": "NoSchedule"}]
        elif change == 8:
            d["consumesCounters"][0]["counters"] = dict(reversed(list(d["consumesCounters"][0]["counters"].items())))
        elif change == 9:
            d["allowMultipleAllocations"] = rng.choice([True, False, 1, None])
        elif change == 10:
            d["consumesCounters"].append({"counterSet": "cs-1", "counters": {"mem": {"value": "1"}}})
        else:
            attrs.update({f"extra{i}": {"int": i} for i in range(rng.choice([20, 30]))})
    return d


def _base(i: int) -> dict[str, Any]:
    return {
        "name": f"dev-{i % 7}",
        "attributes": {"profile": {"string": f"p{i % 3}"}, "version": {"version": "1.2.3"}, "numa": {"int": 1}},
        "capacity": {"memory": {"value": "80Gi"}, "cores": {"value": "16"}},
        "consumesCounters": [{"counterSet": "cs-0", "counters": {"mem": {"value": "1"}, "sm": {"value": "16"}}}],
    }


def _read_slow(d: Any) -> Any:
    try:
        return _device(Reader("ResourceSlice x"), d, "spec.devices[0]")
    except InvalidObject as err:
        return f"error: {err}"


def _read_fast(d: Any, memo: DeviceMemo) -> Any:
    s = {"metadata": {"name": "x"}, "spec": {"driver": DRIVER, "pool": {"name": "p"}, "devices": [d]}}
    try:
        return read_slice(s, 0, memo)["spec"]["devices"][0]
    except InvalidObject as err:
        return f"error: {err}"


@pytest.mark.parametrize("seed", range(5))
def test_fast_reader_reads_every_device_as_the_field_by_field_reader(seed: int) -> None:
    """Equal outputs, keys in the same order, the same errors, with the memo shared by all devices."""
    rng = random.Random(seed)
    memo = DeviceMemo()
    for i in range(400):
        d = _variant(rng, _base(i))
        want, got = _read_slow(d), _read_fast(d, memo)
        assert json.dumps(got) == json.dumps(want), d


@pytest.mark.parametrize("seed", range(5))
def test_fast_reader_reads_shared_values_as_the_field_by_field_reader(seed: int) -> None:
    """As above, the devices decoded as a slices file is (equal values one object): each value is read once, for every map."""
    rng = random.Random(seed)
    devices = [_variant(rng, _base(i)) for i in range(400)]
    for i, d in enumerate(devices):  # a UUID per device, the rest of the map shared with other devices
        if isinstance(d.get("attributes"), dict) and rng.random() < 0.8:
            d["attributes"] = {**d["attributes"], "uuid": {"string": f"GPU-{i}"}}
    memo = DeviceMemo()
    _read_shared_as_slow(devices, memo)
    assert memo.entries  # the values were read through the table


def _read_shared_as_slow(devices: list[dict[str, Any]], memo: DeviceMemo) -> list[tuple[dict[str, Any], Any]]:
    """``devices`` decoded as a slices file (equal values one object), each read fast as read slow: (device, what was read)."""
    data = json.dumps({"kind": "List", "items": [{"spec": {"devices": devices}}]}).encode()
    out = []
    for d in SharedDecoder().decode(data)["items"][0]["spec"]["devices"]:
        want, got = _read_slow(d), _read_fast(d, memo)
        assert json.dumps(got) == json.dumps(want), d
        out.append((d, got))
    return out


def test_a_map_read_from_the_last_of_its_name_reads_as_read_whole() -> None:
    """Attributes read from the last device of the same name (only the values that differ) read as read whole."""
    base = {"uuid": {"string": "GPU-0"}, "profile": {"string": "p1"}, "version": {"version": "1.2.3"}, "numa": {"int": 1}}
    changes: list[dict[str, Any]] = [
        {"uuid": {"string": "GPU-1"}},  # a string for a string: read from the last one
        {"uuid": {"string": "GPU-2"}, "profile": {"string": "p2"}},
        {"numa": {"int": 2}},  # a number
        {"numa": {"bool": True}},  # a kind and a type
        {"numa": {"int": True}},  # refused
        {"version": {"version": "1.2"}},  # a version that does not parse: the error changes
        {"version": {"string": "1.2"}},
        {"uuid": {"version": "1.0.0"}},  # a string for a version
        {"uuid": {"string": "x" * 65}},  # too long
        {"uuid": {"int": 5}},
        {"uuid": {"string": "GPU-3"}, "extra": {"string": "e"}},  # another name
    ]
    devices = []
    for i, change in enumerate(changes):
        devices.append({"name": "gpu-0", "attributes": base})
        devices.append({"name": "gpu-0", "attributes": {**base, **change}})
        devices.append({"name": "gpu-0", "attributes": {**base, **change, "uuid": {"string": f"GPU-{i}-again"}}})
    memo = DeviceMemo()
    for d, got in _read_shared_as_slow(devices, memo):
        alone = DeviceMemo()  # the map read whole: the same conversion error for CEL
        whole = _read_fast(d, alone)
        if not isinstance(got, str):
            assert memo.errors[id(got["attributes"])][1] == alone.errors[id(whole["attributes"])][1], d


def test_memo_does_not_equate_one_true_and_one_point_zero() -> None:
    memo = DeviceMemo()
    ok = _base(0)
    assert _read_fast(ok, memo)["attributes"]["numa"] == {"int": 1}
    for odd in (True, 1.0):
        d = copy.deepcopy(ok)
        d["attributes"]["numa"] = {"int": odd}
        assert d == ok  # what a plain == memo would have taken for the same device
        assert str(_read_fast(d, memo)).startswith("error: ")


# -- per-shape sharing gives each device the answer it gets alone ----------------------------------
SELECTORS = [
    'device.attributes["gpu.dra-gpu.dev"].profile == "p1"',
    'device.attributes["gpu.dra-gpu.dev"].version.isGreaterThan(semver("1.0.0"))',
    'device.capacity["gpu.dra-gpu.dev"].memory.compareTo(quantity("40Gi")) >= 0',
    '"numa" in device.attributes["gpu.dra-gpu.dev"]',
    'device.attributes["other.dev"].x == 1',
    'device.attributes["gpu.dra-gpu.dev"].size() > 3',
    "device.allowMultipleAllocations",
]


def _random_cluster(rng: random.Random, nodes: int) -> list[dict[str, Any]]:
    shapes = []
    for i in range(6):
        attrs: dict[str, Any] = {
            "profile": {"string": f"p{i % 3}"},
            "version": {"version": rng.choice(["1.2.3", "0.9.0", "not-a-version"])},
        }
        if rng.random() < 0.5:
            attrs["numa"] = {"int": rng.randrange(2)}
        if rng.random() < 0.3:
            attrs["gpu.dra-gpu.dev/profile"] = {"string": "p1"}  # the same attribute, qualified: the later one counts
        if rng.random() < 0.3:
            attrs["other.dev/x"] = {"int": rng.randrange(2)}
        caps = {"memory": {"value": rng.choice(["80Gi", "20Gi", "40Gi"])}}
        shapes.append({"attributes": attrs, "capacity": caps, "allowMultipleAllocations": rng.random() < 0.3})
    slices = []
    for n in range(nodes):
        devices = [{"name": f"dev-{k}", **copy.deepcopy(rng.choice(shapes))} for k in range(rng.randrange(1, 12))]
        slices.append(
            {
                "kind": "ResourceSlice",
                "metadata": {"name": f"node-{n}-slice"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": f"node-{n}",
                    "pool": {"name": f"node-{n}", "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    return slices


def _claim(selector: str, count: int) -> dict[str, Any]:
    req = {"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": count, "selectors": [{"cel": {"expression": selector}}]}}
    return {"metadata": {"name": "c", "namespace": "ns"}, "spec": {"devices": {"requests": [req]}}}


CLASSES = {"gpu": {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}}


def _reference(claim: dict[str, Any], slices: list[dict[str, Any]]) -> list[Candidate]:
    """Every device read field by field (no shared parts) and explained by an allocator of its own node, uncached."""
    out: list[Candidate] = []
    for s in slices:
        clean = {
            "metadata": s["metadata"],
            "spec": {**s["spec"], "devices": [_device(Reader("x"), d, "d") for d in s["spec"]["devices"]]},
        }
        node = s["spec"]["nodeName"]
        labels = {"kubernetes.io/hostname": node}
        pools = gather_pools([clean], node, labels)
        a = NodeAllocator([claim], CLASSES, pools, AllocatedState(), node, labels=labels, shapes=ShapeCache())
        out.extend(explain_request(a, 0, claim_requests(claim)[0][0]))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_shared_shapes_give_every_device_its_own_answer(seed: int) -> None:
    rng = random.Random(seed)
    slices = _random_cluster(rng, nodes=rng.randrange(2, 8))
    for selector in SELECTORS:
        claim = _claim(selector, count=rng.randrange(1, 3))
        got = explain([claim], slices, CLASSES, [])
        want = _reference(claim, slices)
        assert [c.to_json() for c in got.requests[0].candidates] == [c.to_json() for c in want], selector


# -- the summary report ------------------------------------------------------------------------------
def _fleet(nodes: int, per_node: int, allocated_on: str | None) -> list[tuple[str, Explanation]]:
    cands = []
    for n in range(nodes):
        node = f"node-{n:04d}"
        for k in range(per_node):
            if k < 2:
                cands.append(Candidate(node, f"{node}/gpu-{k}", "match", ""))
            elif n == 3 and k == 2:
                cands.append(Candidate(node, f"{node}/gpu-{k}", "unavailable", "already allocated to claim ns/other"))
            else:
                cands.append(Candidate(node, f"{node}/gpu-{k}", "no-match", "request gpu selector #0 is false: x"))
    reason = None if allocated_on else "0/9 nodes can allocate all claims: ..."
    devices = [f"{allocated_on}/gpu-0"] if allocated_on else []
    return [("pod ns/p", Explanation([RequestExplanation("ns/c", "gpu", allocated_on, devices, reason, cands)], []))]


def test_a_large_cluster_is_summarized_per_group_of_nodes() -> None:
    text = render_text(_fleet(nodes=50, per_node=10, allocated_on="node-0001"))
    lines = text.splitlines()
    assert lines[:4] == [
        "pod ns/p:",
        "  claim ns/c, request gpu: allocated on node node-0001: node-0001/gpu-0",
        "    node-0001: 10 devices: 2 match, 8 no-match (request gpu selector #0 is false: x)",
        "      node-0001/gpu-0          match",
    ]
    assert len([x for x in lines if x.startswith("      node-0001/")]) == 10  # the chosen node, device by device
    assert lines[13:] == [
        "    node-0000, node-0002, ... node-0049 (48 nodes): 10 devices each: "
        "2 match, 8 no-match (request gpu selector #0 is false: x)",
        "    node-0003: 10 devices: 2 match, 1 unavailable (already allocated to claim ns/other), "
        "7 no-match (request gpu selector #0 is false: x)",
    ]


def test_without_an_allocation_the_first_node_is_shown_device_by_device() -> None:
    lines = render_text(_fleet(nodes=30, per_node=10, allocated_on=None)).splitlines()
    assert lines[1].startswith("  claim ns/c, request gpu: NOT allocatable: 0/9 nodes")
    assert lines[2].startswith("    node-0000: 10 devices: 2 match")
    assert lines[-2].startswith("    node-0001, node-0002, ... node-0029 (28 nodes): 10 devices each:")


def test_a_small_cluster_keeps_one_line_per_device() -> None:
    results = _fleet(nodes=2, per_node=MAX_DEVICE_LINES // 2, allocated_on="node-0000")
    lines = render_text(results).splitlines()
    assert len(lines) == 2 + MAX_DEVICE_LINES
    assert lines[2] == "    node-0000: node-0000/gpu-0          match"


# -- the shipped CEL parser tables ---------------------------------------------------------------------
def _shipped() -> str:
    return (Path(syntax.__file__).parent / syntax.PARSER_TABLES).read_text(encoding="utf-8")


def test_shipped_parser_tables_are_current() -> None:
    """Built by this Lark from this grammar (regenerate with ``python scripts/gen_cel_parser.py`` when this fails).

    Lark numbers its states differently from one build to the next, so the tables are compared by
    what they parse (below), not by their text.
    """
    grammar, options = syntax.grammar_and_options()
    body = json.loads(_shipped())
    assert (body["lark"], body["digest"]) == (lark.__version__, parser_tables.digest(grammar, options))
    assert parser_tables.load(_shipped(), grammar, options) is not None


EXPRESSIONS = [
    'device.attributes["gpu.dra-gpu.dev"].profile == "1g.10gb"',
    "1.size()",
    "a.b(c)[1] ? x : y || !z && 1.5e3 > 2u",
    "[1, 2].all(x, x > 0) && {'a': 1}['a'] == 1 && b'abc' != r'x'",
    "device.attributes[?'d'].?x.orValue(1) // comment\n + 2",
    "cel.bind(a, device.attributes['d'], a.x == a.y)",
    '"unterminated',
    "1 +",
    "a..b",
]


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_loaded_parser_parses_as_a_freshly_built_one(text: str) -> None:
    grammar, options = syntax.grammar_and_options()
    built = lark.Lark(grammar, **options)
    loaded = parser_tables.load(_shipped(), grammar, options)
    assert loaded is not None
    blanked, _, _ = syntax.blank_optional_syntax(text)

    def tokens(p: lark.Lark) -> Any:
        try:
            tree = p.parse(blanked)
        except lark.exceptions.LarkError as err:
            return repr(err)
        return [(t.type, str(t), t.start_pos, t.end_pos) for t in tree.scan_values(lambda _: True)], tree

    assert tokens(loaded) == tokens(built)


def test_tables_of_another_grammar_are_not_used() -> None:
    grammar, options = syntax.grammar_and_options()
    text = parser_tables.dump(lark.Lark(grammar, **options), grammar, options)
    assert parser_tables.load(text, grammar + "\n// changed", options) is None
    assert parser_tables.load("{not json", grammar, options) is None
    assert parser_tables.load(None, grammar, options) is None
