"""dra-gpu's feature-gate table is each release's own, evaluated as that release's kube-scheduler evaluates it.

For the default release (``testkit/go/K8S_VERSION``) and every release of ``testkit/go/K8S_MATRIX``, celdiff
(built against the release) computes the gates with the scheduler's own options, registry and
``pkg/features`` (``testkit/go/cmd/celdiff/gates.go``), and the DRA plugin's mapping of them to the
allocator's features. ``dra_driver.schedsim.gates`` and ``rules`` must give the same: the effective
version (emulation = binary, minimum compatibility = binary - 1), every gate name, the versioned
specs and dependencies of the gates that change allocation, their default values, the allocator's
features and variant and the CEL environment's features; and for each ``--feature-gates`` value of
``FLAGS``, the same refusal or the same values. A new release whose table nobody updated fails here.
The hand-written cases of issue 28 (``testkit/oracle/gate_cases.py``) agree on every release too.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dra_driver.schedsim.gates import DEPENDENCIES, TABLES, TABLES_TEXT, GateError, gate_values, known_gates, parse_feature_gates
from dra_driver.schedsim.rules import allocator_features, allocator_variant, cel_features
from testkit.cluster import K8S_VERSION, matrix_versions, minor_of, wait_for_matrix_build
from testkit.gate_table import other_names, spec_of, table_lines, table_names
from testkit.oracle import gate_cases
from testkit.oracle.allocations import FRACTIONAL_GATE_SINCE
from testkit.oracle.oracle import Celdiff, exact_quantities, python_allocate, python_selector

VERSIONS = [K8S_VERSION, *matrix_versions()]

# --feature-gates values: the gates that change allocation on and off, the special ones, refusals
# (unknown, locked, not introduced, a dependency off, bad syntax) and a gate of no DRA concern.
FLAGS = (
    "DRAFractionalCapacityRange=true",
    "DRAFractionalCapacityRange=false",
    "DRAConsumableCapacity=false",
    "DRAConsumableCapacity=true",
    "DRAConsumableCapacity=false,DRAFractionalCapacityRange=true",
    "DRAListTypeAttributes=true",
    "DRADeviceCompatibilityGroups=true",
    "DRADerivedAttributes=true",
    "DRAPartitionableDevices=false",
    "DRADeviceTaints=false",
    "DRADeviceBindingConditions=true",
    "DRAResourceClaimDeviceStatus=false",
    "DRAAdminAccess=false",
    "DRAPrioritizedList=false",
    "DynamicResourceAllocation=false",
    "AllAlpha=true",
    "AllBeta=true",
    "AllBeta=true,DRAConsumableCapacity=false",
    "AllAlpha=false,AllBeta=false",
    "DRAExtendedResource=true",
    " DRAPrioritizedList = true ",
    "NoSuchGate=true",
    "DRAPrioritizedList",
    "DRAPrioritizedList=yes",
)


@pytest.fixture(scope="module", params=VERSIONS)
def oracle(request: pytest.FixtureRequest) -> Iterator[tuple[int, Celdiff]]:
    version: str = request.param
    if version != K8S_VERSION:
        wait_for_matrix_build()  # make test builds the matrix releases in the background
    o = Celdiff(version)
    try:
        yield minor_of(version), o
    finally:
        o.close()


def test_the_table_is_the_releases_own(oracle: tuple[int, Celdiff]) -> None:
    minor, o = oracle
    go = o.ask({"kind": "gates"})
    assert (go["emulationVersion"], go["minCompatibilityVersion"]) == (f"1.{minor}", f"1.{minor - 1}")
    assert go["binaryVersion"].startswith(f"1.{minor}.")
    assert known_gates(minor) == set(go["specs"])
    assert set(TABLES[minor]) == table_names(go)
    assert {name: [spec_of(s) for s in go["specs"][name]] for name in TABLES[minor]} == {
        name: list(specs) for name, specs in TABLES[minor].items()
    }
    assert DEPENDENCIES[minor] == {n: tuple(sorted(d)) for n, d in (go.get("dependencies") or {}).items() if n in TABLES[minor]}
    assert other_names(go) == known_gates(minor) - set(TABLES[minor]) - {"AllAlpha", "AllBeta"}
    assert table_lines(go) == TABLES_TEXT[minor].strip().splitlines()  # what testkit/gate_table.py prints for it


def test_the_defaults_and_what_the_scheduler_makes_of_them(oracle: tuple[int, Celdiff]) -> None:
    minor, o = oracle
    go = o.ask({"kind": "gates"})
    values = gate_values(minor)
    assert values == {n: go["enabled"][n] for n in TABLES[minor]}
    features = allocator_features(minor, values)
    assert sorted(features) == go["allocatorFeatures"]
    assert allocator_variant(minor, features) == go["allocator"]
    assert sorted(cel_features(minor, values)) == sorted(go.get("celFeatures") or [])


@pytest.mark.parametrize("flags", FLAGS)
def test_feature_gates_are_read_and_refused_as_the_scheduler_reads_and_refuses_them(
    oracle: tuple[int, Celdiff], flags: str
) -> None:
    minor, o = oracle
    go = o.ask({"kind": "gates", "featureGates": flags})
    try:
        values = gate_values(minor, parse_feature_gates(flags))
    except GateError as err:
        assert go.get("error") == "gates", (flags, str(err), go)
        return
    assert go.get("error") is None, (flags, go)
    assert values == {n: go["enabled"][n] for n in TABLES[minor]}, flags
    features = allocator_features(minor, values)
    assert (sorted(features), allocator_variant(minor, features)) == (go["allocatorFeatures"], go["allocator"]), flags
    assert sorted(cel_features(minor, values)) == sorted(go.get("celFeatures") or []), flags


def test_the_hand_written_cases_of_issue_28_agree_on_every_release(oracle: tuple[int, Celdiff]) -> None:
    """List-typed attributes, non-scalar constraint values, compatibility groups, derived attributes, fractional ranges."""
    minor, o = oracle
    for name, case in gate_cases.allocation_cases().items():
        if case.get("featureGates") and minor < FRACTIONAL_GATE_SINCE:
            continue  # the gate does not exist before 1.37
        go = exact_quantities(o.ask(case))
        assert python_allocate(case, minor=minor) == go, name
    for case in gate_cases.selector_cases():
        go = o.ask(case)
        assert python_selector(case["driver"], case["device"], case["expression"], minor=minor) == go, case["expression"]
