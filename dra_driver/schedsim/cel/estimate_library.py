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


def kubernetes_cost(
    size: Sizer, includes: str, function: str, overload: str, *, target: Node | None, args: list[Node]
) -> tuple[Est, Est | None] | None:
    """``library.CostEstimator.EstimateCallCost`` (and 1.36's DRA ``includes``), by function name as there."""
    simple = _simple_cost(size, includes, function, overload, target=target, args=args)
    if simple is not None:
        return simple
    if function in _LIST_FUNCTIONS and (function != "includes" or includes == "lists"):
        return _list_cost(size, function, target)
    by_name = _BY_FUNCTION.get(function)
    if by_name is not None:
        return by_name(size, function, overload, target, args)
    if function == "_==_" and len(args) == 2 and args[0].type == args[1].type:
        return _equality_cost(args[0].type, args[1])
    return None


_LIST_FUNCTIONS = ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf", "includes")
_Result = tuple[Est, Est | None] | None  # (the call's cost, its result's size where it has one); None: no estimate
_Estimate = Callable[[Sizer, str, str, Node | None, list[Node]], _Result]


def _simple_cost(size: Sizer, includes: str, function: str, overload: str, *, target: Node | None, args: list[Node]) -> _Result:
    """The flat costs (DRA's ``includes``, ``check``, the O(1) functions) and the selectors'; None for any other function."""
    if function == "includes" and overload == "dra_includes_dyn_dyn" and includes == "dra" and target is not None:
        return (0, MAX_ATTRIBUTE_VALUES), None
    if function == "check":
        return fixed(AUTHZ_CHECK_COST), None
    if function in FLAT_COST_FUNCTIONS:
        return fixed(1), None
    if function in ("fieldSelector", "labelSelector") and len(args) == 1:
        return _selector_cost(size(args[0])), None
    return None  # (a selector call of another arity has no estimate: no other case names it)


def _list_cost(size: Sizer, function: str, target: Node | None) -> _Result:
    """The lists library's functions (and ``includes`` where it is the lists library's): a traversal of the list."""
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


def _of_argument(
    size: Sizer, function: str, overload: str, target: Node | None, args: list[Node]
) -> tuple[Est, Est | None] | None:
    """``url`` and ``jsonpatch.escapeKey``: a traversal of the argument, the result as long."""
    if len(args) != 1:
        return None
    sz = size(args[0])
    return e_factor(sz, STRING_TRAVERSAL_COST_FACTOR), sz


def _of_receiver(
    size: Sizer, function: str, overload: str, target: Node | None, args: list[Node]
) -> tuple[Est, Est | None] | None:
    """``lowerAscii``, ``upperAscii``, ``substring``, ``trim``: a traversal of the string, the result at most as long."""
    if target is None:
        return None
    sz = size(target)
    return e_factor(sz, STRING_TRAVERSAL_COST_FACTOR), sz


def _replace(size: Sizer, function: str, overload: str, target: Node | None, args: list[Node]) -> _Result:
    return None if target is None or len(args) < 2 else _replace_cost(size, target, args)


def _split(size: Sizer, function: str, overload: str, target: Node | None, args: list[Node]) -> _Result:
    if target is None:
        return None
    sz = size(target)
    top = sz[1]
    if len(args) > 1 and isinstance(args[1].expr, Literal) and type(args[1].expr.value) is int:
        top = args[1].expr.value & U64
    return e_factor(sz, 2 * STRING_TRAVERSAL_COST_FACTOR), (0, top)


def _join(size: Sizer, function: str, overload: str, target: Node | None, args: list[Node]) -> _Result:
    return None if target is None else _join_cost(size, target, args)


def _find(size: Sizer, function: str, overload: str, target: Node | None, args: list[Node]) -> _Result:
    if target is None or not args:
        return None
    sz = size(target)
    s = e_factor(e_add(sz, (1, 1)), STRING_TRAVERSAL_COST_FACTOR)
    r = e_factor(size(args[0]), REGEX_STRING_LENGTH_COST_FACTOR)
    return e_mul(s, r), (0, sz[1])


def _parse(size: Sizer, function: str, overload: str, target: Node | None, args: list[Node]) -> _Result:
    """The parsers (``cidr``, ``isIP``, ``quantity``, ``semver``, ...; ``ip`` but of a CIDR): a traversal of the argument."""
    if function == "ip" and overload == "cidr_ip":
        return fixed(1), None
    if not args:
        return None
    return e_factor(size(args[0]), STRING_TRAVERSAL_COST_FACTOR), None


def _ip_canonical(
    size: Sizer, function: str, overload: str, target: Node | None, args: list[Node]
) -> tuple[Est, Est | None] | None:
    if not args:
        return None
    return e_factor(size(args[0]), 2 * STRING_TRAVERSAL_COST_FACTOR), None


def _contains(size: Sizer, function: str, overload: str, target: Node | None, args: list[Node]) -> _Result:
    """``containsIP``, ``containsCIDR``: two addresses compared (and the argument parsed where it is a string)."""
    if not args:
        return None
    ip = (4, 16)
    c = e_factor(e_add(ip, ip), STRING_TRAVERSAL_COST_FACTOR)
    if function == "containsCIDR":
        c = e_add(e_add(c, e_factor(ip, STRING_TRAVERSAL_COST_FACTOR)), fixed(1))
    if overload in ("cidr_contains_ip_string", "cidr_contains_cidr_string"):
        c = e_add(c, e_factor(size(args[0]), STRING_TRAVERSAL_COST_FACTOR))
    return c, None


def _validate(size: Sizer, function: str, overload: str, target: Node | None, args: list[Node]) -> _Result:
    if not args:
        return None
    c = e_factor(size(args[0]), STRING_TRAVERSAL_COST_FACTOR)
    return e_factor(c, MAX_NAME_FORMAT_REGEX_SIZE * REGEX_STRING_LENGTH_COST_FACTOR), None


_BY_FUNCTION: dict[str, _Estimate] = {
    "url": _of_argument,
    "jsonpatch.escapeKey": _of_argument,
    **dict.fromkeys(("lowerAscii", "upperAscii", "substring", "trim"), _of_receiver),
    "replace": _replace,
    "split": _split,
    "join": _join,
    "find": _find,
    "findAll": _find,
    **dict.fromkeys(("cidr", "isIP", "isCIDR", "quantity", "isQuantity", "semver", "isSemver", "ip"), _parse),
    "ip.isCanonical": _ip_canonical,
    "containsIP": _contains,
    "containsCIDR": _contains,
    "validate": _validate,
}


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
