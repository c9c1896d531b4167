"""The pools one node sees, gathered from ResourceSlices as the scheduler's ``GatherPools`` does.

Called by the allocator (``simulate.py``: :func:`gather_pools` per node, the device walk) and by
``explain.py``. A pool is the slices of one (driver, pool name) at their highest generation that
target the node (``nodeName``, ``allNodes``, a node selector matched against the node's name and
labels, or per-device node selection); one with fewer slices than it declares (as the first slice
gathered says) is incomplete, one with duplicate device names or counters that do not exist is
invalid. Pools go by (driver, pool name), those whose devices carry binding conditions last.
Node selectors are matched by ``node_selection.py``. Inputs are trusted to have the shapes
``validate.py`` checks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.core.quantity import Quantity
from dra_driver.schedsim.allocator.model import qty, slice_spec
from dra_driver.schedsim.allocator.node_selection import node_matches
from dra_driver.schedsim.rules import NEWEST, Rules

__all__ = ["Pool", "SliceIndex", "gather_pools", "slice_spec", "uses_compatibility_groups"]


@dataclass(slots=True)
class Pool:
    """One pool as seen from a node."""

    driver: str
    name: str
    slices: list[Mapping[str, Any]] = field(default_factory=list)  # device slices targeting the node, by name
    other_slices: list[Mapping[str, Any]] = field(default_factory=list)  # same pool, not targeting the node
    counter_sets: dict[str, dict[str, Quantity]] = field(default_factory=dict)
    incomplete: str = ""
    invalid: str = ""

    @property
    def has_binding_conditions(self) -> bool:
        """``poolHasBindingConditions``: a device of a slice targeting the node sets ``bindingConditions``.

        An invalid pool has no slices for the scheduler (it keeps only the reason), so it never has them.
        """
        if self.invalid:
            return False
        return any(d.get("bindingConditions") is not None for s in self.slices for d in slice_spec(s).get("devices") or [])

    @property
    def pool_id(self) -> str:
        """``driver/pool``."""
        return f"{self.driver}/{self.name}"


def _generation(s: Mapping[str, Any]) -> int:
    return int((slice_spec(s).get("pool") or {}).get("generation") or 0)


class SliceIndex:
    """The slices of one explanation filed once for :func:`gather_pools`.

    So each node's gathering reads its own slices and the shared ones instead of every slice of
    the cluster.

    Built for one release's ``rules`` (they decide which slices count as a node's own, and which
    the allocator ignores). ``by_node``: each node's own slices (``nodeName``), ``rest``: the
    others, neither with the ignored ones; ``by_pool``: every slice by (driver, pool name); ``all``
    (1.34 and 1.35, which gather in input order): every slice; each list in input order.
    ``groups``: whether any device may declare compatibility groups (False, as the reader found:
    no slice is looked at for them).
    """

    __slots__ = ("all", "always", "by_node", "by_pool", "counter_checks", "counter_values", "rest")

    def __init__(self, slices: Sequence[Mapping[str, Any]], rules: Rules = NEWEST, *, groups: bool = True) -> None:
        self.always = rules.counter_slices_always_gathered
        self.all = slices if not rules.node_slices_first else ()  # 1.34 and 1.35 gather every slice in input order
        self.by_node: dict[str, list[Mapping[str, Any]]] = {}
        self.rest: list[Mapping[str, Any]] = []
        self.by_pool: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for s in slices:
            sp = slice_spec(s)
            pid = (str(sp.get("driver") or ""), str((sp.get("pool") or {}).get("name") or ""))
            self.by_pool.setdefault(pid, []).append(s)
            if _ignored(sp, rules, groups=groups):  # never gathered (by_pool holds it: it may make its pool obsolete)
                continue
            node = sp.get("nodeName")
            if _own_node(sp, self.always) and isinstance(node, str):
                self.by_node.setdefault(node, []).append(s)
            else:  # (a nodeName that is no string matches no node, wherever it is looked at)
                self.rest.append(s)
        # (the names of a pool's counter sets and counters, id of a device's consumesCounters) ->
        # (the consumesCounters, kept alive; why it names a counter the pool lacks, or ""): every
        # node's pool with the same counters checks a consumption once (see _build_pool).
        # counter names of a pool -> id of a consumesCounters -> (it, kept alive; why it names a missing counter, or "")
        self.counter_checks: dict[Any, dict[int, tuple[Any, str]]] = {}
        # id of a counter set's counters -> (them, kept alive; their quantities): read once for every
        # node's pool that shares them (the reader gives equal ones one copy).
        self.counter_values: dict[int, tuple[Any, dict[str, Quantity]]] = {}


def _own_node(sp: Mapping[str, Any], always: bool) -> bool:
    """A slice gathered first, as the node's own.

    It names a node (and, where counter slices are gathered by every node, holds no counter sets).
    """
    return bool(sp.get("nodeName")) and not (always and sp.get("sharedCounters"))


def _relevant(sp: Mapping[str, Any], node: str | None, labels: Mapping[str, str], always: bool) -> bool:
    """The slice (its spec) is gathered for ``node``: by its node selection, or per device, or as a counter slice."""
    if always and sp.get("sharedCounters"):
        return True
    if sp.get("nodeName") or sp.get("allNodes") or sp.get("nodeSelector") is not None:
        return node_matches(node, labels, sp.get("nodeName"), bool(sp.get("allNodes")), sp.get("nodeSelector"))
    if sp.get("perDeviceNodeSelection"):
        return any(
            node_matches(node, labels, d.get("nodeName"), bool(d.get("allNodes")), d.get("nodeSelector"))
            for d in sp.get("devices") or []
        )
    return False


def uses_compatibility_groups(sp: Mapping[str, Any]) -> bool:
    """``sliceUsesCompatibilityGroups`` (its spec): a device's counter consumption names compatibility groups."""
    return any(cc.get("compatibilityGroups") for d in sp.get("devices") or [] for cc in d.get("consumesCounters") or [])


