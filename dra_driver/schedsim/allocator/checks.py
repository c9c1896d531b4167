"""The allocator's per-device rules besides selectors and counters: taints, and consumable capacity.

Called by the allocator (``simulate.py``) and by candidate explanations (``candidates.py``).
:func:`untolerated_taint` is the first NoSchedule/NoExecute taint no toleration covers;
:func:`capacity_fits` is ``CmpRequestOverCapacity``, with the request rounded up to the device's
request policy (:func:`consumed_capacity`) as the Go allocator rounds it.
"""

from __future__ import annotations

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


def consumed_capacity(req_val: Quantity | None, cap: Mapping[str, Any]) -> Quantity:  # noqa: PLR0911 - mirrors the Go allocator's function branch for branch, so the differential test can be read against it
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
        consumed = consumed_capacity(req.capacity.get(name), cap)
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
