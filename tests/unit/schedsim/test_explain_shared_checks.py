"""`dra-gpu explain`'s checks shared between nodes give what checking each device on its own gives.

Counter checks per (available counters, consumption), conversion errors found while reading,
pool checks once per consumption, the ``-o json`` writer, and the live path's pages fetched ahead.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

import pytest

from dra_driver.core.quantity import Quantity
from dra_driver.kube.explain_api import KubeApiError, KubeExplainApi, continue_token
from dra_driver.kube.rest import RestApi
from dra_driver.schedsim.allocator import NodeAllocator, explain
from dra_driver.schedsim.allocator import pools as pools_mod
from dra_driver.schedsim.allocator.pools import Pool, slice_spec
from dra_driver.schedsim.cel import DeviceView
from dra_driver.schedsim.shared_json import SharedDecoder

DRIVER = "gpu.dra-gpu.dev"
CLASSES = {"gpu": {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}}
SELECTORS = [
    "true",
    f'device.attributes["{DRIVER}"].profile == "p1"',
    f'device.attributes["{DRIVER}"].version.isGreaterThan(semver("1.0.0"))',
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("30Gi")) >= 0',
]


# -- random clusters with counters, allocated devices and odd values --------------------------------
def _cluster(rng: random.Random, nodes: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    slices: list[dict[str, Any]] = []
    allocated: list[dict[str, Any]] = []
    consumptions = [
        [{"counterSet": "cs-0", "counters": {"mem": {"value": str(rng.randrange(1, 5))}, "sm": {"value": "8"}}}] for _ in range(3)
    ]
    if rng.random() < 0.2:
        consumptions.append([{"counterSet": "cs-9", "counters": {"mem": {"value": "1"}}}])  # no such set: invalid pool
    if rng.random() < 0.2:
        consumptions.append([{"counterSet": "cs-0", "counters": {"nope": {"value": "1"}}}])  # no such counter
    for n in range(nodes):
        node = f"node-{n}"
        total = rng.choice(["4", "8", "16", "-1"])
        devices = []
        for k in range(rng.randrange(1, 10)):
            name = f"dev-{k if rng.random() > 0.05 else 0}"  # now and then a duplicate name
            attrs: dict[str, Any] = {
                "profile": {"string": f"p{rng.randrange(3)}"},
                "version": {"version": rng.choice(["1.2.3", "0.9.0", "not-a-version"])},
                "uuid": {"string": f"GPU-{n}-{k % 3}"},
            }
            caps = {"memory": {"value": rng.choice(["80Gi", "20Gi", "40Gi"])}}
            d: dict[str, Any] = {"name": name, "attributes": attrs, "capacity": caps}
            if rng.random() < 0.9:
                d["consumesCounters"] = json.loads(json.dumps(rng.choice(consumptions)))
            if rng.random() < 0.1:
                d["allowMultipleAllocations"] = True
            if rng.random() < 0.05:
                d["taints"] = [{"key": "k", "value": "v", "effect": "NoSchedule"}]  # the field-by-field reader
            devices.append(d)
        pool = {"name": node, "generation": 1, "resourceSliceCount": 2}
        slices.append(
            {
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-counters"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node,
                    "pool": pool,
                    "sharedCounters": [{"name": "cs-0", "counters": {"mem": {"value": total}, "sm": {"value": "32"}}}],
                },
            }
        )
        slices.append(
            {
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-devices"},
                "spec": {"driver": DRIVER, "nodeName": node, "pool": dict(pool), "devices": devices},
            }
        )
        for d in devices:
            if rng.random() < 0.25:
                allocated.append(
                    {
                        "metadata": {"name": f"a-{len(allocated)}", "namespace": "ns", "uid": f"u-{len(allocated)}"},
                        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
                        "status": {
                            "allocation": {
                                "devices": {"results": [{"request": "r", "driver": DRIVER, "pool": node, "device": d["name"]}]}
                            }
                        },
                    }
                )
    return slices, allocated


def _claims(rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for i in range(rng.randrange(1, 3)):
        req = {
            "name": "gpu",
            "exactly": {
                "deviceClassName": "gpu",
                "count": rng.randrange(1, 4),
                "selectors": [{"cel": {"expression": rng.choice(SELECTORS)}}],
            },
        }
        out.append({"metadata": {"name": f"c{i}", "namespace": "ns"}, "spec": {"devices": {"requests": [req]}}})
    return out


def _counters_fit_per_device(self: NodeAllocator, pool: Pool, d: Any, reserve: bool) -> bool:
    """``checkAvailableCounters`` as it was, device by device: nothing shared, nothing cached."""
    pkey = self._counter_key(pool)
    avail = self.available_counters.get(pkey)
    if avail is None:
        avail = self._available(pool, pkey)
    consumed = self.consumed_counters.setdefault(pkey, {})
    self._counters_add(consumed, d, +1)
    ok = self._counters_cover(avail, consumed, self._negative_counters[pkey])
    if not ok or not reserve:
        self._counters_add(consumed, d, -1)
    return ok


def _release_per_device(self: NodeAllocator, pkey: tuple[str, str], d: Any) -> None:
    self._counters_add(self.consumed_counters[pkey], d, -1)


def _view_per_device(self: NodeAllocator, d: Any, driver: str) -> DeviceView:
    return DeviceView.of(d, driver)


def _build_pool_per_device(
    driver: str, name: str, mine: Any, all_slices: Any, rules: Any, checks: Any, values: Any = None
) -> Pool:
    """``_build_pool`` sharing no counter check or counter quantities with other pools (fresh tables each time)."""
    return _ORIGINAL_BUILD(driver, name, mine, all_slices, rules, {}, {})


_ORIGINAL_BUILD = pools_mod._build_pool


def _answer(claims: list[dict[str, Any]], slices: list[dict[str, Any]], allocated: list[dict[str, Any]]) -> Any:
    return explain(claims, slices, CLASSES, allocated).to_json()


@pytest.mark.parametrize("seed", range(30))
def test_shared_checks_answer_as_checks_per_device(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    slices, allocated = _cluster(rng, nodes=rng.randrange(2, 7))
    claims = _claims(rng)
    got = _answer(claims, slices, allocated)
    monkeypatch.setattr(NodeAllocator, "counters_fit", _counters_fit_per_device)
    monkeypatch.setattr(NodeAllocator, "release_counters", _release_per_device)
    monkeypatch.setattr(NodeAllocator, "_new_view", _view_per_device)
    monkeypatch.setattr(pools_mod, "_build_pool", _build_pool_per_device)
    assert got == _answer(claims, slices, allocated)


def _bad_pool_reference(slices: list[dict[str, Any]]) -> str:
    """The first duplicate name or missing counter, device by device (the pool's checks as they were)."""
    seen: set[str] = set()
    devices = [d for s in slices for d in slice_spec(s).get("devices") or []]
    for d in devices:
        if d.get("name") in seen:
            return f"duplicate device name {d.get('name')}"
        seen.add(str(d.get("name")))
    for d in devices:
        for cc in d.get("consumesCounters") or []:
            if cc.get("counterSet") != "cs-0":
                return f"counter set {cc.get('counterSet')} not found"
            for cname in cc.get("counters") or {}:
                if cname not in ("mem", "sm"):
                    return f"counter {cname} not found in counter set {cc.get('counterSet')}"
    return ""


@pytest.mark.parametrize("seed", range(20))
def test_pool_checks_name_the_first_bad_device(seed: int) -> None:
    rng = random.Random(seed)
    slices, _ = _cluster(rng, nodes=1)
    got = explain(_claims(rng), slices, CLASSES, []).to_json()
    want = _bad_pool_reference([s for s in slices if s["spec"].get("devices")])
    invalid = [c["detail"] for r in got["requests"] for c in r["candidates"] if c["device"].endswith("/*")]
    assert invalid == ([f"pool {DRIVER}/node-0 is invalid: {want}"] * len(invalid) if want else [])
    assert bool(invalid) == bool(want)


def test_a_device_without_a_name_before_one_named_none_is_a_duplicate() -> None:
    s = [{"spec": {"devices": [{}, {"name": "None"}]}}]
    assert pools_mod._duplicate_name(s) == "None"
    assert pools_mod._duplicate_name([{"spec": {"devices": [{"name": "None"}, {}]}}]) is None
    assert pools_mod._duplicate_name([{"spec": {"devices": [{"name": "a"}, {"name": "b"}]}}]) is None


def test_a_reservation_taken_back_lets_the_shared_answer_serve_again() -> None:
    slices, _ = _cluster(random.Random(3), nodes=1)
    claim = {
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 2}}]}},
    }
    got = explain([claim], slices, CLASSES, []).to_json()
    assert got["requests"][0]["candidates"]  # and the per-device answer agrees (the randomized test above)
    q = Quantity(1, 0, small=True)
    assert NodeAllocator._counters_cover({"cs": {"n": q}}, {}, []) is True


