"""The call estimates of the libraries the DRA environment declares: cel-go's extensions and Kubernetes'.

Called by the estimator (``estimate.py``) for each overload of each call, before cel-go's own
defaults: the ``ext`` lists (v3) and sets libraries' overload estimators (``ext/lists.go``,
``ext/sets.go``), then the Kubernetes library's ``EstimateCallCost``
(``k8s.io/apiserver/pkg/cel/library/cost.go``, by function name: regex ``find``, quantity, semver,
the lists library and ``includes``, strings, URL, IP, CIDR, format, authorization; 1.36's DRA
``includes``). ``size`` is the estimator's ``sizeEstimate`` of a node: computed, declared, or unknown.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dra_driver.schedsim.cel import types
from dra_driver.schedsim.cel.costmath import (
    AUTHZ_CHECK_COST,
    FLAT_COST_FUNCTIONS,
    LIST_CREATE_BASE_COST,
    MAX_ATTRIBUTE_VALUES,
    MAX_FORMAT_SIZE,
    MAX_NAME_FORMAT_REGEX_SIZE,
    REGEX_STRING_LENGTH_COST_FACTOR,
    STRING_TRAVERSAL_COST_FACTOR,
    TWO_TO_64,
    U64,
    Est,
    Node,
    e_add,
    e_factor,
    e_mul,
    fixed,
)
from dra_driver.schedsim.cel.nodes import Expr, Literal

Sizer = Callable[[Node], Est]
_O1_STRUCTS = frozenset({"kubernetes.Quantity", "kubernetes.Semver"})
_COMPARABLE = ("int", "uint", "double", "bool", "google.protobuf.Duration", "google.protobuf.Timestamp", "string", "bytes")


def _uint_literal(e: Expr | None, default: int) -> int:
    """``nodeAsUintValue``: an int literal (negative: 0), else ``default``."""
    if isinstance(e, Literal) and type(e.value) is int:
        return max(0, e.value)
    return default


def extension_cost(size: Sizer, overload: str, target: Node | None, args: list[Node]) -> tuple[Est, Est | None] | None:  # noqa: PLR0911, PLR0912 - one branch per extension overload
    """The cel-go extension libraries' overload estimators (lists v3, sets)."""
    if overload == "list_slice":
        if target is None or len(args) != 2:
            return None
        sz = size(target)
        start = _uint_literal(args[0].expr, 0)
        end = _uint_literal(args[1].expr, sz[1])
        return _alloc_list(1.0, fixed((end - start) & U64))
    if overload == "lists_range":
        if target is not None or len(args) != 1:
            return None
        return _alloc_list(1.0, fixed(_uint_literal(args[0].expr, U64)))
    if overload == "list_reverse":
        if target is None or args:
            return None
        return _alloc_list(1.0, size(target))
    if overload in ("list_flatten", "list_flatten_int"):
        if target is None or len(args) > 1:
            return None
        depth = _uint_literal(args[0].expr, U64) if args else 1
        return _alloc_list(float(depth), size(target))
    if overload == "list_distinct":
        if target is None or args:
            return None
        sz = size(target)
        return _alloc_list(2.0, e_mul(sz, sz))
    for t in _COMPARABLE:
        if overload == f"list_{t}_sort":
            if target is None or args:
                return None
            return _sort_cost(size, target, t)
        if overload == f"list_{t}_sortByAssociatedKeys":
            if target is None or len(args) != 1:
                return None
            return _sort_cost(size, args[0], t)
    if overload in ("list_sets_contains_list", "list_sets_intersects_list", "list_sets_equivalent_list"):
        if len(args) != 2:
            return None
        factor = 2.0 if overload == "list_sets_equivalent_list" else 1.0
        a, b = size(args[0]), size(args[1])
        return e_add(e_factor(e_mul(a, b), factor), fixed(1)), None
    return None


def _sort_cost(size: Sizer, n: Node, elem: str) -> tuple[Est, Est | None]:
    sz = size(n)
    factor = 2.0 + (STRING_TRAVERSAL_COST_FACTOR if elem in ("string", "bytes") else 0.0)
    return _alloc_list(factor, e_mul(sz, sz))


