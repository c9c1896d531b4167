"""A pure simulation of the scheduler's structured allocator (the incubating variant), release by release.

Called by ``dra-gpu explain``. For one pod's claims on one node it gathers pools (highest
generation, completeness, validity), walks pools by (driver, pool), slices by name and devices in
spec order, tries each request's alternatives in order (``firstAvailable``), checks class then
request selectors (cached per device and request), capacity, counters, taints and constraints,
and backtracks until a complete allocation is found, skipping at once any choice that would put a
claim over 32 devices. A selector error aborts the whole attempt with the scheduler's message,
and so do a found allocation whose node selectors cannot be merged (``createNodeSelector``) and a
search that tries more than ``MAX_SEARCH_STEPS`` devices on one node (the filter timeout). Pools
are gathered by ``pools.py``, taints and capacity checked by ``checks.py``, constraints kept by
``constraints.py``; ``candidates.py`` gives every device's first reason. Inputs are trusted to
have the shapes ``validate.py`` checks. Where releases differ, the :class:`~dra_driver.schedsim.rules.Rules`
given say which answer to give (default: the newest release's).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.core.quantity import Quantity
from dra_driver.schedsim.allocator.checks import CapacityError, capacity_fits, consumed_capacity, untolerated_taint
from dra_driver.schedsim.allocator.constraints import Constraint
from dra_driver.schedsim.allocator.model import (
    AllocatedState,
    DeviceID,
    NodeOutcome,
    Request,
    Result,
    claim_key,
    claim_requests,
    qty,
)
from dra_driver.schedsim.allocator.pools import Pool, node_matches, slice_spec, unmergeable_terms
from dra_driver.schedsim.allocator.shapes import NOT_STORED, SelectorOutcome, ShapeCache, ViewKey
from dra_driver.schedsim.cel import CelCompileError, CelError, CompiledSelector, DeviceView, compile_selector
from dra_driver.schedsim.rules import NEWEST, Rules

MAX_RESULTS = 32  # resourceapi.AllocationResultsMaxSize
# Devices the search may try on one node before it gives up, as the scheduler gives up after its
# filter timeout (10s by default): a search that backtracks over many devices is exponential.
MAX_SEARCH_STEPS = 100_000
# Seconds one explanation may search in all (every node together): a bound on the wall clock
# besides the bound on steps, so no input makes `dra-gpu explain` hang.
SEARCH_BUDGET_S = 30.0
_CLOCK_EVERY = 256  # steps between looks at the clock


_COMPILE_FAILURES: dict[str, CelCompileError] = {}
_NO_ERROR: tuple[None, None] = (None, None)  # a part the device lacks: no conversion error
_EMPTY: Mapping[str, Any] = {}
# One selector of a request's chain: (group: 0 class, 1 request; its index there; the expression;
# the compiled selector, None where it does not compile; its outcome when false, or the compile error).
_Link = tuple[int, int, str, CompiledSelector | None, SelectorOutcome]


def compile_cached(expression: str, rules: Rules = NEWEST) -> CompiledSelector:
    """``compile_selector``; a CEL front-end crash on an expression is reported as a compile error.

    The front end raises ``ValueError`` for an int literal of more than 4300 digits (and could
    run out of stack on some other input): that expression does not compile, and an explanation
    says so rather than crashing. Failures are remembered, as ``compile_selector`` remembers its own.
    """
    failed = _COMPILE_FAILURES.get(expression)
    if failed is not None:
        raise CelCompileError(failed.message)
    try:
        return compile_selector(expression, rules)
    except (ValueError, RecursionError) as err:
        if len(_COMPILE_FAILURES) > 1024:
            _COMPILE_FAILURES.clear()
        failed = _COMPILE_FAILURES[expression] = CelCompileError(f"compilation failed: {type(err).__name__}: {str(err)[:200]}")
        raise CelCompileError(failed.message) from None


# cel.EnhanceRuntimeError's hint (Kubernetes 1.37+) after a "no such key" error.
_OPTIONAL_HINT = (
    ". consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for optional fields"
)


class AllocationAborted(Exception):
    """The scheduler's Filter error: the whole attempt stops (not "unsuitable node")."""


