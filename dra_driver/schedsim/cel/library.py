"""The DRA CEL environment's functions bound to cel-go's names and overload ids, and the dispatch rules.

Called by the planner (``planner.py``). The implementations live by kind in ``operators.py``,
``conversions.py``, ``strings.py`` and ``lists.py``; this module binds them to cel-go's function
names and overload ids (:data:`SINGLETONS`, :data:`IMPLS`) and dispatches. Operators and a few
functions are *singletons* in cel-go: one implementation that requires a trait of the first
argument (``_<_`` needs a comparable left operand, otherwise ``no such overload: _<_``). Every
other function has one implementation per overload id, guarded by the overload's declared
argument types at run time (``no such overload: isQuantity(int)``); a call the checker could not
pin to one overload (``dyn`` arguments) tries every overload of the function in declaration
order. See :func:`call`.
"""

from __future__ import annotations

from typing import Any

from dra_driver.core.quantity import Quantity, QuantityError, from_int, is_quantity, parse_quantity
from dra_driver.schedsim.cel import conversions, lists, operators, strings
from dra_driver.schedsim.cel.decls import FUNCTIONS, OVERLOADS, Overload
from dra_driver.schedsim.cel.operators import Impl
from dra_driver.schedsim.cel.semver import Semver, SemverError, is_semver, normalize_and_parse, parse_semver
from dra_driver.schedsim.cel.types import (
    ANY_KIND,
    DYN_KIND,
    LIST_KIND,
    MAP_KIND,
    TYPE_PARAM_KIND,
    Type,
)
from dra_driver.schedsim.cel.values import (
    INT64_MAX,
    NONE,
    EvalError,
    Optional,
    Uint,
    go_g,
    has_trait,
    is_zero,
    type_name,
)


def no_such_overload(function: str, args: list[Any] | tuple[Any, ...]) -> EvalError:
    """``MaybeNoSuchOverload``: ``no such overload: f(int, string)``."""
    return EvalError(f"no such overload: {function}({', '.join(type_name(a) for a in args)})")


# -- runtime type guards --------------------------------------------------------------------------
def runtime_assignable(t: Type, v: Any) -> bool:
    """``IsAssignableRuntimeType``: the name must agree; lists and maps check their first element."""
    if t.kind in (DYN_KIND, ANY_KIND, TYPE_PARAM_KIND):
        return True
    if t.name != type_name(v):
        return False
    if t.kind == LIST_KIND:
        return not v or runtime_assignable(t.params[0], v[0])
    if t.kind == MAP_KIND:
        if not v:
            return True
        k = next(iter(v))
        return runtime_assignable(t.params[0], k) and runtime_assignable(t.params[1], v[k])
    return True


def matches_signature(ov: Overload, args: list[Any] | tuple[Any, ...], *, guards: bool = True) -> bool:
    """Whether a call's values fit an overload at run time."""
    if len(args) != len(ov.args):
        return False
    return not guards or all(runtime_assignable(t, a) for t, a in zip(ov.args, args, strict=True))


SINGLETONS: dict[str, tuple[Impl, str | None]] = {
    "!_": (operators.logical_not, None),
    "-_": (operators.negate, "negate"),
    "_+_": (operators.add, "add"),
    "_-_": (operators.sub, "subtract"),
    "_*_": (operators.mul, "multiply"),
    "_/_": (operators.div, "divide"),
    "_%_": (operators.mod, "modulo"),
    "_<_": (operators.cmp_op(lambda c: c == -1), "compare"),
    "_<=_": (operators.cmp_op(lambda c: c in (-1, 0)), "compare"),
    "_>_": (operators.cmp_op(lambda c: c == 1), "compare"),
    "_>=_": (operators.cmp_op(lambda c: c in (0, 1)), "compare"),
    "@in": (operators.membership, None),
    "size": (operators.size, "size"),
    "type": (operators.type_of, None),
    "dyn": (lambda v: v, None),
    "matches": (strings.match, "matcher"),
}


def call_singleton(function: str, args: list[Any]) -> Any:
    """A singleton binding: the first argument must have the trait (strings fall back to their receiver)."""
    impl, trait = SINGLETONS[function]
    if trait is not None and not has_trait(args[0], trait):
        if type(args[0]) is str:
            raise EvalError("no such overload")
        raise EvalError(f"no such overload: {function}")
    return impl(*args)


