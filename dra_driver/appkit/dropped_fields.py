"""Fields the API server dropped from a ResourceSlice write: the likely cause, and which ones refuse the pool.

Called by ``dra_driver.appkit.publisher`` after every write (``dra_driver.core.pool_sync.dropped_fields``
finds the paths): every dropped path is logged with ``DROPPED_FIELDS_CAUSE``; a path ending in a field
of ``REFUSED_WHEN_DROPPED`` makes the node's pool unsafe, and ``refusal_for_dropped`` says why it is
not published.
"""

from __future__ import annotations

DROPPED_FIELDS_CAUSE = (
    "the API server dropped fields it does not serve: the feature gate behind them "
    "(e.g. DRAPartitionableDevices for consumesCounters/sharedCounters, DRADeviceTaints for taints) "
    "is probably off, or the server is too old"
)

REFUSED_WHEN_DROPPED: dict[str, tuple[str, str]] = {
    # field the server drops -> (the feature gate behind it, what the node's devices would become)
    "sharedCounters": ("DRAPartitionableDevices", "overlapping MIG placements the scheduler could hand out together"),
    "consumesCounters": ("DRAPartitionableDevices", "overlapping MIG placements the scheduler could hand out together"),
    "allowMultipleAllocations": ("DRAConsumableCapacity", "whole GPUs instead of the shares asked for"),
}
"""Dropped fields that make the pool unsafe or silently different: the pool is refused, not published."""


def _field(path: str) -> str:
    """The field a dropped path ends in: "consumesCounters" for "spec.devices[3].consumesCounters"."""
    return path.rsplit(".", 1)[-1].split("[", 1)[0]


def _some(paths: list[str], shown: int = 3) -> str:
    """The first ``shown`` paths, and how many more."""
    more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
    return ", ".join(paths[:shown]) + more


def refusal_for_dropped(name: str, dropped: list[str]) -> str | None:
    """Why the pool is refused when slice ``name`` lost the ``dropped`` paths; None when none of them matters so."""
    refusing = sorted(f for f in dropped if _field(f) in REFUSED_WHEN_DROPPED)
    if not refusing:
        return None
    gate, effect = REFUSED_WHEN_DROPPED[_field(refusing[0])]
    return (
        f"not publishing this node's devices: the API server dropped {_some(refusing)} from slice "
        f"{name}, so they would be {effect}: the feature gate {gate} is off (beta and on by default "
        "from Kubernetes 1.36; before that turn it on in kube-apiserver and kube-scheduler, or change "
        "the chart's mig.strategy / sharing.consumable)"
    )
