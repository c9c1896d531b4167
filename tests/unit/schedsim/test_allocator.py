"""The allocation simulator: demo claims against `dra-gpu inventory` slices, and allocator rules."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cli.explain import default_classes, load_objects, workloads
from dra_driver.cli.main import inventory_slices
from dra_driver.schedsim.allocator import explain

DRIVER = "gpu.dra-gpu.dev"
DEMO = Path(__file__).resolve().parents[3] / "demo"


@pytest.fixture(scope="module")
def cluster() -> list[dict[str, Any]]:
    """node-a: 8x H100, node-b: 4x L4, as the demo runs them."""
    return inventory_slices(fake_gpus="h100x8", node_name="node-a", driver=DRIVER) + inventory_slices(
        fake_gpus="l4x4", node_name="node-b", driver=DRIVER
    )


def demo_pod_claims(name: str) -> list[dict[str, Any]]:
    objs = load_objects(str(DEMO / f"{name}.yaml"))
    [(_label, claims)] = [w for w in workloads(objs, []) if w[0].endswith(name)]
    return claims


def claim(requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None, name: str = "c") -> dict[str, Any]:
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"devices": {"requests": requests, "constraints": constraints or []}},
    }


def exactly(name: str = "gpu", count: int = 1, selectors: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    body = {
        "deviceClassName": DRIVER,
        "count": count,
        "selectors": [{"cel": {"expression": s}} for s in selectors or []],
        **extra,
    }
    return {"name": name, "exactly": body}


def run(claims: list[dict[str, Any]], slices: list[dict[str, Any]], allocated: list[dict[str, Any]] | None = None) -> Any:
    return explain(claims, slices, default_classes(slices), allocated or [])


def chosen(ex: Any) -> list[tuple[str | None, list[str]]]:
    return [(r.node, r.devices) for r in ex.requests]


def test_demo_gpu_40gi_gets_the_first_h100(cluster: list[dict[str, Any]]) -> None:
    ex = run(demo_pod_claims("gpu-40gi"), cluster)
    assert chosen(ex) == [("node-a", ["node-a/gpu-0"])]
    verdicts = {c.device: c.verdict for c in ex.requests[0].candidates}
    assert verdicts["node-a/gpu-7"] == "match"
    assert verdicts["node-b/gpu-0"] == "no-match"  # an L4 has 23Gi


def test_demo_two_gpus_gets_two_distinct_devices_of_one_node(cluster: list[dict[str, Any]]) -> None:
    ex = run(demo_pod_claims("two-gpus"), cluster)
    assert chosen(ex) == [("node-a", ["node-a/gpu-0", "node-a/gpu-1"])]


def test_demo_gpu_no_mig_lands_on_an_l4(cluster: list[dict[str, Any]]) -> None:
    assert chosen(run(demo_pod_claims("gpu-no-mig"), cluster)) == [("node-b", ["node-b/gpu-0"])]


def test_demo_driver_570_matches_semver(cluster: list[dict[str, Any]]) -> None:
    assert chosen(run(demo_pod_claims("gpu-driver-570"), cluster))[0][0] == "node-a"


def test_demo_unsatisfiable_stays_pending_with_a_reason(cluster: list[dict[str, Any]]) -> None:
    ex = run(demo_pod_claims("unsatisfiable"), cluster)
    [r] = ex.requests
    assert r.node is None and r.devices == []
    assert r.reason is not None and "0/2 nodes" in r.reason
    assert {c.verdict for c in r.candidates} == {"no-match"}
    assert "NVIDIA B200" in r.candidates[0].detail


def test_demo_missing_attribute_aborts_with_the_schedulers_message(cluster: list[dict[str, Any]]) -> None:
    ex = run(demo_pod_claims("missing-attribute"), cluster)
    [r] = ex.requests
    assert r.node is None
    assert r.reason is not None
    # Kubernetes 1.37's wording (the default rules): the device named, and cel.EnhanceRuntimeError's hint.
    assert (
        "claim dra-demo/missing-attribute-gpu: selector #0 on device gpu.dra-gpu.dev/node-a/gpu-0: CEL runtime error: "
        "no such key: coolingType. consider using CEL optional chaining" in r.reason
    )
    assert all(o.error for o in ex.nodes)
    assert {c.verdict for c in r.candidates} == {"error"}


def test_already_allocated_devices_are_skipped(cluster: list[dict[str, Any]]) -> None:
    holder = {
        "kind": "ResourceClaim",
        "metadata": {"name": "other", "namespace": "ns"},
        "status": {
            "allocation": {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-0"}]}}
        },
    }
    ex = run(demo_pod_claims("gpu-40gi"), cluster, [holder])
    assert chosen(ex) == [("node-a", ["node-a/gpu-1"])]
    first = ex.requests[0].candidates[0]
    assert (first.device, first.verdict) == ("node-a/gpu-0", "unavailable")
    assert "ns/other" in first.detail


def test_admin_access_results_do_not_block_a_device(cluster: list[dict[str, Any]]) -> None:
    holder = {
        "metadata": {"name": "admin"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-0", "adminAccess": True}]
                }
            }
        },
    }
    assert chosen(run(demo_pod_claims("gpu-40gi"), cluster, [holder])) == [("node-a", ["node-a/gpu-0"])]


def test_all_mode_takes_every_matching_device(cluster: list[dict[str, Any]]) -> None:
    c = claim([exactly(allocationMode="All", selectors=['device.attributes["gpu.dra-gpu.dev"].architecture == "Hopper"'])])
    [(node, devices)] = chosen(run([c], cluster))
    assert node == "node-a" and devices == [f"node-a/gpu-{i}" for i in range(8)]


def test_all_mode_fails_when_a_matching_device_is_in_use(cluster: list[dict[str, Any]]) -> None:
    holder = {
        "metadata": {"name": "h"},
        "status": {
            "allocation": {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "node-b", "device": "gpu-3"}]}}
        },
    }
    c = claim([exactly(allocationMode="All", selectors=['device.attributes["gpu.dra-gpu.dev"].architecture == "Ada Lovelace"'])])
    ex = run([c], inventory_slices(fake_gpus="l4x4", node_name="node-b", driver=DRIVER), [holder])
    assert ex.requests[0].node is None


def test_first_available_falls_back_to_the_next_subrequest(cluster: list[dict[str, Any]]) -> None:
    def sub(name: str, expr: str) -> dict[str, Any]:
        return {"name": name, "deviceClassName": DRIVER, "selectors": [{"cel": {"expression": expr}}]}

    c = claim(
        [
            {
                "name": "gpu",
                "firstAvailable": [
                    sub("b200", 'device.attributes["gpu.dra-gpu.dev"].productName == "NVIDIA B200"'),
                    sub("l4", 'device.attributes["gpu.dra-gpu.dev"].productName.contains("L4")'),
                ],
            }
        ]
    )
    ex = run([c], cluster)
    assert [(r.request, r.node, r.devices) for r in ex.requests] == [("gpu/l4", "node-b", ["node-b/gpu-0"])]


def test_backtracking_frees_a_device_a_later_request_needs(cluster: list[dict[str, Any]]) -> None:
    c = claim(
        [exactly("any"), exactly("zero", selectors=['device.attributes["resource.kubernetes.io"].pciBusID == "0000:18:00.0"'])]
    )
    ex = run([c], cluster)
    assert [(r.request, r.devices) for r in ex.requests] == [("any", ["node-a/gpu-1"]), ("zero", ["node-a/gpu-0"])]


def test_selector_error_on_a_device_never_reached_does_not_abort() -> None:
    slices = copy.deepcopy(inventory_slices(fake_gpus="l4x4", node_name="n", driver=DRIVER))
    slices[0]["spec"]["devices"][0]["attributes"]["cooling"] = {"string": "liquid"}
    c = claim([exactly(selectors=['device.attributes["gpu.dra-gpu.dev"].cooling == "liquid"'])])
    ex = run([c], slices)
    assert chosen(ex) == [("n", ["n/gpu-0"])]
    assert [c.verdict for c in ex.requests[0].candidates] == ["match", "error", "error", "error"]


def test_selector_error_reached_by_the_search_aborts() -> None:
    slices = copy.deepcopy(inventory_slices(fake_gpus="l4x4", node_name="n", driver=DRIVER))
    slices[0]["spec"]["devices"][1]["attributes"]["cooling"] = {"string": "liquid"}
    c = claim([exactly(selectors=['device.attributes["gpu.dra-gpu.dev"].cooling == "liquid"'])])
    ex = run([c], slices)
    assert ex.requests[0].node is None
    assert "CEL runtime error: no such key: cooling" in (ex.requests[0].reason or "")


def test_class_selector_compile_error_names_the_class() -> None:
    slices = inventory_slices(fake_gpus="l4x4", node_name="n", driver=DRIVER)
    classes = {DRIVER: {"metadata": {"name": DRIVER}, "spec": {"selectors": [{"cel": {"expression": "device.nope"}}]}}}
    ex = explain([claim([exactly()])], slices, classes, [])
    assert f"class {DRIVER}: selector #0: CEL compile error: compilation failed:" in (ex.requests[0].reason or "")


def test_missing_device_class_aborts() -> None:
    slices = inventory_slices(fake_gpus="l4x4", node_name="n", driver=DRIVER)
    ex = explain([claim([exactly()])], slices, {}, [])
    assert "could not retrieve device class gpu.dra-gpu.dev" in (ex.requests[0].reason or "")


def test_incomplete_pool_offers_no_devices() -> None:
    slices = copy.deepcopy(inventory_slices(fake_gpus="l4x4", node_name="n", driver=DRIVER))
    slices[0]["spec"]["pool"]["resourceSliceCount"] = 2
    ex = run([claim([exactly()])], slices)
    assert ex.requests[0].node is None
    [cand] = ex.requests[0].candidates
    assert cand.verdict == "unavailable" and "incomplete" in cand.detail


def test_only_the_highest_pool_generation_counts() -> None:
    old = copy.deepcopy(inventory_slices(fake_gpus="h100x8", node_name="n", driver=DRIVER))[0]
    new = copy.deepcopy(inventory_slices(fake_gpus="l4x4", node_name="n", driver=DRIVER))[0]
    old["metadata"]["name"] = "old"
    new["spec"]["pool"]["generation"] = 2
    c = claim([exactly(selectors=['device.attributes["gpu.dra-gpu.dev"].architecture == "Hopper"'])])
    ex = run([c], [old, new])
    assert ex.requests[0].node is None
    assert len(ex.requests[0].candidates) == 4  # only the generation-2 slice's devices


def _pool(devices: list[dict[str, Any]], counters: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    count = 2 if counters else 1
    base = {"driver": DRIVER, "nodeName": "n", "pool": {"name": "n", "generation": 1, "resourceSliceCount": count}}
    out = [{"kind": "ResourceSlice", "metadata": {"name": "n-devices"}, "spec": {**base, "devices": devices}}]
    if counters:
        out.append({"kind": "ResourceSlice", "metadata": {"name": "n-counters"}, "spec": {**base, "sharedCounters": counters}})
    return out


def _dev(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "attributes": {"type": {"string": "gpu"}, "root": {"string": extra.pop("root", "r0")}}, **extra}


def test_match_attribute_keeps_devices_on_one_root() -> None:
    slices = _pool([_dev("a", root="r0"), _dev("b", root="r1"), _dev("c", root="r1")])
    c = claim([exactly(count=2)], [{"matchAttribute": f"{DRIVER}/root"}])
    assert chosen(run([c], slices)) == [("n", ["n/b", "n/c"])]


def test_distinct_attribute_spreads_devices() -> None:
    slices = _pool([_dev("a", root="r0"), _dev("b", root="r0"), _dev("c", root="r1")])
    c = claim([exactly("x"), exactly("y")], [{"distinctAttribute": f"{DRIVER}/root"}])
    assert [(r.request, r.devices) for r in run([c], slices).requests] == [("x", ["n/a"]), ("y", ["n/c"])]


def test_shared_counters_in_a_separate_slice_limit_partitions() -> None:
    def part(n: str) -> dict[str, Any]:
        return _dev(n, consumesCounters=[{"counterSet": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}])

    slices = _pool([part("p0"), part("p1"), part("p2")], [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}])
    assert chosen(run([claim([exactly(count=2)])], slices)) == [("n", ["n/p0", "n/p1"])]
    assert chosen(run([claim([exactly(count=3)])], slices))[0][0] is None
    holder = {
        "metadata": {"name": "h"},
        "status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n", "device": "p0"}]}}},
    }
    ex = run([claim([exactly(count=2)])], slices, [holder])
    assert ex.requests[0].node is None
    verdicts = [(c.device, c.verdict) for c in ex.requests[0].candidates]
    assert verdicts[0] == ("n/p0", "unavailable")


def test_counter_set_missing_makes_the_pool_invalid() -> None:
    slices = _pool(
        [_dev("p0", consumesCounters=[{"counterSet": "nope", "counters": {"memory": {"value": "1"}}}])],
        [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
    )
    ex = run([claim([exactly()])], slices)
    assert ex.requests[0].node is None
    assert "invalid" in ex.requests[0].candidates[0].detail


def test_untolerated_taint_blocks_and_toleration_allows() -> None:
    taint = {"key": "health", "value": "bad", "effect": "NoSchedule"}
    slices = _pool([_dev("a", taints=[taint]), _dev("b")])
    ex = run([claim([exactly()])], slices)
    assert chosen(ex) == [("n", ["n/b"])]
    assert (
        ex.requests[0].candidates[0].verdict == "unavailable" and "health=bad:NoSchedule" in ex.requests[0].candidates[0].detail
    )
    tol = exactly(tolerations=[{"key": "health", "operator": "Exists"}])
    assert chosen(run([claim([tol])], slices)) == [("n", ["n/a"])]
    info = _pool([_dev("a", taints=[{"key": "k", "effect": "None"}])])
    assert chosen(run([claim([exactly()])], info)) == [("n", ["n/a"])]


def test_consumable_capacity_on_a_shared_device() -> None:
    shared = _dev("s", allowMultipleAllocations=True, capacity={"memory": {"value": "80Gi"}})
    slices = _pool([shared])
    used = {
        "metadata": {"name": "u"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": DRIVER,
                            "pool": "n",
                            "device": "s",
                            "shareID": "1",
                            "consumedCapacity": {"memory": "40Gi"},
                        }
                    ]
                }
            }
        },
    }
    fits = exactly(capacity={"requests": {"memory": "30Gi"}})
    too_big = exactly(capacity={"requests": {"memory": "50Gi"}})
    assert chosen(run([claim([fits])], slices, [used])) == [("n", ["n/s"])]
    ex = run([claim([too_big])], slices, [used])
    assert ex.requests[0].node is None and "capacity memory exhausted" in ex.requests[0].candidates[0].detail
    two = claim(
        [exactly("a", capacity={"requests": {"memory": "40Gi"}}), exactly("b", capacity={"requests": {"memory": "40Gi"}})]
    )
    assert [r.devices for r in run([two], slices).requests] == [["n/s"], ["n/s"]]


def test_request_policy_rounds_up_to_the_step() -> None:
    policy = {"default": "10Gi", "validRange": {"min": "10Gi", "step": "10Gi"}}
    slices = _pool([_dev("s", allowMultipleAllocations=True, capacity={"memory": {"value": "40Gi", "requestPolicy": policy}})])

    # 15Gi rounds up to 20Gi: two fit in 40Gi, three do not
    def req(n: str) -> dict[str, Any]:
        return exactly(n, capacity={"requests": {"memory": "15Gi"}})

    assert run([claim([req("a"), req("b")])], slices).requests[0].node == "n"
    assert run([claim([req("a"), req("b"), req("c")])], slices).requests[0].node is None


def test_requesting_a_capacity_the_device_lacks_makes_it_ineligible() -> None:
    slices = _pool([_dev("a")])
    ex = run([claim([exactly(capacity={"requests": {"memory": "1Gi"}})])], slices)
    assert ex.requests[0].node is None
    assert "not defined" in ex.requests[0].candidates[0].detail


def test_pools_are_walked_by_driver_then_pool_name() -> None:
    a = inventory_slices(fake_gpus="l4x4", node_name="n", driver=DRIVER)
    b = copy.deepcopy(a)
    for s in b:
        s["spec"]["pool"]["name"] = "a-pool"
        s["metadata"]["name"] = "z-slice"
    assert chosen(run([claim([exactly()])], a + b)) == [("n", ["a-pool/gpu-0"])]


def test_two_claims_of_one_pod_get_different_devices(cluster: list[dict[str, Any]]) -> None:
    claims = [claim([exactly()], name="one"), claim([exactly()], name="two")]
    assert [r.devices for r in run(claims, cluster).requests] == [["node-a/gpu-0"], ["node-a/gpu-1"]]


def _counter_pool(devices: list[dict[str, Any]], counter: str = "20Gi") -> list[dict[str, Any]]:
    pool = {"name": "node-a", "generation": 1, "resourceSliceCount": 2}
    return [
        {"metadata": {"name": "a-devices"}, "spec": {"driver": DRIVER, "nodeName": "node-a", "pool": pool, "devices": devices}},
        {
            "metadata": {"name": "b-counters"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "node-a",
                "pool": pool,
                "sharedCounters": [{"name": "cs", "counters": {"mem": {"value": counter}}}],
            },
        },
    ]


def _consumes(value: str) -> list[dict[str, Any]]:
    return [{"counterSet": "cs", "counters": {"mem": {"value": value}}}]


def test_a_backtracked_share_does_not_exempt_the_device_from_its_counters_later() -> None:
    # First try: r0=shared, r1=a overdraws the counters (30Gi > 20Gi) and is undone. Second try:
    # r0=b, r1=a, r2=shared again. That is the device's first share once more, so its counters
    # are checked (and overdrawn): the scheduler (cel-go) finds no allocation.
    slices = _counter_pool(
        [
            {
                "name": "shared",
                "allowMultipleAllocations": True,
                "attributes": {"kind": {"string": "s"}},
                "capacity": {"memory": {"value": "40Gi"}},
                "consumesCounters": _consumes("10Gi"),
            },
            {"name": "a", "attributes": {"kind": {"string": "a"}, "x": {"bool": True}}, "consumesCounters": _consumes("20Gi")},
            {"name": "b", "attributes": {"kind": {"string": "b"}}},
        ]
    )
    a = f'device.attributes["{DRIVER}"]'
    c = claim(
        [
            exactly("r0", selectors=[f'{a}.kind != "a"']),
            exactly("r1", selectors=[f"{a}.?x.orValue(false)"]),
            exactly("r2", selectors=["device.allowMultipleAllocations"]),
        ]
    )
    ex = run([c], slices)
    assert [r.reason is not None for r in ex.requests] == [True, True, True]
