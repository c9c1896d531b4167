"""The simulator's answers where the scheduler's default gates meet list-typed attributes, compatibility
groups, derived attributes and non-scalar constraint values (issue 28, classes 2-5).

Each expectation is what the release's own Go allocator answers at its default gates (celdiff,
``tests/differential``): 1.37 converts list-typed attributes for CEL whatever DRAListTypeAttributes
says, and its incubating allocator compares constraint values as scalars (the first device is
always accepted, a later non-scalar never); 1.36 fails the device's selectors on them; 1.34 and
1.35 do not know the list fields at all (an attribute with no value), and the allocator of 1.35
knows no distinctAttribute. Compatibility groups and derived attributes exist from 1.37, behind
alpha gates that are off.
"""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.schedsim.allocator import AllocatedState, NodeAllocator, gather_pools
from dra_driver.schedsim.cel import CelRuntimeError, compile_selector
from dra_driver.schedsim.rules import Rules, rules_for
from tests.unit.schedsim.test_allocator_releases import DRIVER, claim, device, request, slice_

R34, R35, R36, R37 = (rules_for(m) for m in (34, 35, 36, 37))
NUMA = f"{DRIVER}/numa"


# A class without selectors: before 1.37 any selector fails on a device with a list-typed attribute.
CLASS = {"metadata": {"name": "any"}, "spec": {}}


def numa_device(name: str, value: dict[str, Any]) -> dict[str, Any]:
    return device(name, attributes={"numa": value})


def allocate(rules: Rules, slices: list[dict[str, Any]], *claims: dict[str, Any]) -> Any:
    """Devices as (driver/pool/device, consumed capacities), or the abort message, or None (unsatisfiable)."""
    pools = gather_pools(slices, "node-a", {}, rules)
    out = NodeAllocator(list(claims), {"any": CLASS}, pools, AllocatedState(), "node-a", rules=rules).run()
    if out.error is not None:
        return out.error
    if out.results is None:
        return None
    return [(f"{r.driver}/{r.pool}/{r.device}", {k: str(v.fraction()) for k, v in r.consumed.items()}) for r in out.results]


@pytest.mark.parametrize(
    ("expression", "answer"),
    [
        ('device.attributes["gpu.dra-gpu.dev"].numa.includes(1)', True),
        ('1 in device.attributes["gpu.dra-gpu.dev"].numa', True),
        ('device.attributes["gpu.dra-gpu.dev"].numa.size() == 2', True),
        ('device.attributes["gpu.dra-gpu.dev"].numa.exists(n, n > 1)', False),
        ('device.attributes["gpu.dra-gpu.dev"].names.all(n, n.startsWith("gpu"))', True),
        ('device.attributes["gpu.dra-gpu.dev"].drivers.exists(v, v.compareTo(semver("570.0.0")) >= 0)', True),
        ('device.attributes["gpu.dra-gpu.dev"].flags[1]', False),
    ],
)
def test_list_typed_attributes_are_cel_lists_from_1_37(expression: str, answer: bool) -> None:
    d = device(
        "gpu-0",
        attributes={
            "numa": {"ints": [0, 1]},
            "names": {"strings": ["gpu-a", "gpu-b"]},
            "drivers": {"versions": ["550.1.0", "580.95.5"]},
            "flags": {"bools": [True, False]},
        },
    )
    assert compile_selector(expression, R37).matches(d, driver=DRIVER) is answer


@pytest.mark.parametrize("rules", [R34, R35, R36])
def test_a_list_typed_attribute_fails_every_selector_of_the_device_before_1_37(rules: Rules) -> None:
    d = numa_device("gpu-0", {"ints": [0, 1]})
    with pytest.raises(CelRuntimeError, match=r"^attribute numa: unsupported attribute value$"):
        compile_selector("true", rules).matches(d, driver=DRIVER)


def test_an_unparsable_version_in_a_list_fails_the_device_from_1_37() -> None:
    d = numa_device("gpu-0", {"versions": ["1.2.3", "1.2"]})
    with pytest.raises(CelRuntimeError, match=r"^attribute numa: parse semantic version: "):
        compile_selector("true", R37).matches(d, driver=DRIVER)


def test_the_allocator_selects_by_a_list_typed_attribute_in_1_37_and_aborts_before() -> None:
    slices = [slice_("s", [numa_device("gpu-0", {"ints": [0]}), numa_device("gpu-1", {"ints": [1, 2]})])]
    c = claim(request(selectors=(f'device.attributes["{DRIVER}"].numa.includes(2)',)))
    assert allocate(R37, slices, c) == [(f"{DRIVER}/p/gpu-1", {})]
    assert allocate(R36, slices, c) == ("claim ns/c: selector #0: CEL runtime error: attribute numa: unsupported attribute value")


