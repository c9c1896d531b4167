"""dra-gpu's DRA CEL environment against the scheduler's (k8s.io/dynamic-resource-allocation/cel, Go).

Each case goes to the long-lived celdiff process and to ``compile_selector``; the answers must be
identical: the match result, or the error class (compile/runtime) and cel-go's exact message
(positions and carets included). Generation is derandomized (Hypothesis derives its choices from
the test itself), so a run in CI is the run on a laptop; a failure prints the shrunk case.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings

from testkit.oracle.corpus import DRIVER, chart_class_selectors, corpus_devices, demo_selectors
from testkit.oracle.oracle import Celdiff, python_selector, selector_case
from tests.differential.selectors import regex_cases, selector_cases

SELECTOR_EXAMPLES = 2000
REGEX_EXAMPLES = 400
GENERATED = settings(
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Handwritten cases: the README's example and the upstream quirks found while building this test.
HANDWRITTEN = (
    'device.attributes["gpu.dra-gpu.dev"].productName == "NVIDIA H100 80GB HBM3" && '
    'device.capacity["gpu.dra-gpu.dev"].memory.compareTo(quantity("40Gi")) >= 0 && '
    'device.attributes["gpu.dra-gpu.dev"].driverVersion.compareTo(semver("570.0.0")) >= 0',
    'quantity("2") == quantity("1").add(1)',  # add() returns a pointer; value == pointer is an error
    'quantity("1").add(1) == quantity("2")',
    'device.attributes["gpu.dra-gpu.dev"].driverVersion in [1, 2]',  # Go panics hashing a Semver
    'device.attributes["gpu.dra-gpu.dev"].nope in []',  # folded to false, the error never happens
    "has(device.attributes.anyDomain)",  # the domain map answers every key
    'device.attributes["gpu.dra-gpu.dev"].?nope.orValue(device.attributes["gpu.dra-gpu.dev"].alsoNope) == 1',
    'int("x") == 1',  # a constant conversion fails when the program is built
    'matches("x", "(")',  # the regex validator checks the first argument of the global form
    '"(".matches("x")',
    "[1, 2.5].size() == 2",  # homogeneous aggregate literals
    "1.all(x, y, true)",  # "1." is not a float in CEL
    'device.attributes["gpu.dra-gpu.dev"][?"productName"].hasValue()',
    'device.attributes["gpu.dra-gpu.dev"].all(k, v, k != "")',
    "true && 1 == 1 && false || device.nope",
    'device.attributes["gpu.dra-gpu.dev"].productName',
    "dyn(1.0) == 1 && 9007199254740993 == 9007199254740992.0",
    "true && // a comment, then nothing",  # a syntax error: only the class is compared
)


def assert_same(celdiff: Celdiff, driver: str, device: dict[str, Any], expression: str) -> None:
    go = celdiff.ask(selector_case(driver, device, expression))
    py = python_selector(driver, device, expression)
    if "Syntax error:" in go.get("message", ""):
        # The one place messages cannot agree: ANTLR's and Lark's wording of a parse error. The
        # class must, and both must call it a syntax error.
        go, py = (
            {"error": go["error"], "syntax": True},
            {"error": py.get("error"), "syntax": "Syntax error:" in py.get("message", "")},
        )
    assert py == go, f"expression: {expression}\ndevice: {json.dumps(device)}"


def test_demo_chart_and_handwritten_selectors_agree_on_every_published_device(celdiff: Celdiff) -> None:
    selectors = [*demo_selectors(), *chart_class_selectors(), *HANDWRITTEN]
    devices = corpus_devices()
    assert len(demo_selectors()) >= 10 and len(devices) >= 40
    for expression in selectors:
        for device in devices:
            assert_same(celdiff, DRIVER, device, expression)


def test_generated_selectors_agree_with_the_scheduler(celdiff: Celdiff) -> None:
    seen: list[str] = []

    @settings(GENERATED, max_examples=SELECTOR_EXAMPLES)
    @given(selector_cases())
    def check(case: tuple[str, dict[str, Any], str]) -> None:
        seen.append(case[2])
        assert_same(celdiff, *case)

    check()
    assert len(seen) >= SELECTOR_EXAMPLES  # no silent shrinking of the differential


def test_generated_re2_patterns_agree_with_the_scheduler(celdiff: Celdiff) -> None:
    seen: list[str] = []

    @settings(GENERATED, max_examples=REGEX_EXAMPLES)
    @given(regex_cases())
    def check(case: tuple[str, dict[str, Any], str]) -> None:
        seen.append(case[2])
        assert_same(celdiff, *case)

    check()
    assert len(seen) >= REGEX_EXAMPLES
