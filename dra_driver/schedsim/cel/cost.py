"""What one function call costs at run time, as cel-go's cost tracker charges it in the scheduler.

Called by the metered planner (``metered.py``) after each call it evaluates. The scheduler's CEL
programs track cost (``cel.CostLimit(resource.CELSelectorExpressionMaxCost)``) with three layers,
tried in this order, as ``interpreter/runtimecost.go`` ``costCall`` does: the extension
libraries' trackers (``ext`` lists v3 and sets), the Kubernetes library's ``CallCost``
(``k8s.io/apiserver/pkg/cel/library/cost.go``: regex ``find``, quantity, semver, the lists library,
strings, IP, CIDR, URL, format, authorization) and cel-go's defaults by overload id (string
comparisons and ``==`` by the shorter operand's size, ``+`` of strings by both, ``contains`` and
``matches`` by the product of sizes, ``in`` a list by its length, anything else 1). Sizes are
CEL's ``size()``: characters of a string, bytes, list items, map entries; anything else counts 1.
A call whose overload the checker could not pin to one (``dyn`` operands) has no overload id
at run time and costs 1 unless the Kubernetes library prices its function by name.
"""

from __future__ import annotations

import math
from typing import Any

from dra_driver.core.quantity import Quantity
from dra_driver.schedsim.cel.costmath import (
    AUTHZ_CHECK_COST,
    FLAT_COST_FUNCTIONS,
    LIST_CREATE_BASE_COST,
    REGEX_STRING_LENGTH_COST_FACTOR,
    STRING_TRAVERSAL_COST_FACTOR,
    U64,
)
from dra_driver.schedsim.cel.semver import Semver
from dra_driver.schedsim.cel.values import Optional

_TRAVERSED = ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf")
_SCANNED = frozenset({"url", "lowerAscii", "upperAscii", "substring", "trim", "jsonpatch.escapeKey"})
_PARSED = frozenset({"cidr", "isIP", "isCIDR", "quantity", "isQuantity", "semver", "isSemver"})
_MIN_SIZE = frozenset(
    {
        "less_string",
        "greater_string",
        "less_equals_string",
        "greater_equals_string",
        "less_bytes",
        "greater_bytes",
        "less_equals_bytes",
        "greater_equals_bytes",
        "equals",
        "not_equals",
    }
)
_SORTS = frozenset(
    f"list_{t}_{suffix}"
    for t in ("int", "uint", "double", "bool", "google.protobuf.Duration", "google.protobuf.Timestamp", "string", "bytes")
    for suffix in ("sort", "sortByAssociatedKeys")
)


def size(v: Any) -> int:
    """``actualSize``: the ``size()`` of a string, bytes, list or map (an optional's value's); else 1."""
    t = type(v)
    if t is str or t is bytes or t is list or isinstance(v, dict):
        return len(v)
    if t is Optional and v.has:
        return size(v.value)
    return 1


def _scan(n: int, factor: float = STRING_TRAVERSAL_COST_FACTOR) -> int:
    """``uint64(math.Ceil(float64(n) * factor))``."""
    return math.ceil(float(n) * factor)


def _traversal(v: Any) -> int:
    """The Kubernetes library's ``traversalCost`` (strings by their bytes, truncated; containers summed)."""
    t = type(v)
    if t is str:
        return int(float(len(v.encode("utf-8", "surrogatepass"))) * STRING_TRAVERSAL_COST_FACTOR)
    if t is bytes:
        return int(float(len(v)) * STRING_TRAVERSAL_COST_FACTOR)
    if t is list:
        return sum(_traversal(x) for x in v)
    if isinstance(v, dict):
        return sum(_traversal(k) + _traversal(x) for k, x in v.items())
    return 1


def _list_call(factor: float, n: int) -> int:
    """``trackAllocatingListCall``: the result's size times the factor, the call and the allocation."""
    if factor < 0:
        factor = 1.0
    return min(int(float(n) * factor) + 1 + LIST_CREATE_BASE_COST, U64)


def _self_compare(items: Any) -> int:
    """``trackListSelfCompare``: O(n**2) over a list, more for strings and bytes."""
    n = size(items)
    factor = 2.0
    if n == 0:
        return _list_call(factor, 0)
    if type(items) is list and type(items[0]) in (str, bytes):
        factor += STRING_TRAVERSAL_COST_FACTOR
    return _list_call(factor, min(n * n, U64))


