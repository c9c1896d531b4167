"""dra-gpu's allocation simulator against the scheduler's structured allocator (Go, incubating).

Each case runs through ``k8s.io/dynamic-resource-allocation/structured`` in celdiff and through
:class:`~dra_driver.schedsim.allocator.NodeAllocator`; the outcome must be identical: the same devices
for the same requests in the same order (shared or not, admin access, consumed capacity), or both
unsatisfiable, or the same error (its class, abort or node-local, and its message).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings

from testkit.oracle.allocations import allocation_cases
from testkit.oracle.corpus import chart_classes, demo_workloads, inventory
from testkit.oracle.oracle import Celdiff, allocate_case, exact_quantities, python_allocate
from tests.differential import coverage

ALLOCATION_EXAMPLES = 1000
GENERATED = settings(
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# (what node-a publishes, what node-b publishes)
SCENARIOS: tuple[tuple[tuple[str, ...], tuple[str, ...] | None], ...] = (
    (("h100x8",), ("l4x4",)),
    (("h100x8", "--mig", "dynamic"), None),
    (("h100x8", "--mig", "static", "--fake-mig-layout", "3g.40gb,2g.20gb,1g.10gb"), None),
    (("h100x8", "--sharing", "consumable"), ("l4x4", "--sharing", "consumable")),
)


def assert_same(celdiff: Celdiff, case: dict[str, Any]) -> dict[str, Any]:
    go = exact_quantities(celdiff.ask(case))
    py = python_allocate(case)
    assert py == go, json.dumps(case)
    return go


def _allocated_first(slices: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """A claim holding the first ``n`` devices of the first device slice (dedicated)."""
    s = next(s for s in slices if s["spec"].get("devices"))
    results = [
        {"request": "gpu", "driver": s["spec"]["driver"], "pool": s["spec"]["pool"]["name"], "device": d["name"]}
        for d in s["spec"]["devices"][:n]
    ]
    return [
        {
            "metadata": {"name": "earlier", "namespace": "dra-demo", "uid": "uid-earlier"},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "x", "allocationMode": "ExactCount", "count": n}}]
                }
            },
            "status": {"allocation": {"devices": {"results": results}}},
        }
    ]


def test_every_demo_pod_gets_the_same_allocation_on_every_demo_node(celdiff: Celdiff) -> None:
    workloads = demo_workloads()
    assert len(workloads) >= 10
    compared = 0
    for node_a, node_b in SCENARIOS:
        slices = inventory(node_a[0], *node_a[1:], node="node-a")
        if node_b is not None:
            slices = slices + inventory(node_b[0], *node_b[1:], node="node-b")
        for allocated in ([], _allocated_first(slices, 3)):
            for _label, claims in workloads:
                for node in ("node-a", "node-b") if node_b is not None else ("node-a",):
                    case = allocate_case(node=node, slices=slices, classes=chart_classes(), claims=claims, allocated=allocated)
                    assert_same(celdiff, case)
                    compared += 1
    assert compared >= 100


def test_generated_allocations_agree_with_the_scheduler(celdiff: Celdiff) -> None:
    """Every generated case agrees, and every feature of ``coverage.FEATURES`` (and every outcome) had cases."""
    seen: list[int] = []
    coverage.COUNTS.clear()
    coverage.OUTCOMES.clear()

    @settings(GENERATED, max_examples=ALLOCATION_EXAMPLES)
    @given(allocation_cases())
    def check(case: dict[str, Any]) -> None:
        seen.append(1)
        go = assert_same(celdiff, case)
        coverage.COUNTS.update(coverage.features(case))
        coverage.OUTCOMES[coverage.outcome(go)] += 1

    check()
    assert len(seen) >= ALLOCATION_EXAMPLES
    rare = {f: coverage.COUNTS[f] for f in coverage.FEATURES if coverage.COUNTS[f] < coverage.MIN_CASES}
    rare |= {o: coverage.OUTCOMES[o] for o in coverage.OUTCOME_NAMES if coverage.OUTCOMES[o] < coverage.MIN_CASES}
    assert not rare, f"features or outcomes in fewer than {coverage.MIN_CASES} of {len(seen)} cases: {rare}"
