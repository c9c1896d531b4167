"""The simulator answers as each Kubernetes release's scheduler does (``dra_driver.schedsim.rules``).

One case per rule that differs between releases, with both answers; each expectation is what
celdiff (the release's own Go allocator, ``tests/differential``) answers for the case.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from dra_driver.schedsim.allocator import AllocatedState, NodeAllocator, gather_pools
from dra_driver.schedsim.cel import CelCompileError, CelRuntimeError, compile_selector
from dra_driver.schedsim.rules import NEWEST, NEWEST_MINOR, Rules, minor_of, rules_for
from testkit.oracle import gate_cases
from testkit.oracle.oracle import python_allocate

DRIVER = "gpu.dra-gpu.dev"
R34, R35, R36, R37 = (rules_for(m) for m in (34, 35, 36, 37))
R37F = rules_for(37, {"DRAFractionalCapacityRange": True})  # the gate is off in a stock 1.37 scheduler
CLASS = {"metadata": {"name": "any"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}


def device(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


def slice_(
    name: str,
    devices: list[dict[str, Any]],
    *,
    node: str = "node-a",
    pool: str = "p",
    driver: str = DRIVER,
    count: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    body = {"driver": driver, "nodeName": node, "pool": {"name": pool, "generation": 1, "resourceSliceCount": count}}
    return {"metadata": {"name": name}, "spec": {**body, **({"devices": devices} if devices else {}), **spec}}


def claim(*requests: dict[str, Any], constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": {"requests": list(requests), "constraints": constraints or []}},
    }


def request(
    name: str = "gpu", count: int = 1, *, mode: str = "ExactCount", selectors: tuple[str, ...] = (), **extra: Any
) -> dict[str, Any]:
    body = {
        "deviceClassName": "any",
        "allocationMode": mode,
        "selectors": [{"cel": {"expression": s}} for s in selectors],
        **extra,
    }
    if mode == "ExactCount":
        body["count"] = count
    return {"name": name, "exactly": body}


def allocate(rules: Rules, slices: list[dict[str, Any]], *claims: dict[str, Any], node: str = "node-a") -> Any:
    """(devices as driver/pool/device, consumed capacities) or the abort message, or None (unsatisfiable)."""
    pools = gather_pools(slices, node, {}, rules)
    out = NodeAllocator(list(claims), {"any": CLASS}, pools, AllocatedState(), node, rules=rules).run()
    if out.error is not None:
        return out.error
    if out.results is None:
        return None
    return [(f"{r.driver}/{r.pool}/{r.device}", {k: str(v.fraction()) for k, v in r.consumed.items()}) for r in out.results]


def test_rules_are_picked_by_minor_release_and_clamped_to_the_known_ones() -> None:
    assert rules_for().minor == NEWEST_MINOR == NEWEST.minor == 37
    assert rules_for(None) == NEWEST and rules_for(99) == NEWEST
    assert rules_for(30) == R34 and R34.minor == 34
    assert [minor_of(v) for v in ("v1.37.2", "1.36", "v1.35.4-gke.100", "2.0", "x")] == [37, 36, 35, None, None]
    assert R36.version == "1.36" and not R36.dyn_attributes and R37.dyn_attributes


def test_a_selectors_runtime_error_names_the_device_and_hints_at_optional_access_from_1_37() -> None:
    slices = [slice_("s", [device("gpu-0", attributes={"model": {"string": "x"}})])]
    c = claim(request(selectors=('device.attributes["gpu.dra-gpu.dev"].coolingType == "liquid"',)))
    assert allocate(R36, slices, c) == "claim ns/c: selector #0: CEL runtime error: no such key: coolingType"
    assert allocate(R37, slices, c) == (
        f"claim ns/c: selector #0 on device {DRIVER}/p/gpu-0: CEL runtime error: no such key: coolingType. consider using "
        "CEL optional chaining (.? followed by orValue()) or guarding the check with has() for optional fields"
    )
    other = claim(request(selectors=('device.attributes["gpu.dra-gpu.dev"].model > 1',)))
    assert (
        allocate(R37, slices, other) == f"claim ns/c: selector #0 on device {DRIVER}/p/gpu-0: CEL runtime error: no such overload"
    )


def test_the_claim_limit_is_checked_per_request_from_1_37() -> None:
    slices = [slice_("s", [device(f"gpu-{i}") for i in range(4)])]
    c = claim(request("first", 30), request("more", 4))
    assert allocate(R36, slices, c) == "claim ns/c: number of requested devices 34 exceeds the claim limit of 32"
    assert allocate(R37, slices, c) == (
        "claim ns/c, request more: adding 4 devices exceeds the claim limit of 32, with 30 already accounted for"
    )


def test_a_counter_set_slice_of_another_node_is_gathered_only_before_1_37() -> None:
    # Pool "shared" has a counter-set slice for node-b and a second slice that is missing.
    counters = slice_(
        "shared-0", [], node="node-b", pool="shared", count=2, sharedCounters=[{"name": "cs", "counters": {"c": {"value": "1"}}}]
    )
    slices = [slice_("s", [device("gpu-0")]), counters]
    c = claim(request(mode="All"))
    assert allocate(R36, slices, c) == (
        f"claim ns/c, request gpu: asks for all devices, but resource pool {DRIVER}/shared is currently being updated"
    )
    assert allocate(R37, slices, c) == [(f"{DRIVER}/p/gpu-0", {})]


def test_counters_are_kept_per_driver_and_pool_from_1_37() -> None:
    def pool_of(driver: str) -> list[dict[str, Any]]:
        counters = slice_(
            f"{driver}-counters", [], driver=driver, count=2, sharedCounters=[{"name": "cs", "counters": {"c": {"value": "1"}}}]
        )
        consumer = device("dev", consumesCounters=[{"counterSet": "cs", "counters": {"c": {"value": "1"}}}])
        return [counters, slice_(f"{driver}-devices", [consumer], driver=driver, count=2)]

    slices = pool_of("a.example.com") + pool_of("b.example.com")
    c = claim(request(count=2))
    assert allocate(R36, slices, c) is None  # both pools are named "p": one set of counters for both
    assert allocate(R37, slices, c) == [("a.example.com/p/dev", {}), ("b.example.com/p/dev", {})]


def test_distinct_attribute_remembers_every_value_from_1_37() -> None:
    slices = [slice_("s", [device(f"gpu-{i}", attributes={"x": {"int": v}}) for i, v in enumerate((1, 2, 1))])]
    c = claim(request(count=3), constraints=[{"distinctAttribute": f"{DRIVER}/x"}])
    assert allocate(R36, slices, c) == [(f"{DRIVER}/p/gpu-{i}", {}) for i in range(3)]  # one value per request name
    assert allocate(R37, slices, c) is None


def test_a_fractional_valid_range_rounds_in_milli_units_only_with_the_fractional_capacity_range_gate() -> None:
    policy = {"default": "1", "validRange": {"min": "100m", "step": "100m"}}
    shared = device("gpu-0", allowMultipleAllocations=True, capacity={"cores": {"value": "1", "requestPolicy": policy}})
    c = claim(request(capacity={"requests": {"cores": "250m"}}))
    assert allocate(R36, [slice_("s", [shared])], c) == [(f"{DRIVER}/p/gpu-0", {"cores": "1"})]
    assert allocate(R37, [slice_("s", [shared])], c) == [(f"{DRIVER}/p/gpu-0", {"cores": "1"})]  # stock 1.37: gate off
    assert allocate(R37F, [slice_("s", [shared])], c) == [(f"{DRIVER}/p/gpu-0", {"cores": "3/10"})]


def test_the_fractional_capacity_range_gate_is_beta_but_off_in_a_stock_1_37_scheduler() -> None:
    # On only where the minimum compatibility version is 1.37; kube-scheduler 1.37 runs with 1.36.
    assert not R37.fractional_capacity and R37.gate("DRAFractionalCapacityRange") is False
    assert R37F.fractional_capacity and R37F.overridden == ("DRAFractionalCapacityRange",)
    assert R37.variant == R37F.variant == "incubating"


def test_a_request_the_range_cannot_represent_in_milli_units_aborts_with_the_gate() -> None:
    policy = {"default": "100m", "validRange": {"min": "100m", "step": "100m"}}
    shared = device("gpu-0", allowMultipleAllocations=True, capacity={"cores": {"value": "1", "requestPolicy": policy}})
    c = claim(request(capacity={"requests": {"cores": "150u"}}))
    assert allocate(R36, [slice_("s", [shared])], c) == [(f"{DRIVER}/p/gpu-0", {"cores": "1/10"})]
    assert allocate(R37F, [slice_("s", [shared])], c) == [(f"{DRIVER}/p/gpu-0", {"cores": "1/10"})]  # below min: min
    c = claim(request(capacity={"requests": {"cores": "150100u"}}))
    assert allocate(R37, [slice_("s", [shared])], c) == [(f"{DRIVER}/p/gpu-0", {"cores": "1"})]  # Value() arithmetic
    assert allocate(R37F, [slice_("s", [shared])], c) == (
        f'claim ns/c, request gpu: checking capacity for device {DRIVER}/p/gpu-0: capacity "cores": capacity request cannot be '
        "represented in the device's range arithmetic: request 150100u is not a representable milli value"
    )


@pytest.mark.parametrize(
    ("rules", "answer"),
    [
        (R35, "compile"),  # no includes() before 1.36
        (R36, "runtime"),  # DRA's own, at most 48 values
        (R37, True),  # the lists library's, no limit
    ],
)
def test_includes_by_release(rules: Rules, answer: Any) -> None:
    expr = "lists.range(60).includes(59)"
    try:
        got: Any = compile_selector(expr, rules).matches({"name": "d"}, driver=DRIVER)
    except (CelCompileError, CelRuntimeError) as err:
        got = err.kind
    assert got == answer


def test_attribute_values_are_any_before_1_37_and_dyn_from_it() -> None:
    expr = 'device.attributes["gpu.dra-gpu.dev"].model < quantity("1")'
    for rules, name in ((R36, "any"), (R37, "dyn")):
        with pytest.raises(CelCompileError, match=rf"applied to '\({name}, kubernetes.Quantity\)'"):
            compile_selector(expr, rules)
    with pytest.raises(CelCompileError, match="must evaluate to bool or the unknown type, not dyn"):
        compile_selector("dyn(true)", R36)
    assert compile_selector("dyn(true)", R37).matches({"name": "d"}, driver=DRIVER) is True


def test_lists_range_is_bounded_from_1_37() -> None:
    assert compile_selector("lists.range(-1).size() == 0", R36).matches({"name": "d"}, driver=DRIVER) is True
    with pytest.raises(CelRuntimeError, match=re.escape("lists.range: size must be non-negative, got -1")):
        compile_selector("lists.range(-1).size() == 0", R37).matches({"name": "d"}, driver=DRIVER)


def test_capacity_requests_are_refused_by_1_34_ignored_by_1_35_and_checked_from_1_36() -> None:
    slices = [slice_("s", [device("gpu-0")])]
    c = claim(request(capacity={"requests": {"memory": "1Gi"}}))
    assert allocate(R34, slices, c) == (
        "claim ns/c, request gpu: has capacity requests, but the DRAConsumableCapacity feature is disabled"
    )
    assert allocate(R35, slices, c) == [(f"{DRIVER}/p/gpu-0", {})]
    assert allocate(R36, slices, c) is None  # the device defines no memory capacity
    assert allocate(R37, slices, c) is None


# The devices each release's allocator picks at its default gates (None: unsatisfiable), for the
# hand-written cases of testkit/oracle/gate_cases.py; e2e/test_feature_gates.py holds each
# release's own Go allocator to the same answers.
GATED: dict[str, dict[int, list[str] | None]] = {
    "an untolerated taint": {34: ["gpu-0"], 35: ["gpu-0"], 36: ["gpu-1"], 37: ["gpu-1"]},  # DRADeviceTaints off before 1.36
    "binding conditions": {34: ["gpu-1"], 35: ["gpu-1"], 36: ["gpu-0"], 37: ["gpu-0"]},  # DRADeviceBindingConditions off
    "a device that consumes counters": {34: ["gpu-1"], 35: ["gpu-1"], 36: ["gpu-0"], 37: ["gpu-0"]},  # partitionable off
    "a device that consumes counters, All": {34: None, 35: None, 36: ["gpu-0", "gpu-1"], 37: ["gpu-0", "gpu-1"]},
    # 1.34/1.35 go on after an All subrequest's first device as the request's first subrequest (count 1).
    "All after another subrequest": {
        34: ["gpu-0"],
        35: ["gpu-0"],
        36: [f"gpu-{i}" for i in range(4)],
        37: [f"gpu-{i}" for i in range(4)],
    },
    "slices in input order": {34: ["gpu-1"], 35: ["gpu-1"], 36: ["gpu-0"], 37: ["gpu-0"]},  # 1.36+: by slice name
}


@pytest.mark.parametrize("name", sorted(GATED))
@pytest.mark.parametrize("minor", [34, 35, 36, 37])
def test_each_release_answers_as_its_default_gates_and_allocator_do(name: str, minor: int) -> None:
    answer = python_allocate(gate_cases.allocation_cases()[name], minor=minor)
    claims: list[list[dict[str, Any]]] = answer.get("claims") or []
    devices = [d["device"] for claim in claims for d in claim] if answer["outcome"] == "allocated" else None
    assert devices == GATED[name][minor], answer