@pytest.mark.parametrize("rules", [R34, R35, R36, R37])
def test_match_attribute_accepts_a_first_device_with_a_list_value(rules: Rules) -> None:
    slices = [slice_("s", [numa_device("gpu-0", {"ints": [0, 1]})])]
    c = claim(request(), constraints=[{"matchAttribute": NUMA}])
    assert allocate(rules, slices, c) == [(f"{DRIVER}/p/gpu-0", {})]


@pytest.mark.parametrize("rules", [R34, R35, R36, R37])
def test_match_attribute_refuses_a_later_list_and_a_scalar_after_a_list(rules: Rules) -> None:
    for first, second in (({"ints": [0]}, {"ints": [0]}), ({"ints": [0]}, {"int": 0}), ({"int": 0}, {"ints": [0]})):
        slices = [slice_("s", [numa_device("gpu-0", first), numa_device("gpu-1", second)])]
        c = claim(request(count=2), constraints=[{"matchAttribute": NUMA}])
        assert allocate(rules, slices, c) is None, (first, second)


@pytest.mark.parametrize("rules", [R34, R36, R37])
def test_distinct_attribute_accepts_a_scalar_after_a_list_but_no_list_after_a_value(rules: Rules) -> None:
    later_scalar = [slice_("s", [numa_device("gpu-0", {"ints": [0, 1]}), numa_device("gpu-1", {"int": 0})])]
    c = claim(request(count=2), constraints=[{"distinctAttribute": NUMA}])
    assert allocate(rules, later_scalar, c) == [(f"{DRIVER}/p/gpu-0", {}), (f"{DRIVER}/p/gpu-1", {})]
    later_list = [slice_("s", [numa_device("gpu-0", {"int": 0}), numa_device("gpu-1", {"ints": [1]})])]
    if rules is R34:  # its search starts from the first device again: the list first, then the scalar beside it
        assert allocate(rules, later_list, c) == [(f"{DRIVER}/p/gpu-1", {}), (f"{DRIVER}/p/gpu-0", {})]
    else:
        assert allocate(rules, later_list, c) is None


def test_distinct_attribute_compares_scalars_by_pointer_in_1_34() -> None:
    slices = [slice_("s", [numa_device("gpu-0", {"int": 0}), numa_device("gpu-1", {"int": 0})])]
    c = claim(request(count=2), constraints=[{"distinctAttribute": NUMA}])
    assert allocate(R34, slices, c) == [(f"{DRIVER}/p/gpu-0", {}), (f"{DRIVER}/p/gpu-1", {})]
    for rules in (R36, R37):
        assert allocate(rules, slices, c) is None


def test_distinct_attribute_is_unknown_to_the_allocator_of_1_35() -> None:
    slices = [slice_("s", [numa_device("gpu-0", {"int": 0}), numa_device("gpu-1", {"int": 1})])]
    c = claim(request(count=2), constraints=[{"distinctAttribute": NUMA}])
    assert allocate(R35, slices, c) == "claim ns/c, constraint #0: empty constraint (unsupported constraint type?)"


def _consumer(name: str, **extra: Any) -> dict[str, Any]:
    return device(name, consumesCounters=[{"counterSet": "cs", "counters": {"mem": {"value": "1"}}, **extra}])


def _grouped_pool() -> list[dict[str, Any]]:
    counters = slice_("p-counters", [], count=3, sharedCounters=[{"name": "cs", "counters": {"mem": {"value": "2"}}}])
    plain = slice_("p-plain", [_consumer("gpu-0")], count=3)
    return [counters, plain, slice_("p-grouped", [_consumer("gpu-1", compatibilityGroups=["a"])], count=3)]


def test_a_slice_with_compatibility_groups_leaves_its_pool_incomplete_in_1_37() -> None:
    c = claim(request())
    assert allocate(R37, _grouped_pool(), c) is None
    assert allocate(R37, _grouped_pool(), claim(request(mode="All"))) == (
        f"claim ns/c, request gpu: asks for all devices, but resource pool {DRIVER}/p is currently being updated"
    )
    assert allocate(R36, _grouped_pool(), c) == [(f"{DRIVER}/p/gpu-1", {})]  # no such field before 1.37


def test_a_request_with_derived_attributes_is_refused_in_1_37() -> None:
    slices = [slice_("s", [device("gpu-0")])]
    derived = [{"name": "derived/numa", "expression": "1"}]
    c = claim(request(derivedAttributes=derived), constraints=[{"matchAttribute": "derived/numa"}])
    assert allocate(R37, slices, c) == (
        "claim ns/c, request gpu: cannot handle request with derived attributes, the feature is disabled"
    )
    assert allocate(R36, slices, c) is None  # the field does not exist: the constraint finds no such attribute
    one = {"name": "one", "deviceClassName": "any", "allocationMode": "ExactCount", "count": 1, "derivedAttributes": derived}
    sub = {"name": "gpu", "firstAvailable": [one]}
    assert allocate(R37, slices, claim(sub)) == (
        "claim ns/c, request one: cannot handle request with derived attributes, the feature is disabled"
    )
