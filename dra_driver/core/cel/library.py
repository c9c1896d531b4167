"""Implementations of the DRA CEL environment's functions, and cel-go's rules for dispatching to them.

Called by the planner (``planner.py``). Operators and a few functions are *singletons* in cel-go:
one implementation that requires a trait of the first argument (``_<_`` needs a comparable left
operand, otherwise ``no such overload: _<_``). Every other function has one implementation per
overload id, guarded by the overload's declared argument types at run time (``no such overload:
isQuantity(int)``); a call the checker could not pin to one overload (``dyn`` arguments) tries
every overload of the function in declaration order. See :func:`call`.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

from dra_driver.core.cel import regex
from dra_driver.core.cel.decls import FUNCTIONS, OVERLOADS, Overload
from dra_driver.core.cel.quantity import Quantity, QuantityError, from_int, is_quantity, parse_quantity
from dra_driver.core.cel.semver import Semver, SemverError, is_semver, normalize_and_parse, parse_semver
from dra_driver.core.cel.types import (
    ANY_KIND,
    DYN_KIND,
    LIST_KIND,
    MAP_KIND,
    TYPE_PARAM_KIND,
    Type,
)
from dra_driver.core.cel.values import (
    INT64_MAX,
    INT64_MIN,
    NONE,
    UINT64_MAX,
    CelType,
    EvalError,
    Optional,
    Uint,
    compare,
    equal,
    go_g,
    go_v,
    has_trait,
    is_zero,
    map_contains,
    type_name,
)

Impl = Callable[..., Any]


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


# -- arithmetic --------------------------------------------------------------------------------------
def _int(v: int) -> int:
    if not INT64_MIN <= v <= INT64_MAX:
        raise EvalError("integer overflow")
    return v


def _uint(v: int) -> Uint:
    if not 0 <= v <= UINT64_MAX:
        raise EvalError("unsigned integer overflow")
    return Uint(v)


def _add(a: Any, b: Any) -> Any:
    ta = type(a)
    if ta is not type(b) and not (ta is list and type(b) is list):
        raise EvalError("no such overload")
    if ta is int:
        return _int(a + b)
    if ta is Uint:
        return _uint(int(a) + int(b))
    return a + b


def _sub(a: Any, b: Any) -> Any:
    if type(a) is not type(b):
        raise EvalError("no such overload")
    if type(a) is int:
        return _int(a - b)
    if type(a) is Uint:
        return _uint(int(a) - int(b))
    return a - b


def _mul(a: Any, b: Any) -> Any:
    if type(a) is not type(b):
        raise EvalError("no such overload")
    if type(a) is int:
        return _int(a * b)
    if type(a) is Uint:
        return _uint(int(a) * int(b))
    return a * b


def _div(a: Any, b: Any) -> Any:
    if type(a) is not type(b):
        raise EvalError("no such overload")
    if type(a) is float:
        if b == 0:
            if a == 0 or math.isnan(a):
                return math.nan
            return math.copysign(math.inf, a) * math.copysign(1.0, b)
        return a / b
    if b == 0:
        raise EvalError("division by zero")
    if type(a) is int and a == INT64_MIN and b == -1:
        raise EvalError("integer overflow")
    q = abs(int(a)) // abs(int(b))
    q = -q if (a < 0) != (b < 0) else q
    return Uint(q) if type(a) is Uint else q


def _mod(a: Any, b: Any) -> Any:
    if type(a) is not type(b):
        raise EvalError("no such overload")
    if b == 0:
        raise EvalError("modulus by zero")
    if type(a) is int and a == INT64_MIN and b == -1:
        raise EvalError("integer overflow")
    r = abs(int(a)) % abs(int(b))
    r = -r if a < 0 else r
    return Uint(r) if type(a) is Uint else r


def _negate(v: Any) -> Any:
    if type(v) is bool:
        raise EvalError("no such overload")
    if type(v) is int:
        return _int(-v)
    return -v


def _logical_not(v: Any) -> Any:
    if type(v) is not bool:
        raise EvalError("no such overload")
    return not v


def _cmp_op(test: Callable[[int], bool]) -> Impl:
    def op(a: Any, b: Any) -> bool:
        return test(compare(a, b))

    return op


def _in(needle: Any, container: Any) -> bool:
    if type(container) is list:
        for x in container:
            try:
                if _needle_equal(needle, x):
                    return True
            except EvalError:
                continue
        return False
    if isinstance(container, dict):
        return map_contains(container, needle)
    raise EvalError("no such overload")


def _needle_equal(needle: Any, elem: Any) -> bool:
    """``needle.Equal(elem)`` (no null shortcut: ``Null.Equal`` compares types)."""
    if needle is None:
        return elem is None
    return equal(needle, elem)


def _size(v: Any) -> int:
    return len(v)


def _type(v: Any) -> CelType:
    return CelType(type_name(v))


SINGLETONS: dict[str, tuple[Impl, str | None]] = {
    "!_": (_logical_not, None),
    "-_": (_negate, "negate"),
    "_+_": (_add, "add"),
    "_-_": (_sub, "subtract"),
    "_*_": (_mul, "multiply"),
    "_/_": (_div, "divide"),
    "_%_": (_mod, "modulo"),
    "_<_": (_cmp_op(lambda c: c == -1), "compare"),
    "_<=_": (_cmp_op(lambda c: c in (-1, 0)), "compare"),
    "_>_": (_cmp_op(lambda c: c == 1), "compare"),
    "_>=_": (_cmp_op(lambda c: c in (0, 1)), "compare"),
    "@in": (_in, None),
    "size": (_size, "size"),
    "type": (_type, None),
    "dyn": (lambda v: v, None),
    "matches": (lambda s, p: _match(s, p), "matcher"),  # noqa: PLW0108 (_match is defined below)
}


def call_singleton(function: str, args: list[Any]) -> Any:
    """A singleton binding: the first argument must have the trait (strings fall back to their receiver)."""
    impl, trait = SINGLETONS[function]
    if trait is not None and not has_trait(args[0], trait):
        if type(args[0]) is str:
            raise EvalError("no such overload")
        raise EvalError(f"no such overload: {function}")
    return impl(*args)


# -- conversions -------------------------------------------------------------------------------------
_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_UINT_RE = re.compile(r"\+?[0-9]+\Z")


def _conv_error(src: str, dst: str) -> EvalError:
    return EvalError(f"type conversion error from '{src}' to '{dst}'")


def _string_to_int(s: str) -> int:
    if not _INT_RE.match(s) or not INT64_MIN <= int(s) <= INT64_MAX:
        raise _conv_error("string", "int")
    return int(s)


def _string_to_uint(s: str) -> Uint:
    if not _UINT_RE.match(s) or s.startswith("+") or int(s) > UINT64_MAX:
        raise _conv_error("string", "uint")
    return Uint(int(s))


_DEC_FLOAT = re.compile(r"[+-]?(?=[0-9_]*\.?[0-9_]*[0-9])[0-9_]*(?:\.[0-9_]*)?(?:[eE][+-]?[0-9][0-9_]*)?\Z")
_HEX_FLOAT = re.compile(r"[+-]?0[xX](?=[0-9a-fA-F_.]*[0-9a-fA-F])[0-9a-fA-F_]*(?:\.[0-9a-fA-F_]*)?[pP][+-]?[0-9][0-9_]*\Z")


def _underscore_ok(s: str) -> bool:
    """Go's ``underscoreOK``: underscores only between digits (a base prefix counts as a digit)."""
    saw = "^"
    body = s[1:] if s[:1] in "+-" else s
    i = 0
    hexa = False
    if len(body) >= 2 and body[0] == "0" and body[1] in "bBoOxX":
        i, saw, hexa = 2, "0", body[1] in "xX"
    for c in body[i:]:
        if c.isdigit() or (hexa and c in "abcdefABCDEF"):
            saw = "0"
        elif c == "_":
            if saw != "0":
                return False
            saw = "_"
        else:
            if saw == "_":
                return False
            saw = "!"
    return saw != "_"


