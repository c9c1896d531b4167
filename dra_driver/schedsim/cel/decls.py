"""Declarations of the scheduler's DRA CEL environment: variables, functions and their overloads.

Called by the checker (``checker.py``), the planner and the library. The table (``decl_table.py``) lists every
function the Kubernetes 1.36 DRA environment declares (StoredExpressions, the scheduler's view;
:func:`functions` gives another release's ``includes``):
cel-go's standard library and optional types, the strings, sets, lists and two-variable
comprehension extensions, the Kubernetes quantity, semver, regex, lists, URL, IP, CIDR, format and
authorization libraries, and DRA's ``includes``, each overload with its id, call style,
argument types (receiver first), result type and type parameters, in declaration order (the
first overload that matches gives a call its result type). It was read off the environment the
``testkit/go/cmd/celdiff`` program builds. Everything is declared, so type-checking agrees everywhere;
``library.py`` implements what a device selector can use, and the rest fails at run time saying
dra-gpu does not support it (timestamps, durations, URLs, IPs, CIDRs, formats, authorization).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from dra_driver.schedsim.cel.decl_table import TABLE
from dra_driver.schedsim.cel.types import (
    ANY,
    BOOL,
    BYTES,
    DEVICE,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    NULL,
    OPAQUE_KIND,
    QUANTITY,
    SEMVER,
    STRING,
    TIMESTAMP,
    TYPE,
    UINT,
    Type,
    list_of,
    map_of,
    optional_of,
    param,
    type_of,
)
from dra_driver.schedsim.rules import Rules


@dataclass(frozen=True, slots=True)
class Overload:
    """One overload: id, receiver style, argument types (receiver first), result, type parameters."""

    id: str
    member: bool
    args: tuple[Type, ...]
    result: Type
    type_params: tuple[str, ...] = ()


_TABLE = TABLE  # function | overload id | g(lobal) or m(ember) | argument types | result | type parameters

_NAMED = {
    "bool": BOOL,
    "bytes": BYTES,
    "double": DOUBLE,
    "dyn": DYN,
    "int": INT,
    "string": STRING,
    "uint": UINT,
    "null_type": NULL,
    "type": TYPE,
    "google.protobuf.Any": ANY,
    "google.protobuf.Timestamp": TIMESTAMP,
    "google.protobuf.Duration": DURATION,
    "kubernetes.Quantity": QUANTITY,
    "kubernetes.Semver": SEMVER,
}


def _split_args(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for c in text:
        if c == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += {"(": 1, ")": -1}.get(c, 0)
        cur += c
    if cur.strip():
        out.append(cur.strip())
    return out


@functools.cache
def parse_type(text: str) -> Type:  # noqa: PLR0911 - one branch per type constructor of the declaration syntax
    """A type as cel-go prints it: ``list(<A>)``, ``map(string, dyn)``, ``optional_type(<V>)``, names."""
    text = text.strip()
    if text.startswith("<") and text.endswith(">"):
        return param(text[1:-1])
    if "(" in text:
        head, rest = text.split("(", 1)
        params = [parse_type(p) for p in _split_args(rest[:-1])]
        if head == "list":
            return list_of(params[0])
        if head == "map":
            return map_of(params[0], params[1])
        if head == "optional_type":
            return optional_of(params[0])
        if head == "type":
            return type_of(params[0])
        return Type(OPAQUE_KIND, head, tuple(params))
    return _NAMED.get(text) or Type(OPAQUE_KIND, text)


def _load() -> dict[str, tuple[Overload, ...]]:
    out: dict[str, list[Overload]] = {}
    for line in _TABLE.splitlines():
        name, oid, style, args, result, params = line.rsplit("|", 5)
        ov = Overload(
            oid,
            style == "m",
            tuple(parse_type(a) for a in _split_args(args)),
            parse_type(result),
            tuple(params.split()),
        )
        out.setdefault(name, []).append(ov)
    return {k: tuple(v) for k, v in out.items()}


FUNCTIONS: dict[str, tuple[Overload, ...]] = _load()
# ``includes`` as Kubernetes 1.37 declares it (the lists library's overload, without DRA's limit of 48
# values); 1.34 and 1.35 do not declare it at all. See ``dra_driver.schedsim.rules``.
LISTS_INCLUDES = Overload("list_includes_dyn_dyn", True, (DYN, DYN), BOOL)
# ``lists.range`` as cel-go v0.29 (Kubernetes 1.37) runs it: the same declaration, a bounded size.
LISTS_RANGE_BOUNDED = Overload("lists_range@cel-go-0.29", False, (INT,), list_of(INT))
OVERLOADS: dict[str, Overload] = {o.id: o for os in FUNCTIONS.values() for o in os} | {
    o.id: o for o in (LISTS_INCLUDES, LISTS_RANGE_BOUNDED)
}


@functools.cache
def functions(includes: str = "dra", cel_go: int = 26) -> dict[str, tuple[Overload, ...]]:
    """The declared functions of a release (see ``dra_driver.schedsim.rules``; the defaults: 1.36's, the table).

    ``includes``: "dra" (1.36, the table's), "lists" (1.37+) or "" (none); ``cel_go``: the cel-go minor
    release, whose runtime differs in a few functions (they get their own overload ids).
    """
    if includes == "dra" and cel_go < 29:
        return FUNCTIONS
    out = {k: v for k, v in FUNCTIONS.items() if k != "includes"}
    if includes == "dra":
        out["includes"] = FUNCTIONS["includes"]
    elif includes == "lists":
        out["includes"] = (LISTS_INCLUDES,)
    if cel_go >= 29:
        out["lists.range"] = (LISTS_RANGE_BOUNDED,)
    return out


# -- variables: the device and the type identifiers -------------------------------------------------
A, B = param("A"), param("B")
VARIABLES: dict[str, Type] = {
    "device": DEVICE,
    "bool": type_of(BOOL),
    "bytes": type_of(BYTES),
    "double": type_of(DOUBLE),
    "int": type_of(INT),
    "list": type_of(list_of(A)),
    "map": type_of(map_of(A, B)),
    "null_type": type_of(NULL),
    "string": type_of(STRING),
    "type": type_of(TYPE),
    "uint": type_of(UINT),
    "google.protobuf.Duration": type_of(DURATION),
    "google.protobuf.Timestamp": type_of(TIMESTAMP),
}

DEVICE_FIELDS: dict[str, Type] = {
    "driver": STRING,
    "attributes": map_of(STRING, map_of(STRING, ANY)),
    "capacity": map_of(STRING, map_of(STRING, QUANTITY)),
    "allowMultipleAllocations": BOOL,
}


# -- the API server's environment for new expressions ------------------------------------------------
# The API server compiles a new or changed selector in the environment of its minimum compatibility
# version (the release before it, k8s.io/apiserver/pkg/cel/environment NewExpressions), with the
# default feature gates; the scheduler (and a stored selector) gets everything the binary has. So a
# new selector may not use: cel-go's lists extension (introduced in 1.34, so from 1.35), ``includes``
# (DRA's of 1.36 and the lists library's of 1.37 need DRAListTypeAttributes, alpha, or 1.38), or
# ``device.allowMultipleAllocations`` before DRAConsumableCapacity is on (1.36).
EXT_LISTS_FUNCTIONS = frozenset({"slice", "flatten", "sort", "@sortByAssociatedKeys", "lists.range", "reverse", "distinct"})
EXT_LISTS_NEW_FROM_MINOR = 35


@functools.cache
def _new_functions(includes: str, cel_go: int, ext_lists: bool) -> dict[str, tuple[Overload, ...]]:
    out = {k: v for k, v in functions(includes, cel_go).items() if k != "includes"}
    if not ext_lists:
        out = {k: v for k, v in out.items() if k not in EXT_LISTS_FUNCTIONS}
    return out


def new_list_attributes(rules: Rules) -> bool:
    """DRAListTypeAttributes is on (1.36+): a new selector may use ``includes`` and sees ``dyn`` attributes."""
    return rules.minor >= 36 and dict(rules.gates).get("DRAListTypeAttributes", False)


def new_expression_functions(rules: Rules) -> dict[str, tuple[Overload, ...]]:
    """The functions the API server of ``rules``' release (with its gates) lets a new selector use."""
    funcs = _new_functions(rules.includes, rules.cel_go, rules.minor >= EXT_LISTS_NEW_FROM_MINOR)
    if new_list_attributes(rules):
        return functions(rules.includes, rules.cel_go) | {k: v for k, v in funcs.items() if k != "includes"}
    return funcs


def attribute_type(rules: Rules, *, new_expressions: bool = False) -> Type:
    """The declared type of an attribute value: ``any``, or ``dyn`` where the device type with list attributes is declared.

    That is the stored 1.37 device; a new selector gets it only with DRAListTypeAttributes on (off by default).
    """
    if new_expressions:
        return DYN if new_list_attributes(rules) else ANY
    return DYN if rules.dyn_attributes else ANY


def device_fields(rules: Rules, *, new_expressions: bool = False) -> dict[str, Type]:
    """The fields of ``device``; ``allowMultipleAllocations`` for a new selector only with consumable capacity."""
    if new_expressions and not rules.consumable_capacity:
        return {k: v for k, v in DEVICE_FIELDS.items() if k != "allowMultipleAllocations"}
    return DEVICE_FIELDS