# -- quantities and versions -----------------------------------------------------------------------
def _quantity(s: str) -> Quantity:
    try:
        return parse_quantity(s)
    except QuantityError as err:
        raise EvalError(str(err)) from None


def _q_as_integer(q: Quantity) -> int:
    v = q.as_int64()
    if v is None:
        raise EvalError("cannot convert value to integer")
    return v


def _q_result(q: Quantity) -> Quantity:
    q.ptr = True
    return q


def _semver(s: str, normalize: bool = False) -> Semver:
    try:
        return normalize_and_parse(s) if normalize else parse_semver(s)
    except SemverError as err:
        raise EvalError(str(err)) from None


def _go_int(v: int) -> int:
    """Go's int64(uint64) conversion of a version number."""
    return v - (1 << 64) if v > INT64_MAX else v


def _opt_value(o: Optional) -> Any:
    if not o.has:
        raise EvalError("optional.none() dereference")
    return o.value


IMPLS: dict[str, Impl] = {
    # conversions
    "bool_to_bool": lambda v: v,
    "string_to_bool": conversions.string_to_bool,
    "bytes_to_bytes": lambda v: v,
    "string_to_bytes": lambda s: s.encode("utf-8"),
    "double_to_double": lambda v: v,
    "int64_to_double": float,
    "string_to_double": conversions.string_to_double,
    "uint64_to_double": float,
    "int64_to_int64": lambda v: v,
    "double_to_int64": conversions.double_to_int,
    "string_to_int64": conversions.string_to_int,
    "uint64_to_int64": conversions.uint_to_int,
    "string_to_string": lambda v: v,
    "bool_to_string": lambda b: "true" if b else "false",
    "bytes_to_string": conversions.bytes_to_string,
    "double_to_string": go_g,
    "int64_to_string": lambda v: str(int(v)),
    "uint64_to_string": lambda v: str(int(v)),
    "uint64_to_uint64": lambda v: v,
    "double_to_uint64": conversions.double_to_uint,
    "int64_to_uint64": conversions.int_to_uint,
    "string_to_uint64": conversions.string_to_uint,
    # strings
    "contains_string": strings.contains,
    "ends_with_string": strings.ends_with,
    "starts_with_string": strings.starts_with,
    "string_char_at_int": strings.char_at,
    "string_find_string": strings.find,
    "string_find_all_string": strings.find_all,
    "string_find_all_string_int": strings.find_all,
    "string_index_of_string": strings.index_of,
    "string_index_of_string_int": strings.index_of,
    "string_last_index_of_string": strings.last_index_of,
    "string_last_index_of_string_int": strings.last_index_of,
    "string_lower_ascii": strings.lower_ascii,
    "string_upper_ascii": strings.upper_ascii,
    "string_replace_string_string": strings.replace,
    "string_replace_string_string_int": strings.replace,
    "string_split_string": strings.split,
    "string_split_string_int": strings.split,
    "string_substring_int": strings.substring,
    "string_substring_int_int": strings.substring,
    "string_trim": lambda s: s.strip(strings.SPACE),
    "list_join": strings.join,
    "list_join_string": strings.join,
    "strings_quote": strings.quote,
    # optionals
    "optional_hasValue": lambda o: o.has,
    "optional_none": lambda: NONE,
    "optional_of": lambda v: Optional(True, v),
    "optional_ofNonZeroValue": lambda v: NONE if is_zero(v) else Optional(True, v),
    "optional_or_optional": lambda o, p: o if o.has else p,
    "optional_orValue_value": lambda o, d: o.value if o.has else d,
    "optional_value": _opt_value,
    # quantities
    "quantity_add": lambda a, b: _q_result(a.add(b)),
    "quantity_add_int": lambda a, b: _q_result(a.add(from_int(b, "DecimalExponent"))),
    "quantity_sub": lambda a, b: _q_result(a.sub(b)),
    "quantity_sub_int": lambda a, b: _q_result(a.sub(from_int(b, "DecimalExponent"))),
    "quantity_get_float": lambda q: q.as_approximate_float(),
    "quantity_get_int": _q_as_integer,
    "quantity_compare_to": lambda a, b: a.cmp(b),
    "quantity_is_greater_than": lambda a, b: a.cmp(b) == 1,
    "quantity_is_less_than": lambda a, b: a.cmp(b) == -1,
    "quantity_is_integer": lambda q: q.as_int64() is not None,
    "is_quantity_string": is_quantity,
    "string_to_quantity": _quantity,
    "quantity_sign": lambda q: q.sign(),
    # versions
    "semver_compare_to": lambda a, b: a.compare(b),
    "semver_is_greater_than": lambda a, b: a.compare(b) == 1,
    "semver_is_less_than": lambda a, b: a.compare(b) == -1,
    "semver_major": lambda v: _go_int(v.major),
    "semver_minor": lambda v: _go_int(v.minor),
    "semver_patch": lambda v: _go_int(v.patch),
    "is_semver_string": is_semver,
    "is_semver_string_bool": lambda s, n: is_semver(s, normalize=n),
    "string_to_semver": _semver,
    "string_bool_to_semver": _semver,
    # DRA
    "dra_includes_dyn_dyn": lists.includes,
    "list_includes_dyn_dyn": lists.includes_unbounded,
    # sets and lists
    "list_sets_contains_list": lists.sets_contains,
    "list_sets_equivalent_list": lambda a, b: lists.sets_contains(a, b) and lists.sets_contains(b, a),
    "list_sets_intersects_list": lists.sets_intersects,
    "list_distinct": lists.distinct,
    "list_first": lambda xs: Optional(True, xs[0]) if xs else NONE,
    "list_last": lambda xs: Optional(True, xs[-1]) if xs else NONE,
    "list_flatten": lists.flatten,
    "list_flatten_int": lists.flatten,
    "lists_range": lists.int_range,
    "lists_range@cel-go-0.29": lists.int_range_bounded,
    "list_reverse": lambda xs: xs[::-1],
    "list_slice": lists.sublist,
    "list_a_index_of_int": lists.index_of,
    "list_a_last_index_of_int": lists.last_index_of,
    "not_strictly_false": lambda v: v if type(v) is bool else True,
}
for _n in ("int", "uint", "double", "bool", "string", "bytes"):
    IMPLS[f"list_{_n}_sort"] = lists.sort
    IMPLS[f"list_{_n}_is_sorted_bool"] = lists.is_sorted
    IMPLS[f"list_{_n}_max_{_n}"] = lists.extreme("max", -1)
    IMPLS[f"list_{_n}_min_{_n}"] = lists.extreme("min", 1)