def gather_pools(
    slices: Sequence[Mapping[str, Any]],
    node: str | None,
    labels: Mapping[str, str],
    rules: Rules = NEWEST,
    index: SliceIndex | None = None,
) -> list[Pool]:
    """``GatherPools`` for one node, in allocation order, as ``rules``' release gathers them.

    Slices are gathered in the scheduler's order, the node's own (``nodeName``) first, then those
    for all or several nodes (and, before 1.37, those with counter sets, which every node gathers),
    each in input order: a pool whose slices disagree on ``resourceSliceCount`` is measured by the
    first one gathered. From 1.37 a counter-set slice is gathered by its node selection like any
    other; a pool that lacks it on this node is completed from all its slices.

    With 1.37's DRADeviceCompatibilityGroups off, a slice whose devices declare compatibility groups
    is ignored (before it is looked at, and when a pool is completed from all its slices), so its
    pool is incomplete.

    ``index``: the same ``slices`` filed by :class:`SliceIndex` for the same ``rules`` (the answer is
    the same; with many nodes it saves reading every slice for each node).
    """
    by_pool: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    if index is None:
        index = SliceIndex(slices, rules)
    if rules.pools_as_gathered:
        return _gather_as_is(index.all, node, labels, rules)
    always = index.always
    ignore = rules.ignores_compatibility_groups
    # Slices of other nodes never match this one: the node's own, then the rest.
    own = index.by_node.get(node, []) if node is not None else []
    node_first = rules.node_slices_first
    for s in [*own, *index.rest] if node_first else index.all:
        sp = slice_spec(s)
        if (not node_first and _ignored(sp, rules)) or not _relevant(sp, node, labels, always):
            continue  # (the index leaves out the slices the allocator ignores, but all holds them)
        pid = (str(sp.get("driver") or ""), str((sp.get("pool") or {}).get("name") or ""))
        gen = _generation(s)
        have = by_pool.get(pid)
        if have is None or gen > _generation(have[0]):
            by_pool[pid] = [s]
        elif gen == _generation(have[0]):
            have.append(s)
    pools: list[Pool] = []
    for (driver, name), mine in by_pool.items():
        gen = _generation(mine[0])
        want = int((slice_spec(mine[0]).get("pool") or {}).get("resourceSliceCount") or 0)
        all_slices = mine
        if len(mine) != want:
            same = index.by_pool.get((driver, name), [])
            if any(_generation(s) > gen for s in same):
                continue  # obsolete
            all_slices, why = _whole_pool(driver, name, [s for s in same if _generation(s) == gen], want, ignore)
            if why:
                pools.append(Pool(driver, name, incomplete=why))
                continue
        if not rules.partitionable_devices:  # no counter sets (their slices are ignored), nothing to check against them
            pools.append(_plain_pool(Pool(driver, name), mine, all_slices))
            continue
        by_name = sorted(mine, key=lambda s: str((s.get("metadata") or {}).get("name", "")))  # (1.36+)
        pools.append(_build_pool(driver, name, by_name, all_slices, rules, index.counter_checks, index.counter_values))
    if len(pools) > 1:  # (one pool, the usual node: nothing to order, no device to scan for binding conditions)
        _order(pools, rules)
    return pools


