"""A pure simulation of the scheduler's structured allocator (the incubating variant of 1.36).

Called by ``dra-gpu explain``. For one pod's claims on one node it gathers pools (highest
generation, completeness, validity), walks pools by (driver, pool), slices by name and devices in
spec order, tries each request's alternatives in order (``firstAvailable``), checks class then
request selectors (cached per device and request), capacity, counters, taints and constraints,
and backtracks until a complete allocation is found. A selector error aborts the whole attempt
with the scheduler's message, and so does a search that tries more than ``MAX_SEARCH_STEPS``
devices on one node (the scheduler's filter timeout). :func:`explain_request` gives every
device's first reason. Inputs are trusted to have the shapes ``validate.py`` checks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.core.allocator.model import (
    AllocatedState,
    Candidate,
    DeviceID,
    NodeOutcome,
    Request,
    Result,
    claim_key,
    claim_requests,
    qty,
)
from dra_driver.core.cel import CelCompileError, CelError, CompiledSelector, DeviceView, compile_selector
from dra_driver.core.cel.quantity import Quantity

MAX_RESULTS = 32  # resourceapi.AllocationResultsMaxSize
# Devices the search may try on one node before it gives up, as the scheduler gives up after its
# filter timeout (10s by default): a search that backtracks over many devices is exponential.
MAX_SEARCH_STEPS = 100_000


_COMPILE_FAILURES: dict[str, CelCompileError] = {}


def _compile(expression: str) -> CompiledSelector:
    """``compile_selector``; a CEL front-end crash on an expression is reported as a compile error.

    The front end raises ``ValueError`` for an int literal of more than 4300 digits (and could
    run out of stack on some other input): that expression does not compile, and an explanation
    says so rather than crashing. Failures are remembered, as ``compile_selector`` remembers its own.
    """
    failed = _COMPILE_FAILURES.get(expression)
    if failed is not None:
        raise CelCompileError(failed.message)
    try:
        return compile_selector(expression)
    except (ValueError, RecursionError) as err:
        if len(_COMPILE_FAILURES) > 1024:
            _COMPILE_FAILURES.clear()
        failed = _COMPILE_FAILURES[expression] = CelCompileError(f"compilation failed: {type(err).__name__}: {str(err)[:200]}")
        raise CelCompileError(failed.message) from None


class AllocationAborted(Exception):
    """The scheduler's Filter error: the whole attempt stops (not "unsuitable node")."""


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
    def pool_id(self) -> str:
        """``driver/pool``."""
        return f"{self.driver}/{self.name}"


def _spec(s: Mapping[str, Any]) -> Mapping[str, Any]:
    return s.get("spec") or {}


def _generation(s: Mapping[str, Any]) -> int:
    return int((_spec(s).get("pool") or {}).get("generation") or 0)


def _node_selector_matches(selector: Mapping[str, Any] | None, node: str, labels: Mapping[str, str]) -> bool:
    if not selector:
        return False
    for term in selector.get("nodeSelectorTerms") or []:
        ok = True
        for e in term.get("matchExpressions") or []:
            v = labels.get(e.get("key", ""))
            op, vals = e.get("operator"), e.get("values") or []
            ok = ok and {
                "In": v is not None and v in vals,
                "NotIn": v is None or v not in vals,
                "Exists": v is not None,
                "DoesNotExist": v is None,
            }.get(op, False)
        for e in term.get("matchFields") or []:
            if e.get("key") == "metadata.name":
                inside = node in (e.get("values") or [])
                ok = ok and (inside if e.get("operator") == "In" else not inside)
        if ok and (term.get("matchExpressions") or term.get("matchFields")):
            return True
    return False


def node_matches(node: str | None, labels: Mapping[str, str], node_name: str | None, all_nodes: bool, selector: Any) -> bool:
    """``NodeMatches``: nodeName, allNodes or a node selector."""
    if node_name:
        return node is not None and node == node_name
    if all_nodes:
        return True
    if selector is not None:
        return node is not None and _node_selector_matches(selector, node, labels)
    return False


