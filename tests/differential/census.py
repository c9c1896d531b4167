"""Count where dra-gpu's simulator and a release's own allocator disagree over many generated cases.

``python -m tests.differential.census [--release v1.36.3] [--examples N] [--seed S] [--show K]``
runs ``N`` allocation cases of ``allocations.py`` (and ``N`` selector cases of ``selectors.py``)
through the release's celdiff (built by ``testkit/go/build.sh``; default: ``testkit/go/K8S_VERSION``) and through
``oracle.python_allocate`` / ``python_selector``, and prints how many agreed and disagreed, by the Go
outcome, with the first ``K`` disagreements (a case Go answers differently when asked again, by
map order, is counted apart). Unlike the tests it does not stop at the first
disagreement, and its cases are random (``--seed``) rather than the tests' fixed ones: the scale
run of the differential (the tests run a fixed 1,000 allocation cases). Test infrastructure only.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings

from testkit.cluster import K8S_VERSION, minor_of
from testkit.oracle.allocations import allocation_cases
from testkit.oracle.oracle import Celdiff, exact_quantities, python_allocate, python_selector, selector_case
from tests.differential.coverage import features, outcome
from tests.differential.selectors import selector_cases

RETRIES = 8  # more asks of a case Go and dra-gpu disagree on


def _settings(examples: int) -> settings:
    return settings(
        database=None,
        deadline=None,
        max_examples=examples,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


def run(release: str, examples: int, random_seed: int, show: int) -> dict[str, Any]:
    """The counts (see the module's docstring)."""
    minor = minor_of(release)
    oracle = Celdiff(release)
    counts: Counter[str] = Counter()
    shown: list[dict[str, Any]] = []
    covered: Counter[str] = Counter()

    def note(kind: str, agreed: bool, go: dict[str, Any], py: dict[str, Any], case: dict[str, Any]) -> None:
        counts[f"{kind} {'agree' if agreed else 'DISAGREE'}"] += 1
        if not agreed and len(shown) < show:
            shown.append({"go": go, "python": py, "case": case})

    try:

        @seed(random_seed)
        @_settings(examples)
        @given(allocation_cases(minor=minor))
        def allocations(case: dict[str, Any]) -> None:
            go = exact_quantities(oracle.ask(case))
            try:
                py: dict[str, Any] = python_allocate(case, minor=minor)
            except Exception as err:  # a crash is a disagreement to count, not to stop at
                py = {"crash": repr(err)}
            covered.update(features(case))
            counts[f"allocate outcome {outcome(go)}"] += 1
            if py != go:
                # Where Go's answer depends on map order (1.35 keeps no order of pools), asking again
                # may give another: such a case is counted apart, agreeing if one of Go's answers is ours.
                others = [exact_quantities(oracle.ask(case)) for _ in range(RETRIES)]
                if any(o != go for o in others):
                    agreed = py in others
                    counts[f"allocate Go nondeterministic, {'one answer agrees' if agreed else 'DISAGREE'}"] += 1
                    if not agreed and len(shown) < show:
                        shown.append({"go": [go, *others], "python": py, "case": case})
                    return
            note("allocate", py == go, go, py, case)

        @seed(random_seed)
        @_settings(examples)
        @given(selector_cases())
        def selectors(case: tuple[str, dict[str, Any], str]) -> None:
            driver, device, expression = case
            go = oracle.ask(selector_case(driver, device, expression))
            try:
                py = python_selector(driver, device, expression, minor=minor)
            except Exception as err:  # as above
                py = {"crash": repr(err)}
            if "Syntax error:" in go.get("message", ""):
                go, py = {"error": go["error"]}, {"error": py.get("error")}
            note("selector", py == go, go, py, {"driver": driver, "device": device, "expression": expression})

        allocations()
        selectors()
    finally:
        oracle.close()
    return {"release": release, "counts": dict(sorted(counts.items())), "coverage": dict(covered), "disagreements": shown}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--release", default=K8S_VERSION)
    p.add_argument("--examples", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--show", type=int, default=3)
    p.add_argument("--dump", help="write the disagreements shown, whole, to this JSON file")
    args = p.parse_args()
    result = run(args.release, args.examples, args.seed, args.show)
    if args.dump:
        Path(args.dump).write_text(json.dumps(result["disagreements"], indent=1))
    for k, v in result["counts"].items():
        print(f"{k:40s} {v:7d}")
    for d in result["disagreements"]:
        print(json.dumps(d)[:4000])


if __name__ == "__main__":
    main()
