"""A pure simulation of the scheduler's structured allocator (the incubating variant), release by release.

Called by ``dra-gpu explain``. For one pod's claims on one node it gathers pools (highest
generation, completeness, validity), walks pools by (driver, pool), slices by name and devices in
spec order, tries each request's alternatives in order (``firstAvailable``), checks class then
request selectors (cached per device shape: ``outcome_cache.py``), capacity and counters (kept by
``ledger.py``), taints and constraints, and backtracks until a complete allocation is found,
skipping at once any choice that would put a claim over 32 devices. A selector error aborts the
whole attempt with the scheduler's message, and so do a found allocation whose node selectors
cannot be merged (``createNodeSelector``) and a search that tries more than ``MAX_SEARCH_STEPS``
devices on one node (the filter timeout). Pools are gathered by ``pools.py``, taints and capacity
checked by ``checks.py``, constraints kept by ``constraints.py``; ``candidates.py`` gives every
device's first reason. Inputs are trusted to have the shapes ``validate.py`` checks. Where releases
differ, the :class:`~dra_driver.schedsim.rules.Rules` given say which answer to give (default: the newest release's).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from dra_driver.schedsim.allocator.checks import CapacityError, capacity_fits, untolerated_taint
from dra_driver.schedsim.allocator.constraints import Constraint
from dra_driver.schedsim.allocator.ledger import CounterLedger
from dra_driver.schedsim.allocator.model import (
    AllocatedState,
    AllocationAborted,
    DeviceID,
    NodeOutcome,
    Request,
    Result,
    claim_key,
    claim_requests,
)
from dra_driver.schedsim.allocator.node_selection import node_matches, unmergeable_terms
from dra_driver.schedsim.allocator.outcome_cache import SelectorOutcomeCache
from dra_driver.schedsim.allocator.pools import Pool, slice_spec
from dra_driver.schedsim.allocator.shapes import ShapeCache
from dra_driver.schedsim.rules import NEWEST, Rules

MAX_RESULTS = 32  # resourceapi.AllocationResultsMaxSize
# Devices the search may try on one node before it gives up, as the scheduler gives up after its
# filter timeout (10s by default): a search that backtracks over many devices is exponential.
MAX_SEARCH_STEPS = 100_000
# Seconds one explanation may search in all (every node together): a bound on the wall clock
# besides the bound on steps, so no input makes `dra-gpu explain` hang.
SEARCH_BUDGET_S = 30.0
_CLOCK_EVERY = 256  # steps between looks at the clock
_START = (0, 0, 0)  # Go's deviceLocation{}: (pool, slice, device) where a request's walk begins


class _LimitExceeded(Exception):
    """Taking the current request's devices would put the claim over ``MAX_RESULTS``.

    Raised through the search like Go's ``errAllocationResultMaxSizeExceeded``: no other device of
    an earlier request of the claim can help, so backtracking goes straight to the nearest
    ``firstAvailable`` choice (which may need fewer devices) or to the previous claim.
    """


class _Undo(list[Callable[[], None]]):
    """A device's rollback (Go's ``rollbackDevice``): its steps undone last first, once (it empties itself)."""

    def __call__(self) -> None:
        for step in reversed(self):
            step()
        self.clear()


class NodeAllocator(SelectorOutcomeCache, CounterLedger):
    """One attempt for one pod on one node: the scheduler's ``Allocate``.

    The search is here, method by method as Go's allocator (k8s.io/dynamic-resource-allocation
    structured/allocator: ``Allocate``, ``validateDeviceRequest``, ``allocateOne``, ``isSelectable``,
    ``allocateDevice``); whether selectors accept a device comes from :class:`SelectorOutcomeCache`
    and what the attempt consumes of counters and capacity is kept by :class:`CounterLedger`.
    """

    def __init__(
        self,
        claims: Sequence[Mapping[str, Any]],
        classes: Mapping[str, Mapping[str, Any]],
        pools: list[Pool],
        state: AllocatedState,
        node: str | None,
        *,
        labels: Mapping[str, str] | None = None,
        deadline: float | None = None,
        rules: Rules = NEWEST,
        shapes: ShapeCache | None = None,
    ) -> None:
        self.claims, self.classes, self.pools, self.state, self.node = claims, classes, pools, state, node
        # Views and selector outcomes by device shape, shared by the allocators of one explanation
        # (the same claims, classes and rules); see shapes.py.
        self.shapes = shapes if shapes is not None else ShapeCache()
        self.rules = rules  # the release whose scheduler this one follows
        self.labels: Mapping[str, str] = labels or {}  # the node's labels, for per-device node selectors
        self.deadline = deadline  # time.monotonic() past which the search gives up (None: no clock bound)
        self.requests = [claim_requests(c) for c in claims]
        self.match_cache: dict[tuple[int, str, DeviceID], bool] = {}
        self.allocating: dict[DeviceID, set[int]] = {}
        self._init_ledger()
        self.results: list[list[Result]] = [[] for _ in claims]
        self.constraints: list[list[Constraint]] = []
        self.all_devices: dict[tuple[int, int, int], list[tuple[Pool, Mapping[str, Any], Mapping[str, Any]]]] = {}
        self.steps = 0

    # -- setup: Allocate's checks of every claim before the search ------------------------------
    def run(self) -> NodeOutcome:
        """``Allocate``: allocate or say why not; never raises for selector errors (they become ``error``)."""
        try:
            self._validate()
            try:
                done = self._one(0, 0, 0, 0)
            except _LimitExceeded:  # only a first claim whose every alternative is over the limit gets here
                raise AllocationAborted("allocation max size exceeded") from None
        except AllocationAborted as err:
            return NodeOutcome(self.node, None, str(err), str(err))
        if not done:
            if any(p.invalid for p in self.pools) and not self.rules.pools_as_gathered:
                return NodeOutcome(self.node, None, None, "invalid resource pools were encountered")
            return NodeOutcome(self.node, None, None, "cannot allocate all claims")
        for claim, results in zip(self.claims, self.results, strict=True):  # createNodeSelector, after the search
            terms = unmergeable_terms([r.source for r in results if r.source is not None])
            if terms is not None:
                name = (claim.get("metadata") or {}).get("name", "")
                why = f"create NodeSelector for claim {name}: unsupported ResourceSlice.NodeSelector with {terms} terms"
                return NodeOutcome(self.node, None, why, why)
        return NodeOutcome(self.node, [r for rs in self.results for r in rs], None, None)

    def _validate(self) -> None:
        """``Allocate``'s loop over the claims: each request validated, the claim's device limit, its constraints."""
        for ci, claim in enumerate(self.claims):
            key = claim_key(claim)
            total = 0
            for ri, alts in enumerate(self.requests[ci]):
                least = self._least_devices(key, ci, ri, alts)
                if self.rules.claim_limit_per_request and least > MAX_RESULTS - total:
                    raise AllocationAborted(
                        f"claim {key}, request {alts[0].base}: adding {least} devices exceeds the claim limit of "
                        f"{MAX_RESULTS}, with {total} already accounted for"
                    )
                total += least
            if not self.rules.claim_limit_per_request and total > MAX_RESULTS:
                raise AllocationAborted(
                    f"claim {key}: number of requested devices {total} exceeds the claim limit of {MAX_RESULTS}"
                )
            self.constraints.append(self._claim_constraints(key, claim))

    def _least_devices(self, key: str, ci: int, ri: int, alts: list[Request]) -> int:
        """The fewest devices any of a request's alternatives takes (each one validated in order)."""
        if self.rules.refuses_capacity_requests and any(req.has_capacity for req in alts):
            raise AllocationAborted(
                f"claim {key}, request {alts[0].base}: has capacity requests, but the DRAConsumableCapacity feature is disabled"
            )
        counts = [self._validate_request(key, ci, ri, si, req) for si, req in enumerate(alts)]
        return min(counts) if counts else 0

    def _validate_request(self, key: str, ci: int, ri: int, si: int, req: Request) -> int:
        """``validateDeviceRequest``: the request's (or subrequest's) checks, and how many devices it takes."""
        if self.rules.refuses_derived_attributes and req.derived_attributes:
            raise AllocationAborted(
                f"claim {key}, request {req.own_name}: cannot handle request with derived attributes, the feature is disabled"
            )
        for i, sel in enumerate(req.selectors):
            if not sel:
                raise AllocationAborted(
                    f"claim {key}, request {req.own_name}, selector #{i}: CEL expression empty (unsupported selector type?)"
                )
        if not req.class_name:
            raise AllocationAborted(f"claim {key}, request {req.own_name}: missing device class name (unsupported request type?)")
        if req.class_name not in self.classes:
            raise AllocationAborted(
                f"claim {key}, request {req.own_name}: could not retrieve device class {req.class_name}: "
                f'deviceclass.resource.k8s.io "{req.class_name}" not found'
            )
        if req.mode == "All":
            return self._prepare_all(ci, ri, si, req)
        if req.mode == "ExactCount":
            return req.count
        raise AllocationAborted(f"claim {key}, request {req.own_name}: unsupported count mode {req.mode}")

    def _claim_constraints(self, key: str, claim: Mapping[str, Any]) -> list[Constraint]:
        """``Allocate``'s constraints of one claim (``matchAttributeConstraint``, ``distinctAttributeConstraint``)."""
        cons: list[Constraint] = []
        for i, c in enumerate(((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []):
            if c.get("matchAttribute"):
                cons.append(Constraint(set(c.get("requests") or []), str(c["matchAttribute"]), distinct=False))
            elif c.get("distinctAttribute") and self.rules.distinct_attribute:
                cons.append(
                    Constraint(
                        set(c.get("requests") or []),
                        str(c["distinctAttribute"]),
                        distinct=True,
                        every_value=self.rules.distinct_keeps_every_value,
                        pointer_compare=self.rules.distinct_compares_pointers,
                    )
                )
            else:
                raise AllocationAborted(f"claim {key}, constraint #{i}: empty constraint (unsupported constraint type?)")
        return cons

    def _prepare_all(self, ci: int, ri: int, si: int, req: Request) -> int:
        """``validateDeviceRequest`` for mode All: the devices it takes, found now (every pool complete and valid)."""
        key = claim_key(self.claims[ci])
        found: list[tuple[Pool, Mapping[str, Any], Mapping[str, Any]]] = []
        for pool in self.pools:
            if pool.incomplete:
                raise AllocationAborted(
                    f"claim {key}, request {req.own_name}: asks for all devices, "
                    f"but resource pool {pool.pool_id} is currently being updated"
                )
            if pool.invalid:
                raise AllocationAborted(
                    f"claim {key}, request {req.own_name}: asks for all devices, "
                    f"but resource pool {pool.pool_id} is currently invalid"
                )
            for s in pool.slices:
                for d in slice_spec(s).get("devices") or []:
                    if self.selectable(ci, req, pool, s, d) and self._all_capacity_ok(key, req, pool, d):
                        found.append((pool, s, d))
        self.all_devices[(ci, ri, si)] = found
        return len(found)

    def _all_capacity_ok(self, key: str, req: Request, pool: Pool, d: Mapping[str, Any]) -> bool:
        """Whether a device may be one of "all devices": from 1.37 its static capacity only (what is in use fails later)."""
        if not self.rules.strict_capacity:
            return self.capacity_ok(req, pool, d)[0]
        try:
            return capacity_fits(req, d, None, None, fractional=True, milli=self.rules.fractional_capacity)[0]
        except CapacityError as err:
            raise AllocationAborted(
                f"claim {key}, request {req.own_name}: checking capacity for device {d.get('name', '')}: {err}"
            ) from None

    # -- per device -----------------------------------------------------------------------------
    def selectable(self, ci: int, req: Request, pool: Pool, s: Mapping[str, Any], d: Mapping[str, Any]) -> bool:
        """``isSelectable``: class then request selectors (``selectorsMatch``: ``outcome_cache.py``), node selection."""
        if d.get("bindingConditions") and not self.rules.binding_conditions:
            return False  # devices with binding conditions are not supported while their gates are off
        did = self.dev_id(pool, d)
        ck = (ci, req.name, did)
        if ck in self.match_cache:
            return self.match_cache[ck]
        out = self.selector_outcome(ci, req, did, d)
        if out is not None and out.stage != "false":
            where = f"class {req.class_name}" if out.group == 0 else f"claim {claim_key(self.claims[ci])}"
            if out.stage == "compile":
                raise AllocationAborted(f"{where}: selector #{out.index}: CEL compile error: {out.message}")
            raise AllocationAborted(self.runtime_error(where, out.index, did, out.message))
        ok = out is None
        if ok and slice_spec(s).get("perDeviceNodeSelection"):
            ok = node_matches(self.node, self.labels, d.get("nodeName"), bool(d.get("allNodes")), d.get("nodeSelector"))
        self.match_cache[ck] = ok
        return ok

    def in_use(self, did: DeviceID) -> bool:
        """Allocated in the cluster (dedicated) or picked earlier in this attempt."""
        return did in self.state.devices or bool(self.allocating.get(did))

    # -- the search: allocateOne -----------------------------------------------------------------
    def _one(self, ci: int, ri: int, si: int, di: int, *, in_sub: bool = False, start: tuple[int, int, int] = _START) -> bool:
        """``allocateOne``: the device ``di`` of request ``ri`` (subrequest ``si``) of claim ``ci``, then all that follow.

        ``in_sub``: Go's ``allocateSubRequest`` (a ``firstAvailable`` alternative already chosen);
        ``start``: Go's ``startLocation``, where the walk over pools, slices and devices resumes.
        """
        if ci >= len(self.claims):
            return True
        if ri >= len(self.requests[ci]):
            try:
                return self._one(ci + 1, 0, 0, 0)
            except _LimitExceeded:  # not fatal: another allocation of this claim may leave room
                return False
        alts = self.requests[ci][ri]
        if not in_sub and len(alts) > 1:
            return self._first_available(ci, ri, len(alts))
        return self._one_device(ci, ri, si, di, in_sub=in_sub, start=start)

    def _one_device(self, ci: int, ri: int, si: int, di: int, *, in_sub: bool, start: tuple[int, int, int]) -> bool:
        """``allocateOne`` for one (sub)request: its next device, or the next request once it has all it needs."""
        req = self.requests[ci][ri][si]
        devices = self.all_devices.get((ci, ri, si), []) if req.mode == "All" else []
        if req.mode == "All" and not devices:
            return False
        need = len(devices) if req.mode == "All" else req.count
        if di >= need:
            return self._one(ci, ri + 1, 0, 0)
        if len(self.results[ci]) + need - di > MAX_RESULTS:
            raise _LimitExceeded  # back to the nearest firstAvailable choice, or the claim before
        if req.mode == "All":
            self._step()
            pool, s, d = devices[di]
            undo = self._allocate(ci, req, pool, s, d, must=True)
            if undo is None:
                return False
            next_si = si if self.rules.all_keeps_its_subrequest else 0  # (1.34/1.35: the first subrequest's)
            return self._one_or_undo(undo, ci, ri, next_si, di + 1, in_sub=in_sub, start=_START)
        return self._walk(ci, ri, si, di, in_sub=in_sub, start=start)

    def _walk(self, ci: int, ri: int, si: int, di: int, *, in_sub: bool, start: tuple[int, int, int]) -> bool:
        """``allocateOne``'s loop: pools by ID, slices by name, devices in spec order, from ``start``; backtracks on failure."""
        req = self.requests[ci][ri][si]
        for pi in range(start[0], len(self.pools)):
            pool = self.pools[pi]
            if pool.invalid and self.rules.pools_as_gathered:
                raise AllocationAborted(f"pool {pool.name} is invalid: {pool.invalid}")
            if (pool.incomplete and not self.rules.pools_as_gathered) or pool.invalid:
                continue
            s0 = start[1] if pi == start[0] else 0
            for sj in range(s0, len(pool.slices)):
                s = pool.slices[sj]
                devs = slice_spec(s).get("devices") or []
                d0 = start[2] if (pi == start[0] and sj == start[1]) else 0
                for dk in range(d0, len(devs)):
                    self._step()
                    d = devs[dk]
                    if not self._may_try(ci, req, pool, s, d):
                        continue
                    undo = self._allocate(ci, req, pool, s, d, must=False)
                    if undo is None:
                        continue
                    resume = (pi, sj, dk + 1) if self.rules.search_resumes else _START
                    if self._one_or_undo(undo, ci, ri, si, di + 1, in_sub=in_sub, start=resume):
                        return True
        return False

    def _may_try(self, ci: int, req: Request, pool: Pool, s: Mapping[str, Any], d: Mapping[str, Any]) -> bool:
        """``allocateOne``'s checks of a device before ``allocateDevice``: free for the request, selectable, with capacity."""
        did = self.dev_id(pool, d)
        if req.admin_access and ci in self.allocating.get(did, set()):
            return False
        if not req.admin_access and self.in_use(did):
            return False
        if not self.selectable(ci, req, pool, s, d):
            return False
        return self._capacity_or_abort(ci, req, pool, d, "checking")

    def _one_or_undo(
        self, undo: Callable[[], None], ci: int, ri: int, si: int, di: int, *, in_sub: bool, start: tuple[int, int, int]
    ) -> bool:
        """``_one`` after taking a device; the device is given back unless that completed the allocation."""
        try:
            if self._one(ci, ri, si, di, in_sub=in_sub, start=start):
                return True
        except _LimitExceeded:
            undo()
            raise
        undo()
        return False

    def _first_available(self, ci: int, ri: int, n: int) -> bool:
        """A request's subrequests in order until one completes every remaining request and claim.

        A subrequest that would put the claim over its device limit is skipped at once; when
        every one would, the limit goes back to the request before (``errAllocationResultMaxSizeExceeded``).
        """
        all_exceeded = True
        for si in range(n):
            try:
                if self._one(ci, ri, si, 0, in_sub=True):
                    return True
            except _LimitExceeded:
                continue
            all_exceeded = False
        if all_exceeded:
            raise _LimitExceeded
        return False

    def _step(self) -> None:
        self.steps += 1
        if self.deadline is not None and self.steps % _CLOCK_EVERY == 0 and time.monotonic() > self.deadline:
            where = f"node {self.node}: " if self.node else ""
            raise AllocationAborted(
                f"{where}could not decide within {SEARCH_BUDGET_S:.0f}s (the simulation stopped after trying {self.steps} "
                "devices; the scheduler gives up after its filter timeout, 10s by default)"
            )
        if self.steps > MAX_SEARCH_STEPS:
            where = f"node {self.node}: " if self.node else ""
            raise AllocationAborted(
                f"{where}timed out trying to allocate devices (the simulation gave up after trying {MAX_SEARCH_STEPS} "
                "devices; the scheduler gives up after its filter timeout, 10s by default)"
            )

    # -- allocateDevice -------------------------------------------------------------------------
    def _allocate(
        self, ci: int, req: Request, pool: Pool, s: Mapping[str, Any], d: Mapping[str, Any], *, must: bool
    ) -> _Undo | None:
        """``allocateDevice``: take the device for the request, or None; its undo (``rollbackDevice``) where taken.

        ``must`` (allocation mode All): a constraint the device breaks aborts the attempt.
        """
        did = self.dev_id(pool, d)
        shared = self.rules.consumable_capacity and bool(d.get("allowMultipleAllocations"))
        if not self._may_allocate(ci, req, did, d, shared=shared):
            return None
        undo = _Undo()
        if not (shared and self._capacity_in_use(did)) and d.get("consumesCounters"):
            if not self.counters_fit(pool, d, reserve=True):  # checkAvailableCounters
                return None
            pkey = self._counter_key(pool)
            undo.append(lambda: self.release_counters(pkey, d))
        if not self._add_device(ci, req, d, did, undo, must=must, shared=shared):
            undo()
            return None
        if not self._capacity_or_abort(ci, req, pool, d, "rechecking"):  # an abort ends the attempt: nothing to roll back
            undo()
            return None
        consumed: dict[str, Any] = {}
        if shared:
            consumed, drop = self.share_capacity(req, did, d)
            undo.append(drop)
        n = len(self.results[ci])
        self.results[ci].append(
            Result(claim_key(self.claims[ci]), req.name, did[0], did[1], did[2], shared, consumed, req.admin_access, (s, d))
        )
        undo.append(lambda: self.results[ci].__delitem__(slice(n, None)))
        return undo

    def _may_allocate(self, ci: int, req: Request, did: DeviceID, d: Mapping[str, Any], *, shared: bool) -> bool:
        """``allocateDevice``'s first checks: not taken (``allocatingDeviceForClaim``, ``deviceInUse``), partitionable on."""
        if not shared and req.admin_access and ci in self.allocating.get(did, set()):
            return False
        if not req.admin_access and self.in_use(did):
            return False
        # A device that consumes counters is not allocated while DRAPartitionableDevices is off.
        return not (d.get("consumesCounters") and not self.rules.partitionable_devices)

    def _add_device(
        self, ci: int, req: Request, d: Mapping[str, Any], did: DeviceID, undo: _Undo, *, must: bool, shared: bool
    ) -> bool:
        """``allocateDevice``'s taint and constraint checks, then the device marked as allocating for the claim (undo kept)."""
        if self.rules.device_taints and untolerated_taint(d, req) is not None:
            return False
        for c in self.constraints[ci]:
            if not c.add(req, d, did):
                if must:
                    undo()
                    raise AllocationAborted(
                        f"claim {claim_key(self.claims[ci])}, request {req.own_name}: cannot add device "
                        f"{did[0]}/{did[1]}/{did[2]} because a claim constraint would not be satisfied"
                    )
                return False
            undo.append(partial(c.remove, req))
        if not shared:
            self.allocating.setdefault(did, set()).add(ci)
            undo.append(lambda: self.allocating[did].discard(ci))
        return True
