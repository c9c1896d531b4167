"""The function library of the DRA CEL environment.

Standard functions, Kubernetes quantity and semver libraries, the strings, lists and sets
extensions, regex helpers and optionals.

Called by the compiler (``compiler.py``), which type-checks calls against these overloads at
compile time and dispatches on runtime types. Each overload names its parameter types with CEL
type names (``dyn`` matches anything, ``list``/``map`` any list/map).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dra_driver.core.cel.quantity import Quantity, QuantityError, from_int, is_quantity, parse_quantity
from dra_driver.core.cel.semver import Semver, SemverError, is_semver, normalize_and_parse, parse_semver
from dra_driver.core.cel.values import (
    INT64_MAX,
    INT64_MIN,
    NONE,
    UINT64_MAX,
    CelType,
    EvalError,
    Optional,
    Uint,
    cel_compare,
    cel_equal,
    is_numeric,
    type_name,
)

Q = "kubernetes.Quantity"
S = "kubernetes.Semver"
StaticType = str | tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Overload:
    """One overload: receiver-style or global, parameter types, result type, implementation."""

    member: bool
    params: tuple[str, ...]
    result: StaticType
    impl: Callable[..., Any]


def _int(v: int) -> int:
    if not INT64_MIN <= v <= INT64_MAX:
        raise EvalError("integer overflow")
    return v


# -- quantity ---------------------------------------------------------------------------------
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


# -- semver -----------------------------------------------------------------------------------
def _semver(s: str, normalize: bool = False) -> Semver:
    try:
        return normalize_and_parse(s) if normalize else parse_semver(s)
    except SemverError as err:
        raise EvalError(str(err)) from None


def _go_int(v: int) -> int:
    """Go's int64(uint64) conversion of a version number."""
    return v - (1 << 64) if v > INT64_MAX else v


# -- conversions ------------------------------------------------------------------------------
def _to_int(v: Any) -> int:
    t = type(v)
    if t is int:
        return int(v)
    if t is Uint:
        if v > INT64_MAX:
            raise EvalError("integer overflow")
        return int(v)
    if t is float:
        if math.isnan(v) or v >= 9.223372036854775807e18 or v <= -9.223372036854775808e18:
            raise EvalError("integer overflow")
        return int(v)
    if t is str:
        try:
            return _int(int(v, 10))
        except ValueError:
            raise EvalError(f"cannot convert string '{v}' to int") from None
    raise EvalError("no such overload")


def _to_uint(v: Any) -> Uint:
    t = type(v)
    if t is Uint:
        return Uint(v)
    if t is int:
        if v < 0:
            raise EvalError("unsigned integer overflow")
        return Uint(v)
    if t is float:
        if math.isnan(v) or v < 0 or v >= 1.8446744073709552e19:
            raise EvalError("unsigned integer overflow")
        return Uint(int(v))
    if t is str:
        try:
            u = int(v, 10)
        except ValueError:
            raise EvalError(f"cannot convert string '{v}' to uint") from None
        if not 0 <= u <= UINT64_MAX:
            raise EvalError("unsigned integer overflow")
        return Uint(u)
    raise EvalError("no such overload")


def _to_double(v: Any) -> float:
    if is_numeric(v):
        return float(v)
    if type(v) is str:
        try:
            return float(v)
        except ValueError:
            raise EvalError(f"cannot convert string '{v}' to double") from None
    raise EvalError("no such overload")


def _to_string(v: Any) -> str:
    t = type(v)
    if t is str:
        return str(v)
    if t is bool:
        return "true" if v else "false"
    if t is int or t is Uint:
        return str(int(v))
    if t is float:
        return _format_double(v)
    if t is bytes:
        try:
            return str(v.decode("utf-8"))
        except UnicodeDecodeError:
            raise EvalError("invalid UTF-8 in bytes, cannot convert to string") from None
    raise EvalError("no such overload")


