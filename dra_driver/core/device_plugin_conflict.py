"""Whether NVIDIA's device plugin serves GPUs on this node, and what the kubelet plugin does about it. Pure.

A device plugin registered with the kubelet puts its resource in the Node's ``status.allocatable``
(``nvidia.com/gpu``, or ``nvidia.com/mig-<profile>`` under its mixed MIG strategy): the kubelet
then hands those GPUs to pods asking for the resource, while the scheduler would allocate the same
GPUs through this driver's ResourceSlices. So while any of them is above 0 the node's devices are
withheld (an empty pool is published), and published again once every one is 0 or absent. The
kubelet zeroes allocatable as soon as the device plugin's socket goes (its devices are marked
unhealthy; capacity stays for its 5 minute grace, then drops to 0), so allocatable is what counts;
capacity stands in only for a resource allocatable does not list.

Fail closed: an unreadable Node (``observed`` None) keeps the last decision, and before the first
read nothing is published. Called by ``dra_driver.appkit.device_plugin_guard``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from dra_driver.core.quantity import QuantityError, parse_quantity

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
_MAX_QUANTITY = 64
"""A longer quantity string is no count the kubelet writes (and is not parsed): it counts as present."""
_DESCRIBED = 8
"""Resources named in a message at most (the rest are counted)."""
_NAME_CHARS = 80
"""A resource name longer than this is cut in messages (a valid one has at most 63 after its prefix)."""


def is_device_plugin_resource(name: str) -> bool:
    """Whether ``name`` is a resource NVIDIA's device plugin registers for GPUs or MIG devices."""
    return name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX)


def _count(value: object) -> int:
    """A device count from a quantity; 0 for a number at or below 0, and 1 for anything unreadable (fail closed).

    The kubelet writes decimal counts; a value no quantity parser reads (a wrong type, garbage, an
    absurdly long string) cannot show that the device plugin is gone, so it counts as one device.
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        return 1
    text = str(value) if isinstance(value, str) or abs(value) < 10**_MAX_QUANTITY else ""
    if not text or len(text) > _MAX_QUANTITY:
        return 1
    try:
        q = parse_quantity(text)
    except (QuantityError, ValueError):
        return 1
    if q.sign() <= 0:
        return 0
    return q.as_int64() or 1  # a positive count the kubelet never writes (fractions, huge): still a conflict


class NodeShapeError(ValueError):
    """A Node whose status or resource maps are no objects: whether a device plugin serves GPUs is unknown."""


def _resource_map(status: Mapping[str, Any], field_name: str) -> Mapping[str, Any]:
    value = status.get(field_name)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise NodeShapeError(f"the Node's status.{field_name} is a {type(value).__name__}, not a map of resources")
    return value


def device_plugin_resources(node: Mapping[str, Any]) -> dict[str, int]:
    """The device plugin's GPU resources above 0 on ``node`` (a Node as JSON): name -> allocatable count.

    A value that is no readable quantity counts as 1 (fail closed); NodeShapeError when the Node,
    its status or a resource map is no object (the guard then keeps its last decision).
    """
    if not isinstance(node, Mapping):
        raise NodeShapeError(f"the Node is a {type(node).__name__}, not an object")
    status = node.get("status")
    if status is None:
        return {}
    if not isinstance(status, Mapping):
        raise NodeShapeError(f"the Node's status is a {type(status).__name__}, not an object")
    allocatable, capacity = _resource_map(status, "allocatable"), _resource_map(status, "capacity")
    out: dict[str, int] = {}
    for name in sorted(n for n in {*allocatable, *capacity} if isinstance(n, str) and is_device_plugin_resource(n)):
        count = _count(allocatable[name] if name in allocatable else capacity[name])
        if count > 0:
            out[name] = count
    return out


class Guard(Enum):
    """Where the guard stands."""

    UNKNOWN = "unknown"
    """Not read yet: nothing is published."""
    CLEAR = "clear"
    """No device plugin serves GPUs: the devices are published."""
    CONFLICT = "conflict"
    """A device plugin serves GPUs: the devices are withheld."""


class Change(Enum):
    """What a decision changed, for the log line and the Node Event."""

    CONFLICT = "conflict"
    """A device plugin appeared (or was there at the first read): devices withdrawn."""
    CLEARED = "cleared"
    """The device plugin went: devices published again."""
    RELEASED = "released"
    """The first read found no device plugin: publishing starts."""


@dataclass(frozen=True, slots=True)
class GuardDecision:
    """The guard's state: whether the devices are published, and what the device plugin serves."""

    state: Guard = Guard.UNKNOWN
    resources: Mapping[str, int] = field(default_factory=dict)

    @property
    def publish(self) -> bool:
        """Whether the node's devices may be published."""
        return self.state is Guard.CLEAR


def decide(previous: GuardDecision, observed: Mapping[str, int] | None) -> tuple[GuardDecision, Change | None]:
    """The next decision from the device plugin's resources just read (None: the Node was unreadable)."""
    if observed is None:
        return previous, None  # fail closed: keep what was decided, withheld when nothing was
    if observed:
        decision = GuardDecision(Guard.CONFLICT, dict(observed))
        return decision, (None if previous.state is Guard.CONFLICT else Change.CONFLICT)
    decision = GuardDecision(Guard.CLEAR)
    if previous.state is Guard.CONFLICT:
        return decision, Change.CLEARED
    return decision, (Change.RELEASED if previous.state is Guard.UNKNOWN else None)


def describe(resources: Mapping[str, int]) -> str:
    """``nvidia.com/gpu=8, nvidia.com/mig-1g.10gb=2``."""
    items = sorted(resources.items())
    text = ", ".join(f"{_short(name)}={count}" for name, count in items[:_DESCRIBED])
    return text + (f" (and {len(items) - _DESCRIBED} more)" if len(items) > _DESCRIBED else "")


def _short(name: str) -> str:
    return name if len(name) <= _NAME_CHARS else name[:_NAME_CHARS] + "..."


def conflict_message(node: str, resources: Mapping[str, int]) -> str:
    """The Node Event's message for a conflict: what is wrong, what the plugin does, the fix."""
    return (
        f"A device plugin serves {describe(resources)} on node {node} (status.allocatable): the kubelet would hand "
        "these GPUs to pods while the scheduler allocates the same GPUs through DRA, so this node's GPUs are not "
        "published until the device plugin is gone. Fix: keep the device plugin off this node (a node label and a "
        "nodeSelector or NotIn affinity on its DaemonSet; with the GPU Operator, nvidia.com/gpu.deploy.device-plugin="
        "false), or remove it and serve pods written for nvidia.com/gpu through DRA with the chart's "
        "extendedResources mode."
    )


def cleared_message(node: str, previous: Mapping[str, int]) -> str:
    """The Node Event's message once the device plugin is gone."""
    return (
        f"No device plugin serves GPUs on node {node} any more (was {describe(previous)}; allocatable is now 0 or "
        "absent): this node's GPUs are published again."
    )
