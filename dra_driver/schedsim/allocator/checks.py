"""The allocator's per-device rules besides selectors and counters: taints, and consumable capacity.

Called by the allocator (``simulate.py``) and by candidate explanations (``candidates.py``).
:func:`untolerated_taint` is the first NoSchedule/NoExecute taint no toleration covers;
:func:`capacity_fits` is ``CmpRequestOverCapacity``, with the request rounded up to the device's
request policy (:func:`consumed_capacity`) as the Go allocator rounds it (with Kubernetes 1.37's
fractional ranges where the caller's rules say so).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dra_driver.core.quantity import Quantity
from dra_driver.schedsim.allocator.model import Request, qty


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


INT64_MAX = 2**63 - 1
_NOT_REPRESENTABLE = "capacity request cannot be represented in the device's range arithmetic"


class CapacityError(Exception):
    """A request's capacity cannot be computed (Kubernetes 1.37+): the scheduler aborts the attempt with this text."""


def consumed_capacity(  # noqa: PLR0911 - mirrors the Go allocator's function branch for branch, so the differential test can be read against it
    req_val: Quantity | None, cap: Mapping[str, Any], *, fractional: bool = False, milli: bool = False
) -> Quantity:
    """``calculateConsumedCapacity``: the request rounded up to the policy, else the default, else all.

    ``fractional``: Kubernetes 1.37's rounding, which raises :class:`CapacityError` for a request it
    cannot represent and keeps the step's format; before, ``Value()`` arithmetic only. ``milli``
    (DRAFractionalCapacityRange on): a range exact in milli units rounds in milli units.
    """
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
        if fractional:
            return _round_up_range(req_val, lo, qty(rng["step"]), milli and _use_milli(rng))
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


def _milli(q: Quantity) -> int | None:
    """``safeMilliValue``: the value in milli units when that is exact and an int64, else None."""
    f = q.fraction() * 1000
    if f.denominator != 1 or not -(2**63) <= f.numerator <= INT64_MAX:
        return None
    return int(f.numerator)


def _use_milli(rng: Mapping[str, Any]) -> bool:
    """``useMilli``: every bound of the range is exact in milli units, and the step at least 1m."""
    for key in ("min", "max", "step"):
        if rng.get(key) is None:
            continue
        m = _milli(qty(rng[key]))
        if m is None or (key == "step" and m < 1):
            return False
    return True