def _order(pools: list[Pool], rules: Rules) -> None:
    """By (driver, pool), complete pools with binding-condition devices after all others (1.36+).

    (The incubating allocator of 1.36+ tries devices that need no binding step first.) 1.35 keeps
    its pools in Go's map order: unspecified, but for a node's few pools (a map of up to 8 entries
    is one group of slots, filled in order, iterated from a random slot) most often the order they
    were first gathered in, which is the order they stay in here.
    """
    if rules.binding_pools_last:
        pools.sort(key=lambda p: (p.has_binding_conditions, p.driver, p.name))


def _ignored(sp: Mapping[str, Any], rules: Rules, *, groups: bool = True) -> bool:
    """A slice the release's allocator ignores: with compatibility groups (1.37, gate off), or of partitionable devices (off)."""
    if groups and rules.ignores_compatibility_groups and uses_compatibility_groups(sp):
        return True
    return not rules.partitionable_devices and (sp.get("perDeviceNodeSelection") is not None or bool(sp.get("sharedCounters")))


def _has_binding_conditions(sp: Mapping[str, Any]) -> bool:
    return any(d.get("bindingConditions") is not None for d in sp.get("devices") or [])


def _gather_as_is(slices: Sequence[Mapping[str, Any]], node: str | None, labels: Mapping[str, str], rules: Rules) -> list[Pool]:
    """``GatherPools`` of 1.34's experimental allocator (see :attr:`Rules.pools_as_gathered`)."""
    by_pool: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    later: list[Mapping[str, Any]] = []

    def add(s: Mapping[str, Any]) -> None:
        sp = slice_spec(s)
        pid = (str(sp.get("driver") or ""), str((sp.get("pool") or {}).get("name") or ""))
        have = by_pool.get(pid)
        if have is None or _generation(s) > _generation(have[0]):
            by_pool[pid] = [s]
        elif _generation(s) == _generation(have[0]):
            have.append(s)

    for s in slices:
        sp = slice_spec(s)
        if not rules.partitionable_devices and sp.get("perDeviceNodeSelection") is not None:
            continue
        if not _relevant(sp, node, labels, False):
            continue
        if _has_binding_conditions(sp):
            later.append(s)  # after every other slice: the simpler devices first
        else:
            add(s)
    for s in later:
        add(s)
    pools = []
    for (driver, name), mine in by_pool.items():
        pool = Pool(driver, name, slices=mine)
        want = int((slice_spec(mine[0]).get("pool") or {}).get("resourceSliceCount") or 0)
        if len(mine) != want:
            pool.incomplete = f"pool {driver}/{name} is incomplete: {len(mine)} of {want} slices"
        duplicate = _duplicate_name(mine)
        if duplicate is not None:
            pool.invalid = f"duplicate device name {duplicate}"
        pools.append(pool)
    # Pools with binding-condition devices last; within each group Go's map order, most often the
    # order of first gathering (see _order).
    pools.sort(key=lambda p: any(_has_binding_conditions(slice_spec(s)) for s in p.slices))
    return pools


def _whole_pool(
    driver: str, name: str, current: list[Mapping[str, Any]], want: int, ignore: bool
) -> tuple[list[Mapping[str, Any]], str]:
    """The pool's slices at its generation (``current``) that count, and why the pool is incomplete ("" if it is not).

    ``ignore``: slices whose devices declare compatibility groups do not count (1.37, gate off).
    """
    ignored = [s for s in current if ignore and uses_compatibility_groups(slice_spec(s))]
    if ignored:
        current = [s for s in current if not any(s is i for i in ignored)]
    if len(current) == want:
        return current, ""
    why = f"pool {driver}/{name} is incomplete: {len(current)} of {want} slices"
    if ignored:
        names = ", ".join(str((s.get("metadata") or {}).get("name", "")) for s in ignored)
        why += (
            f" (ignored: {names}, whose devices declare compatibility groups while the DRADeviceCompatibilityGroups gate is off)"
        )
    return current, why