def _string_to_double(s: str) -> float:
    """Go's ``strconv.ParseFloat(s, 64)``; any error is a conversion error."""
    low = s.lower()
    body = low[1:] if low[:1] in "+-" else low
    if body in ("inf", "infinity"):
        return -math.inf if low.startswith("-") else math.inf
    if low == "nan":
        return math.nan
    hexa = _HEX_FLOAT.match(s) is not None
    if not (hexa or _DEC_FLOAT.match(s)) or ("_" in s and not _underscore_ok(s)):
        raise _conv_error("string", "double")
    clean = s.replace("_", "")
    v = float.fromhex(clean) if hexa else float(clean)
    if math.isinf(v):
        raise _conv_error("string", "double")
    return v


def _string_to_bool(s: str) -> bool:
    if s in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if s in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise _conv_error("string", "bool")


def _double_to_int(v: float) -> int:
    if math.isinf(v) or math.isnan(v) or v <= -9.223372036854775808e18 or v >= 9.223372036854775808e18:
        raise EvalError("integer overflow")
    return int(v)


def _double_to_uint(v: float) -> Uint:
    if math.isinf(v) or math.isnan(v) or v < 0 or v >= 1.8446744073709551616e19:
        raise EvalError("unsigned integer overflow")
    return Uint(int(v))


