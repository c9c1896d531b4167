"""Static CEL types and the type-checker's assignability rules, as cel-go defines them.

Called by the checker (``checker.py``) and the declarations (``decls.py``). A :class:`Type` has a
kind, a runtime type name and parameters. Assignability unifies type parameters through a
:class:`Mapping` of substitutions, with cel-go's special cases: ``dyn`` and the protobuf ``any``
type (what DRA attributes are declared as) match anything, ``null`` matches the nullable kinds,
and the more general of two unified types wins. Type names print as cel-go prints them in
error messages (:func:`format_type` for checker issues, :meth:`Type.display` for
``must evaluate to bool ..., not X``).
"""

from __future__ import annotations

from dataclasses import dataclass

# kinds
ANY_KIND = "any"
BOOL_KIND = "bool"
BYTES_KIND = "bytes"
DOUBLE_KIND = "double"
DURATION_KIND = "duration"
DYN_KIND = "dyn"
ERROR_KIND = "error"
INT_KIND = "int"
LIST_KIND = "list"
MAP_KIND = "map"
NULL_KIND = "null_type"
OPAQUE_KIND = "opaque"
STRING_KIND = "string"
STRUCT_KIND = "struct"
TIMESTAMP_KIND = "timestamp"
TYPE_KIND = "type"
TYPE_PARAM_KIND = "type_param"
UINT_KIND = "uint"


@dataclass(frozen=True, slots=True)
class Type:
    """A CEL type: kind, runtime type name, parameters."""

    kind: str
    name: str
    params: tuple[Type, ...] = ()

    def display(self) -> str:
        """``Type.String()`` of cel-go (type parameters as ``<A>``)."""
        if self.kind == TYPE_PARAM_KIND:
            return f"<{self.name}>"
        if not self.params:
            return self.name
        return f"{self.name}({', '.join(p.display() for p in self.params)})"

    def __repr__(self) -> str:
        return self.display()


DYN = Type(DYN_KIND, "dyn")
ANY = Type(ANY_KIND, "google.protobuf.Any")
BOOL = Type(BOOL_KIND, "bool")
BYTES = Type(BYTES_KIND, "bytes")
DOUBLE = Type(DOUBLE_KIND, "double")
INT = Type(INT_KIND, "int")
UINT = Type(UINT_KIND, "uint")
STRING = Type(STRING_KIND, "string")
NULL = Type(NULL_KIND, "null_type")
ERROR = Type(ERROR_KIND, "*error*")
TIMESTAMP = Type(TIMESTAMP_KIND, "google.protobuf.Timestamp")
DURATION = Type(DURATION_KIND, "google.protobuf.Duration")
QUANTITY = Type(OPAQUE_KIND, "kubernetes.Quantity")
SEMVER = Type(OPAQUE_KIND, "kubernetes.Semver")
DEVICE = Type(STRUCT_KIND, "kubernetes.DRADevice")


def list_of(elem: Type) -> Type:
    """``list(elem)``."""
    return Type(LIST_KIND, "list", (elem,))


def map_of(key: Type, value: Type) -> Type:
    """``map(key, value)``."""
    return Type(MAP_KIND, "map", (key, value))


def optional_of(elem: Type) -> Type:
    """``optional_type(elem)``."""
    return Type(OPAQUE_KIND, "optional_type", (elem,))


def type_of(t: Type) -> Type:
    """``type(t)``: the type of a type value."""
    return Type(TYPE_KIND, "type", (t,))


TYPE = Type(TYPE_KIND, "type")


def param(name: str) -> Type:
    """A type parameter."""
    return Type(TYPE_PARAM_KIND, name)


def is_dyn(t: Type) -> bool:
    """``dyn`` or the protobuf ``any`` type."""
    return t.kind in (DYN_KIND, ANY_KIND)


def is_dyn_or_error(t: Type) -> bool:
    """``dyn``, ``any`` or the error type."""
    return t.kind == ERROR_KIND or is_dyn(t)


