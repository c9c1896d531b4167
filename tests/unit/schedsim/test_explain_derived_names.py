"""`dra-gpu explain`: the derived-attributes shortcut against the shortcut off, on names read in unusual ways.

A device whose attributes were read as a delta from the same-named device's (``DeviceMemo.derived``)
takes that map's selector outcome when its selectors read none of the names that differ
(``NodeAllocator.selector_outcome``). These clusters stress what the names are: devices of one name
under two drivers (a bare name files under each driver's own domain), names published both bare and
with the driver's domain, names with more than one slash, another domain's name of the same
identifier, chains of derivation across nodes (each map a few strings apart from the last), selectors
that err (a non-bool result, a missing key) in two releases (1.37 names the device in an abort), and
devices in use or asked for with admin access. Each answer must be the one with the shortcut off and
the one from input that shares nothing (``json.loads``).
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from dra_driver.schedsim.allocator import NodeAllocator, explain
from dra_driver.schedsim.rules import rules_for
from dra_driver.schedsim.shared_json import SharedDecoder

D = "gpu.example.com"
OTHER = "other.example.com"
SELECTORS = [
    f'device.attributes["{D}"].uuid == "GPU-0-0"',
    f'device.attributes["{D}"].profile == "p0"',
    f'device.attributes["{D}"].?uuid.orValue("") == "GPU-1-0"',
    f'has(device.attributes["{D}"].label)',
    f'cel.bind(a, device.attributes["{D}"], a.profile == "p0")',
    f'cel.bind(a, device.attributes["{D}"], a.uuid.startsWith("GPU-1"))',
    f'device.attributes["{OTHER}"].uuid == "GPU-0-0"',
    f'device.attributes["{OTHER}"].?uuid.orValue("z") == "z"',
    'device.attributes["a"]["b/c"] == "v0"',
    f'device.attributes["{D}"]["a/b"] == "v0"',
    f'device.attributes["{D}"].uuid',  # not a bool: a runtime error
    f'device.attributes["{D}"].profile',
    f'device.attributes["{D}"].nope == "x"',  # no such key
    f'device.attributes["{D}"].label.matches(device.attributes["{D}"].profile)',
    f'int(device.attributes["{D}"].label) > 0',
    f'device.attributes["{D}"].label in ["x", "y"]',
    f'device.attributes["{D}"].label == "x" || device.attributes["{D}"].nope',
    f'device.driver == "{OTHER}"',
]
CLASS_SELECTORS = ["true", f'device.attributes["{D}"].label != "zz"', f'device.attributes["{D}"].profile != "p9"']


def _attributes(rng: random.Random, n: int, k: int, p: float) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "profile": {"string": rng.choice(["p0", "p1", "["])},
        "uuid": {"string": f"GPU-{n % 3}-{k % 2}"},
        "label": {"string": rng.choice(["x", "y", "12", "", "["])},
    }
    for name, values in (
        (f"{OTHER}/uuid", ["GPU-0-0", "GPU-1-0"]),
        (f"{D}/uuid", ["GPU-0-0", "x"]),  # published bare and with the domain
        ("a/b/c", ["v0", "v1"]),
        (f"{D}/a/b", ["v0", "v1"]),
    ):
        if rng.random() < p:
            attrs[name] = {"string": rng.choice(values)}
    if rng.random() < p / 2:
        attrs["label"] = rng.choice([{"int": 1}, {"version": "1.0.0"}, {"string": "x"}])
    return attrs


def _cluster(rng: random.Random, p: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    slices: list[dict[str, Any]] = []
    allocated: list[dict[str, Any]] = []
    for n in range(rng.randrange(2, 7)):
        for driver in [D, OTHER] if rng.random() < 0.5 else [D]:
            devices = [{"name": f"dev-{k}", "attributes": _attributes(rng, n, k, p)} for k in range(rng.randrange(1, 5))]
            pool = f"node-{n}"
            slices.append(
                {
                    "kind": "ResourceSlice",
                    "metadata": {"name": f"node-{n}-{driver}"},
                    "spec": {
                        "driver": driver,
                        "nodeName": pool,
                        "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                        "devices": devices,
                    },
                }
            )
            for d in devices:
                if rng.random() < 0.15:
                    allocated.append(
                        {
                            "metadata": {"name": f"a{len(allocated)}", "namespace": "ns", "uid": f"u{len(allocated)}"},
                            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
                            "status": {
                                "allocation": {
                                    "devices": {
                                        "results": [{"request": "r", "driver": driver, "pool": pool, "device": d["name"]}]
                                    }
                                }
                            },
                        }
                    )
    return slices, allocated


def _claims(rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for i in range(rng.randrange(1, 3)):
        reqs = []
        for r in range(rng.randrange(1, 3)):
            sels = [{"cel": {"expression": rng.choice(SELECTORS)}} for _ in range(rng.randrange(1, 3))]
            exactly: dict[str, Any] = {"deviceClassName": "gpu", "count": rng.randrange(1, 3), "selectors": sels}
            if rng.random() < 0.1:
                exactly["adminAccess"] = True
            reqs.append({"name": f"r{r}", "exactly": exactly})
        out.append({"metadata": {"name": f"c{i}", "namespace": "ns"}, "spec": {"devices": {"requests": reqs}}})
    return out


def _no_names(self: NodeAllocator, ci: int, req: Any, chain: Any, driver: str) -> None:
    return None  # the shortcut off


@pytest.mark.parametrize("minor", [36, 37])
@pytest.mark.parametrize("seed", range(15))
def test_unusual_names_answer_as_without_the_shortcut(seed: int, minor: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    slices, allocated = _cluster(rng, p=rng.choice([0.05, 0.2]))
    text = json.dumps({"items": slices}).encode()
    classes = {
        "gpu": {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": rng.choice(CLASS_SELECTORS)}}]}}
    }
    claims = _claims(rng)
    rules = rules_for(minor)

    def answer(items: Any) -> Any:
        return explain(claims, items, classes, allocated, rules=rules).to_json()

    got = answer(SharedDecoder().decode(text)["items"])
    assert got == answer(json.loads(text)["items"])
    monkeypatch.setattr(NodeAllocator, "_names_read", _no_names)
    assert got == answer(SharedDecoder().decode(text)["items"])


def test_a_chain_of_deltas_across_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Node by node, x then y then x again changes: each map is read from the last one, a string apart.
    def node(n: int, x: str, y: str) -> dict[str, Any]:
        attrs = {"x": {"string": x}, "y": {"string": y}, "z": {"string": "z"}}
        return {
            "kind": "ResourceSlice",
            "metadata": {"name": f"n{n}"},
            "spec": {
                "driver": D,
                "nodeName": f"n{n}",
                "pool": {"name": f"n{n}", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0", "attributes": attrs}],
            },
        }

    text = json.dumps({"items": [node(0, "a", "a"), node(1, "b", "a"), node(2, "b", "b"), node(3, "a", "b")]}).encode()
    classes = {"gpu": {"metadata": {"name": "gpu"}, "spec": {}}}
    used: list[Any] = []
    names_read = NodeAllocator._names_read

    def spy(self: NodeAllocator, ci: int, req: Any, chain: Any, driver: str) -> frozenset[str] | None:
        out = names_read(self, ci, req, chain, driver)
        used.append(out)
        return out

    for name in ("x", "y", "z", "nope"):  # (nope: no such key, a runtime error)
        expression = f'device.attributes["{D}"].{name} == "a"'
        req = {"name": "r", "exactly": {"deviceClassName": "gpu", "selectors": [{"cel": {"expression": expression}}]}}
        claims = [{"metadata": {"name": "c", "namespace": "ns"}, "spec": {"devices": {"requests": [req]}}}]
        for minor in (36, 37):
            with monkeypatch.context() as m:
                m.setattr(NodeAllocator, "_names_read", spy)
                got = explain(claims, SharedDecoder().decode(text)["items"], classes, [], rules=rules_for(minor)).to_json()
            assert got == explain(claims, json.loads(text)["items"], classes, [], rules=rules_for(minor)).to_json()
            with monkeypatch.context() as m:
                m.setattr(NodeAllocator, "_names_read", _no_names)
                assert (
                    got == explain(claims, SharedDecoder().decode(text)["items"], classes, [], rules=rules_for(minor)).to_json()
                )
    assert used  # the shortcut was asked
