"""dra_driver.core.device_plugin_conflict: reading a device plugin's GPUs off the Node, and the guard's decisions."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.core.device_plugin_conflict import (
    Change,
    Guard,
    GuardDecision,
    NodeShapeError,
    cleared_message,
    conflict_message,
    decide,
    device_plugin_resources,
    is_device_plugin_resource,
)


def _node(allocatable: dict[str, str] | None = None, capacity: dict[str, str] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if allocatable is not None:
        status["allocatable"] = allocatable
    if capacity is not None:
        status["capacity"] = capacity
    return {"metadata": {"name": "node-a"}, "status": status}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/mig-1g.10gb", True),
        ("nvidia.com/mig-3g.40gb.me", True),
        ("nvidia.com/gpu.shared", False),
        ("amd.com/gpu", False),
        ("cpu", False),
    ],
)
def test_which_resources_are_the_device_plugins(name: str, expected: bool) -> None:
    assert is_device_plugin_resource(name) is expected


def test_allocatable_above_zero_is_a_device_plugin_serving_gpus() -> None:
    node = _node({"cpu": "8", "nvidia.com/gpu": "8", "nvidia.com/mig-1g.10gb": "7"}, {"nvidia.com/gpu": "8"})
    assert device_plugin_resources(node) == {"nvidia.com/gpu": 8, "nvidia.com/mig-1g.10gb": 7}


def test_allocatable_zero_counts_even_while_capacity_stays() -> None:
    # The kubelet zeroes allocatable when the device plugin goes; capacity stays for its 5-minute grace.
    assert device_plugin_resources(_node({"nvidia.com/gpu": "0"}, {"nvidia.com/gpu": "8"})) == {}


def test_capacity_stands_in_only_where_allocatable_does_not_list_the_resource() -> None:
    assert device_plugin_resources(_node({"cpu": "8"}, {"nvidia.com/gpu": "2"})) == {"nvidia.com/gpu": 2}


@pytest.mark.parametrize("node", [{}, {"status": None}, _node(), _node({"cpu": "4", "memory": "1Gi"})])
def test_no_status_or_no_gpu_resource_is_clear(node: dict[str, Any]) -> None:
    assert device_plugin_resources(node) == {}


@pytest.mark.parametrize(
    ("value", "count"),
    [("garbage", 1), ("-1", 0), ("500m", 1), ("1k", 1000), ("1e40", 1), ("1e10000000", 1), (None, 1), (True, 1), ([], 1), (8, 8)],
)
def test_odd_quantities_never_hide_a_positive_count(value: object, count: int) -> None:
    # Fail closed: a value no quantity parser reads cannot show the device plugin gone, so it counts as one.
    got = device_plugin_resources({"status": {"allocatable": {"nvidia.com/gpu": value}}})
    assert got == ({"nvidia.com/gpu": count} if count else {})


@pytest.mark.parametrize(
    ("node", "what"),
    [
        ([], "the Node is a list"),
        ({"status": "x"}, "status is a str"),
        ({"status": {"allocatable": ["nvidia.com/gpu"]}}, "status.allocatable is a list"),
        ({"status": {"allocatable": {}, "capacity": 8}}, "status.capacity is a int"),
    ],
)
def test_a_node_of_the_wrong_shape_is_a_clear_error_not_a_count(node: Any, what: str) -> None:
    with pytest.raises(NodeShapeError, match=what):
        device_plugin_resources(node)


def test_odd_keys_are_skipped_and_huge_ones_are_cut_in_messages() -> None:
    long = "nvidia.com/mig-" + "x" * 5000
    got = device_plugin_resources({"status": {"allocatable": {long: "1", 5: "1", "nvidia.com/gpu": "0"}}})
    assert got == {long: 1}
    many = {f"nvidia.com/mig-{i}g": 1 for i in range(20)}
    for text in (conflict_message("node-a", got), conflict_message("node-a", many)):
        assert len(text) < 1024  # a Node Event's message is cut there: the fix must stay in it
    assert "(and 12 more)" in conflict_message("node-a", many)


def test_before_the_first_read_nothing_is_published_and_a_failed_read_changes_nothing() -> None:
    start = GuardDecision()
    assert start.state is Guard.UNKNOWN and not start.publish
    assert decide(start, None) == (start, None)


def test_first_read_clear_releases_publishing() -> None:
    decision, change = decide(GuardDecision(), {})
    assert decision.publish and change is Change.RELEASED
    assert decide(decision, {}) == (decision, None)


def test_first_read_with_a_device_plugin_is_a_conflict_without_publishing_first() -> None:
    decision, change = decide(GuardDecision(), {"nvidia.com/gpu": 8})
    assert not decision.publish and change is Change.CONFLICT
    assert decision.resources == {"nvidia.com/gpu": 8}


def test_conflict_then_cleared_then_conflict_again() -> None:
    clear, _ = decide(GuardDecision(), {})
    conflict, change = decide(clear, {"nvidia.com/gpu": 4})
    assert change is Change.CONFLICT and not conflict.publish
    same, change = decide(conflict, {"nvidia.com/gpu": 8})  # a count change is no new conflict
    assert change is None and same.resources == {"nvidia.com/gpu": 8}
    kept, change = decide(same, None)  # the API is down: still withheld
    assert kept is same and change is None
    cleared, change = decide(kept, {})
    assert cleared.publish and change is Change.CLEARED


def test_messages_name_the_resources_and_the_fix() -> None:
    text = conflict_message("node-a", {"nvidia.com/gpu": 8, "nvidia.com/mig-1g.10gb": 2})
    assert "nvidia.com/gpu=8, nvidia.com/mig-1g.10gb=2" in text and "node-a" in text
    assert "nodeSelector" in text and "extendedResources" in text
    assert "nvidia.com/gpu=8" in cleared_message("node-a", {"nvidia.com/gpu": 8})