def is_optional(t: Type) -> bool:
    """``optional_type(...)``."""
    return t.kind == OPAQUE_KIND and t.name == "optional_type"


def unwrap_optional(t: Type) -> tuple[Type, bool]:
    """The element type of an optional, and whether ``t`` was one."""
    if is_optional(t):
        return t.params[0], True
    return t, False


def _is_wrapper_like_dyn(t: Type) -> bool:
    return t.kind in (DYN_KIND, ANY_KIND, TYPE_PARAM_KIND)


def exact(a: Type, b: Type) -> bool:
    """``IsExactType``."""
    return a == b


def equivalent(a: Type, b: Type) -> bool:
    """``IsEquivalentType``: equal, ignoring type parameter names."""
    if a.kind != b.kind or len(a.params) != len(b.params):
        return False
    if a.kind != TYPE_PARAM_KIND and a.name != b.name:
        return False
    return all(equivalent(x, y) for x, y in zip(a.params, b.params, strict=True))


def _type_assignable_from(target: Type, source: Type) -> bool:
    """``Type.IsAssignableType`` (the default rule; no wrapper types are declared here)."""
    if target == source or _is_wrapper_like_dyn(target):
        return True
    if target.kind != source.kind or target.name != source.name or len(target.params) != len(source.params):
        return False
    return all(_type_assignable_from(tp, sp) for tp, sp in zip(target.params, source.params, strict=True))


class Mapping:
    """Type-parameter substitutions (copy-on-write in the checker)."""

    __slots__ = ("subs",)

    def __init__(self, subs: dict[Type, Type] | None = None) -> None:
        self.subs: dict[Type, Type] = dict(subs or {})

    def copy(self) -> Mapping:
        """An independent copy."""
        return Mapping(self.subs)

    def find(self, t: Type) -> Type | None:
        """The substitution of ``t``, if any."""
        return self.subs.get(t)

    def add(self, src: Type, dst: Type) -> None:
        """Record ``src -> dst``."""
        self.subs[src] = dst


def _less_or_equally_specific(a: Type, b: Type) -> bool:  # noqa: PLR0911 - one branch per type kind, as cel-go's type assignability
    if is_dyn(a) or a.kind == TYPE_PARAM_KIND:
        return True
    if is_dyn(b) or b.kind == TYPE_PARAM_KIND:
        return False
    if a.kind != b.kind:
        return False
    if a.kind == OPAQUE_KIND:
        if a.name != b.name or len(a.params) != len(b.params):
            return False
        return all(_less_or_equally_specific(x, y) for x, y in zip(a.params, b.params, strict=True))
    if a.kind == LIST_KIND:
        return _less_or_equally_specific(a.params[0], b.params[0])
    if a.kind == MAP_KIND:
        return _less_or_equally_specific(a.params[0], b.params[0]) and _less_or_equally_specific(a.params[1], b.params[1])
    if a.kind == TYPE_KIND:
        return True
    return a == b


def most_general(a: Type, b: Type) -> Type:
    """The more general of two types known to unify."""
    return a if _less_or_equally_specific(a, b) else b


def _not_referenced_in(m: Mapping, t: Type, within: Type) -> bool:
    if t == within:
        return False
    if within.kind == TYPE_PARAM_KIND:
        sub = m.find(within)
        return True if sub is None else _not_referenced_in(m, t, sub)
    if within.kind in (OPAQUE_KIND, LIST_KIND, MAP_KIND, TYPE_KIND):
        return all(_not_referenced_in(m, t, p) for p in within.params)
    return True


def _valid_substitution(m: Mapping, t1: Type, t2: Type) -> tuple[bool, bool]:
    """Whether t2 (or its substitution) can stand for t1; and whether t2 had a substitution."""
    if t1.kind == t2.kind and t1 == t2:
        return True, True
    sub = m.find(t2)
    if sub is not None:
        if t1.kind == sub.kind and t1 == sub:
            return True, True
        if _assignable(m, t1, sub):
            new = most_general(t1, sub)
            if _not_referenced_in(m, t2, new):
                m.add(t2, new)
            return True, True
        return False, True
    if _not_referenced_in(m, t2, t1):
        m.add(t2, t1)
        return True, False
    return False, False


