"""Selector cost against the real cel-go: the API server's estimate and the scheduler's actual cost.

Each case goes to celdiff as a ``cost`` case (``testkit/go/cmd/celdiff/cost.go``): Go compiles the
expression as the API server compiles a new selector (``NewExpressions``, cost estimation on) and
evaluates it as the scheduler does on the device (``EvalDetails.ActualCost``, also when the cost
limit cancels it). dra-gpu must give the same estimate (or refuse to compile it likewise), and
charge the same cost with the same outcome, to the unit: so ``validate_selector``'s verdict
(``estimate > 1,000,000``) and the point where an evaluation is cancelled are the Kubernetes
release's. The cases are the handwritten ones below (comprehensions, string and list functions,
literals built at run time, bindings, optional chains, a runaway) and generated selectors.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings

from dra_driver.schedsim.cel import CelCompileError, CelRuntimeError, compile_selector
from dra_driver.schedsim.cel.compiler import CompileError, compile_expression
from testkit.oracle.corpus import DRIVER, chart_class_selectors, corpus_devices, demo_selectors
from testkit.oracle.oracle import Celdiff, python_selector, release_rules, selector_case
from tests.differential.selectors import selector_cases

GENERATED_EXAMPLES = 600
A = f'device.attributes["{DRIVER}"]'
COST_CASES = (
    "lists.range(1000).all(i, lists.range(1000).all(j, i + j >= 0))",  # cancelled: the cost at that point
    "lists.range(2000).all(a, lists.range(600).all(b, a + b >= 0))",
    "lists.range(100).map(i, string(i)).join(',').size() > 0",
    "lists.range(50).map(i, 'abcdefghij' + string(i)).filter(s, s.contains('j1')).size() >= 0",
    "lists.range(30).exists(i, 'x'.matches('^x$'))",
    "lists.range(10).map(i, [i, i * 2]).flatten().size() == 20",
    "lists.range(20).reverse().sort()[0] == 0",
    "lists.range(20).distinct().size() == 20",
    "sets.contains(lists.range(30), lists.range(10)) && sets.intersects([1, 2, 3], [3]) && sets.equivalent([1], [1])",
    "cel.bind(s, 'abc' + 'def', s + s + s).size() == 18",
    "cel.bind(unused, lists.range(100000).size(), true)",
    f"{A}.productName.startsWith('NVIDIA') && {A}.productName.endsWith('GB')",
    f"{A}.productName.lowerAscii().upperAscii().trim().substring(1, 3).size() == 2",
    f"{A}.productName.replace('H', 'hh').split(' ').size() > 0",
    f"{A}.productName.find('[0-9]+') != '' && {A}.productName.findAll('[A-Z]').size() > 0",
    f"{A}.productName.indexOf('H') >= 0 && {A}.productName.lastIndexOf('H') >= 0",
    f"{A}.productName < 'Z' && {A}.productName >= 'A' && {A}.productName != 'x'",
    f"has({A}.productName) && {A}.?productName.hasValue() && {A}[?'productName'].orValue('') != ''",
    f"{A}.?nope.orValue('fallback') == 'fallback'",
    "{'a': 1, 'b': 2}.all(k, v, v > 0) && {'a': {'b': 'c'}}.a.b == 'c'",
    "[1, 2, 3].map(x, {'v': x}).all(m, m.v > 0)",
    "[[1], [2, 3]].exists(l, l.size() > 1) && [1, 2, 3][2] == 3",
    "(1 > 0 ? [1, 2] : [3])[0] == 1 && (true ? {'a': 1} : {'a': 2}).a == 1",
    f"{A}.productName + {A}.productName + 'x' == 'abc'",
    f"device.capacity['{DRIVER}'].memory.compareTo(quantity('40Gi')) >= 0 && quantity('1') == quantity('1')",
    f"{A}.driverVersion.compareTo(semver('570.0.0')) >= 0 && semver('1.2.3').major() == 1",
    "lists.range(5).transformList(i, v, v * i).size() == 5 && lists.range(3).transformMap(i, v, v + 1).size() == 3",
    "[1, 2, 3].exists_one(x, x == 2) && ['a', 'b'].all(i, s, i >= 0 && s != '')",
    "'abc'.matches('b') && matches('abc', 'c')",
    "lists.range(3).all(i, [i].all(j, {'k': j}.k == j))",
    "lists.range(200).all(i, lists.range(200).all(j, 'x' + string(i) != string(j)))",
    "lists.range(1000).map(i, lists.range(10)).flatten().size() > 0",
    "lists.range(400).all(i, lists.range(400).exists(j, j == i))",
    f"lists.range(10000).all(i, {A}.productName.contains('H100'))",
    f"lists.range(20000).all(i, {A}.productName + {A}.productName != '')",
    f"{A}.productName.split('').map(c, c + c).join('').size() > 0",
    f"{A}.nope.indexOf(device.driver) <= 3",  # a failing receiver: a dispatched call stops there
    f"{A}.cores > 100 && {A}.nope == 1",
    "lists.range(1000).all(i, lists.range(1000).all(j, i + j >= 0)) || true",
)
# Integer literals out of range, one far past the digits Python's int() converts.
LITERALS = ("9223372036854775808 == 1", "-9223372036854775809 == 1", "18446744073709551616u == 1u", "9" * 4400 + " == 1")
GENERATED = settings(
    max_examples=GENERATED_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def python_cost(driver: str, device: dict[str, Any], expression: str) -> dict[str, Any]:
    """dra-gpu's answer to a cost case, shaped like celdiff's (messages of compile errors aside)."""
    rules = release_rules()
    out: dict[str, Any] = {}
    try:
        out["estimate"] = compile_expression(expression, rules, new_expressions=True).estimated_cost
    except CompileError:
        out["estimateError"] = True
    try:
        sel = compile_selector(expression, rules)
    except CelCompileError:
        out["error"] = "compile"
        return out
    try:
        result, out["actual"] = sel.evaluate_device(device, driver=driver)
        out["result"] = result
    except CelRuntimeError as err:
        out["error"], out["message"] = "runtime", err.message
        if err.cost is not None:
            out["actual"] = err.cost
    return out


def assert_same(celdiff: Celdiff, driver: str, device: dict[str, Any], expression: str) -> dict[str, Any]:
    go = celdiff.ask({"kind": "cost", "driver": driver, "device": device, "expression": expression})
    py = python_cost(driver, device, expression)
    where = f"{expression}\non {json.dumps(device)[:600]}"
    if "estimateError" in go:
        assert "estimateError" in py, f"Go refuses to compile the new selector ({go['estimateError'][:300]}): {where}"
    else:
        assert py.get("estimate") == go["estimate"], where
    assert py.get("error") == go.get("error"), (go.get("message"), py.get("message"), where)
    if go.get("error") == "runtime" and "actual" not in go:
        return go  # failed before evaluating (the device's attributes), nothing charged
    if go.get("error") != "compile":
        assert py.get("actual") == go.get("actual"), where
        assert py.get("result") == go.get("result"), where
    return go


def test_handwritten_costs_agree_with_cel_go(celdiff: Celdiff) -> None:
    devices = corpus_devices()[:3]
    cancelled = 0
    for expression in COST_CASES:
        for device in devices:
            go = assert_same(celdiff, DRIVER, device, expression)
            cancelled += "cost limit exceeded" in go.get("message", "")
    assert cancelled >= 3 * 3  # the runaways really ran into the limit, on every device


def test_the_corpus_costs_agree_with_cel_go(celdiff: Celdiff) -> None:
    for expression in (*demo_selectors(), *chart_class_selectors()):
        for device in corpus_devices():
            assert_same(celdiff, DRIVER, device, expression)


@GENERATED
@given(selector_cases())
def test_generated_selector_costs_agree_with_cel_go(celdiff: Celdiff, case: tuple[str, dict[str, Any], str]) -> None:
    driver, device, expression = case
    assert_same(celdiff, driver, device, expression)


def test_out_of_range_literals_fail_to_compile_as_cel_go_says(celdiff: Celdiff) -> None:
    device = {"name": "d"}
    for expression in LITERALS:
        assert python_selector(DRIVER, device, expression) == celdiff.ask(selector_case(DRIVER, device, expression))
