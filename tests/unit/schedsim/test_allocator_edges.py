"""The allocation simulator on hand-written cases the scheduler answers and `explain` once did not.

The cases are in ``tests/differential/edges.py``.

The same cases go through the Go allocator in ``tests/differential/test_allocation_edges.py``;
here the simulator alone must give the scheduler's devices (or its error), and give them at once.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from dra_driver.core.schema import ATTR_NUMA_NODE
from dra_driver.schedsim.allocator import explain
from dra_driver.schedsim.allocator.model import AllocatedState
from dra_driver.schedsim.allocator.pools import gather_pools
from dra_driver.schedsim.allocator.simulate import SEARCH_BUDGET_S, NodeAllocator
from testkit.oracle.oracle import python_allocate
from tests.differential import edges


@pytest.mark.parametrize("name", sorted(edges.CASES))
def test_the_simulator_allocates_what_the_scheduler_allocates(name: str) -> None:
    case, expected = edges.CASES[name]()
    start = time.monotonic()
    assert edges.shape(python_allocate(case)) == expected
    assert time.monotonic() - start < 5.0  # at once, not after a search over combinations


def test_explain_uses_the_nodes_labels_for_per_device_node_selection() -> None:
    case, _ = edges.per_device_node_selection(mixed=True)
    classes = {c["metadata"]["name"]: c for c in case["classes"]}
    ex = explain(case["claims"], case["slices"], classes, [], {edges.NODE: edges.LABELS, "node-b": {"x": "y"}})
    got = {r.request: (r.node, r.devices) for r in ex.requests}
    assert got == {
        "gpus": (edges.NODE, ["fabric/gpu-rack", "fabric/gpu-named", "fabric/gpu-all"]),
        "nic": (edges.NODE, [f"{edges.NODE}/nic-0"]),
    }
    verdicts = {(c.node, c.device): c.verdict for c in ex.requests[0].candidates}
    assert verdicts[(edges.NODE, "fabric/gpu-elsewhere")] == "unavailable"  # its selector wants rack r2
    assert verdicts[(edges.NODE, "fabric/gpu-rack")] == "match"
    assert verdicts[("node-b", "fabric/gpu-all")] == "match"  # node-b is known by its labels: it is simulated too


def test_a_node_known_only_by_labels_is_simulated_when_slices_select_by_label() -> None:
    slices = [edges.one_slice(edges.GPU, "p", [{"name": "g"}], nodeSelector=edges._selector("zone", "z1"))]
    classes = {edges.GPU: edges.device_class(edges.GPU)}
    claim = edges.claim(edges.exactly("gpu", edges.GPU))
    ex = explain([claim], slices, classes, [], {"n1": {"zone": "z0"}, "n2": {"zone": "z1"}})
    assert [(r.node, r.devices) for r in ex.requests] == [("n2", ["p/g"])]


def test_a_search_past_its_time_budget_says_it_could_not_decide() -> None:
    case, _ = edges.prioritized_list_over_the_claim_limit()
    case["claims"][0]["spec"]["devices"]["requests"][1]["exactly"]["count"] = 3  # fits: the first choice is searched
    case["claims"][0]["spec"]["devices"]["requests"].append(edges.exactly("none", "no.such.driver"))
    classes = {c["metadata"]["name"]: c for c in [*case["classes"], edges.device_class("no.such.driver")]}
    pools = gather_pools(case["slices"], edges.NODE, {})
    alloc = NodeAllocator(case["claims"], classes, pools, AllocatedState.from_claims([]), edges.NODE, deadline=time.monotonic())
    outcome = alloc.run()
    assert outcome.error is not None
    assert outcome.error.startswith(f"node {edges.NODE}: could not decide within {SEARCH_BUDGET_S:.0f}s")
    assert alloc.steps < 1000  # stopped at the first look at the clock


def _explain_case(case: dict[str, Any]) -> list[tuple[str, str | None, list[str], str | None]]:
    classes = {c["metadata"]["name"]: c for c in case["classes"]}
    ex = explain(case["claims"], case["slices"], classes, case["allocated"], {edges.NODE: edges.LABELS})
    return [(r.request, r.node, r.devices, r.reason) for r in ex.requests]


def test_explain_names_the_constraint_when_only_it_keeps_the_pod_pending() -> None:
    """NUMA-1 GPUs held, the NIC on NUMA node 1: free GPUs and NICs exist, so the reason names the matchAttribute."""
    case, _ = edges.gpu_beside_nic(ATTR_NUMA_NODE, {"attributes": {ATTR_NUMA_NODE: {"int": 1}}}, held=(4, 5, 6, 7), gpu=None)
    got = _explain_case(case)
    assert [(r, n, d) for r, n, d, _ in got] == [("gpu", None, []), ("nic", None, [])]
    for *_, reason in got:
        assert reason is not None
        assert reason.startswith("0/1 nodes can allocate all claims: ")
        assert reason.endswith(
            f"; it would fit on node {edges.NODE} without the claim's constraints: "
            f"no free devices satisfy matchAttribute {ATTR_NUMA_NODE} of requests gpu, nic"
        )


def test_explain_does_not_blame_the_constraint_when_the_claim_fails_without_it() -> None:
    """Every GPU held: the claim fails with or without its constraint, so the constraint is not named."""
    case, _ = edges.gpu_beside_nic(ATTR_NUMA_NODE, {"attributes": {ATTR_NUMA_NODE: {"int": 1}}}, held=tuple(range(8)), gpu=None)
    for request, _, _, reason in _explain_case(case):
        assert reason is not None and "constraints" not in reason, (request, reason)
    assert "request gpu needs 1 device; at most 0 usable on one node" in (_explain_case(case)[0][3] or "")