IMPLS["list_int_sum_int"] = lists.sum_from(0)
IMPLS["list_uint_sum_uint"] = lists.sum_from(Uint(0))
IMPLS["list_double_sum_double"] = lists.sum_from(0.0)
IMPLS["@mapInsert_map_key_value"] = lists.map_insert
IMPLS["@mapInsert_map_map"] = lists.map_insert_map
IMPLS["optional_unwrap"] = lambda xs: [o.value for o in xs if type(o) is Optional and o.has]
IMPLS["optional_unwrapOpt"] = IMPLS["optional_unwrap"]

UNGUARDED = frozenset({"contains_string", "ends_with_string", "starts_with_string"})


def _impl(function: str, overload_id: str) -> Impl:
    impl = IMPLS.get(overload_id)
    if impl is None:
        raise EvalError(
            f"{function}() ({overload_id}) is declared by the Kubernetes CEL environment but not supported by dra-gpu"
        )
    return impl


def overload_call(function: str, overload_id: str, args: list[Any]) -> Any:
    """One resolved overload, behind its runtime type guard."""
    ov = OVERLOADS[overload_id]
    if overload_id not in UNGUARDED and not matches_signature(ov, args):
        raise no_such_overload(function, args)
    return _impl(function, overload_id)(*args)


def dispatch(function: str, args: list[Any]) -> Any:
    """Several overloads matched at check time: the first whose signature fits the values wins."""
    for ov in FUNCTIONS[function]:
        if matches_signature(ov, args, guards=ov.id not in UNGUARDED):
            return _impl(function, ov.id)(*args)
    raise no_such_overload(function, args)


def call(function: str, refs: list[str], args: list[Any]) -> Any:
    """Call ``function`` as cel-go's planner would for a call resolved to ``refs``."""
    if function in SINGLETONS:
        return call_singleton(function, args)
    if len(refs) == 1:
        return overload_call(function, refs[0], args)
    return dispatch(function, args)


__all__ = ["IMPLS", "SINGLETONS", "Impl", "call", "go_g", "no_such_overload", "runtime_assignable"]
