"""A driver-side lever the bench measures: leave out the shared counters that can never bind.

Used by ``bench.cluster_scale.fleet`` for the ``*-lean`` layouts. Dynamic MIG gives every GPU a
counter set (one counter per memory slice, and the engines and multiprocessors) and every
placement consumes its memory slices and its engines. The scheduler walks every consumed counter
of every device of a node for each node it filters (``validateDeviceCounterConsumption``), so
counters cost it in proportion to their number. A counter the published placements can never
exhaust -- the most any set of placements with disjoint memory slices can take stays within
its total -- refuses no allocation the memory slices allow; dropping it (from the set and from
every consumption) leaves exactly the same allocations possible, at fewer counters per device.
With the recommended profiles (1g.10gb, 3g.40gb, 7g.80gb on an H100) every engine counter is
such a counter: each placement keeps one counter per memory slice it covers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from dra_driver.core.mig_publish import Publication
from dra_driver.core.schema import DeviceSpec

MEMORY = "memory-slice-"


def _value(v: Mapping[str, Any]) -> int:
    return int(str(v.get("value", "0")))


def _consumption(dev: DeviceSpec) -> dict[str, dict[str, int]]:
    """{counter set: {counter: amount}} of a device."""
    out: dict[str, dict[str, int]] = {}
    for c in dev.extra.get("consumesCounters") or []:
        out[str(c["counterSet"])] = {k: _value(v) for k, v in (c.get("counters") or {}).items()}
    return out


def most_taken(uses: Sequence[dict[str, int]], counter: str) -> int:
    """The most of ``counter`` any set of ``uses`` with pairwise disjoint memory slices takes together."""
    best: dict[frozenset[str], int] = {frozenset(): 0}
    for use in uses:
        mine = frozenset(k for k in use if k.startswith(MEMORY))
        for held, total in list(best.items()):
            if held & mine:
                continue
            key = held | mine
            best[key] = max(best.get(key, 0), total + use.get(counter, 0))
    return max(best.values())


def non_binding(counter_set: Mapping[str, Any], uses: Sequence[dict[str, int]]) -> set[str]:
    """The counters of ``counter_set`` (not memory slices) that ``uses`` can never exhaust."""
    totals = {k: _value(v) for k, v in (counter_set.get("counters") or {}).items()}
    return {k for k, total in totals.items() if not k.startswith(MEMORY) and most_taken(uses, k) <= total}


def lean(pub: Publication) -> Publication:
    """``pub`` without the counters that never bind (same allocations possible)."""
    uses: dict[str, list[dict[str, int]]] = {}
    for dev in pub.devices:
        for name, use in _consumption(dev).items():
            uses.setdefault(name, []).append(use)
    drop = {str(cs["name"]): non_binding(cs, uses.get(str(cs["name"]), [])) for cs in pub.counter_sets}
    sets = tuple(
        {**cs, "counters": {k: v for k, v in cs["counters"].items() if k not in drop[str(cs["name"])]}} for cs in pub.counter_sets
    )
    devices = []
    for dev in pub.devices:
        consumes = dev.extra.get("consumesCounters")
        if not consumes:
            devices.append(dev)
            continue
        kept = [
            {**c, "counters": {k: v for k, v in c["counters"].items() if k not in drop.get(str(c["counterSet"]), set())}}
            for c in consumes
        ]
        devices.append(replace(dev, extra={**dev.extra, "consumesCounters": kept}))
    return replace(pub, devices=tuple(devices), counter_sets=sets)