def gather_pools(slices: Sequence[Mapping[str, Any]], node: str | None, labels: Mapping[str, str]) -> list[Pool]:
    """``GatherPools`` for one node, in allocation order."""
    by_pool: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for s in slices:
        sp = _spec(s)
        if sp.get("sharedCounters"):
            relevant = True
        elif sp.get("nodeName") or sp.get("allNodes") or sp.get("nodeSelector") is not None:
            relevant = node_matches(node, labels, sp.get("nodeName"), bool(sp.get("allNodes")), sp.get("nodeSelector"))
        elif sp.get("perDeviceNodeSelection"):
            relevant = any(
                node_matches(node, labels, d.get("nodeName"), bool(d.get("allNodes")), d.get("nodeSelector"))
                for d in sp.get("devices") or []
            )
        else:
            continue
        if not relevant:
            continue
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
        want = int((_spec(mine[0]).get("pool") or {}).get("resourceSliceCount") or 0)
        all_slices = mine
        if len(mine) != want:
            same = [
                s
                for s in slices
                if str(_spec(s).get("driver") or "") == driver and str((_spec(s).get("pool") or {}).get("name") or "") == name
            ]
            if any(_generation(s) > gen for s in same):
                continue  # obsolete
            all_slices = [s for s in same if _generation(s) == gen]
            if len(all_slices) != want:
                pools.append(
                    Pool(driver, name, incomplete=f"pool {driver}/{name} is incomplete: {len(all_slices)} of {want} slices")
                )
                continue
        pools.append(_build_pool(driver, name, mine, all_slices))
    pools.sort(key=lambda p: (p.driver, p.name))
    return pools


def _build_pool(driver: str, name: str, mine: Sequence[Mapping[str, Any]], all_slices: Sequence[Mapping[str, Any]]) -> Pool:
    mine = sorted(mine, key=lambda s: str((s.get("metadata") or {}).get("name", "")))
    pool = Pool(driver, name)
    counter_slices = [s for s in mine if _spec(s).get("sharedCounters")]
    pool.slices = [s for s in mine if not _spec(s).get("sharedCounters")]
    seen: set[str] = set()
    for s in pool.slices:
        for d in _spec(s).get("devices") or []:
            if d.get("name") in seen:
                pool.invalid = f"duplicate device name {d.get('name')}"
                return pool
            seen.add(str(d.get("name")))
    for s in counter_slices:
        for cs in _spec(s).get("sharedCounters") or []:
            if cs.get("name") in pool.counter_sets:
                pool.invalid = f"duplicate counter set name {cs.get('name')}"
                return pool
            pool.counter_sets[str(cs.get("name"))] = {k: qty(v.get("value")) for k, v in (cs.get("counters") or {}).items()}
    mine_names = {str((s.get("metadata") or {}).get("name", "")) for s in mine}
    pool.other_slices = [s for s in all_slices if str((s.get("metadata") or {}).get("name", "")) not in mine_names]
    for s in [*mine, *pool.other_slices]:
        for d in _spec(s).get("devices") or []:
            for cc in d.get("consumesCounters") or []:
                cset = pool.counter_sets.get(str(cc.get("counterSet")))
                if cset is None:
                    pool.invalid = f"counter set {cc.get('counterSet')} not found"
                    return pool
                for cname in cc.get("counters") or {}:
                    if cname not in cset:
                        pool.invalid = f"counter {cname} not found in counter set {cc.get('counterSet')}"
                        return pool
    return pool