class _LimitExceeded(Exception):
    """Taking the current request's devices would put the claim over ``MAX_RESULTS``.

    Raised through the search like Go's ``errAllocationResultMaxSizeExceeded``: no other device of
    an earlier request of the claim can help, so backtracking goes straight to the nearest
    ``firstAvailable`` choice (which may need fewer devices) or to the previous claim.
    """


class NodeAllocator:
    """One attempt for one pod on one node: the scheduler's ``Allocate``."""

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
        self.allocating_capacity: dict[DeviceID, dict[str, Quantity]] = {}  # aggregated, as cel-go keeps it
        # Per pool ID (driver, pool); before 1.37 per pool name (the driver left empty).
        self.consumed_counters: dict[tuple[str, str], dict[str, dict[str, Quantity]]] = {}
        self.available_counters: dict[tuple[str, str], dict[str, dict[str, Quantity]]] = {}
        self._negative_counters: dict[tuple[str, str], list[tuple[str, str]]] = {}  # overdrawn (cs, counter) per pool
        # Per pool ID: shapes.counters' answers for its available counters, and how many devices this attempt reserves.
        self._fits: dict[tuple[str, str], dict[int, tuple[Any, bool]]] = {}
        self._reserved: dict[tuple[str, str], int] = {}
        self.results: list[list[Result]] = [[] for _ in claims]
        self.constraints: list[list[Constraint]] = []
        self.all_devices: dict[tuple[int, int, int], list[tuple[Pool, Mapping[str, Any], Mapping[str, Any]]]] = {}
        self.steps = 0

    # -- setup ----------------------------------------------------------------------------------
    def run(self) -> NodeOutcome:
        """Allocate or say why not; never raises for selector errors (they become ``error``)."""
        try:
            self._validate()
            try:
                done = self._one(0, 0, 0, 0, False, (0, 0, 0))
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

    def _validate(self) -> None:  # noqa: PLR0912 - mirrors the Go allocator's function branch for branch, so the differential test can be read against it
        for ci, claim in enumerate(self.claims):
            key = claim_key(claim)
            total = 0
            for ri, alts in enumerate(self.requests[ci]):
                if self.rules.refuses_capacity_requests and any(req.has_capacity for req in alts):
                    raise AllocationAborted(
                        f"claim {key}, request {alts[0].base}: has capacity requests, "
                        "but the DRAConsumableCapacity feature is disabled"
                    )
                counts = []
                for si, req in enumerate(alts):
                    if self.rules.refuses_derived_attributes and req.derived_attributes:
                        raise AllocationAborted(
                            f"claim {key}, request {req.own_name}: cannot handle request with derived attributes, "
                            "the feature is disabled"
                        )
                    for i, sel in enumerate(req.selectors):
                        if not sel:
                            raise AllocationAborted(
                                f"claim {key}, request {req.own_name}, selector #{i}: "
                                "CEL expression empty (unsupported selector type?)"
                            )
                    if not req.class_name:
                        raise AllocationAborted(
                            f"claim {key}, request {req.own_name}: missing device class name (unsupported request type?)"
                        )
                    if req.class_name not in self.classes:
                        raise AllocationAborted(
                            f"claim {key}, request {req.own_name}: could not retrieve device class {req.class_name}: "
                            f'deviceclass.resource.k8s.io "{req.class_name}" not found'
                        )
                    if req.mode == "All":
                        counts.append(self._prepare_all(ci, ri, si, req))
                    elif req.mode == "ExactCount":
                        counts.append(req.count)
                    else:
                        raise AllocationAborted(f"claim {key}, request {req.own_name}: unsupported count mode {req.mode}")
                least = min(counts) if counts else 0
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
            self.constraints.append(cons)

    def _prepare_all(self, ci: int, ri: int, si: int, req: Request) -> int:
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
    def dev_id(self, pool: Pool, d: Mapping[str, Any]) -> DeviceID:
        """(driver, pool, device)."""
        return (pool.driver, pool.name, str(d.get("name", "")))

    def selectable(self, ci: int, req: Request, pool: Pool, s: Mapping[str, Any], d: Mapping[str, Any]) -> bool:
        """``isSelectable``: class selectors, request selectors, per-device node selection (cached)."""
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
            raise AllocationAborted(self._runtime_error(where, out.index, did, out.message))
        ok = out is None
        if ok and slice_spec(s).get("perDeviceNodeSelection"):
            ok = node_matches(self.node, self.labels, d.get("nodeName"), bool(d.get("allNodes")), d.get("nodeSelector"))
        self.match_cache[ck] = ok
        return ok

    def selector_outcome(self, ci: int, req: Request, did: DeviceID, d: Mapping[str, Any]) -> SelectorOutcome | None:
        """The first of the class's then the request's selectors that rejects the device (false or an error); None: all accept it.

        Computed once per device shape (see ``shapes.py``): the outcome never names the device.
        """
        multi = d.get("allowMultipleAllocations") if self.rules.selectors_see_multiple_allocations else None
        vkey = (did[0], id(d.get("attributes")), id(d.get("capacity")), multi)  # the view's key (see view())
        by_view = self.outcomes_by_view(ci, req)
        hit = by_view.get(vkey, NOT_STORED)
        if hit is not NOT_STORED:
            return hit
        chain = self._chain(ci, req)
        # Attributes the reader read from another map (another node's device of the same name), a few
        # strings apart (a GPU's UUID): where no selector reads those names, the outcome is the other's.
        attrs = d.get("attributes")
        derived = self.shapes.derived.get(id(attrs)) if attrs is not None else None
        if derived is not None and derived[0] is attrs:
            hit = by_view.get((vkey[0], id(derived[1]), vkey[2], multi), NOT_STORED)
            if hit is not NOT_STORED:
                read = self._names_read(ci, req, chain, did[0])
                if read is not None and read.isdisjoint(derived[2]):
                    self.shapes.alive.append(d)  # (keeps the parts alive, so the ids in vkey stay theirs)
                    by_view[vkey] = hit
                    return hit
        # A device of another view that reads the same to every selector of the chain (devices that
        # differ only in what no selector reads, a GPU's UUID, ...) has the same outcome.
        pkey = self._projection(chain, did[0], d)
        if pkey is None:
            # The view keeps the device's parts alive (shapes.views), so the ids in vkey stay theirs.
            out = by_view[vkey] = self._evaluate(chain, self.view(did, d))
            return out
        by_projection = self.shapes.projections.setdefault((ci, req.name), {})
        hit = by_projection.get(pkey, NOT_STORED)
        if hit is not NOT_STORED:
            self.shapes.alive.append(d)  # (keeps the parts alive, so the ids in vkey stay theirs)
        else:
            hit = by_projection[pkey] = self._evaluate(chain, self.view(did, d))  # (the view keeps them alive)
        by_view[vkey] = hit
        return hit

    def _names_read(self, ci: int, req: Request, chain: tuple[_Link, ...], driver: str) -> frozenset[str] | None:
        """The attribute names (with the domain and bare) the chain's selectors read of a device of ``driver`` (once per request).

        None where a selector reads the whole device, a whole map or a whole domain (as for :meth:`_projection`).
        """
        key = (ci, req.name, driver)
        known = self.shapes.names_read
        if key in known:
            return known[key]
        names: set[str] = set()
        for _, _, _, sel, _ in chain:
            if sel is None:  # it does not compile: what follows is never evaluated
                break
            pieces = sel.projector.published_names(driver)
            if pieces is None:
                known[key] = None
                return None
            for is_attr, qualified, bare in pieces:
                if is_attr:
                    names.update(n for n in (qualified, bare) if n is not None)
        out = known[key] = frozenset(names)
        return out

    def _projection(self, chain: tuple[_Link, ...], driver: str, d: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """What the chain's selectors read of the device, read from its published maps; None where that cannot be told so.

        Two devices with the same key get the same outcome: either the same conversion error (which
        fails the first selector that compiles), or, for every selector, the key its own answers are
        shared by (``CompiledSelector.matches_view``). None where a selector reads the whole device,
        a whole map or domain, or the reader did not find the device's conversion error.
        """
        known = self.shapes.conversion_errors
        attrs, caps = d.get("attributes"), d.get("capacity")
        a = known.get(id(attrs)) if attrs is not None else _NO_ERROR
        c = known.get(id(caps)) if caps is not None else _NO_ERROR
        if a is None or c is None:
            return None
        error = a[1] if a[1] is not None else c[1]
        if error is not None:
            return (error,)  # (a key of one string: no other key starts with one)
        multi = bool(d.get("allowMultipleAllocations", False)) if self.rules.selectors_see_multiple_allocations else False
        out: list[Any] = [None]
        for _, _, _, sel, _ in chain:
            if sel is None:  # it does not compile: what follows is never evaluated
                break
            k = sel.projector.published_key(attrs or _EMPTY, caps or _EMPTY, driver, multi)
            if k is None:
                return None
            out.append(k)
        return tuple(out)

    def outcomes_by_view(self, ci: int, req: Request) -> dict[ViewKey, SelectorOutcome | None]:
        """The request's selector outcomes found so far, by view key (see :meth:`selector_outcome`)."""
        rkey = (ci, req.name)
        by_view = self.shapes.outcomes.get(rkey)
        if by_view is None:
            by_view = self.shapes.outcomes[rkey] = {}
        return by_view

    def _chain(self, ci: int, req: Request) -> tuple[_Link, ...]:
        """The class's then the request's selectors, compiled once per request (up to the first that does not compile)."""
        rkey = (ci, req.name)
        chain = self.shapes.chains.get(rkey)
        if chain is None:
            cls = self.classes.get(req.class_name) or {}
            class_sels = [str((x.get("cel") or {}).get("expression", "")) for x in (cls.get("spec") or {}).get("selectors") or []]
            links: list[_Link] = []
            for group, sels in ((0, class_sels), (1, req.selectors)):
                for i, expr in enumerate(sels):
                    try:
                        links.append((group, i, expr, compile_cached(expr, self.rules), SelectorOutcome(group, i, expr, "false")))
                    except CelError as err:
                        links.append((group, i, expr, None, SelectorOutcome(group, i, expr, "compile", err.kind, err.message)))
                        break
                else:
                    continue
                break
            chain = self.shapes.chains[rkey] = tuple(links)
        return chain

    @staticmethod
    def _evaluate(chain: tuple[_Link, ...], view: DeviceView) -> SelectorOutcome | None:
        for group, i, expr, sel, failed in chain:
            if sel is None:  # it does not compile
                return failed
            try:
                if not sel.matches_view(view):
                    return failed
            except CelError as err:
                return SelectorOutcome(group, i, expr, "runtime", err.kind, err.message)
        return None

    def _runtime_error(self, where: str, i: int, did: DeviceID, message: str) -> str:
        """A selector's runtime error as the release words it (1.37+: the device named, ``EnhanceRuntimeError``'s hint)."""
        if not self.rules.selector_error_names_device:
            return f"{where}: selector #{i}: CEL runtime error: {message}"
        if "no such key:" in message:
            message += _OPTIONAL_HINT
        return f"{where}: selector #{i} on device {did[0]}/{did[1]}/{did[2]}: CEL runtime error: {message}"

    def view(self, did: DeviceID, d: Mapping[str, Any]) -> DeviceView:
        """The device as selectors see it: one view per device shape (driver, attributes, capacity, multiple allocations)."""
        sees_multi = self.rules.selectors_see_multiple_allocations
        multi = d.get("allowMultipleAllocations") if sees_multi else None
        key = (did[0], id(d.get("attributes")), id(d.get("capacity")), multi)
        views = self.shapes.views
        v = views.get(key)
        if v is None:
            if not sees_multi and "allowMultipleAllocations" in d:
                d = {k: x for k, x in d.items() if k != "allowMultipleAllocations"}
            v = views[key] = self._new_view(d, did[0])
        return v

    def _new_view(self, d: Mapping[str, Any], driver: str) -> DeviceView:
        """A view of ``d``, given its conversion error when the reader found the errors of all its parts.

        (The table keeps each part it names alive, so an id found there is that part's.)
        """
        known = self.shapes.conversion_errors
        attrs, caps = d.get("attributes"), d.get("capacity")
        a = known.get(id(attrs)) if attrs is not None else _NO_ERROR
        c = known.get(id(caps)) if caps is not None else _NO_ERROR
        lists = self.rules.list_attributes
        if a is None or c is None:
            return DeviceView.of(d, driver, lists=lists)
        return DeviceView.of(d, driver, a[1] if a[1] is not None else c[1], lists=lists)

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

    def _counter_key(self, pool: Pool) -> tuple[str, str]:
        return (pool.driver, pool.name) if self.rules.counters_per_pool_id else ("", pool.name)

    def in_use(self, did: DeviceID) -> bool:
        """Allocated in the cluster (dedicated) or picked earlier in this attempt."""
        return did in self.state.devices or bool(self.allocating.get(did))

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
            consumed: dict[str, dict[str, Quantity]] = {}
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

    def _available(self, pool: Pool, pkey: tuple[str, str]) -> dict[str, dict[str, Quantity]]:
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
    def _counters_cover(
        avail: dict[str, dict[str, Quantity]], consumed: dict[str, dict[str, Quantity]], negative: list[tuple[str, str]]
    ) -> bool:
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
    def _counters_add(consumed: dict[str, dict[str, Quantity]], d: Mapping[str, Any], sign: int) -> None:
        for cc in d.get("consumesCounters") or []:
            cset = consumed.setdefault(str(cc.get("counterSet")), {})
            for n, c in (cc.get("counters") or {}).items():
                v = qty(c.get("value"))
                cur = cset.get(n)
                cset[n] = (v if sign > 0 else v.neg()) if cur is None else (cur.add(v) if sign > 0 else cur.sub(v))

    # -- the search -----------------------------------------------------------------------------
    def _one(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: tuple[int, int, int]) -> bool:  # noqa: PLR0911, PLR0912, PLR0917 - mirrors the Go allocator's function branch for branch, so the differential test can be read against it
        if ci >= len(self.claims):
            return True
        if ri >= len(self.requests[ci]):
            try:
                return self._one(ci + 1, 0, 0, 0, False, (0, 0, 0))
            except _LimitExceeded:  # not fatal: another allocation of this claim may leave room
                return False
        alts = self.requests[ci][ri]
        if not in_sub and len(alts) > 1:
            return self._first_available(ci, ri, len(alts))
        req = alts[si]
        devices = self.all_devices.get((ci, ri, si), []) if req.mode == "All" else []
        if req.mode == "All" and not devices:
            return False
        need = len(devices) if req.mode == "All" else req.count
        if di >= need:
            return self._one(ci, ri + 1, 0, 0, False, (0, 0, 0))
        if len(self.results[ci]) + need - di > MAX_RESULTS:
            raise _LimitExceeded  # back to the nearest firstAvailable choice, or the claim before
        if req.mode == "All":
            self._step()
            pool, s, d = devices[di]
            undo = self._allocate(ci, req, pool, s, d, must=True)
            if undo is None:
                return False
            next_si = si if self.rules.all_keeps_its_subrequest else 0  # (1.34/1.35: the first subrequest's)
            return self._one_or_undo(undo, ci, ri, next_si, di + 1, in_sub, (0, 0, 0))
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
                    did = self.dev_id(pool, d)
                    if req.admin_access and ci in self.allocating.get(did, set()):
                        continue
                    if not req.admin_access and self.in_use(did):
                        continue
                    if not self.selectable(ci, req, pool, s, d):
                        continue
                    if not self._capacity_or_abort(ci, req, pool, d, "checking"):
                        continue
                    undo = self._allocate(ci, req, pool, s, d, must=False)
                    if undo is None:
                        continue
                    resume = (pi, sj, dk + 1) if self.rules.search_resumes else (0, 0, 0)
                    if self._one_or_undo(undo, ci, ri, si, di + 1, in_sub, resume):
                        return True
        return False

    def _one_or_undo(  # noqa: PLR0917 - _one's position, plus the undo of the device just taken
        self, undo: Any, ci: int, ri: int, si: int, di: int, in_sub: bool, start: tuple[int, int, int]
    ) -> bool:
        """``_one`` after taking a device; the device is given back unless that completed the allocation."""
        try:
            if self._one(ci, ri, si, di, in_sub, start):
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
                if self._one(ci, ri, si, 0, True, (0, 0, 0)):
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

    def _allocate(self, ci: int, req: Request, pool: Pool, s: Mapping[str, Any], d: Mapping[str, Any], *, must: bool) -> Any:  # noqa: PLR0911, PLR0912 - mirrors the Go allocator's function branch for branch, so the differential test can be read against it
        did = self.dev_id(pool, d)
        shared = self.rules.consumable_capacity and bool(d.get("allowMultipleAllocations"))
        if not shared and req.admin_access and ci in self.allocating.get(did, set()):
            return None
        if not req.admin_access and self.in_use(did):
            return None
        if d.get("consumesCounters") and not self.rules.partitionable_devices:
            return None  # a device that consumes counters is not allocated while DRAPartitionableDevices is off
        skip_counters = shared and self._capacity_in_use(did)
        reserved = False
        if not skip_counters and d.get("consumesCounters"):
            if not self.counters_fit(pool, d, reserve=True):
                return None
            reserved = True
        undo_steps: list[Any] = []
        if reserved:
            pkey = self._counter_key(pool)
            undo_steps.append(lambda: self.release_counters(pkey, d))

        def rollback() -> None:
            for step in reversed(undo_steps):
                step()

        if self.rules.device_taints and untolerated_taint(d, req) is not None:
            rollback()
            return None
        for c in self.constraints[ci]:
            if not c.add(req, d, did):
                rollback()
                if must:
                    raise AllocationAborted(
                        f"claim {claim_key(self.claims[ci])}, request {req.own_name}: cannot add device "
                        f"{did[0]}/{did[1]}/{did[2]} because a claim constraint would not be satisfied"
                    )
                return None
            undo_steps.append(lambda c=c: c.remove(req))
        if not shared:
            self.allocating.setdefault(did, set()).add(ci)
            undo_steps.append(lambda: self.allocating[did].discard(ci))
        ok = self._capacity_or_abort(ci, req, pool, d, "rechecking")  # an abort ends the attempt: nothing to roll back
        if not ok:
            rollback()
            return None
        consumed: dict[str, Quantity] = {}
        if shared:
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

            undo_steps.append(drop)
        n = len(self.results[ci])
        self.results[ci].append(
            Result(claim_key(self.claims[ci]), req.name, did[0], did[1], did[2], shared, consumed, req.admin_access, (s, d))
        )
        undo_steps.append(lambda: self.results[ci].__delitem__(slice(n, None)))
        return rollback
