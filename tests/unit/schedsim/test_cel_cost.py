"""Selector cost as the API server estimates it and as the scheduler charges it, per release.

The expected figures are worked out by hand from cel-go's cost model (``checker/cost.go``,
``interpreter/runtimecost.go``) and the Kubernetes library's (``apiserver/pkg/cel/library/cost.go``)
with DRA's size hints; the differential test (``tests/differential/test_cel_cost_differential.py``)
holds the same numbers to the real cel-go.
"""

from __future__ import annotations

import pytest

from dra_driver.schedsim.cel import MAX_COST, CelRuntimeError, compile_selector, device_value, validate_selector
from dra_driver.schedsim.cel.compiler import METER_DIVISOR, compile_expression
from dra_driver.schedsim.rules import rules_for

DRIVER = "gpu.example.com"
A = f'device.attributes["{DRIVER}"]'
DEVICE = {
    "name": "gpu-0",
    "attributes": {"model": {"string": "NVIDIA H100 80GB HBM3"}, "cores": {"int": 132}},
    "capacity": {"memory": {"value": "80Gi"}},
}
RUNAWAY = "lists.range(1000).all(i, lists.range(1000).all(j, i + j >= 0))"
RELEASES = (34, 35, 36, 37)


def charged(expression: str, minor: int = 37) -> int:
    """The cost the scheduler's evaluation of ``expression`` on :data:`DEVICE` charges."""
    sel = compile_selector(expression, rules_for(minor))
    try:
        _, cost = sel.evaluate(device_value(DEVICE, driver=DRIVER))
    except CelRuntimeError as err:  # an error is charged up to where it happened
        assert err.cost is not None
        return err.cost
    return cost


def estimated(expression: str, minor: int = 37) -> int:
    """The API server's estimate for ``expression`` as a new selector."""
    return compile_expression(expression, rules_for(minor), new_expressions=True).estimated_cost


