"""Splitting a pool into slices within the API's per-slice limits."""

from __future__ import annotations

import pytest

from dra_driver.core.schema import Attr, DeviceSpec
from dra_driver.core.slices import slice_objects, split_pool


def devs(n: int, *, counters: bool = False) -> list[DeviceSpec]:
    extra = {"consumesCounters": [{"counterSet": "cs-0", "counters": {"memory": {"value": "1Gi"}}}]} if counters else {}
    return [DeviceSpec(f"dev-{i}", {"type": Attr("string", "gpu")}, {}, dict(extra)) for i in range(n)]


@pytest.mark.parametrize(
    ("n", "counters", "sizes"),
    [
        (0, False, [0]),
        (8, False, [8]),
        (128, False, [128]),
        (129, False, [128, 1]),
        (300, False, [128, 128, 44]),
        (64, True, [64]),
        (65, True, [64, 1]),
        (200, True, [64, 64, 64, 8]),
    ],
    ids=lambda v: str(v),
)
def test_devices_split_at_the_per_slice_limit(n: int, counters: bool, sizes: list[int]) -> None:
    """128 devices per slice, 64 once devices consume counters; order is kept."""
    contents = split_pool(devs(n, counters=counters))
    assert sizes == [len(c.devices) for c in contents]
    flat = [d["name"] for c in contents for d in c.devices]
    assert [f"dev-{i}" for i in range(n)] == flat


def test_counter_sets_get_their_own_slices_of_at_most_eight() -> None:
    """Counter sets never share a slice with devices (1.35+) and fill slices of 8."""
    sets = [{"name": f"gpu-{i}-counters", "counters": {"memory": {"value": "80Gi"}}} for i in range(10)]
    contents = split_pool(devs(3, counters=True), sets)
    assert [8, 2, 0] == [len(c.shared_counters) for c in contents]
    assert [0, 0, 3] == [len(c.devices) for c in contents]
    assert "devices" not in contents[0].spec_fields()


def test_a_device_over_the_32_attributes_and_capacities_limit_is_refused() -> None:
    """The API rejects a device with more than 32 attributes and capacities together; say which device, before writing."""
    attrs = {f"a{i}": Attr("int", i) for i in range(20)}
    ok = DeviceSpec("at-limit", attrs, {f"c{i}": "1" for i in range(12)})
    assert [["at-limit"]] == [[d["name"] for d in c.devices] for c in split_pool([ok])]
    over = DeviceSpec("over", attrs, {f"c{i}": "1" for i in range(13)})
    with pytest.raises(ValueError, match="'over' has 33 attributes and capacities"):
        split_pool([over])


def test_duplicate_device_names_are_refused() -> None:
    """A pool with one name twice is invalid; refuse before writing anything."""
    d = devs(2)
    with pytest.raises(ValueError, match="dev-1"):
        split_pool([d[0], d[1], d[1]])


def test_slice_objects_carry_exact_pool_bookkeeping() -> None:
    """Every slice names the node, the pool, the generation and the exact slice count."""
    objs = slice_objects(driver="gpu.dra-gpu.dev", node_name="n1", contents=split_pool(devs(300)), generation=7, node_uid="uid-1")
    assert 3 == len(objs)
    for i, o in enumerate(objs):
        assert {"name": "n1", "generation": 7, "resourceSliceCount": 3} == o["spec"]["pool"]
        assert "n1" == o["spec"]["nodeName"]
        assert f"n1-gpu.dra-gpu.dev-{i:03d}" == o["metadata"]["name"]
        assert [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-1", "controller": True}] == o["metadata"][
            "ownerReferences"
        ]