def _uint_to_int(v: int) -> int:
    if v > INT64_MAX:
        raise EvalError("integer overflow")
    return int(v)


def _int_to_uint(v: int) -> Uint:
    if v < 0:
        raise EvalError("unsigned integer overflow")
    return Uint(v)


def _bytes_to_string(b: bytes) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        raise EvalError("invalid UTF-8 in bytes, cannot convert to string") from None


# -- strings ---------------------------------------------------------------------------------------
def _contains(s: Any, sub: Any) -> bool:
    if type(s) is not str or type(sub) is not str:
        raise EvalError("no such overload")
    return sub in s


def _starts(s: Any, sub: Any) -> bool:
    if type(s) is not str or type(sub) is not str:
        raise EvalError("no such overload")
    return s.startswith(sub)


def _ends(s: Any, sub: Any) -> bool:
    if type(s) is not str or type(sub) is not str:
        raise EvalError("no such overload")
    return s.endswith(sub)


def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return regex.compile_re2(pattern)
    except (regex.RegexError, regex.RegexUnsupported) as err:
        raise EvalError(str(err)) from None


def _match(s: Any, pattern: Any) -> bool:
    if type(pattern) is not str:
        raise EvalError("no such overload")
    return _regex(pattern).search(s) is not None


def _find(s: str, pattern: str) -> str:
    try:
        rx = regex.compile_re2(pattern)
    except regex.RegexError as err:
        raise EvalError(f"Illegal regex: {err!s}") from None
    except regex.RegexUnsupported as err:
        raise EvalError(str(err)) from None
    m = rx.search(s)
    return m.group(0) if m else ""


def _find_all(s: str, pattern: str, n: int = -1) -> list[str]:
    try:
        rx = regex.compile_re2(pattern)
    except regex.RegexError as err:
        raise EvalError(f"Illegal regex: {err!s}") from None
    except regex.RegexUnsupported as err:
        raise EvalError(str(err)) from None
    return find_all_compiled(rx, s, n)


def find_all_compiled(rx: re.Pattern[str], s: str, n: int) -> list[str]:
    """Go's ``FindAllString(s, n)`` with a compiled pattern."""
    if n == 0:
        return []
    out: list[str] = []
    pos = 0
    prev_end = -1
    while pos <= len(s):
        m = rx.search(s, pos)
        if m is None:
            break
        if m.end() == m.start() and m.start() == prev_end:
            pos = m.start() + 1  # Go skips an empty match right after the previous match
            continue
        out.append(m.group(0))
        prev_end = m.end()
        pos = m.end() if m.end() > m.start() else m.end() + 1
        if 0 < n <= len(out):
            break
    return out


def _char_at(s: str, i: int) -> str:
    if i < 0 or i > len(s):
        raise EvalError(f"index out of range: {i}")
    return s[i : i + 1]


def _index_of(s: str, sub: str, off: int = 0) -> int:
    if sub == "":
        return off
    if off < 0:
        raise EvalError(f"index out of range: {off}")
    if off >= len(s):
        return -1
    return s.find(sub, off)


def _last_index_of(s: str, sub: str, off: int | None = None) -> int:
    if off is None:
        if sub == "":
            return len(s)
        if len(s.encode("utf-8")) < len(sub.encode("utf-8")):
            return -1
        off = len(s) - 1
    if sub == "":
        return off
    if off < 0:
        raise EvalError(f"index out of range: {off}")
    if off >= len(s):
        return -1
    off = min(off, len(s) - len(sub))
    if off < 0:
        return -1
    return s.rfind(sub, 0, off + len(sub))