def _extension(overload: str, args: list[Any], result: Any) -> int | None:
    """The ``ext`` libraries' trackers (lists v3, sets)."""
    if overload in ("list_slice", "lists_range", "list_reverse"):
        return _list_call(1.0, size(result))
    if overload in ("list_flatten", "list_flatten_int"):
        depth = float(args[1]) if len(args) == 2 and type(args[1]) is int else 1.0
        return _list_call(depth, size(args[0]))
    if overload == "list_distinct":
        return _self_compare(args[0])
    if overload in _SORTS:
        return _self_compare(args[1] if overload.endswith("sortByAssociatedKeys") else args[0])
    if overload in ("list_sets_contains_list", "list_sets_intersects_list", "list_sets_equivalent_list"):
        factor = 2.0 if overload == "list_sets_equivalent_list" else 1.0
        return min(1 + int(float(size(args[0]) * size(args[1])) * factor), U64)
    return None


def _kubernetes(function: str, overload: str, args: list[Any], result: Any, minor: int) -> int | None:  # noqa: PLR0911 - one branch per function, as the Kubernetes library's CallCost
    """``library.CostEstimator.CallCost``."""
    if function == "check":
        return AUTHZ_CHECK_COST
    if function in FLAT_COST_FUNCTIONS:
        return 1
    if function in ("fieldSelector", "labelSelector") and len(args) >= 2:
        n = size(args[1])
        parse = _scan(n)
        per = _scan(_scan(n, 0.5), float(LIST_CREATE_BASE_COST + 40))
        return LIST_CREATE_BASE_COST + parse + per
    if function in _TRAVERSED or (function == "includes" and minor >= 37):
        return _traversal(args[0]) if args else 0
    if function in _SCANNED and args:
        return _scan(size(args[0]))
    if function in ("replace", "split") and args:
        return _scan(size(args[0]), 2 * STRING_TRAVERSAL_COST_FACTOR)
    if function == "join" and args:
        return _scan(size(result), 2 * STRING_TRAVERSAL_COST_FACTOR)
    if function in ("find", "findAll") and len(args) >= 2:
        return _scan(1 + size(args[0])) * _scan(size(args[1]), REGEX_STRING_LENGTH_COST_FACTOR)
    if function in _PARSED and args:
        return _scan(size(args[0]))
    if function == "ip" and args:
        return 1 if overload == "cidr_ip" else _scan(size(args[0]))
    if function == "ip.isCanonical" and args:
        return _scan(size(args[0]), 2 * STRING_TRAVERSAL_COST_FACTOR)
    if function == "_==_" and len(args) == 2 and type(args[0]) in (Quantity, Semver):
        return 1
    return None


def call_cost(function: str, overload: str, args: list[Any], result: Any, *, minor: int, cel_go: int) -> int:  # noqa: PLR0911 - one branch per priced overload, as cel-go's costCall
    """What cel-go charges for one call of ``function`` (``overload``: "" when not pinned) on ``args``."""
    overload = overload.split("@", 1)[0] if "@cel-go" in overload else overload
    tracked = _extension(overload, args, result)
    if tracked is not None:
        return tracked
    k8s = _kubernetes(function, overload, args, result, minor)
    if k8s is not None:
        return k8s
    if overload in ("starts_with_string", "ends_with_string"):
        return _scan(size(args[1] if cel_go >= 29 else args[0]))
    if overload in ("string_to_bytes", "bytes_to_string", "strings_quote", "string_format"):
        return _scan(size(args[0]))
    if overload == "in_list":
        return size(args[1])
    if overload in _MIN_SIZE:
        return _scan(min(size(args[0]), size(args[1])))
    if overload in ("add_string", "add_bytes"):
        return _scan(size(args[0]) + size(args[1]))
    if overload == "matches_string" or (overload == "matches" and cel_go >= 29):
        return _scan(1 + size(args[0])) * _scan(size(args[1]), REGEX_STRING_LENGTH_COST_FACTOR)
    if overload == "contains_string":
        return _scan(size(args[0])) * _scan(size(args[1]))
    return 1


__all__ = ["call_cost", "size"]