def list_element(target: Node) -> Node | None:
    """The Kubernetes library's ``listElementNode``: a node for the target's first type parameter."""
    if not target.type.params:
        return None
    path = [*target.path, "@items"] if target.path is not None else None
    return Node(path, target.type.params[0], None, None)


def kubernetes_cost(  # noqa: PLR0911, PLR0912, PLR0915 - one branch per function, as the Kubernetes library's EstimateCallCost
    size: Sizer, includes: str, function: str, overload: str, *, target: Node | None, args: list[Node]
) -> tuple[Est, Est | None] | None:
    """``library.CostEstimator.EstimateCallCost`` (and 1.36's DRA ``includes``)."""
    if function == "includes" and overload == "dra_includes_dyn_dyn" and includes == "dra" and target is not None:
        return (0, MAX_ATTRIBUTE_VALUES), None
    if function == "check":
        return fixed(AUTHZ_CHECK_COST), None
    if function in FLAT_COST_FUNCTIONS:
        return fixed(1), None
    if function in ("fieldSelector", "labelSelector"):
        return (_selector_cost(size(args[0])), None) if len(args) == 1 else None
    listy = ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf", "includes")
    if function in listy and (function != "includes" or includes == "lists"):
        if target is None:
            return None
        el = list_element(target)
        if el is not None:
            el_cost = fixed(1)
            if el.type.kind in (types.STRING_KIND, types.BYTES_KIND):
                el_cost = e_add(el_cost, e_factor(size(el), STRING_TRAVERSAL_COST_FACTOR))
            return e_mul(size(target), el_cost), None
        if function == "includes":
            return e_mul(size(target), fixed(1)), None
        return e_factor(size(target), STRING_TRAVERSAL_COST_FACTOR), None
    if function in ("url", "jsonpatch.escapeKey"):
        if len(args) != 1:
            return None
        sz = size(args[0])
        return e_factor(sz, STRING_TRAVERSAL_COST_FACTOR), sz
    if function in ("lowerAscii", "upperAscii", "substring", "trim"):
        if target is None:
            return None
        sz = size(target)
        return e_factor(sz, STRING_TRAVERSAL_COST_FACTOR), sz
    if function == "replace":
        if target is None or len(args) < 2:
            return None
        return _replace_cost(size, target, args)
    if function == "split":
        if target is None:
            return None
        sz = size(target)
        top = sz[1]
        if len(args) > 1 and isinstance(args[1].expr, Literal) and type(args[1].expr.value) is int:
            top = args[1].expr.value & U64
        return e_factor(sz, 2 * STRING_TRAVERSAL_COST_FACTOR), (0, top)
    if function == "join":
        if target is None:
            return None
        return _join_cost(size, target, args)
    if function in ("find", "findAll"):
        if target is None or not args:
            return None
        sz = size(target)
        s = e_factor(e_add(sz, (1, 1)), STRING_TRAVERSAL_COST_FACTOR)
        r = e_factor(size(args[0]), REGEX_STRING_LENGTH_COST_FACTOR)
        return e_mul(s, r), (0, sz[1])
    if function in ("cidr", "isIP", "isCIDR", "quantity", "isQuantity", "semver", "isSemver"):
        if not args:
            return None
        return e_factor(size(args[0]), STRING_TRAVERSAL_COST_FACTOR), None
    if function == "ip":
        if overload == "cidr_ip":
            return fixed(1), None
        if not args:
            return None
        return e_factor(size(args[0]), STRING_TRAVERSAL_COST_FACTOR), None
    if function == "ip.isCanonical":
        if not args:
            return None
        return e_factor(size(args[0]), 2 * STRING_TRAVERSAL_COST_FACTOR), None
    if function in ("containsIP", "containsCIDR"):
        if not args:
            return None
        ip = (4, 16)
        c = e_factor(e_add(ip, ip), STRING_TRAVERSAL_COST_FACTOR)
        if function == "containsCIDR":
            c = e_add(e_add(c, e_factor(ip, STRING_TRAVERSAL_COST_FACTOR)), fixed(1))
        if overload in ("cidr_contains_ip_string", "cidr_contains_cidr_string"):
            c = e_add(c, e_factor(size(args[0]), STRING_TRAVERSAL_COST_FACTOR))
        return c, None
    if function == "validate":
        if not args:
            return None
        c = e_factor(size(args[0]), STRING_TRAVERSAL_COST_FACTOR)
        return e_factor(c, MAX_NAME_FORMAT_REGEX_SIZE * REGEX_STRING_LENGTH_COST_FACTOR), None
    if function == "_==_" and len(args) == 2 and args[0].type == args[1].type:
        return _equality_cost(args[0].type, args[1])
    return None