def _lower_ascii(s: str) -> str:
    return "".join(c.lower() if c.isascii() else c for c in s)


def _upper_ascii(s: str) -> str:
    return "".join(c.upper() if c.isascii() else c for c in s)


def _replace(s: str, old: str, new: str, n: int = -1) -> str:
    return s.replace(old, new, n if n >= 0 else -1)


def _split(s: str, sep: str, n: int = -1) -> list[str]:
    if n == 0:
        return []
    if sep == "":
        chars = list(s)
        if n > 0 and len(chars) > n:
            return [*chars[: n - 1], "".join(chars[n - 1 :])]
        return chars
    return s.split(sep, n - 1 if n > 0 else -1)


def _substring(s: str, start: int, end: int | None = None) -> str:
    if end is None:
        if start < 0 or start > len(s):
            raise EvalError(f"index out of range: {start}")
        return s[start:]
    if start > end:
        raise EvalError(f"invalid substring range. start: {start}, end: {end}")
    if start < 0 or start > len(s):
        raise EvalError(f"index out of range: {start}")
    if end < 0 or end > len(s):
        raise EvalError(f"index out of range: {end}")
    return s[start:end]


_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def _join(items: list[Any], sep: str = "") -> str:
    for x in items:
        if type(x) is not str:
            raise EvalError(f"join: invalid input: {x}")
    return sep.join(items)


def _quote(s: str) -> str:
    esc = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v", "\\": "\\\\", '"': '\\"'}
    return '"' + "".join(esc.get(c, c) for c in s) + '"'


# -- lists and sets ----------------------------------------------------------------------------------
def _list_contains(items: list[Any], v: Any) -> bool:
    for x in items:
        try:
            if _needle_equal(v, x):
                return True
        except EvalError:
            continue
    return False


def _slice(items: list[Any], start: int, end: int) -> list[Any]:
    if start < 0 or end < 0:
        raise EvalError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise EvalError(f"cannot slice({start}, {end}), start index must be less than or equal to end index")
    if len(items) < end:
        raise EvalError(f"cannot slice({start}, {end}), list is length {len(items)}")
    return items[start:end]


def _flatten(items: list[Any], depth: int = 1) -> list[Any]:
    if depth < 0:
        raise EvalError("level must be non-negative")
    out: list[Any] = []
    for x in items:
        if type(x) is list and depth != 0:
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
        return _needle_equal(a, b)
    except EvalError:
        return False


def _sort(items: list[Any]) -> list[Any]:
    if not items:
        return items
    if not has_trait(items[0], "compare"):
        raise EvalError("list elements must be comparable")
    first = type(items[0])
    for x in items:
        if type(x) is not first:
            raise EvalError("list elements must have the same type")
    return sorted(items, key=functools.cmp_to_key(compare))


def _range(n: int) -> list[int]:
    return list(range(n))


def _is_sorted(items: list[Any]) -> bool:
    for x in items:
        if not has_trait(x, "compare"):
            raise EvalError("no such overload")
    return all(compare(items[i], items[i + 1]) != 1 for i in range(len(items) - 1))


def _sum(zero: Any) -> Impl:
    def run(items: list[Any]) -> Any:
        acc = zero
        for x in items:
            if not has_trait(x, "add"):
                raise EvalError("no such overload")
            acc = _add(acc, x)
        return acc

    return run


def _extreme(name: str, prefer: int) -> Impl:
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


def _list_index_of(items: list[Any], v: Any) -> int:
    for i, x in enumerate(items):
        if _elem_equal(x, v):
            return i
    return -1


def _list_last_index_of(items: list[Any], v: Any) -> int:
    for i in range(len(items) - 1, -1, -1):
        if _elem_equal(items[i], v):
            return i
    return -1


def _elem_equal(elem: Any, v: Any) -> bool:
    try:
        return _needle_equal(elem, v)
    except EvalError:
        return False


def _sets_contains(a: list[Any], b: list[Any]) -> bool:
    return all(_list_contains(a, x) for x in b)


def _sets_intersects(a: list[Any], b: list[Any]) -> bool:
    return any(_list_contains(b, x) for x in a)


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


def _includes(target: Any, arg: Any) -> bool:
    if type(target) is list:
        for i, x in enumerate(target):
            if i >= 48:
                raise EvalError("'includes' function cannot be applied to lists longer than 48 values")
            if _safe_eq(x, arg):
                return True
        return False
    return _safe_eq(target, arg)