def _round_up_range(req_val: Quantity, lo: Quantity, step_q: Quantity, milli: bool) -> Quantity:
    """``roundUpRange`` of 1.37 above the minimum: up to the next step, in milli or integer units, in the step's format."""
    if milli:
        r = _milli(req_val)
        if r is None:
            raise CapacityError(f"{_NOT_REPRESENTABLE}: request {go_string(req_val)} is not a representable milli value")
        step, m = _milli(step_q) or 1, _milli(lo) or 0
        added = r - m
        n = _go_div(added, step) + (1 if added - _go_div(added, step) * step != 0 else 0)
        if n > _go_div(INT64_MAX - m, step):
            raise CapacityError(
                f"{_NOT_REPRESENTABLE}: rounding request {go_string(req_val)} up to the next step passes the milli-value range"
            )
        val = m + step * n
        if val % 1000 == 0:
            return Quantity(val // 1000, 0, small=True, fmt=step_q.format)
        return Quantity(val, -3, small=True, fmt=step_q.format)
    if req_val.cmp(Quantity(INT64_MAX, 0, small=True)) > 0:
        raise CapacityError(f"{_NOT_REPRESENTABLE}: request {go_string(req_val)} exceeds MaxInt64")
    r, step, m = _int_value(req_val), _int_value(step_q), _int_value(lo)
    added = r - m
    n = _go_div(added, step) + (1 if step and added - _go_div(added, step) * step != 0 else 0)
    if m >= 0 and step and n > _go_div(INT64_MAX - m, step):
        raise CapacityError(f"{_NOT_REPRESENTABLE}: rounding request {go_string(req_val)} up to the next step passes MaxInt64")
    return Quantity(m + step * n, 0, small=True, fmt=step_q.format)


_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIXES = ((60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki"))


def go_string(q: Quantity) -> str:
    """``Quantity.String()``, the canonical form (values finer than 1n rounded up, as Go rounds them)."""
    f = q.fraction()
    sign = "-" if f < 0 else ""
    f = abs(f)
    if q.format == "BinarySI" and f.denominator == 1 and f >= 1024:
        binary = next(
            (f"{f.numerator >> shift}{suffix}" for shift, suffix in _BINARY_SUFFIXES if f.numerator % (1 << shift) == 0), None
        )
        if binary is not None:
            return sign + binary
    nanos = -((-f.numerator * 10**9) // f.denominator)
    exp = -9
    while nanos and nanos % 1000 == 0 and exp < 18:
        nanos //= 1000
        exp += 3
    suffix = (f"e{exp}" if exp else "") if q.format == "DecimalExponent" else _DECIMAL_SUFFIXES[exp]
    return f"{sign}{nanos}{suffix}" if nanos else "0"


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


def _off_step(consumed: Quantity, rng: Mapping[str, Any], milli: bool) -> bool:
    """``violateValidRange``'s step check: not min plus a multiple of the step (``milli``: in milli units where it can)."""
    if milli and _use_milli(rng):
        value = _milli(consumed)
        step, lo = _milli(qty(rng["step"])) or 1, _milli(qty(rng.get("min", "0"))) or 0
        return value is None or (value - lo) - _go_div(value - lo, step) * step != 0
    step = _int_value(qty(rng["step"]))
    added = _int_value(consumed) - _int_value(qty(rng.get("min", "0")))
    return bool(step) and (added - _go_div(added, step) * step) != 0


def _violates(consumed: Quantity, policy: Mapping[str, Any] | None, *, milli: bool = False) -> bool:
    """``violatesPolicy`` (``milli``: DRAFractionalCapacityRange's milli-unit step check where the range allows it)."""
    if not policy:
        return False
    if policy.get("default") is not None and _same_quantity(consumed, qty(policy["default"])):
        return False
    rng = policy.get("validRange")
    if rng is not None:
        if rng.get("max") is not None and consumed.cmp(qty(rng["max"])) > 0:
            return True
        return rng.get("step") is not None and _off_step(consumed, rng, milli)
    vals = policy.get("validValues") or []
    return bool(vals) and not any(consumed.cmp(qty(v)) == 0 for v in vals)


def capacity_fits(
    req: Request,
    device: Mapping[str, Any],
    used: dict[str, Quantity] | None,
    allocating: dict[str, Quantity] | None,
    *,
    fractional: bool = False,
    milli: bool = False,
) -> tuple[bool, str]:
    """``CmpRequestOverCapacity``: (fits, why not).

    ``fractional`` (Kubernetes 1.37+): every capacity is resolved first, and one that cannot be
    represented, or comes out negative, raises :class:`CapacityError` (the scheduler aborts).
    ``milli``: DRAFractionalCapacityRange (see :func:`consumed_capacity`).
    """
    caps: Mapping[str, Any] = device.get("capacity") or {}
    for name in req.capacity:
        if name not in caps:
            return False, f"requested capacity {name} is not defined on the device"
    resolved: dict[str, Quantity] = {}
    if fractional:
        for name, cap in caps.items():
            try:
                consumed = consumed_capacity(req.capacity.get(name), cap, fractional=True, milli=milli)
            except CapacityError as err:
                raise CapacityError(f"capacity {json.dumps(name)}: {err}") from None
            if consumed.sign() < 0:
                raise CapacityError(f"capacity {json.dumps(name)}: capacity value is negative")
            resolved[name] = consumed
    for name, cap in caps.items():
        consumed = resolved[name] if fractional else consumed_capacity(req.capacity.get(name), cap)
        if _violates(consumed, cap.get("requestPolicy"), milli=milli):
            return False, f"capacity {name}: request {consumed.fraction()} violates the request policy"
        total = consumed
        if used and name in used:
            total = used[name].add(total)
        if allocating and name in allocating:
            total = total.add(allocating[name])
        if total.cmp(qty(cap.get("value"))) > 0:
            return False, f"capacity {name} exhausted"
    return True, ""