# -- the live path's pages -------------------------------------------------------------------------
class _Answer:
    def __init__(self, status: int, data: bytes) -> None:
        self.status, self.data, self.reason = status, data, "Reason"

    def release_conn(self) -> None:
        pass


def _api(pages: Mapping[str, bytes | int]) -> tuple[KubeExplainApi, list[str]]:
    """An explain API whose list answers are ``pages`` by continue token (an int: that error status)."""
    asked: list[str] = []
    api = KubeExplainApi.__new__(KubeExplainApi)

    def send(method: str, path: str, *, query: list[tuple[str, str]], **_: object) -> _Answer:
        token = dict(query).get("continue", "")
        asked.append(token)
        page = pages[token]
        if isinstance(page, int):
            return _Answer(page, b'{"kind":"Status","message":"gone","reason":"Expired","code":410}')
        return _Answer(200, page)

    rest = RestApi.__new__(RestApi)
    rest.send = send  # type: ignore[assignment,method-assign] # a fake transport: the pages by continue token
    api._rest = rest
    return api, asked


def _page(items: list[int], cont: str, *, metadata_first: bool = True) -> bytes:
    meta = {"resourceVersion": "7", **({"continue": cont} if cont else {})}
    body = [{"metadata": {"name": f"s{i}"}} for i in items]
    if metadata_first:
        head = {"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1", "metadata": meta}
        return json.dumps({**head, "items": body}).encode()
    return json.dumps({"items": body, "metadata": meta}).encode()