def _nullable(t: Type) -> bool:
    return t.kind in (OPAQUE_KIND, STRUCT_KIND, ANY_KIND, DURATION_KIND, TIMESTAMP_KIND) or _type_assignable_from(t, NULL)


def _assignable(m: Mapping, t1: Type, t2: Type) -> bool:  # noqa: PLR0911 - one branch per type kind, as cel-go's type assignability
    """Whether t1 is assignable to t2, recording substitutions in ``m``."""
    if t2.kind == TYPE_PARAM_KIND:
        valid, has_sub = _valid_substitution(m, t1, t2)
        if valid:
            return True
        if has_sub:
            return False
    if t1.kind == TYPE_PARAM_KIND:
        return _valid_substitution(m, t2, t1)[0]
    if is_dyn_or_error(t1) or is_dyn_or_error(t2):
        return True
    if t1.kind == NULL_KIND:
        return _nullable(t2)
    if t2.kind == NULL_KIND:
        return _nullable(t1)
    if t1.kind in (
        BOOL_KIND,
        BYTES_KIND,
        DOUBLE_KIND,
        INT_KIND,
        STRING_KIND,
        UINT_KIND,
        ANY_KIND,
        DURATION_KIND,
        TIMESTAMP_KIND,
        STRUCT_KIND,
    ):
        return _type_assignable_from(t2, t1)
    if t1.kind == TYPE_KIND:
        return t2.kind == TYPE_KIND
    if t1.kind in (OPAQUE_KIND, LIST_KIND, MAP_KIND):
        return (
            t1.kind == t2.kind
            and t1.name == t2.name
            and len(t1.params) == len(t2.params)
            and all(_assignable(m, a, b) for a, b in zip(t1.params, t2.params, strict=True))
        )
    return False


def assignable(m: Mapping, t1: Type, t2: Type) -> Mapping | None:
    """A new mapping if t1 is assignable to t2, else None (``m`` is left alone)."""
    c = m.copy()
    return c if _assignable(c, t1, t2) else None


def assignable_list(m: Mapping, l1: list[Type], l2: list[Type]) -> Mapping | None:
    """A new mapping if every l1[i] is assignable to l2[i] (same lengths), else None."""
    if len(l1) != len(l2):
        return None
    c = m.copy()
    for a, b in zip(l1, l2, strict=True):
        if not _assignable(c, a, b):
            return None
    return c


def substitute(m: Mapping, t: Type, params_to_dyn: bool) -> Type:
    """Replace bound type parameters (and unbound ones by ``dyn`` if asked)."""
    sub = m.find(t)
    if sub is not None:
        return substitute(m, sub, params_to_dyn)
    if params_to_dyn and t.kind == TYPE_PARAM_KIND:
        return DYN
    if t.kind in (OPAQUE_KIND, LIST_KIND, MAP_KIND, TYPE_KIND) and t.params:
        return Type(t.kind, t.name, tuple(substitute(m, p, params_to_dyn) for p in t.params))
    return t


def format_type(t: Type) -> str:
    """``FormatCELType``: how checker issues print a type."""
    special = {ANY_KIND: "any", ERROR_KIND: "!error!", NULL_KIND: "null", DURATION_KIND: "duration", TIMESTAMP_KIND: "timestamp"}
    if t.kind in special:
        return special[t.kind]
    if t.kind == TYPE_PARAM_KIND:
        return t.name
    if not t.params:
        return t.name
    return f"{t.name}({', '.join(format_type(p) for p in t.params)})"


def format_signature(args: list[Type], member: bool) -> str:
    """``formatFunctionDeclType`` without a result: ``(a, b)`` or ``t.(a)``."""
    out = ""
    if member:
        out = format_type(args[0]) + "."
        args = args[1:]
    return out + "(" + ", ".join(format_type(a) for a in args) + ")"