def _replace_cost(size: Sizer, target: Node, args: list[Node]) -> tuple[Est, Est | None]:
    sz = size(target)
    old, new = size(args[0]), size(args[1])
    count_max = count_min = kept_max = kept_min = 0
    if old[0] == 0:
        count_max = sz[1] + 1 if sz[1] < U64 else sz[1]
        kept_max = sz[1]
    elif new[1] <= old[0]:
        kept_max = sz[1]
    else:
        count_max = _go_uint(math.ceil(float(sz[1]) / float(old[0])))
    if old[1] == 0:
        count_min = sz[0] + 1 if sz[0] < U64 else sz[0]
        kept_min = sz[0]
    elif old[1] <= new[0]:
        kept_min = sz[0]
    else:
        count_min = _go_uint(math.ceil(float(sz[0]) / float(old[1])))
    result = e_add(e_mul((count_min, count_max), new), (kept_min, kept_max))
    return e_factor(sz, 2 * STRING_TRAVERSAL_COST_FACTOR), result


def _join_cost(size: Sizer, target: Node, args: list[Node]) -> tuple[Est, Est | None]:
    n = size(target)
    sz: Est = (0, 0)
    el = list_element(target)
    if el is not None:
        sz = e_mul(n, size(el))
    if args:
        sep = size(args[0])
        seps = (n[0] - 1 if n[0] > 0 else 0, n[1] - 1 if n[1] > 0 else 0)
        sz = e_add(sz, e_mul(sep, seps))
    return e_factor(sz, STRING_TRAVERSAL_COST_FACTOR), sz


def _go_uint(x: float) -> int:
    """``uint64(f)`` of a float64 as Go converts it on amd64 (out of range: 2**63)."""
    if math.isnan(x):
        return 1 << 63
    if x < 0:
        return int(x) & U64
    return int(x) if x < TWO_TO_64 else 1 << 63


def _alloc_list(factor: float, size: Est) -> tuple[Est, Est | None]:
    """``estimateAllocatingListCall``: size times the factor, plus the call and the list allocation."""
    cost = e_add(e_add(e_factor(size, factor), fixed(1)), fixed(LIST_CREATE_BASE_COST))
    return cost, size


def _selector_cost(length: Est) -> Est:
    """``selectorCostEstimate`` of the authorization library (label and field selectors)."""
    parse = e_factor(length, STRING_TRAVERSAL_COST_FACTOR)
    requirements = e_factor(length, 0.5)
    per = e_factor(requirements, float(LIST_CREATE_BASE_COST + 40))
    return e_add(e_add(fixed(LIST_CREATE_BASE_COST), parse), per)


def _equality_cost(t: types.Type, rhs: Node) -> tuple[Est, Est | None] | None:
    """The Kubernetes library's ``_==_`` estimate for its own types."""
    if t.kind == types.OPAQUE_KIND and t.name in ("net.IP", "net.CIDR"):
        return fixed(1), None
    if t.name in _O1_STRUCTS or t.name.startswith("kubernetes.authorization."):
        return fixed(1), None
    if t.name == "kubernetes.NamedFormat":
        return e_factor((1, MAX_FORMAT_SIZE), STRING_TRAVERSAL_COST_FACTOR), None
    if t.name == "kubernetes.URL":
        size = rhs.computed if rhs.computed is not None else (1, 1)
        return e_factor((1, size[1]), STRING_TRAVERSAL_COST_FACTOR), None
    return None