@pytest.mark.parametrize(
    ("expression", "estimate"),
    [
        # device (1) + .driver (1); == against a 15-character literal: ceil(min(63, 15) * 0.1) = 2
        (f'device.driver == "{DRIVER}"', 4),
        # device, .attributes, [domain], .model (1 each); == : ceil(min(64, 4) * 0.1) = 1
        (f'{A}.model == "a100"', 5),
        # a presence test costs its operand only
        (f"has({A}.model)", 3),
        # quantity("40Gi"): ceil(4 * 0.1); compareTo 1; >= 1; device.capacity[d].memory 4
        (f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0', 7),
        # matches: ceil((64 + 1) * 0.1) * ceil(6 * 0.25) = 7 * 2
        (f'{A}.model.matches("^a.*$")', 4 + 14),
        # in a 2-item list literal: 2 + the list (10)
        (f'{A}.model in ["a", "b"]', 4 + 2 + 10),
        # all() over a 3-item literal: 10 + 3 * (condition 2 + step 3) + result 1
        ("[1, 2, 3].all(x, x > 0)", 26),
        # a string of up to 64 characters, twice: ceil(128 * 0.1) + both operands
        (f'{A}.model + {A}.model == ""', 4 + 4 + 13 + 0),
    ],
)
def test_the_estimate_is_the_api_servers(expression: str, estimate: int) -> None:
    assert estimated(expression) == estimate


@pytest.mark.parametrize(
    ("expression", "cost"),
    [
        (f'device.driver == "{DRIVER}"', 4),
        (f'{A}.model == "NVIDIA H100 80GB HBM3"', 4 + 3),  # ceil(21 * 0.1)
        (f"has({A}.model)", 3),  # the presence test's attribute costs nothing, its qualifiers 1 each
        ("'abcdefghijklmnopqrstuvwxy' + 'z' != ''", 3 + 0),  # ceil(26 * 0.1); != with an empty string: 0
        ("'hello world'.contains('o w')", 2 * 1),  # ceil(11 * 0.1) * ceil(3 * 0.1)
        ("'abcdefghij'.matches('^a.*j$')", 2 * 2),  # ceil((1 + 10) * 0.1) * ceil(6 * 0.25)
        ("'aaaaaaaaaaaaaaaaaaaa' == 'aaaaaaaaaaaaaaaaaaaa'", 2),  # ceil(20 * 0.1)
        ("[1, 2, 3] == [1, 2, 3]", 1),  # constant lists are built once, for free; == by size: ceil(3 * 0.1)
        ("[1 + 1, 2].size() == 2", 1 + 10 + 1 + 1),  # a list built at run time: 10
        ("{'a': 1 + 1}.a == 2", 1 + 30 + 1 + 1 + 1),  # a map: 30; selecting from a computed value: 1 + 1
        ("[1, 2, 3].all(x, x > 0)", 3 * (2 + 3) + 1),
        ("cel.bind(x, 'abc' + 'def', true)", 0),  # a binding never read is never computed
        ("cel.bind(x, 'abc' + 'def', x == x)", 1 + 1 + 1 + 1),  # computed once: ceil(6 * 0.1); x, x, ==
        ("2 in [1, 2, 3]", 0),  # a set lookup
        ("2 in [1 + 0, 2]", 1 + 10 + 2),  # a list built at run time: in costs its size
        (f"{A}.cores > 100 && {A}.nope == 1", 5 + 5),  # the failing qualifier counts; && adds nothing
    ],
)
def test_the_scheduler_charges_what_cel_go_charges(expression: str, cost: int) -> None:
    assert charged(expression) == cost


def test_startswith_is_charged_by_the_string_up_to_1_36_and_by_the_prefix_from_1_37() -> None:
    expression = "'abcdefghijklmnopqrstuvwxyz'.startsWith('abc')"
    assert charged(expression, 36) == 3  # cel-go 0.26: ceil(26 * 0.1)
    assert charged(expression, 37) == 1  # cel-go 0.29: ceil(3 * 0.1)


@pytest.mark.parametrize("minor", RELEASES)
def test_the_runaway_comprehension_is_cancelled_with_the_schedulers_error(minor: int) -> None:
    sel = compile_selector(RUNAWAY, rules_for(minor))
    with pytest.raises(CelRuntimeError, match=r"^operation cancelled: actual cost limit exceeded$") as err:
        sel.matches_value(device_value(DEVICE, driver=DRIVER))
    assert err.value.cost is not None
    assert MAX_COST < err.value.cost <= MAX_COST + 10


def test_a_cancelled_evaluation_is_not_absorbed_by_or() -> None:
    sel = compile_selector(f"{RUNAWAY} || true")
    with pytest.raises(CelRuntimeError, match="actual cost limit exceeded"):
        sel.matches_value(device_value(DEVICE, driver=DRIVER))


def test_string_operations_count_against_the_limit_not_only_iterations() -> None:
    # 100,000 iterations are a tenth of the limit; each also reads the 21-character attribute twice
    # (4 + 4), concatenates it (ceil(42 * 0.1) = 5) and tests the loop (3): 16 per iteration.
    expression = f'lists.range(100000).all(i, {A}.model + {A}.model != "")'
    sel = compile_selector(expression)
    with pytest.raises(CelRuntimeError, match="actual cost limit exceeded") as err:
        sel.matches_value(device_value(DEVICE, driver=DRIVER))
    assert err.value.cost is not None and err.value.cost > MAX_COST


def test_common_selectors_run_unmetered_and_heavy_ones_metered() -> None:
    light = compile_selector(f'{A}.model == "x" && device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0')
    heavy = compile_selector(RUNAWAY)
    assert light.bound <= MAX_COST // METER_DIVISOR < heavy.bound


@pytest.mark.parametrize("minor", [35, 36, 37])
def test_the_api_server_refuses_a_selector_over_the_estimated_limit(minor: int) -> None:
    assert validate_selector(RUNAWAY, rules_for(minor)) == ["Forbidden: too complex, exceeds cost limit"]


def test_1_34_refuses_the_lists_extension_in_a_new_selector_before_estimating() -> None:
    [problem] = validate_selector(RUNAWAY, rules_for(34))
    assert problem.startswith(f'Invalid value: "{RUNAWAY}": compilation failed: ERROR: <input>:1:1: undeclared reference to')


def test_a_selector_just_under_the_limit_is_taken() -> None:
    # 10 + 1 (lists.range) + 1000 * (... ) well under; 3 levels of 100 are 100 ** 3 iterations: refused.
    assert validate_selector("lists.range(100).all(i, i >= 0)") == []
    assert validate_selector("lists.range(100).all(a, lists.range(100).all(b, lists.range(100).all(c, a + b + c >= 0)))") == [
        "Forbidden: too complex, exceeds cost limit"
    ]


def test_the_length_limit_counts_bytes() -> None:
    base = f'{A}.model == ""'
    fits = base[:-1] + "x" * (10 * 1024 - len(base)) + '"'
    assert len(fits.encode()) == 10 * 1024
    assert validate_selector(fits) == []
    over = base[:-1] + "é" * ((10 * 1024 - len(base)) // 2 + 1) + '"'
    assert len(over) < 10 * 1024 < len(over.encode())
    assert validate_selector(over) == ["Too long: may not be more than 10240 bytes"]


@pytest.mark.parametrize(("minor", "taken"), [(34, False), (35, False), (36, True), (37, True)])
def test_allow_multiple_allocations_is_new_only_with_consumable_capacity(minor: int, taken: bool) -> None:
    problems = validate_selector("device.allowMultipleAllocations", rules_for(minor))
    assert (problems == []) is taken
    if not taken:
        assert "undefined field 'allowMultipleAllocations'" in problems[0]


@pytest.mark.parametrize("minor", [36, 37])
def test_includes_is_for_stored_selectors_only(minor: int) -> None:
    expression = f"{A}.cores.includes(132)"
    compile_selector(expression, rules_for(minor))  # the scheduler has it
    [problem] = validate_selector(expression, rules_for(minor))
    assert "undeclared reference to 'includes'" in problem


def test_a_compile_error_is_quoted_as_the_api_server_quotes_it() -> None:
    [problem] = validate_selector('device.nope == "\t"')
    assert problem.startswith(
        'Invalid value: "device.nope == \\"\\t\\"": compilation failed: ERROR: <input>:1:7: undefined field'
    )
