"""Fuzzing the Node the device-plugin guard reads: a count, "present", or a shape error; never a crash, never fail open.

The kubelet plugin reads its own Node every ``--device-plugin-check-interval`` seconds and withholds
every device while ``status.allocatable`` (or ``capacity``) shows NVIDIA's device plugin serving
GPUs. The Node comes from the API server, so a proxy or a version skew can answer anything:
hostile resource maps, quantities of every type and size, huge and odd keys. Per input,
``device_plugin_resources`` returns counts or raises only ``NodeShapeError``; the guard's
``check_once`` raises nothing, and it never decides "clear" (devices published) from a Node in
which a device plugin's resource holds anything but a readable count at or below 0.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator, Mapping
from typing import Any

from dra_driver.appkit.device_plugin_guard import DevicePluginGuard
from dra_driver.core.device_plugin_conflict import (
    Guard,
    NodeShapeError,
    conflict_message,
    device_plugin_resources,
    is_device_plugin_resource,
)
from dra_driver.core.quantity import QuantityError, parse_quantity
from dra_driver.core.schema import DeviceSpec
from dra_driver.files.checkpoint_store import Notice
from tests.fuzz import harness


def node_seed(gpus: str) -> dict[str, Any]:
    resources = {
        "cpu": "64",
        "memory": "1056Gi",
        "ephemeral-storage": "3584Gi",
        "hugepages-1Gi": "0",
        "pods": "110",
        "nvidia.com/gpu": gpus,
        "nvidia.com/mig-1g.10gb": "0",
        "nvidia.com/mig-3g.40gb": gpus,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-a", "uid": "u-1", "labels": {"kubernetes.io/hostname": "node-a"}},
        "spec": {"podCIDR": "10.0.0.0/24"},
        "status": {"allocatable": dict(resources), "capacity": {**resources, "nvidia.com/gpu": "8"}},
    }


def _big_key(rng: random.Random) -> dict[str, Any]:
    """A resource map with a huge, odd or numerous device-plugin-looking keys."""
    key = rng.choice(["nvidia.com/mig-" + "x" * rng.choice([64, 5000, 100_000]), "nvidia.com/gpu\x00", "NVIDIA.COM/GPU"])
    if rng.random() < 0.2:
        return {f"nvidia.com/mig-{i}g": rng.choice(["1", "0", "x"]) for i in range(rng.choice([100, 5000]))}
    return {key: rng.choice(["1", "0", 1, None, "9" * 100])}


def inputs(n: int, name: str) -> Iterator[Any]:
    rng = random.Random(harness.seed_for(name))
    seeds = (node_seed("0"), node_seed("8"))
    for _ in range(n):
        yield harness.mutate(rng.choice(seeds), rng, extra=(_big_key, harness.random_quantity))


def test_the_nodes_gpu_resources_read_as_counts_or_a_shape_error_only() -> None:
    def read(node: Any) -> None:
        got = device_plugin_resources(node)
        assert all(is_device_plugin_resource(k) and isinstance(v, int) and v > 0 for k, v in got.items())
        assert len(conflict_message("node-a", got)) < 2000

    rep = harness.run("node device-plugin resources", inputs(harness.budget(1200), "node-guard-read"), read, (NodeShapeError,))
    harness.assert_clean(rep)
    assert rep.accepted > rep.inputs // 2


def _clear_is_proven(node: Any) -> bool:
    """Whether ``node`` shows, beyond doubt, every device plugin resource at or below 0 (the oracle)."""
    status = node.get("status") if isinstance(node, Mapping) else None
    if status is None:
        return isinstance(node, Mapping)
    if not isinstance(status, Mapping):
        return False
    maps = [status.get(k) or {} for k in ("allocatable", "capacity")]
    if not all(isinstance(m, Mapping) for m in maps):
        return False
    allocatable, capacity = maps
    for key in {*allocatable, *capacity}:
        if not (isinstance(key, str) and is_device_plugin_resource(key)):
            continue
        value = allocatable[key] if key in allocatable else capacity[key]
        if isinstance(value, bool) or not isinstance(value, str | int) or len(str(value)) > 64:
            return False
        try:
            if parse_quantity(str(value)).sign() > 0:
                return False
        except (QuantityError, ValueError):
            return False
    return True


class _Publisher:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def set_devices(self, devices: list[DeviceSpec], counter_sets: list[dict[str, object]] | None = None) -> None:
        self.calls.append(len(devices))


def test_the_guard_never_raises_and_never_publishes_on_a_node_it_cannot_read_as_clear() -> None:
    def check(node: Any) -> None:
        notices: list[Notice] = []
        publisher = _Publisher()
        guard = DevicePluginGuard(
            publisher, node_name="node-a", read_node=lambda: copy.deepcopy(node), notify=notices.append, interval_s=1.0
        )
        guard.set_devices([])
        decision = guard.check_once()
        if decision.state is Guard.CLEAR:
            assert _clear_is_proven(node), "published on a Node that does not prove the device plugin gone"
        else:
            assert publisher.calls in ([], [0])  # nothing, or an empty pool
        assert all(len(n.message) < 2000 for n in notices)

    rep = harness.run("node device-plugin guard", inputs(harness.budget(600), "node-guard-check"), check, ())
    harness.assert_clean(rep)