def _tolerates(tol: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if tol.get("effect") and tol.get("effect") != taint.get("effect"):
        return False
    if tol.get("key") and tol.get("key") != taint.get("key"):
        return False
    op = tol.get("operator") or "Equal"
    if op == "Exists":
        return True
    return bool(op == "Equal" and (tol.get("value") or "") == (taint.get("value") or ""))


def untolerated_taint(device: Mapping[str, Any], req: Request) -> Mapping[str, Any] | None:
    """The first NoSchedule/NoExecute taint no toleration of the request covers."""
    for taint in device.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(_tolerates(t, taint) for t in req.tolerations):
            found: Mapping[str, Any] = taint
            return found
    return None


def _consumed(req_val: Quantity | None, cap: Mapping[str, Any]) -> Quantity:  # noqa: PLR0911 - mirrors the Go allocator's function branch for branch, so the differential test can be read against it
    """``calculateConsumedCapacity``: the request rounded up to the policy, else the default, else all."""
    policy = cap.get("requestPolicy")
    if req_val is None:
        if policy and policy.get("default") is not None:
            return qty(policy["default"])
        return qty(cap.get("value"))
    if not policy:
        return req_val
    rng = policy.get("validRange")
    if rng and rng.get("min") is not None:
        lo = qty(rng["min"])
        if req_val.cmp(lo) < 0:
            return lo
        if rng.get("step") is None:
            return req_val
        r, step, m = _int_value(req_val), _int_value(qty(rng["step"])), _int_value(lo)
        added = r - m
        n = _go_div(added, step)
        if added - n * step != 0:
            n += 1
        return Quantity(m + step * n, 0, small=True, fmt="BinarySI")  # resource.NewQuantity(val, BinarySI)
    if policy.get("validValues") is not None:
        for v in policy["validValues"]:
            if req_val.cmp(qty(v)) <= 0:
                return qty(v)
    return req_val


def _go_div(a: int, b: int) -> int:
    q = abs(a) // abs(b) if b else 0
    return -q if (a < 0) != (b < 0) else q


def _int_value(q: Quantity) -> int:
    """``Quantity.Value()``: rounded up to an integer."""
    f = q.fraction()
    n = -((-f.numerator) // f.denominator)
    return int(n)


def _same_quantity(a: Quantity, b: Quantity) -> bool:
    """Go's ``==`` on two ``resource.Quantity`` structs: the same int64 form and format, not just value."""
    return a.small and b.small and a.unscaled == b.unscaled and a.exp == b.exp and a.format == b.format


def _violates(consumed: Quantity, policy: Mapping[str, Any] | None) -> bool:
    """``violatesPolicy``."""
    if not policy:
        return False
    if policy.get("default") is not None and _same_quantity(consumed, qty(policy["default"])):
        return False
    rng = policy.get("validRange")
    if rng is not None:
        if rng.get("max") is not None and consumed.cmp(qty(rng["max"])) > 0:
            return True
        if rng.get("step") is not None:
            step = _int_value(qty(rng["step"]))
            added = _int_value(consumed) - _int_value(qty(rng.get("min", "0")))
            return bool(step) and (added - _go_div(added, step) * step) != 0
        return False
    vals = policy.get("validValues") or []
    return bool(vals) and not any(consumed.cmp(qty(v)) == 0 for v in vals)


def capacity_fits(
    req: Request, device: Mapping[str, Any], used: dict[str, Quantity] | None, allocating: dict[str, Quantity] | None
) -> tuple[bool, str]:
    """``CmpRequestOverCapacity``: (fits, why not)."""
    caps: Mapping[str, Any] = device.get("capacity") or {}
    for name in req.capacity:
        if name not in caps:
            return False, f"requested capacity {name} is not defined on the device"
    for name, cap in caps.items():
        consumed = _consumed(req.capacity.get(name), cap)
        if _violates(consumed, cap.get("requestPolicy")):
            return False, f"capacity {name}: request {consumed.fraction()} violates the request policy"
        total = consumed
        if used and name in used:
            total = used[name].add(total)
        if allocating and name in allocating:
            total = total.add(allocating[name])
        if total.cmp(qty(cap.get("value"))) > 0:
            return False, f"capacity {name} exhausted"
    return True, ""


class NodeAllocator:
    """One attempt for one pod on one node: the scheduler's ``Allocate``."""

    def __init__(
        self,
        claims: Sequence[Mapping[str, Any]],
        classes: Mapping[str, Mapping[str, Any]],
        pools: list[Pool],
        state: AllocatedState,
        node: str | None,
    ) -> None:
        self.claims, self.classes, self.pools, self.state, self.node = claims, classes, pools, state, node
        self.requests = [claim_requests(c) for c in claims]
        self.match_cache: dict[tuple[int, str, DeviceID], bool] = {}
        self.allocating: dict[DeviceID, set[int]] = {}
        self.allocating_capacity: dict[DeviceID, dict[str, Quantity]] = {}  # aggregated, as cel-go keeps it
        self.consumed_counters: dict[str, dict[str, dict[str, Quantity]]] = {}
        self.available_counters: dict[str, dict[str, dict[str, Quantity]]] = {}
        self.results: list[list[Result]] = [[] for _ in claims]
        self.constraints: list[list[_Constraint]] = []
        self.all_devices: dict[tuple[int, int, int], list[tuple[Pool, Mapping[str, Any], Mapping[str, Any]]]] = {}
        self._views: dict[DeviceID, DeviceView] = {}
        self.steps = 0

    # -- setup ----------------------------------------------------------------------------------
    def run(self) -> NodeOutcome:
        """Allocate or say why not; never raises for selector errors (they become ``error``)."""
        try:
            self._validate()
            done = self._one(0, 0, 0, 0, False, (0, 0, 0))
        except AllocationAborted as err:
            return NodeOutcome(self.node, None, str(err), str(err))
        if not done:
            if any(p.invalid for p in self.pools):
                return NodeOutcome(self.node, None, None, "invalid resource pools were encountered")
            return NodeOutcome(self.node, None, None, "cannot allocate all claims")
        return NodeOutcome(self.node, [r for rs in self.results for r in rs], None, None)

    def _validate(self) -> None:  # noqa: PLR0912 - mirrors the Go allocator's function branch for branch, so the differential test can be read against it
        for ci, claim in enumerate(self.claims):
            key = claim_key(claim)
            total = 0
            for ri, alts in enumerate(self.requests[ci]):
                counts = []
                for si, req in enumerate(alts):
                    for i, sel in enumerate(req.selectors):
                        if not sel:
                            raise AllocationAborted(
                                f"claim {key}, request {req.name}, selector #{i}: "
                                "CEL expression empty (unsupported selector type?)"
                            )
                    if not req.class_name:
                        raise AllocationAborted(
                            f"claim {key}, request {req.name}: missing device class name (unsupported request type?)"
                        )
                    if req.class_name not in self.classes:
                        raise AllocationAborted(
                            f"claim {key}, request {req.name}: could not retrieve device class {req.class_name}: "
                            f'deviceclass.resource.k8s.io "{req.class_name}" not found'
                        )
                    if req.mode == "All":
                        counts.append(self._prepare_all(ci, ri, si, req))
                    elif req.mode == "ExactCount":
                        counts.append(req.count)
                    else:
                        raise AllocationAborted(f"claim {key}, request {req.name}: unsupported count mode {req.mode}")
                total += min(counts) if counts else 0
            if total > MAX_RESULTS:
                raise AllocationAborted(
                    f"claim {key}: number of requested devices {total} exceeds the claim limit of {MAX_RESULTS}"
                )
            cons: list[_Constraint] = []
            for i, c in enumerate(((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []):
                if c.get("matchAttribute"):
                    cons.append(_Constraint(set(c.get("requests") or []), str(c["matchAttribute"]), distinct=False))
                elif c.get("distinctAttribute"):
                    cons.append(_Constraint(set(c.get("requests") or []), str(c["distinctAttribute"]), distinct=True))
                else:
                    raise AllocationAborted(f"claim {key}, constraint #{i}: empty constraint (unsupported constraint type?)")
            self.constraints.append(cons)

    def _prepare_all(self, ci: int, ri: int, si: int, req: Request) -> int:
        key = claim_key(self.claims[ci])
        found: list[tuple[Pool, Mapping[str, Any], Mapping[str, Any]]] = []
        for pool in self.pools:
            if pool.incomplete:
                raise AllocationAborted(
                    f"claim {key}, request {req.name}: asks for all devices, "
                    f"but resource pool {pool.pool_id} is currently being updated"
                )
            if pool.invalid:
                raise AllocationAborted(
                    f"claim {key}, request {req.name}: asks for all devices, "
                    f"but resource pool {pool.pool_id} is currently invalid"
                )
            for s in pool.slices:
                for d in _spec(s).get("devices") or []:
                    if self.selectable(ci, req, pool, s, d) and self._capacity_ok(req, pool, d)[0]:
                        found.append((pool, s, d))
        self.all_devices[(ci, ri, si)] = found
        return len(found)

    # -- per device -----------------------------------------------------------------------------
    def dev_id(self, pool: Pool, d: Mapping[str, Any]) -> DeviceID:
        """(driver, pool, device)."""
        return (pool.driver, pool.name, str(d.get("name", "")))

    def selectable(self, ci: int, req: Request, pool: Pool, s: Mapping[str, Any], d: Mapping[str, Any]) -> bool:
        """``isSelectable``: class selectors, request selectors, per-device node selection (cached)."""
        did = self.dev_id(pool, d)
        if d.get("bindingConditions"):
            pass  # the incubating allocator has binding conditions enabled
        ck = (ci, req.name, did)
        if ck in self.match_cache:
            return self.match_cache[ck]
        cls = self.classes.get(req.class_name) or {}
        class_sels = [str((x.get("cel") or {}).get("expression", "")) for x in (cls.get("spec") or {}).get("selectors") or []]
        ok = self._selectors(ci, did, d, class_sels, req.class_name) and self._selectors(ci, did, d, req.selectors, None)
        if ok and _spec(s).get("perDeviceNodeSelection"):
            ok = node_matches(self.node, {}, d.get("nodeName"), bool(d.get("allNodes")), d.get("nodeSelector"))
        self.match_cache[ck] = ok
        return ok

    def _selectors(self, ci: int, did: DeviceID, d: Mapping[str, Any], sels: list[str], class_name: str | None) -> bool:
        where = f"class {class_name}" if class_name is not None else f"claim {claim_key(self.claims[ci])}"
        for i, expr in enumerate(sels):
            try:
                sel = _compile(expr)
            except CelError as err:
                raise AllocationAborted(f"{where}: selector #{i}: CEL compile error: {err.message}") from None
            try:
                if not sel.matches_view(self.view(did, d)):
                    return False
            except CelError as err:
                raise AllocationAborted(f"{where}: selector #{i}: CEL runtime error: {err.message}") from None
        return True

    def view(self, did: DeviceID, d: Mapping[str, Any]) -> DeviceView:
        """The device as selectors see it (built once per attempt; answers are shared by projection)."""
        v = self._views.get(did)
        if v is None:
            v = self._views[did] = DeviceView.of(d, did[0])
        return v

    def _capacity_ok(self, req: Request, pool: Pool, d: Mapping[str, Any]) -> tuple[bool, str]:
        did = self.dev_id(pool, d)
        return capacity_fits(req, d, self.state.shared.get(did), self.allocating_capacity.get(did))

    def in_use(self, did: DeviceID) -> bool:
        """Allocated in the cluster (dedicated) or picked earlier in this attempt."""
        return did in self.state.devices or bool(self.allocating.get(did))

    def counters_fit(self, pool: Pool, d: Mapping[str, Any], reserve: bool) -> bool:
        """``checkAvailableCounters``; reserves the device's counters if it fits and ``reserve``."""
        avail = self.available_counters.get(pool.name)
        if avail is None:
            avail = {cs: dict(cnt) for cs, cnt in pool.counter_sets.items()}
            for s in [*pool.slices, *pool.other_slices]:
                for od in _spec(s).get("devices") or []:
                    if not self.state.in_use(self.dev_id(pool, od)):
                        continue
                    for cc in od.get("consumesCounters") or []:
                        cset = avail.get(str(cc.get("counterSet")), {})
                        for n, c in (cc.get("counters") or {}).items():
                            if n in cset:
                                cset[n] = cset[n].sub(qty(c.get("value")))
            self.available_counters[pool.name] = avail
        consumed = self.consumed_counters.setdefault(pool.name, {})
        self._counters_add(consumed, d, +1)
        ok = all(v.cmp(consumed.get(cs, {}).get(n, qty("0"))) >= 0 for cs, cnt in avail.items() for n, v in cnt.items())
        if not ok or not reserve:
            self._counters_add(consumed, d, -1)
        return ok

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
            return self._one(ci + 1, 0, 0, 0, False, (0, 0, 0))
        alts = self.requests[ci][ri]
        if not in_sub and len(alts) > 1:
            return any(self._one(ci, ri, s, 0, True, (0, 0, 0)) for s in range(len(alts)))
        req = alts[si]
        if req.mode == "All":
            devices = self.all_devices[(ci, ri, si)]
            if not devices:
                return False
            if di >= len(devices):
                return self._one(ci, ri + 1, 0, 0, False, (0, 0, 0))
            self._step()
            pool, s, d = devices[di]
            undo = self._allocate(ci, req, pool, s, d, must=True)
            if undo is None:
                return False
            if self._one(ci, ri, si, di + 1, in_sub, (0, 0, 0)):
                return True
            undo()
            return False
        if di >= req.count:
            return self._one(ci, ri + 1, 0, 0, False, (0, 0, 0))
        if len(self.results[ci]) + req.count - di > MAX_RESULTS:
            return False
        for pi in range(start[0], len(self.pools)):
            pool = self.pools[pi]
            if pool.incomplete or pool.invalid:
                continue
            s0 = start[1] if pi == start[0] else 0
            for sj in range(s0, len(pool.slices)):
                s = pool.slices[sj]
                devs = _spec(s).get("devices") or []
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
                    if not self._capacity_ok(req, pool, d)[0]:
                        continue
                    undo = self._allocate(ci, req, pool, s, d, must=False)
                    if undo is None:
                        continue
                    if self._one(ci, ri, si, di + 1, in_sub, (pi, sj, dk + 1)):
                        return True
                    undo()
        return False

    def _step(self) -> None:
        self.steps += 1
        if self.steps > MAX_SEARCH_STEPS:
            where = f"node {self.node}: " if self.node else ""
            raise AllocationAborted(
                f"{where}timed out trying to allocate devices (the simulation gave up after trying {MAX_SEARCH_STEPS} "
                "devices; the scheduler gives up after its filter timeout, 10s by default)"
            )

    def _allocate(self, ci: int, req: Request, pool: Pool, s: Mapping[str, Any], d: Mapping[str, Any], *, must: bool) -> Any:  # noqa: PLR0911, PLR0912 - mirrors the Go allocator's function branch for branch, so the differential test can be read against it
        did = self.dev_id(pool, d)
        shared = bool(d.get("allowMultipleAllocations"))
        if not shared and req.admin_access and ci in self.allocating.get(did, set()):
            return None
        if not req.admin_access and self.in_use(did):
            return None
        skip_counters = shared and (did in self.state.shared or did in self.allocating_capacity)
        reserved = False
        if not skip_counters and d.get("consumesCounters"):
            if not self.counters_fit(pool, d, reserve=True):
                return None
            reserved = True
        undo_steps: list[Any] = []
        if reserved:
            undo_steps.append(lambda: self._counters_add(self.consumed_counters[pool.name], d, -1))

        def rollback() -> None:
            for step in reversed(undo_steps):
                step()

        if untolerated_taint(d, req) is not None:
            rollback()
            return None
        for c in self.constraints[ci]:
            if not c.add(req, d, did):
                rollback()
                if must:
                    raise AllocationAborted(
                        f"claim {claim_key(self.claims[ci])}, request {req.name}: cannot add device "
                        f"{did[0]}/{did[1]}/{did[2]} because a claim constraint would not be satisfied"
                    )
                return None
            undo_steps.append(lambda c=c: c.remove(req))
        if not shared:
            self.allocating.setdefault(did, set()).add(ci)
            undo_steps.append(lambda: self.allocating[did].discard(ci))
        ok, _ = self._capacity_ok(req, pool, d)
        if not ok:
            rollback()
            return None
        consumed: dict[str, Quantity] = {}
        if shared:
            consumed = {n: _consumed(req.capacity.get(n), cap) for n, cap in (d.get("capacity") or {}).items()}
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
            Result(claim_key(self.claims[ci]), req.name, did[0], did[1], did[2], shared, consumed, req.admin_access)
        )
        undo_steps.append(lambda: self.results[ci].__delitem__(slice(n, None)))
        return rollback


def _lookup_attribute(d: Mapping[str, Any], driver: str, name: str) -> Mapping[str, Any] | None:
    attrs: Mapping[str, Any] = d.get("attributes") or {}
    if name in attrs:
        return dict(attrs[name])
    if "/" in name:
        domain, ident = name.split("/", 1)
        if domain == driver and ident in attrs:
            return dict(attrs[ident])
    return None


def _attr_key(a: Mapping[str, Any]) -> tuple[str, Any] | None:
    for t in ("string", "int", "bool", "version"):
        if t in a:
            return t, a[t]
    return None


class _Constraint:
    """matchAttribute / distinctAttribute with the allocator's bookkeeping quirks."""

    def __init__(self, requests: set[str], attribute: str, *, distinct: bool) -> None:
        self.requests, self.attribute, self.distinct = requests, attribute, distinct
        self.values: dict[str, tuple[str, Any]] = {}  # distinct: one value per request name (a known quirk)
        self.first: tuple[str, Any] | None = None
        self.n = 0

    def _applies(self, req: Request) -> bool:
        if not self.requests:
            return True
        return req.base in self.requests or (bool(req.sub) and req.name in self.requests)

    def add(self, req: Request, d: Mapping[str, Any], did: DeviceID) -> bool:
        """Whether the device may join; records it if so."""
        if not self._applies(req):
            return True
        attr = _lookup_attribute(d, did[0], self.attribute)
        key = _attr_key(attr) if attr is not None else None
        if key is None:
            return False
        if self.n == 0:
            if self.distinct:
                self.values[req.base] = key
            else:
                self.first = key
            self.n = 1
            return True
        if self.distinct:
            if any(v == key for v in self.values.values()):
                return False
            self.values[req.base] = key
        elif key != self.first:
            return False
        self.n += 1
        return True

    def remove(self, req: Request) -> None:
        """Undo the latest :meth:`add` for ``req``."""
        if not self._applies(req):
            return
        if self.distinct:
            self.values.pop(req.base, None)
        self.n -= 1
        if self.n == 0:
            self.first = None


def explain_request(allocator: NodeAllocator, ci: int, req: Request) -> list[Candidate]:
    """Every device of the node's pools with its first reason, in the allocator's order.

    Unlike the search this evaluates every device, so it can show an error the scheduler would
    only reach later; the outcome (allocation or abort) comes from :meth:`NodeAllocator.run`.
    """
    out: list[Candidate] = []
    node = allocator.node
    for pool in allocator.pools:
        if pool.incomplete or pool.invalid:
            out.append(
                Candidate(
                    node, f"{pool.name}/*", "unavailable", pool.incomplete or f"pool {pool.pool_id} is invalid: {pool.invalid}"
                )
            )
            continue
        for s in pool.slices:
            for d in _spec(s).get("devices") or []:
                out.append(_explain_device(allocator, ci, req, pool, s, d))
    return out


def _explain_device(a: NodeAllocator, ci: int, req: Request, pool: Pool, s: Mapping[str, Any], d: Mapping[str, Any]) -> Candidate:  # noqa: PLR0911, PLR0917 - mirrors the Go allocator's function branch for branch, so the differential test can be read against it
    did = a.dev_id(pool, d)
    name = f"{pool.name}/{did[2]}"
    if did in a.state.devices and not req.admin_access:
        return Candidate(a.node, name, "unavailable", f"already allocated to claim {a.state.devices[did]}")
    cls = a.classes.get(req.class_name) or {}
    groups = [
        (
            f"class {req.class_name}",
            [str((x.get("cel") or {}).get("expression", "")) for x in (cls.get("spec") or {}).get("selectors") or []],
        ),
        ("request " + req.name, req.selectors),
    ]
    for where, sels in groups:
        for i, expr in enumerate(sels):
            try:
                ok = _compile(expr).matches_view(a.view(did, d))
            except CelError as err:
                kind = "CEL compile error" if err.kind == "compile" else "CEL runtime error"
                return Candidate(a.node, name, "error", f"{where} selector #{i}: {kind}: {err.message}")
            if not ok:
                return Candidate(a.node, name, "no-match", f"{where} selector #{i} is false: {expr}")
    if _spec(s).get("perDeviceNodeSelection") and not node_matches(
        a.node, {}, d.get("nodeName"), bool(d.get("allNodes")), d.get("nodeSelector")
    ):
        return Candidate(a.node, name, "unavailable", "device is not available on this node")
    ok, why = a._capacity_ok(req, pool, d)
    if not ok:
        return Candidate(a.node, name, "unavailable", why)
    if d.get("consumesCounters") and not d.get("allowMultipleAllocations") and not a.counters_fit(pool, d, reserve=False):
        return Candidate(a.node, name, "unavailable", "shared counters exhausted (partitions already in use)")
    taint = untolerated_taint(d, req)
    if taint is not None:
        return Candidate(
            a.node,
            name,
            "unavailable",
            f"taint {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')} is not tolerated",
        )
    return Candidate(a.node, name, "match", "")