@pytest.mark.parametrize("metadata_first", [True, False])
def test_pages_fetched_ahead_give_every_item_once_in_order(metadata_first: bool) -> None:
    pages: dict[str, bytes | int] = {
        "": _page([0, 1], "t1", metadata_first=metadata_first),
        "t1": _page([2], "t2", metadata_first=metadata_first),
        "t2": _page([3, 4], "", metadata_first=metadata_first),
    }
    api, asked = _api(pages)
    got = api.list_all("/x")
    assert [i["metadata"]["name"] for i in got] == ["s0", "s1", "s2", "s3", "s4"]
    assert asked == ["", "t1", "t2"]


def test_a_head_that_says_another_token_than_the_page_is_not_followed() -> None:
    # JSON's last duplicate key counts: the head says "wrong", the page "t1".
    first = b'{"metadata":{"continue":"wrong"},"items":[{"metadata":{"name":"s0"}}],"metadata":{"continue":"t1"}}'
    pages: dict[str, bytes | int] = {"": first, "wrong": _page([9], ""), "t1": _page([1], "")}
    api, asked = _api(pages)
    assert [i["metadata"]["name"] for i in api.list_all("/x")] == ["s0", "s1"]
    assert asked[0] == "" and asked[-1] == "t1" and set(asked) <= {"", "wrong", "t1"}


def test_a_failed_page_is_the_lists_error() -> None:
    api, _ = _api({"": _page([0], "t1"), "t1": 410})
    with pytest.raises(KubeApiError) as err:
        api.list_all("/x")
    assert err.value.status == 410


def test_continue_token_is_read_from_the_head_only() -> None:
    assert continue_token(_page([1], "abc")) == "abc"
    assert continue_token(_page([1], "")) == ""
    assert continue_token(_page([1], "abc", metadata_first=False)) == ""
    assert continue_token(b"not json") == ""


def _slice_page(node: int, cont: str) -> bytes:
    """A page with one node's slice: devices of the same attributes but a UUID, as a fleet publishes them."""
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {"type": {"string": "gpu"}, "uuid": {"string": f"GPU-{node}-{i}"}, "index": {"int": i}},
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for i in range(3)
    ]
    item = {
        "metadata": {"name": f"node-{node}-slice"},
        "spec": {"driver": DRIVER, "nodeName": f"node-{node}", "devices": devices},
    }
    meta = {"resourceVersion": "7", **({"continue": cont} if cont else {})}
    return json.dumps(
        {"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1", "metadata": meta, "items": [item]}
    ).encode()


def test_slice_pages_decode_as_json_with_parts_shared_across_pages() -> None:
    pages = {"": _slice_page(0, "t1"), "t1": _slice_page(1, "t2"), "t2": _slice_page(2, "")}
    api, asked = _api(pages)
    got = api.resource_slices(SharedDecoder().decode)
    want = [item for token in ("", "t1", "t2") for item in json.loads(pages[token])["items"]]
    assert got == want
    assert json.dumps(got) == json.dumps(want)  # the same order of keys too
    assert asked == ["", "t1", "t2"]
    first, last = got[0]["spec"]["devices"][0], got[-1]["spec"]["devices"][0]
    assert first["capacity"] is last["capacity"]  # equal parts are one object, whichever page they came on
    assert first["attributes"]["type"] is last["attributes"]["type"]
    assert first["attributes"]["uuid"] != last["attributes"]["uuid"]


@pytest.mark.parametrize(
    "body",
    [b"[1, 2]", b'{"items": [1, 2], "metadata": {}}', b'{"items": [{"spec": {"devices": [1]}}], "metadata": {}}', b"{nope"],
)
def test_slice_pages_the_shared_decoder_does_not_read_decode_as_before(body: bytes) -> None:
    api, _ = _api({"": body})
    try:
        want: Any = json.loads(body)
    except ValueError:
        with pytest.raises(KubeApiError, match="answer is not JSON"):
            api.resource_slices(SharedDecoder().decode)
        return
    if not isinstance(want, dict):
        with pytest.raises(KubeApiError, match="not a JSON object"):
            api.resource_slices(SharedDecoder().decode)
        return
    assert api.resource_slices(SharedDecoder().decode) == [i for i in want["items"] if isinstance(i, dict)]