def _opt_value(o: Optional) -> Any:
    if not o.has:
        raise EvalError("optional.none() dereference")
    return o.value


IMPLS: dict[str, Impl] = {
    # conversions
    "bool_to_bool": lambda v: v,
    "string_to_bool": _string_to_bool,
    "bytes_to_bytes": lambda v: v,
    "string_to_bytes": lambda s: s.encode("utf-8"),
    "double_to_double": lambda v: v,
    "int64_to_double": float,
    "string_to_double": _string_to_double,
    "uint64_to_double": float,
    "int64_to_int64": lambda v: v,
    "double_to_int64": _double_to_int,
    "string_to_int64": _string_to_int,
    "uint64_to_int64": _uint_to_int,
    "string_to_string": lambda v: v,
    "bool_to_string": lambda b: "true" if b else "false",
    "bytes_to_string": _bytes_to_string,
    "double_to_string": go_g,
    "int64_to_string": lambda v: str(int(v)),
    "uint64_to_string": lambda v: str(int(v)),
    "uint64_to_uint64": lambda v: v,
    "double_to_uint64": _double_to_uint,
    "int64_to_uint64": _int_to_uint,
    "string_to_uint64": _string_to_uint,
    # strings
    "contains_string": _contains,
    "ends_with_string": _ends,
    "starts_with_string": _starts,
    "string_char_at_int": _char_at,
    "string_find_string": _find,
    "string_find_all_string": _find_all,
    "string_find_all_string_int": _find_all,
    "string_index_of_string": _index_of,
    "string_index_of_string_int": _index_of,
    "string_last_index_of_string": _last_index_of,
    "string_last_index_of_string_int": _last_index_of,
    "string_lower_ascii": _lower_ascii,
    "string_upper_ascii": _upper_ascii,
    "string_replace_string_string": _replace,
    "string_replace_string_string_int": _replace,
    "string_split_string": _split,
    "string_split_string_int": _split,
    "string_substring_int": _substring,
    "string_substring_int_int": _substring,
    "string_trim": lambda s: s.strip(_SPACE),
    "list_join": _join,
    "list_join_string": _join,
    "strings_quote": _quote,
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
    "dra_includes_dyn_dyn": _includes,
    # sets and lists
    "list_sets_contains_list": _sets_contains,
    "list_sets_equivalent_list": lambda a, b: _sets_contains(a, b) and _sets_contains(b, a),
    "list_sets_intersects_list": _sets_intersects,
    "list_distinct": _distinct,
    "list_first": lambda xs: Optional(True, xs[0]) if xs else NONE,
    "list_last": lambda xs: Optional(True, xs[-1]) if xs else NONE,
    "list_flatten": _flatten,
    "list_flatten_int": _flatten,
    "lists_range": _range,
    "list_reverse": lambda xs: xs[::-1],
    "list_slice": _slice,
    "list_a_index_of_int": _list_index_of,
    "list_a_last_index_of_int": _list_last_index_of,
    "not_strictly_false": lambda v: v if type(v) is bool else True,
}
for _n in ("int", "uint", "double", "bool", "string", "bytes"):
    IMPLS[f"list_{_n}_sort"] = _sort
    IMPLS[f"list_{_n}_is_sorted_bool"] = _is_sorted
    IMPLS[f"list_{_n}_max_{_n}"] = _extreme("max", -1)
    IMPLS[f"list_{_n}_min_{_n}"] = _extreme("min", 1)
IMPLS["list_int_sum_int"] = _sum(0)
IMPLS["list_uint_sum_uint"] = _sum(Uint(0))
IMPLS["list_double_sum_double"] = _sum(0.0)


def _map_insert(m: dict[Any, Any], k: Any, v: Any) -> dict[Any, Any]:
    if map_contains(m, k):
        raise EvalError(f"insert failed: key {go_v(k)} already exists")
    out = dict(m)
    out[k] = v
    return out


def _map_insert_map(m: dict[Any, Any], update: dict[Any, Any]) -> dict[Any, Any]:
    for k, v in update.items():
        m = _map_insert(m, k, v)
    return m


IMPLS["@mapInsert_map_key_value"] = _map_insert
IMPLS["@mapInsert_map_map"] = _map_insert_map
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
