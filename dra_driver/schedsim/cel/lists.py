"""CEL's list, set and map functions (Kubernetes ``lists`` and ``sets`` libraries, DRA's ``includes``).

Called by the function library (``library.py``), which binds them to their overloads. Element
equality is cel-go's (an element that cannot be compared is skipped, not an error); sorting and
``min``/``max`` need comparable elements of one type, as in cel-go.
"""

from __future__ import annotations

import functools
from typing import Any

from dra_driver.schedsim.cel.operators import Impl, add, needle_equal
from dra_driver.schedsim.cel.values import EvalError, compare, go_v, has_trait, map_contains


# -- lists and sets ----------------------------------------------------------------------------------
def contains(items: list[Any], v: Any) -> bool:
    """Whether ``items`` holds ``v`` (elements that cannot be compared are skipped)."""
    for x in items:
        try:
            if needle_equal(v, x):
                return True
        except EvalError:
            continue
    return False


def sublist(items: list[Any], start: int, end: int) -> list[Any]:
    """``list.slice(start, end)``."""
    if start < 0 or end < 0:
        raise EvalError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise EvalError(f"cannot slice({start}, {end}), start index must be less than or equal to end index")
    if len(items) < end:
        raise EvalError(f"cannot slice({start}, {end}), list is length {len(items)}")
    return items[start:end]


def flatten(items: list[Any], depth: int = 1) -> list[Any]:
    """``list.flatten([depth])``."""
    if depth < 0:
        raise EvalError("level must be non-negative")
    out: list[Any] = []
    for x in items:
        if type(x) is list and depth != 0:
            out.extend(flatten(x, depth - 1))
        else:
            out.append(x)
    return out


def distinct(items: list[Any]) -> list[Any]:
    """``list.distinct()``: the first of each equal run, in order."""
    out: list[Any] = []
    for x in items:
        if not any(safe_eq(x, y) for y in out):
            out.append(x)
    return out


def safe_eq(a: Any, b: Any) -> bool:
    """Equality where an incomparable pair is simply unequal."""
    try:
        return needle_equal(a, b)
    except EvalError:
        return False


def sort(items: list[Any]) -> list[Any]:
    """``list.sort()``: comparable elements of one type."""
    if not items:
        return items
    if not has_trait(items[0], "compare"):
        raise EvalError("list elements must be comparable")
    first = type(items[0])
    for x in items:
        if type(x) is not first:
            raise EvalError("list elements must have the same type")
    return sorted(items, key=functools.cmp_to_key(compare))


def int_range(n: int) -> list[int]:
    """``lists.range(n)``: ``[0, n)``."""
    return list(range(n))


MAX_RANGE_SIZE = 1_000_000  # cel-go v0.29's default ListsMaxRangeSize


def int_range_bounded(n: int) -> list[int]:
    """``lists.range(n)`` of cel-go v0.29: ``[0, n)``, an error for a negative n or one above 1,000,000."""
    if n < 0:
        raise EvalError(f"lists.range: size must be non-negative, got {n}")
    if n > MAX_RANGE_SIZE:
        raise EvalError(f"lists.range: size {n} exceeds maximum allowed ({MAX_RANGE_SIZE})")
    return list(range(n))


def is_sorted(items: list[Any]) -> bool:
    """``list.isSorted()``."""
    for x in items:
        if not has_trait(x, "compare"):
            raise EvalError("no such overload")
    return all(compare(items[i], items[i + 1]) != 1 for i in range(len(items) - 1))


def sum_from(zero: Any) -> Impl:
    """``list.sum()`` starting from ``zero`` (the element type's zero)."""

    def run(items: list[Any]) -> Any:
        acc = zero
        for x in items:
            if not has_trait(x, "add"):
                raise EvalError("no such overload")
            acc = add(acc, x)
        return acc

    return run


def extreme(name: str, prefer: int) -> Impl:
    """``list.max()`` / ``list.min()``: ``prefer`` is the comparison result that replaces the best so far."""

    def run(items: list[Any]) -> Any:
        best = None
        for x in items:
            if not has_trait(x, "compare"):
                raise EvalError("no such overload")
            if best is None or compare(best, x) == prefer:
                best = x
        if best is None:
            raise EvalError(f"{name} called on empty list")
        return best

    return run


def index_of(items: list[Any], v: Any) -> int:
    """``list.indexOf(v)``, -1 if absent."""
    for i, x in enumerate(items):
        if _elem_equal(x, v):
            return i
    return -1


def last_index_of(items: list[Any], v: Any) -> int:
    """``list.lastIndexOf(v)``, -1 if absent."""
    for i in range(len(items) - 1, -1, -1):
        if _elem_equal(items[i], v):
            return i
    return -1


def _elem_equal(elem: Any, v: Any) -> bool:
    try:
        return needle_equal(elem, v)
    except EvalError:
        return False


def sets_contains(a: list[Any], b: list[Any]) -> bool:
    """``sets.contains(a, b)``: every element of ``b`` is in ``a``."""
    return all(contains(a, x) for x in b)


def sets_intersects(a: list[Any], b: list[Any]) -> bool:
    """``sets.intersects(a, b)``: some element is in both."""
    return any(contains(b, x) for x in a)


def includes_unbounded(target: Any, arg: Any) -> bool:
    """The lists library's ``includes(target, arg)`` (Kubernetes 1.37+): list membership, else equality."""
    if type(target) is list:
        return any(safe_eq(x, arg) for x in target)
    return safe_eq(target, arg)


def includes(target: Any, arg: Any) -> bool:
    """DRA's ``includes(target, arg)`` (Kubernetes 1.36): list membership (at most 48 values), else equality."""
    if type(target) is list:
        for i, x in enumerate(target):
            if i >= 48:
                raise EvalError("'includes' function cannot be applied to lists longer than 48 values")
            if safe_eq(x, arg):
                return True
        return False
    return safe_eq(target, arg)


def map_insert(m: dict[Any, Any], k: Any, v: Any) -> dict[Any, Any]:
    """``cel.@mapInsert(m, k, v)``: a copy with the new key; an existing key is an error."""
    if map_contains(m, k):
        raise EvalError(f"insert failed: key {go_v(k)} already exists")
    out = dict(m)
    out[k] = v
    return out


def map_insert_map(m: dict[Any, Any], update: dict[Any, Any]) -> dict[Any, Any]:
    """``cel.@mapInsert(m, update)``: every key of ``update`` inserted in turn."""
    for k, v in update.items():
        m = map_insert(m, k, v)
    return m
