"""Hand-written allocation cases (``tests/differential/edges.py``) through the scheduler's Go allocator and the simulator.

Both must give the devices (or the error) the case names: the Go answer proves the expectation
is the scheduler's, the Python answer that `dra-gpu explain` agrees with it.
"""

from __future__ import annotations

import pytest

from testkit.oracle.oracle import Celdiff, exact_quantities, python_allocate
from tests.differential import edges


@pytest.mark.parametrize("name", sorted(edges.CASES))
def test_the_scheduler_and_the_simulator_agree_on_the_edge_case(celdiff: Celdiff, name: str) -> None:
    case, expected = edges.CASES[name]()
    go = exact_quantities(celdiff.ask(case))
    assert edges.shape(go) == expected
    assert python_allocate(case) == go
