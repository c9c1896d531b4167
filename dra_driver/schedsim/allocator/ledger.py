"""The counter ledger: what one attempt takes of pools' shared counters and of devices' consumable capacity.

Mixed into the allocator (``simulate.py``: :class:`~dra_driver.schedsim.allocator.simulate.NodeAllocator`,
whose ``allocateDevice`` reserves and gives back through it) and used by candidate explanations
(``candidates.py``: :meth:`CounterLedger.counters_fit`, :meth:`CounterLedger.capacity_ok`). Mirrors
Go's ``checkAvailableCounters``, ``deallocateCountersForDevice`` and ``deviceCapacityInUse`` (and
``ConsumedCapacityCollection``) in k8s.io/dynamic-resource-allocation structured/allocator: a
pool's available counters are its counter sets less what the cluster's allocated devices consume
(computed once per pool ID), and every counter must cover what the attempt consumes. While an
attempt reserves nothing of a pool, a device's fit is looked up in the explanation's
:class:`~dra_driver.schedsim.allocator.shapes.ShapeCache` (shared by every node whose pool has the
same counters left); so is a device's capacity check when nothing of it is in use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dra_driver.core.quantity import Quantity
from dra_driver.schedsim.allocator.checks import CapacityError, capacity_fits, consumed_capacity
from dra_driver.schedsim.allocator.model import AllocatedState, AllocationAborted, DeviceID, Request, claim_key, qty
from dra_driver.schedsim.allocator.pools import Pool, slice_spec
from dra_driver.schedsim.allocator.shapes import ShapeCache
from dra_driver.schedsim.rules import Rules

__all__ = ["CounterLedger"]

_Counters = dict[str, dict[str, Quantity]]  # counter set -> counter -> quantity


class CounterLedger:
    """Counters and consumable capacity consumed by one attempt, with the undo of each reservation."""

    claims: Sequence[Mapping[str, Any]]
    rules: Rules
    state: AllocatedState
    shapes: ShapeCache

    def _init_ledger(self) -> None:
        self.allocating_capacity: dict[DeviceID, dict[str, Quantity]] = {}  # aggregated, as cel-go keeps it
        # Per pool ID (driver, pool); before 1.37 per pool name (the driver left empty).
        self.consumed_counters: dict[tuple[str, str], _Counters] = {}
        self.available_counters: dict[tuple[str, str], _Counters] = {}
        self._negative_counters: dict[tuple[str, str], list[tuple[str, str]]] = {}  # overdrawn (cs, counter) per pool
        # Per pool ID: shapes.counters' answers for its available counters, and how many devices this attempt reserves.
        self._fits: dict[tuple[str, str], dict[int, tuple[Any, bool]]] = {}
        self._reserved: dict[tuple[str, str], int] = {}

    def dev_id(self, pool: Pool, d: Mapping[str, Any]) -> DeviceID:
        """(driver, pool, device)."""
        return (pool.driver, pool.name, str(d.get("name", "")))

    def _counter_key(self, pool: Pool) -> tuple[str, str]:
        return (pool.driver, pool.name) if self.rules.counters_per_pool_id else ("", pool.name)

    def counters_fit(self, pool: Pool, d: Mapping[str, Any], reserve: bool) -> bool:
        """``checkAvailableCounters``; reserves the device's counters if it fits and ``reserve``.

        While this attempt reserves nothing of the pool, the answer depends only on the pool's
        available counters and the device's consumption: it is looked up per (available counters,
        consumption) in the shape cache, shared by every node whose pool has the same counters left.
        """
        pkey = self._counter_key(pool)
        avail = self.available_counters.get(pkey)
        if avail is None:
            avail = self._available(pool, pkey)
        if not self._reserved.get(pkey):
            ok = self.fits_alone(pkey, d)
            if ok and reserve:
                self.reserve_counters(pkey, d)
            return ok
        consumed = self.consumed_counters.setdefault(pkey, {})
        self._counters_add(consumed, d, +1)
        ok = self._counters_cover(avail, consumed, self._negative_counters[pkey])
        if not ok or not reserve:
            self._counters_add(consumed, d, -1)
        else:
            self._reserved[pkey] += 1
        return ok

    def fits_alone(self, pkey: tuple[str, str], d: Mapping[str, Any]) -> bool:
        """Whether the device's consumption alone fits the pool's available counters (cached per content, see ``shapes.py``)."""
        ccs = d.get("consumesCounters")
        fits = self._fits[pkey]
        hit = fits.get(id(ccs))
        if hit is None:
            consumed: _Counters = {}
            self._counters_add(consumed, d, +1)
            hit = fits[id(ccs)] = (
                ccs,
                self._counters_cover(self.available_counters[pkey], consumed, self._negative_counters[pkey]),
            )
        return hit[1]

    def reserve_counters(self, pkey: tuple[str, str], d: Mapping[str, Any]) -> None:
        """Add the device's consumption to what this attempt consumes of the pool."""
        self._counters_add(self.consumed_counters.setdefault(pkey, {}), d, +1)
        self._reserved[pkey] = self._reserved.get(pkey, 0) + 1

    def release_counters(self, pkey: tuple[str, str], d: Mapping[str, Any]) -> None:
        """Take a reserved device's consumption back (the undo of :meth:`reserve_counters`)."""
        self._counters_add(self.consumed_counters[pkey], d, -1)
        self._reserved[pkey] -= 1

    def _available(self, pool: Pool, pkey: tuple[str, str]) -> _Counters:
        """The pool's counters less what the cluster's allocated devices consume (computed once per pool ID)."""
        avail = {cs: dict(cnt) for cs, cnt in pool.counter_sets.items()}
        st = self.state
        if st.devices or st.shared_ids or st.shared:  # nothing allocated: nothing to subtract
            for s in [*pool.slices, *pool.other_slices]:
                for od in slice_spec(s).get("devices") or []:
                    if not st.in_use(self.dev_id(pool, od)):
                        continue
                    for cc in od.get("consumesCounters") or []:
                        cset = avail.get(str(cc.get("counterSet")), {})
                        for n, c in (cc.get("counters") or {}).items():
                            if n in cset:
                                cset[n] = cset[n].sub(qty(c.get("value")))
        self.available_counters[pkey] = avail
        self._negative_counters[pkey] = [(cs, n) for cs, cnt in avail.items() for n, v in cnt.items() if v.unscaled < 0]
        content = tuple((cs, tuple((n, v.unscaled, v.exp) for n, v in cnt.items())) for cs, cnt in avail.items())
        fits = self.shapes.counters.get(content)  # (the content hashed once per pool, not once per device)
        if fits is None:
            fits = self.shapes.counters[content] = {}
        self._fits[pkey] = fits
        return avail

    @staticmethod
    def _counters_cover(avail: _Counters, consumed: _Counters, negative: list[tuple[str, str]]) -> bool:
        """Every available counter of the pool covers what this attempt consumes of it (Go compares them all).

        A counter nothing consumes (or that the attempt consumes nothing of, any more) needs only
        to be non-negative, so besides the consumed ones only the pool's ``negative`` counters
        (already overdrawn by the cluster) are compared.
        """
        for cs, cnt in consumed.items():
            have = avail.get(cs)
            if have is None:
                continue
            for n, v in cnt.items():
                if v.unscaled <= 0:  # a >= v unless a < 0: the negative counters are compared below
                    continue
                a = have.get(n)
                if a is not None and (a.unscaled < v.unscaled if a.exp == v.exp else a.cmp(v) < 0):
                    return False
        for cs, n in negative:
            used = consumed.get(cs, {}).get(n)
            if used is None or avail[cs][n].cmp(used) < 0:
                return False
        return True

    @staticmethod
    def _counters_add(consumed: _Counters, d: Mapping[str, Any], sign: int) -> None:
        for cc in d.get("consumesCounters") or []:
            cset = consumed.setdefault(str(cc.get("counterSet")), {})
            for n, c in (cc.get("counters") or {}).items():
                v = qty(c.get("value"))
                cur = cset.get(n)
                cset[n] = (v if sign > 0 else v.neg()) if cur is None else (cur.add(v) if sign > 0 else cur.sub(v))

    def capacity_ok(self, req: Request, pool: Pool, d: Mapping[str, Any]) -> tuple[bool, str]:
        """:func:`capacity_fits` against what the cluster and this attempt already consume of the device.

        Raises :class:`~dra_driver.schedsim.allocator.checks.CapacityError` (1.37+) for a request it cannot compute.
        """
        if not self.rules.consumable_capacity:
            return True, ""
        did = self.dev_id(pool, d)
        fractional, milli = self.rules.strict_capacity, self.rules.fractional_capacity
        used, allocating = self.state.shared.get(did), self.allocating_capacity.get(did)
        if used is not None or allocating is not None or req.capacity:
            return capacity_fits(req, d, used, allocating, fractional=fractional, milli=milli)
        # Nothing of the device in use and nothing asked for: the answer is the device's capacity's, once per shape.
        caps = d.get("capacity")
        key = (id(caps), fractional, milli)
        hit = self.shapes.capacity.get(key)
        if hit is None:
            try:
                fits = capacity_fits(req, d, None, None, fractional=fractional, milli=milli)
                hit = self.shapes.capacity[key] = (caps, fits, None)
            except CapacityError as err:
                hit = self.shapes.capacity[key] = (caps, (False, ""), str(err))
        if hit[2] is not None:
            raise CapacityError(hit[2])
        return hit[1]

    def _capacity_or_abort(self, ci: int, req: Request, pool: Pool, d: Mapping[str, Any], what: str) -> bool:
        """:meth:`capacity_ok`; a request it cannot compute aborts the attempt (``what``: checking / rechecking)."""
        try:
            return self.capacity_ok(req, pool, d)[0]
        except CapacityError as err:
            did = self.dev_id(pool, d)
            raise AllocationAborted(
                f"claim {claim_key(self.claims[ci])}, request {req.own_name}: {what} capacity for device "
                f"{did[0]}/{did[1]}/{did[2]}: {err}"
            ) from None

    def _capacity_in_use(self, did: DeviceID) -> bool:
        """``deviceCapacityInUse``: shared with consumed capacity (1.37+: or shared at all) in the cluster, or in this attempt."""
        if did in self.state.shared or did in self.allocating_capacity:
            return True
        return self.rules.strict_capacity and did in self.state.shared_ids

    def share_capacity(self, req: Request, did: DeviceID, d: Mapping[str, Any]) -> tuple[dict[str, Quantity], Callable[[], None]]:
        """Add what ``req`` consumes of a shared device to the attempt's aggregate; (what it consumes, its undo)."""
        fractional, milli = self.rules.strict_capacity, self.rules.fractional_capacity
        consumed = {
            n: consumed_capacity(req.capacity.get(n), cap, fractional=fractional, milli=milli)
            for n, cap in (d.get("capacity") or {}).items()
        }
        existed = did in self.allocating_capacity
        agg = self.allocating_capacity.setdefault(did, {})
        for k, v in consumed.items():
            agg[k] = agg[k].add(v) if k in agg else v

        def drop() -> None:
            # ConsumedCapacityCollection.Remove: subtract, forget the device once all is zero;
            # an entry that predates this share stays (it marks the device as already shared).
            cur = self.allocating_capacity.get(did)
            if cur is not None:
                for k, v in consumed.items():
                    if k in cur:
                        cur[k] = cur[k].sub(v)
                if all(q.sign() == 0 for q in cur.values()):
                    del self.allocating_capacity[did]
            if existed and did not in self.allocating_capacity:
                self.allocating_capacity[did] = {}

        return consumed, drop
