"""Declarations of the scheduler's DRA CEL environment: variables, functions and their overloads.

Called by the checker (``checker.py``) and the planner (``planner.py``). The overloads, their ids,
order and signatures are those of the Kubernetes 1.36 DRA environment (cel-go's standard library,
optional types, the strings, sets and lists extensions, the Kubernetes quantity, semver, regex and
lists libraries, and DRA's ``includes``), minus timestamps, durations, URLs, IPs, CIDRs, string
formatting and authorization, which a device selector has no use for (they are undeclared here).
Order matters: the first overload that matches gives a call its result type.
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_driver.core.cel.types import (
    ANY,
    BOOL,
    BYTES,
    DEVICE,
    DOUBLE,
    DYN,
    INT,
    QUANTITY,
    SEMVER,
    STRING,
    UINT,
    Type,
    list_of,
    map_of,
    optional_of,
    param,
    type_of,
)


@dataclass(frozen=True, slots=True)
class Overload:
    """One overload: id, receiver style, argument types (receiver first), result, type parameters."""

    id: str
    member: bool
    args: tuple[Type, ...]
    result: Type
    type_params: tuple[str, ...] = ()


A, B, K, T, V = param("A"), param("B"), param("K"), param("T"), param("V")
_FUNCTIONS: dict[str, list[Overload]] = {}


def _fn(name: str, *overloads: Overload) -> None:
    _FUNCTIONS.setdefault(name, []).extend(overloads)


def g(oid: str, args: tuple[Type, ...], result: Type, *params: str) -> Overload:
    """A global overload."""
    return Overload(oid, False, args, result, params)


def m(oid: str, args: tuple[Type, ...], result: Type, *params: str) -> Overload:
    """A receiver-style overload (the receiver is ``args[0]``)."""
    return Overload(oid, True, args, result, params)


_NUM_PAIRS = (
    ("bool", BOOL, BOOL),
    ("int64", INT, INT),
    ("int64_double", INT, DOUBLE),
    ("int64_uint64", INT, UINT),
    ("uint64", UINT, UINT),
    ("uint64_double", UINT, DOUBLE),
    ("uint64_int64", UINT, INT),
    ("double", DOUBLE, DOUBLE),
    ("double_int64", DOUBLE, INT),
    ("double_uint64", DOUBLE, UINT),
    ("string", STRING, STRING),
    ("bytes", BYTES, BYTES),
)

# -- the standard library ---------------------------------------------------------------------------
_fn("!_", g("logical_not", (BOOL,), BOOL))
_fn("-_", g("negate_double", (DOUBLE,), DOUBLE), g("negate_int64", (INT,), INT))
_fn(
    "@in",
    g("in_list", (A, list_of(A)), BOOL, "A"),
    g("in_map", (A, map_of(A, B)), BOOL, "B", "A"),
)
_fn("@not_strictly_false", g("not_strictly_false", (BOOL,), BOOL))
_fn("_!=_", g("not_equals", (A, A), BOOL, "A"))
_fn("_==_", g("equals", (A, A), BOOL, "A"))
_fn("_%_", g("modulo_int64", (INT, INT), INT), g("modulo_uint64", (UINT, UINT), UINT))
_fn("_&&_", g("logical_and", (BOOL, BOOL), BOOL))
_fn("_||_", g("logical_or", (BOOL, BOOL), BOOL))
_fn(
    "_*_",
    g("multiply_double", (DOUBLE, DOUBLE), DOUBLE),
    g("multiply_int64", (INT, INT), INT),
    g("multiply_uint64", (UINT, UINT), UINT),
)
_fn(
    "_+_",
    g("add_bytes", (BYTES, BYTES), BYTES),
    g("add_double", (DOUBLE, DOUBLE), DOUBLE),
    g("add_int64", (INT, INT), INT),
    g("add_list", (list_of(A), list_of(A)), list_of(A), "A"),
    g("add_string", (STRING, STRING), STRING),
    g("add_uint64", (UINT, UINT), UINT),
)
_fn(
    "_-_",
    g("subtract_double", (DOUBLE, DOUBLE), DOUBLE),
    g("subtract_int64", (INT, INT), INT),
    g("subtract_uint64", (UINT, UINT), UINT),
)
_fn(
    "_/_",
    g("divide_double", (DOUBLE, DOUBLE), DOUBLE),
    g("divide_int64", (INT, INT), INT),
    g("divide_uint64", (UINT, UINT), UINT),
)
for _op, _prefix in (("_<_", "less"), ("_<=_", "less_equals"), ("_>_", "greater"), ("_>=_", "greater_equals")):
    _fn(_op, *(g(f"{_prefix}_{suffix}", (x, y), BOOL) for suffix, x, y in _NUM_PAIRS))
_fn("_?_:_", g("conditional", (BOOL, A, A), A, "A"))
_fn("_?._", g("select_optional_field", (DYN, STRING), optional_of(V), "V"))
_fn(
    "_[?_]",
    g("list_optindex_optional_int", (list_of(V), INT), optional_of(V), "V"),
    g("optional_list_optindex_optional_int", (optional_of(list_of(V)), INT), optional_of(V), "V"),
    g("map_optindex_optional_value", (map_of(K, V), K), optional_of(V), "V", "K"),
    g("optional_map_optindex_optional_value", (optional_of(map_of(K, V)), K), optional_of(V), "V", "K"),
)
_fn(
    "_[_]",
    g("index_list", (list_of(A), INT), A, "A"),
    g("index_map", (map_of(A, B), A), B, "A", "B"),
    g("optional_list_index_int", (optional_of(list_of(V)), INT), optional_of(V), "V"),
    g("optional_map_index_value", (optional_of(map_of(K, V)), K), optional_of(V), "V", "K"),
)
_fn("bool", g("bool_to_bool", (BOOL,), BOOL), g("string_to_bool", (STRING,), BOOL))
_fn("bytes", g("bytes_to_bytes", (BYTES,), BYTES), g("string_to_bytes", (STRING,), BYTES))
_fn("contains", m("contains_string", (STRING, STRING), BOOL))
_fn(
    "double",
    g("double_to_double", (DOUBLE,), DOUBLE),
    g("int64_to_double", (INT,), DOUBLE),
    g("string_to_double", (STRING,), DOUBLE),
    g("uint64_to_double", (UINT,), DOUBLE),
)
_fn("dyn", g("to_dyn", (A,), DYN, "A"))
_fn("endsWith", m("ends_with_string", (STRING, STRING), BOOL))
_fn(
    "int",
    g("int64_to_int64", (INT,), INT),
    g("double_to_int64", (DOUBLE,), INT),
    g("string_to_int64", (STRING,), INT),
    g("uint64_to_int64", (UINT,), INT),
)
_fn("matches", g("matches", (STRING, STRING), BOOL), m("matches_string", (STRING, STRING), BOOL))
_fn(
    "size",
    g("size_bytes", (BYTES,), INT),
    m("bytes_size", (BYTES,), INT),
    g("size_list", (list_of(A),), INT, "A"),
    m("list_size", (list_of(A),), INT, "A"),
    g("size_map", (map_of(A, B),), INT, "A", "B"),
    m("map_size", (map_of(A, B),), INT, "A", "B"),
    g("size_string", (STRING,), INT),
    m("string_size", (STRING,), INT),
)
_fn("startsWith", m("starts_with_string", (STRING, STRING), BOOL))
_fn(
    "string",
    g("string_to_string", (STRING,), STRING),
    g("bool_to_string", (BOOL,), STRING),
    g("bytes_to_string", (BYTES,), STRING),
    g("double_to_string", (DOUBLE,), STRING),
    g("int64_to_string", (INT,), STRING),
    g("uint64_to_string", (UINT,), STRING),
)
_fn("type", g("type", (A,), type_of(A), "A"))
_fn(
    "uint",
    g("uint64_to_uint64", (UINT,), UINT),
    g("double_to_uint64", (DOUBLE,), UINT),
    g("int64_to_uint64", (INT,), UINT),
    g("string_to_uint64", (STRING,), UINT),
)

# -- optional types ---------------------------------------------------------------------------------
_fn("hasValue", m("optional_hasValue", (optional_of(V),), BOOL, "V"))
_fn("optional.none", g("optional_none", (), optional_of(V), "V"))
_fn("optional.of", g("optional_of", (V,), optional_of(V), "V"))
_fn("optional.ofNonZeroValue", g("optional_ofNonZeroValue", (V,), optional_of(V), "V"))
_fn("or", m("optional_or_optional", (optional_of(V), optional_of(V)), optional_of(V), "V"))
_fn("orValue", m("optional_orValue_value", (optional_of(V), V), V, "V"))
_fn("value", m("optional_value", (optional_of(V),), V, "V"))

# -- Kubernetes quantity and semver libraries ----------------------------------------------------------
_fn("add", m("quantity_add", (QUANTITY, QUANTITY), QUANTITY), m("quantity_add_int", (QUANTITY, INT), QUANTITY))
_fn("asApproximateFloat", m("quantity_get_float", (QUANTITY,), DOUBLE))
_fn("asInteger", m("quantity_get_int", (QUANTITY,), INT))
_fn(
    "compareTo",
    m("quantity_compare_to", (QUANTITY, QUANTITY), INT),
    m("semver_compare_to", (SEMVER, SEMVER), INT),
)
_fn(
    "isGreaterThan",
    m("quantity_is_greater_than", (QUANTITY, QUANTITY), BOOL),
    m("semver_is_greater_than", (SEMVER, SEMVER), BOOL),
)
_fn("isInteger", m("quantity_is_integer", (QUANTITY,), BOOL))
_fn(
    "isLessThan",
    m("quantity_is_less_than", (QUANTITY, QUANTITY), BOOL),
    m("semver_is_less_than", (SEMVER, SEMVER), BOOL),
)
_fn("isQuantity", g("is_quantity_string", (STRING,), BOOL))
_fn("isSemver", g("is_semver_string", (STRING,), BOOL), g("is_semver_string_bool", (STRING, BOOL), BOOL))
_fn("major", m("semver_major", (SEMVER,), INT))
_fn("minor", m("semver_minor", (SEMVER,), INT))
_fn("patch", m("semver_patch", (SEMVER,), INT))
_fn("quantity", g("string_to_quantity", (STRING,), QUANTITY))
_fn("semver", g("string_to_semver", (STRING,), SEMVER), g("string_bool_to_semver", (STRING, BOOL), SEMVER))
_fn("sign", g("quantity_sign", (QUANTITY,), INT))
_fn("sub", m("quantity_sub", (QUANTITY, QUANTITY), QUANTITY), m("quantity_sub_int", (QUANTITY, INT), QUANTITY))

# -- DRA ------------------------------------------------------------------------------------------------
_fn("includes", m("dra_includes_dyn_dyn", (DYN, DYN), BOOL))

# -- strings extension (v2) and Kubernetes regex -------------------------------------------------------
_fn("charAt", m("string_char_at_int", (STRING, INT), STRING))
_fn("find", m("string_find_string", (STRING, STRING), STRING))
_fn(
    "findAll",
    m("string_find_all_string", (STRING, STRING), list_of(STRING)),
    m("string_find_all_string_int", (STRING, STRING, INT), list_of(STRING)),
)
_fn(
    "indexOf",
    m("list_a_index_of_int", (list_of(A), A), INT, "A"),
    m("string_index_of_string", (STRING, STRING), INT),
    m("string_index_of_string_int", (STRING, STRING, INT), INT),
)
_fn("join", m("list_join", (list_of(STRING),), STRING), m("list_join_string", (list_of(STRING), STRING), STRING))
_fn(
    "lastIndexOf",
    m("list_a_last_index_of_int", (list_of(A), A), INT, "A"),
    m("string_last_index_of_string", (STRING, STRING), INT),
    m("string_last_index_of_string_int", (STRING, STRING, INT), INT),
)
_fn("lowerAscii", m("string_lower_ascii", (STRING,), STRING))
_fn(
    "replace",
    m("string_replace_string_string", (STRING, STRING, STRING), STRING),
    m("string_replace_string_string_int", (STRING, STRING, STRING, INT), STRING),
)
_fn(
    "split",
    m("string_split_string", (STRING, STRING), list_of(STRING)),
    m("string_split_string_int", (STRING, STRING, INT), list_of(STRING)),
)
_fn("strings.quote", g("strings_quote", (STRING,), STRING))
_fn(
    "substring",
    m("string_substring_int", (STRING, INT), STRING),
    m("string_substring_int_int", (STRING, INT, INT), STRING),
)
_fn("trim", m("string_trim", (STRING,), STRING))
_fn("upperAscii", m("string_upper_ascii", (STRING,), STRING))

# -- sets and lists extensions, Kubernetes lists library ---------------------------------------------
_fn("sets.contains", g("list_sets_contains_list", (list_of(T), list_of(T)), BOOL, "T"))
_fn("sets.equivalent", g("list_sets_equivalent_list", (list_of(T), list_of(T)), BOOL, "T"))
_fn("sets.intersects", g("list_sets_intersects_list", (list_of(T), list_of(T)), BOOL, "T"))
_fn("distinct", m("list_distinct", (list_of(T),), list_of(T), "T"))
_fn("first", m("list_first", (list_of(V),), optional_of(V), "V"))
_fn("last", m("list_last", (list_of(V),), optional_of(V), "V"))
_fn(
    "flatten",
    m("list_flatten", (list_of(list_of(T)),), list_of(T), "T"),
    m("list_flatten_int", (list_of(DYN), INT), list_of(DYN)),
)
_fn("lists.range", g("lists_range", (INT,), list_of(INT)))
_fn("reverse", m("list_reverse", (list_of(T),), list_of(T), "T"))
_fn("slice", m("list_slice", (list_of(T), INT, INT), list_of(T), "T"))
_ORDERED = (("int", INT), ("uint", UINT), ("double", DOUBLE), ("bool", BOOL), ("string", STRING), ("bytes", BYTES))
_fn("sort", *(m(f"list_{n}_sort", (list_of(t),), list_of(t)) for n, t in _ORDERED))
_fn("isSorted", *(m(f"list_{n}_is_sorted_bool", (list_of(t),), BOOL) for n, t in _ORDERED))
_fn("max", *(m(f"list_{n}_max_{n}", (list_of(t),), t) for n, t in _ORDERED))
_fn("min", *(m(f"list_{n}_min_{n}", (list_of(t),), t) for n, t in _ORDERED))
_fn("sum", *(m(f"list_{n}_sum_{n}", (list_of(t),), t) for n, t in _ORDERED[:3]))

FUNCTIONS: dict[str, tuple[Overload, ...]] = {k: tuple(v) for k, v in _FUNCTIONS.items()}
OVERLOADS: dict[str, Overload] = {o.id: o for os in FUNCTIONS.values() for o in os}

# -- variables: the device and the type identifiers -------------------------------------------------
VARIABLES: dict[str, Type] = {
    "device": DEVICE,
    "bool": type_of(BOOL),
    "bytes": type_of(BYTES),
    "double": type_of(DOUBLE),
    "int": type_of(INT),
    "list": type_of(list_of(A)),
    "map": type_of(map_of(A, B)),
    "null_type": type_of(Type("null_type", "null_type")),
    "string": type_of(STRING),
    "type": type_of(Type("type", "type")),
    "uint": type_of(UINT),
}

DEVICE_FIELDS: dict[str, Type] = {
    "driver": STRING,
    "attributes": map_of(STRING, map_of(STRING, ANY)),
    "capacity": map_of(STRING, map_of(STRING, QUANTITY)),
    "allowMultipleAllocations": BOOL,
}