def _format_double(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v.is_integer() and abs(v) < 1e21:
        return str(int(v))
    r = repr(v)
    if "e" in r:
        mant, exp = r.split("e")
        sign = exp[0] if exp[0] in "+-" else "+"
        digits = exp.lstrip("+-").rjust(2, "0")
        return f"{mant}e{sign}{digits}"
    return r


def _to_bool(v: Any) -> bool:
    if type(v) is bool:
        return v
    if type(v) is str:
        if v in ("true", "True", "TRUE", "t", "1"):
            return True
        if v in ("false", "False", "FALSE", "f", "0"):
            return False
        raise EvalError(f"type conversion error from 'string' to 'bool'")  # noqa: F541
    raise EvalError("no such overload")


def _size(v: Any) -> int:
    if type(v) is str:
        return len(v)
    if type(v) in (bytes, list) or isinstance(v, dict):
        return len(v)
    raise EvalError("no such overload")


# -- strings extension (v2) -------------------------------------------------------------------
def _char_at(s: str, i: int) -> str:
    if i < 0 or i > len(s):
        raise EvalError(f"index out of range: {i}")
    return s[i : i + 1]


def _index_of(s: str, sub: str, start: int = 0) -> int:
    if start < 0 or start > len(s):
        raise EvalError(f"index out of range: {start}")
    return s.find(sub, start)


def _last_index_of(s: str, sub: str, end: int | None = None) -> int:
    if end is None:
        return s.rfind(sub)
    if end < 0 or end > len(s):
        raise EvalError(f"index out of range: {end}")
    return s.rfind(sub, 0, end + len(sub))


def _lower_ascii(s: str) -> str:
    return "".join(c.lower() if c.isascii() else c for c in s)


def _upper_ascii(s: str) -> str:
    return "".join(c.upper() if c.isascii() else c for c in s)


def _replace(s: str, old: str, new: str, n: int = -1) -> str:
    return s.replace(old, new, n if n >= 0 else -1)


def _split(s: str, sep: str, n: int = -1) -> list[str]:
    if n == 0:
        return []
    if n == 1:
        return [s]
    if sep == "":
        chars = list(s)
        if n > 0 and len(chars) > n:
            return [*chars[: n - 1], "".join(chars[n - 1 :])]
        return chars
    return s.split(sep, n - 1 if n > 0 else -1)


def _substring(s: str, start: int, end: int | None = None) -> str:
    e = len(s) if end is None else end
    if start < 0 or start > len(s):
        raise EvalError(f"index out of range: {start}")
    if e < 0 or e > len(s):
        raise EvalError(f"index out of range: {e}")
    if start > e:
        raise EvalError(f"invalid substring range. start: {start}, end: {e}")
    return s[start:e]


_TRIM = (
    " \t\n\v\f\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def _trim(s: str) -> str:
    return s.strip(_TRIM)


def _join(items: list[Any], sep: str = "") -> str:
    for x in items:
        if type(x) is not str:
            raise EvalError("no such overload")
    return sep.join(items)


def _quote(s: str) -> str:
    out = ['"']
    for c in s:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


# -- lists ------------------------------------------------------------------------------------
def _slice(items: list[Any], start: int, end: int) -> list[Any]:
    if start < 0 or end < 0:
        raise EvalError(f"cannot slice(start={start}, end={end}), negative indexes not supported")
    if start > end:
        raise EvalError(f"cannot slice(start={start}, end={end}), start must be less than or equal to end")
    if end > len(items):
        raise EvalError(f"cannot slice(start={start}, end={end}), list is length {len(items)}")
    return items[start:end]


def _flatten(items: list[Any], depth: int = 1) -> list[Any]:
    if depth < 0:
        raise EvalError("level must be non-negative")
    out: list[Any] = []
    for x in items:
        if type(x) is list and depth > 0:
            out.extend(_flatten(x, depth - 1))
        else:
            out.append(x)
    return out


def _distinct(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    for x in items:
        if not any(_safe_eq(x, y) for y in out):
            out.append(x)
    return out


def _safe_eq(a: Any, b: Any) -> bool:
    try:
        return cel_equal(a, b)
    except EvalError:
        return False


def _sorted(items: list[Any]) -> list[Any]:
    import functools

    return sorted(items, key=functools.cmp_to_key(_order))


def _order(a: Any, b: Any) -> int:
    if type(a) is Quantity and type(b) is Quantity:
        return a.cmp(b)
    if type(a) is Semver and type(b) is Semver:
        return a.compare(b)
    return cel_compare(a, b)


def _range(n: int) -> list[int]:
    return list(range(n))


def _is_sorted(items: list[Any]) -> bool:
    return all(_order(items[i], items[i + 1]) <= 0 for i in range(len(items) - 1))


def _sum(items: list[Any]) -> Any:
    if not items:
        return 0
    total = items[0]
    for x in items[1:]:
        total = add_values(total, x)
    return total


def _min(items: list[Any]) -> Any:
    if not items:
        raise EvalError("min(list) argument must not be empty")
    best = items[0]
    for x in items[1:]:
        if _order(x, best) < 0:
            best = x
    return best


def _max(items: list[Any]) -> Any:
    if not items:
        raise EvalError("max(list) argument must not be empty")
    best = items[0]
    for x in items[1:]:
        if _order(x, best) > 0:
            best = x
    return best


def _list_index_of(items: list[Any], v: Any) -> int:
    for i, x in enumerate(items):
        if cel_equal(x, v):
            return i
    return -1


def _list_last_index_of(items: list[Any], v: Any) -> int:
    for i in range(len(items) - 1, -1, -1):
        if cel_equal(items[i], v):
            return i
    return -1


def _sets_contains(a: list[Any], b: list[Any]) -> bool:
    return all(any(_safe_eq(x, y) for y in a) for x in b)


def _sets_intersects(a: list[Any], b: list[Any]) -> bool:
    return any(any(_safe_eq(x, y) for y in a) for x in b)


# -- regex ------------------------------------------------------------------------------------
_RE_CACHE: dict[str, re.Pattern[str]] = {}


def _regex(pattern: str) -> re.Pattern[str]:
    rx = _RE_CACHE.get(pattern)
    if rx is None:
        try:
            rx = re.compile(pattern)
        except re.error as err:
            raise EvalError(f"error parsing regexp: {err}") from None
        _RE_CACHE[pattern] = rx
    return rx


def _matches(s: str, pattern: str) -> bool:
    return _regex(pattern).search(s) is not None


def _find(s: str, pattern: str) -> str:
    m = _regex(pattern).search(s)
    return m.group(0) if m else ""


def _find_all(s: str, pattern: str, n: int = -1) -> list[str]:
    out = [m.group(0) for m in _regex(pattern).finditer(s)]
    return out if n < 0 else out[:n]


# -- optionals --------------------------------------------------------------------------------
def _opt_of_non_zero(v: Any) -> Optional:
    zero = v is None or v is False or (is_numeric(v) and v == 0) or (type(v) in (str, bytes, list) and len(v) == 0)
    zero = zero or (isinstance(v, dict) and len(v) == 0)
    return NONE if zero else Optional(True, v)


def _opt_value(o: Optional) -> Any:
    if not o.has:
        raise EvalError("optional.none() dereference")
    return o.value


# -- arithmetic used by sum() and the '+' operator -----------------------------------------------
def add_values(a: Any, b: Any) -> Any:
    """``a + b`` for same-typed CEL values."""
    ta = type(a)
    if ta is not type(b):
        raise EvalError("no such overload")
    if ta is int:
        return _int(a + b)
    if ta is Uint:
        r = int(a) + int(b)
        if r > UINT64_MAX:
            raise EvalError("unsigned integer overflow")
        return Uint(r)
    if ta in (float, str, bytes):
        return a + b
    if ta is list:
        return a + b
    raise EvalError("no such overload")


def _type_of(v: Any) -> CelType:
    return CelType(type_name(v))


def _o(member: bool, params: tuple[str, ...], result: StaticType, impl: Callable[..., Any]) -> Overload:
    return Overload(member, params, result, impl)


T, F = True, False
LS = ("list", "string")
FUNCTIONS: dict[str, tuple[Overload, ...]] = {
    # standard
    "size": (
        _o(F, ("string",), "int", _size),
        _o(F, ("bytes",), "int", _size),
        _o(F, ("list",), "int", _size),
        _o(F, ("map",), "int", _size),
        _o(T, ("string",), "int", _size),
        _o(T, ("bytes",), "int", _size),
        _o(T, ("list",), "int", _size),
        _o(T, ("map",), "int", _size),
    ),
    "contains": (_o(T, ("string", "string"), "bool", lambda s, x: x in s),),
    "startsWith": (_o(T, ("string", "string"), "bool", lambda s, x: s.startswith(x)),),
    "endsWith": (_o(T, ("string", "string"), "bool", lambda s, x: s.endswith(x)),),
    "matches": (_o(F, ("string", "string"), "bool", _matches), _o(T, ("string", "string"), "bool", _matches)),
    "int": tuple(_o(F, (p,), "int", _to_int) for p in ("int", "uint", "double", "string")),
    "uint": tuple(_o(F, (p,), "uint", _to_uint) for p in ("int", "uint", "double", "string")),
    "double": tuple(_o(F, (p,), "double", _to_double) for p in ("int", "uint", "double", "string")),
    "string": tuple(_o(F, (p,), "string", _to_string) for p in ("int", "uint", "double", "string", "bool", "bytes")),
    "bool": (_o(F, ("bool",), "bool", _to_bool), _o(F, ("string",), "bool", _to_bool)),
    "bytes": (_o(F, ("bytes",), "bytes", lambda b: b), _o(F, ("string",), "bytes", lambda s: s.encode("utf-8"))),
    "type": (_o(F, ("dyn",), "type", _type_of),),
    # Kubernetes quantity library
    "quantity": (_o(F, ("string",), Q, _quantity),),
    "isQuantity": (_o(F, ("string",), "bool", is_quantity),),
    "sign": (_o(F, (Q,), "int", lambda q: q.sign()),),
    "isGreaterThan": (_o(T, (Q, Q), "bool", lambda a, b: a.cmp(b) == 1), _o(T, (S, S), "bool", lambda a, b: a.compare(b) == 1)),
    "isLessThan": (_o(T, (Q, Q), "bool", lambda a, b: a.cmp(b) == -1), _o(T, (S, S), "bool", lambda a, b: a.compare(b) == -1)),
    "compareTo": (_o(T, (Q, Q), "int", lambda a, b: a.cmp(b)), _o(T, (S, S), "int", lambda a, b: a.compare(b))),
    "asApproximateFloat": (_o(T, (Q,), "double", lambda q: q.as_approximate_float()),),
    "asInteger": (_o(T, (Q,), "int", _q_as_integer),),
    "isInteger": (_o(T, (Q,), "bool", lambda q: q.as_int64() is not None),),
    "add": (_o(T, (Q, Q), Q, lambda a, b: a.add(b)), _o(T, (Q, "int"), Q, lambda a, b: a.add(from_int(b, a.format)))),
    "sub": (_o(T, (Q, Q), Q, lambda a, b: a.sub(b)), _o(T, (Q, "int"), Q, lambda a, b: a.sub(from_int(b, a.format)))),
    # Kubernetes semver library (v1, with normalisation)
    "semver": (_o(F, ("string",), S, _semver), _o(F, ("string", "bool"), S, _semver)),
    "isSemver": (
        _o(F, ("string",), "bool", is_semver),
        _o(F, ("string", "bool"), "bool", lambda s, n: is_semver(s, normalize=n)),
    ),
    "major": (_o(T, (S,), "int", lambda v: _go_int(v.major)),),
    "minor": (_o(T, (S,), "int", lambda v: _go_int(v.minor)),),
    "patch": (_o(T, (S,), "int", lambda v: _go_int(v.patch)),),
    # strings extension
    "charAt": (_o(T, ("string", "int"), "string", _char_at),),
    "indexOf": (
        _o(T, ("string", "string"), "int", _index_of),
        _o(T, ("string", "string", "int"), "int", _index_of),
        _o(T, ("list", "dyn"), "int", _list_index_of),
    ),
    "lastIndexOf": (
        _o(T, ("string", "string"), "int", _last_index_of),
        _o(T, ("string", "string", "int"), "int", _last_index_of),
        _o(T, ("list", "dyn"), "int", _list_last_index_of),
    ),
    "lowerAscii": (_o(T, ("string",), "string", _lower_ascii),),
    "upperAscii": (_o(T, ("string",), "string", _upper_ascii),),
    "replace": (
        _o(T, ("string", "string", "string"), "string", _replace),
        _o(T, ("string", "string", "string", "int"), "string", _replace),
    ),
    "split": (_o(T, ("string", "string"), LS, _split), _o(T, ("string", "string", "int"), LS, _split)),
    "substring": (_o(T, ("string", "int"), "string", _substring), _o(T, ("string", "int", "int"), "string", _substring)),
    "trim": (_o(T, ("string",), "string", _trim),),
    "join": (_o(T, ("list",), "string", _join), _o(T, ("list", "string"), "string", _join)),
    "strings.quote": (_o(F, ("string",), "string", _quote),),
    # lists extension and Kubernetes list library
    "slice": (_o(T, ("list", "int", "int"), "list", _slice),),
    "flatten": (_o(T, ("list",), "list", _flatten), _o(T, ("list", "int"), "list", _flatten)),
    "distinct": (_o(T, ("list",), "list", _distinct),),
    "reverse": (_o(T, ("list",), "list", lambda xs: xs[::-1]),),
    "sort": (_o(T, ("list",), "list", _sorted),),
    "lists.range": (_o(F, ("int",), ("list", "int"), _range),),
    "isSorted": (_o(T, ("list",), "bool", _is_sorted),),
    "sum": (_o(T, ("list",), "dyn", _sum),),
    "min": (_o(T, ("list",), "dyn", _min),),
    "max": (_o(T, ("list",), "dyn", _max),),
    # sets extension
    "sets.contains": (_o(F, ("list", "list"), "bool", _sets_contains),),
    "sets.equivalent": (_o(F, ("list", "list"), "bool", lambda a, b: _sets_contains(a, b) and _sets_contains(b, a)),),
    "sets.intersects": (_o(F, ("list", "list"), "bool", _sets_intersects),),
    # Kubernetes regex library
    "find": (_o(T, ("string", "string"), "string", _find),),
    "findAll": (_o(T, ("string", "string"), LS, _find_all), _o(T, ("string", "string", "int"), LS, _find_all)),
    # optionals
    "optional.of": (_o(F, ("dyn",), ("optional_type", "dyn"), lambda v: Optional(True, v)),),
    "optional.ofNonZeroValue": (_o(F, ("dyn",), ("optional_type", "dyn"), _opt_of_non_zero),),
    "optional.none": (_o(F, (), ("optional_type", "dyn"), lambda: NONE),),
    "hasValue": (_o(T, ("optional_type",), "bool", lambda o: o.has),),
    "value": (_o(T, ("optional_type",), "dyn", _opt_value),),
    "orValue": (_o(T, ("optional_type", "dyn"), "dyn", lambda o, d: o.value if o.has else d),),
    "or": (_o(T, ("optional_type", "optional_type"), ("optional_type", "dyn"), lambda o, p: o if o.has else p),),
}

NAMESPACES = frozenset(name.split(".", 1)[0] for name in FUNCTIONS if "." in name)


def runtime_matches(param: str, v: Any) -> bool:
    """Whether a runtime value fits an overload parameter."""
    if param == "dyn":
        return True
    if param == "list":
        return type(v) is list
    if param == "map":
        return isinstance(v, dict)
    return type_name(v) == param


def dispatch(name: str, overloads: tuple[Overload, ...], args: list[Any]) -> Any:
    """Call the first overload whose parameters fit ``args``; else "no such overload"."""
    for ov in overloads:
        if len(ov.params) == len(args) and all(runtime_matches(p, a) for p, a in zip(ov.params, args, strict=True)):
            return ov.impl(*args)
    raise EvalError("no such overload")