def _other_slices(
    mine: Sequence[Mapping[str, Any]], all_slices: Sequence[Mapping[str, Any]], rules: Rules
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """The pool's slices that do not target the node: (device slices, counter-set slices; 1.37+, before: none)."""
    mine_names = {str((s.get("metadata") or {}).get("name", "")) for s in mine}
    others = [s for s in all_slices if str((s.get("metadata") or {}).get("name", "")) not in mine_names]
    if rules.counter_slices_always_gathered:
        return others, []
    return [s for s in others if not slice_spec(s).get("sharedCounters")], [
        s for s in others if slice_spec(s).get("sharedCounters")
    ]


def _build_pool(  # noqa: PLR0917 - the pool's identity, its slices, the rules, and the shared checks
    driver: str,
    name: str,
    mine: Sequence[Mapping[str, Any]],
    all_slices: Sequence[Mapping[str, Any]],
    rules: Rules,
    checks: dict[Any, dict[int, tuple[Any, str]]],
    values: dict[int, tuple[Any, dict[str, Quantity]]] | None = None,
) -> Pool:
    """The pool of the node's slices ``mine`` (by name; of ``all_slices``, the pool's at its generation), or why it is invalid.

    ``checks``: consumptions already checked against counters of the same names; ``values``: counters
    already read into quantities (see :class:`SliceIndex`; default: none).
    """
    if values is None:
        values = {}
    pool = Pool(driver, name)
    counter_slices = [s for s in mine if slice_spec(s).get("sharedCounters")]
    pool.slices = [s for s in mine if not slice_spec(s).get("sharedCounters")]
    others, more_counters = _other_slices(mine, all_slices, rules)
    counter_slices += more_counters
    duplicate = _duplicate_name(pool.slices)
    if duplicate is not None:
        pool.invalid = f"duplicate device name {duplicate}"
        return pool
    for s in counter_slices:
        for cs in slice_spec(s).get("sharedCounters") or []:
            if cs.get("name") in pool.counter_sets:
                pool.invalid = f"duplicate counter set name {cs.get('name')}"
                return pool
            counters = cs.get("counters")
            read = values.get(id(counters))
            if read is None or read[0] is not counters:
                read = values[id(counters)] = (counters, {k: qty(v.get("value")) for k, v in (counters or {}).items()})
            pool.counter_sets[str(cs.get("name"))] = dict(read[1])  # (a copy of its own, as before)
    pool.other_slices = others
    # Devices of one consumption (the reader gives equal ones one copy) are checked once against
    # counters of the same names, on whichever node; in device order, so the first bad one is named.
    names = tuple((cs, tuple(cnt)) for cs, cnt in pool.counter_sets.items())
    checked = checks.get(names)  # (the names hashed once per pool, not once per device)
    if checked is None:
        checked = checks[names] = {}
    last: Any = None  # the consumption just found fine (consecutive devices often share one)
    for s in [*(mine if rules.counter_slices_always_gathered else pool.slices), *pool.other_slices]:
        for d in slice_spec(s).get("devices") or []:
            ccs = d.get("consumesCounters")
            if not ccs or ccs is last:
                continue
            hit = checked.get(id(ccs))
            if hit is None:
                hit = checked[id(ccs)] = (ccs, _missing_counter(ccs, pool.counter_sets))
            if hit[1]:
                pool.invalid = hit[1]
                return pool
            last = ccs
    return pool


def _plain_pool(pool: Pool, mine: Sequence[Mapping[str, Any]], all_slices: Sequence[Mapping[str, Any]]) -> Pool:
    """The pool of ``mine`` without DRAPartitionableDevices: its device slices, invalid only for a duplicate name."""
    pool.slices = list(mine)
    pool.other_slices = [s for s in all_slices if not any(s is m for m in mine)]
    duplicate = _duplicate_name(pool.slices)
    if duplicate is not None:
        pool.invalid = f"duplicate device name {duplicate}"
    return pool


def _duplicate_name(slices: Sequence[Mapping[str, Any]]) -> Any:
    """The first device name seen twice in the slices' devices (in order), or None."""
    names = [d.get("name") for s in slices for d in slice_spec(s).get("devices") or []]
    if len(set(names)) == len(names) and None not in names:
        return None  # the usual case, decided at once
    seen: set[str] = set()
    for name in names:  # (a device without a name counts as one named "None" for the devices after it)
        if name in seen:
            return name
        seen.add(str(name))
    return None


def _missing_counter(ccs: Sequence[Mapping[str, Any]], counter_sets: Mapping[str, Mapping[str, Any]]) -> str:
    """Why a device's ``consumesCounters`` names a counter the pool lacks ("" if it names none)."""
    for cc in ccs:
        cset = counter_sets.get(str(cc.get("counterSet")))
        if cset is None:
            return f"counter set {cc.get('counterSet')} not found"
        for cname in cc.get("counters") or {}:
            if cname not in cset:
                return f"counter {cname} not found in counter set {cc.get('counterSet')}"
    return ""
