"""CEL runtime values and the operations cel-go defines on them: equality, ordering, arithmetic.

Called by the planner (``planner.py``) and the function library (``library.py``). Values are plain
Python objects: ``bool``, ``int`` (CEL int), :class:`Uint`, ``float`` (double), ``str``, ``bytes``,
``None`` (null), ``list``, ``dict`` (map; :class:`DomainMap` for ``device.attributes`` and
``device.capacity``), :class:`~.quantity.Quantity`, :class:`~.semver.Semver`, :class:`Optional`
and :class:`CelType`. Errors are :class:`EvalError` with cel-go's text. Each operation follows the
receiving type's method in cel-go (``Int.Compare``, ``String.Add``, ...), including which side
decides: ``quantity("1") == 1`` is an error, ``1 == quantity("1")`` is false.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from dra_driver.core.quantity import Quantity
from dra_driver.schedsim.cel.semver import Semver

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1
_TWO_63 = 9.223372036854775808e18
_TWO_64 = 1.8446744073709551616e19


class EvalError(Exception):
    """A CEL runtime error (the message is cel-go's)."""


class Panic(Exception):
    """A Go runtime panic inside cel-go, which aborts the whole evaluation (``internal error: ...``).

    Unlike :class:`EvalError` no ``||``, ``&&`` or fold absorbs it.
    """


class Uint(int):
    """A CEL ``uint``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}u"


class Optional:
    """A CEL ``optional_type`` value: ``optional.of(v)`` or ``optional.none()``."""

    __slots__ = ("has", "value")

    def __init__(self, has: bool, value: Any = None) -> None:
        self.has, self.value = has, value

    def __repr__(self) -> str:
        return f"optional.of({self.value!r})" if self.has else "optional.none()"


NONE = Optional(False)


class CelType:
    """A CEL type value, as ``type(x)`` returns and ``int``/``string``/... denote."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return self.name


class DomainMap(dict[str, Any]):
    """``device.attributes`` / ``device.capacity``: an unknown domain reads as an empty map."""

    def __missing__(self, key: str) -> dict[str, Any]:
        return {}


def type_name(v: Any) -> str:  # noqa: PLR0911, PLR0912 - one branch per CEL runtime type, as cel-go's type switch
    """The CEL type name of a runtime value (``Type().TypeName()``)."""
    t = type(v)
    if t is bool:
        return "bool"
    if t is int:
        return "int"
    if t is Uint:
        return "uint"
    if t is float:
        return "double"
    if t is str:
        return "string"
    if t is bytes:
        return "bytes"
    if v is None:
        return "null_type"
    if t is list:
        return "list"
    if isinstance(v, dict):
        return "map"
    if t is Quantity:
        return "kubernetes.Quantity"
    if t is Semver:
        return "kubernetes.Semver"
    if t is Optional:
        return "optional_type"
    if t is CelType:
        return "type"
    return t.__name__


def go_type_name(v: Any) -> str:
    """Go's ``%T`` of the cel-go value (for ``got '%T', expected iterable type``)."""
    names = {
        bool: "types.Bool",
        int: "types.Int",
        Uint: "types.Uint",
        float: "types.Double",
        str: "types.String",
        bytes: "types.Bytes",
        Quantity: "cel.Quantity",
        Semver: "cel.Semver",
        Optional: "*types.Optional",
        CelType: "*types.Type",
    }
    if v is None:
        return "types.Null"
    if type(v) is Quantity and v.ptr:
        return "*cel.Quantity"
    return names.get(type(v), type(v).__name__)


# -- formatting as Go prints values ---------------------------------------------------------------
def _float_digits(v: float) -> tuple[str, int]:
    """Shortest round-trip digits and the decimal exponent of the first digit."""
    d = Decimal(repr(abs(v))).normalize()
    sign, digits, exp = d.as_tuple()
    del sign
    text = "".join(str(x) for x in digits)
    return text, len(text) + int(exp) - 1


def _go_float(v: float, threshold: int) -> str:  # noqa: PLR0911 - one branch per CEL runtime type, as cel-go's type switch
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    neg = "-" if math.copysign(1.0, v) < 0 else ""
    if v == 0:
        return neg + "0"
    digits, exp = _float_digits(v)
    if exp < -4 or exp >= threshold:
        mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{neg}{mant}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if exp < 0:
        return f"{neg}0.{'0' * (-exp - 1)}{digits}"
    if len(digits) <= exp + 1:
        return neg + digits + "0" * (exp + 1 - len(digits))
    return f"{neg}{digits[: exp + 1]}.{digits[exp + 1 :]}"


def go_g(v: float) -> str:
    """Go's ``%g`` (``string(double)``)."""
    return _go_float(v, 6)


def go_v(v: Any) -> str:
    """Go's ``%v`` of a CEL value, as error messages print keys and indexes."""
    if type(v) is bool:
        return "true" if v else "false"
    if type(v) is float:
        return _go_float(v, 6)
    if type(v) in (int, Uint):
        return str(int(v))
    if v is None:
        return "NULL_VALUE"
    return str(v)


# -- traits (which operators a value's type implements in cel-go) ---------------------------------
_TRAITS: dict[type, frozenset[str]] = {
    bool: frozenset({"compare", "negate"}),
    int: frozenset({"add", "compare", "divide", "modulo", "multiply", "negate", "subtract"}),
    Uint: frozenset({"add", "compare", "divide", "modulo", "multiply", "subtract"}),
    float: frozenset({"add", "compare", "divide", "multiply", "negate", "subtract"}),
    str: frozenset({"add", "compare", "matcher", "receiver", "size"}),
    bytes: frozenset({"add", "compare", "size"}),
    list: frozenset({"add", "container", "index", "iterable", "size"}),
}
_MAP_TRAITS = frozenset({"container", "index", "iterable", "size"})


def has_trait(v: Any, trait: str) -> bool:
    """Whether the value's cel-go type implements ``trait``."""
    if isinstance(v, dict):
        return trait in _MAP_TRAITS
    return trait in _TRAITS.get(type(v), frozenset())


# -- equality ------------------------------------------------------------------------------------
def is_numeric(v: Any) -> bool:
    """CEL int, uint or double (not bool)."""
    t = type(v)
    return t is int or t is Uint or t is float


def _cmp_double_int(d: float, i: int) -> int:
    if d < -_TWO_63:
        return -1
    if d > _TWO_63:
        return 1
    return _cmp_float(d, float(i))


def _cmp_double_uint(d: float, u: int) -> int:
    if d < 0:
        return -1
    if d > _TWO_64:
        return 1
    return _cmp_float(d, float(u))


def _cmp_float(a: float, b: float) -> int:
    return -1 if a < b else (1 if a > b else 0)


def _cmp_int_uint(i: int, u: int) -> int:
    if i < 0 or u > INT64_MAX:
        return -1
    return (i > u) - (i < u)


def num_compare(a: Any, b: Any) -> int:  # noqa: PLR0911 - one branch per CEL runtime type, as cel-go's type switch
    """Cross-type numeric ordering as cel-go computes it (ints meet doubles as doubles)."""
    ta, tb = type(a), type(b)
    if ta is float:
        if tb is float:
            return _cmp_float(a, b)
        if tb is int:
            return _cmp_double_int(a, b)
        return _cmp_double_uint(a, b)
    if tb is float:
        return -num_compare(b, a)
    if ta is int and tb is Uint:
        return _cmp_int_uint(a, b)
    if ta is Uint and tb is int:
        return -_cmp_int_uint(b, a)
    return (int(a) > int(b)) - (int(a) < int(b))


def equal(a: Any, b: Any) -> bool:  # noqa: PLR0911, PLR0912 - one branch per CEL runtime type, as cel-go's type switch
    """``types.Equal(a, b)``: null first, then ``a.Equal(b)``; raises :class:`EvalError` where cel-go errs."""
    if a is None or b is None:
        return a is None and b is None
    ta = type(a)
    if ta is Quantity:
        if type(b) is not Quantity or b.ptr:
            raise EvalError("no such overload")
        return bool(a.cmp(b) == 0)
    if ta is Semver:
        if type(b) is not Semver:
            raise EvalError("no such overload")
        return bool(a.compare(b) == 0)
    if ta is float or ta is int or ta is Uint:
        if not is_numeric(b):
            return False
        if (ta is float and math.isnan(a)) or (type(b) is float and math.isnan(b)):
            return False
        return num_compare(a, b) == 0
    if ta is bool:
        return type(b) is bool and a is b
    if ta is str or ta is bytes:
        return type(b) is ta and a == b
    if ta is list:
        if type(b) is not list or len(a) != len(b):
            return False
        for x, y in zip(a, b, strict=True):
            try:
                if not equal(x, y):
                    return False
            except EvalError:
                continue  # only an explicit false makes lists unequal
        return True
    if isinstance(a, dict):
        if not isinstance(b, dict) or len(a) != len(b):
            return False
        for k, v in a.items():
            found, bv = map_find(b, k)
            if not found:
                return False
            try:
                if not equal(v, bv):
                    return False
            except EvalError:
                continue
        return True
    if ta is Optional:
        if type(b) is not Optional:
            return False
        if not a.has or not b.has:
            return bool(a.has == b.has)
        return equal(a.value, b.value)
    if ta is CelType:
        return type(b) is CelType and a == b
    return False


def not_equal(a: Any, b: Any) -> bool:
    """``!=``: anything but a true equality (an equality error counts as unequal)."""
    try:
        return not equal(a, b)
    except EvalError:
        return True


def compare(a: Any, b: Any) -> int:
    """``a.Compare(b)`` for a value with the Comparer trait; raises where cel-go errs."""
    ta, tb = type(a), type(b)
    if ta is float or ta is int or ta is Uint:
        if ta is float and math.isnan(a):
            raise EvalError("NaN values cannot be ordered")
        if not is_numeric(b):
            raise EvalError("no such overload")
        if tb is float and math.isnan(b):
            raise EvalError("NaN values cannot be ordered")
        return num_compare(a, b)
    if ta is tb and ta in (str, bytes, bool):
        return int((a > b) - (a < b))
    raise EvalError("no such overload")


def map_find(m: dict[Any, Any], key: Any) -> tuple[bool, Any]:  # noqa: PLR0911 - one branch per CEL runtime type, as cel-go's type switch
    """Find ``key`` in a CEL map, numeric keys equal across int/uint/double."""
    tk = type(key)
    if tk is str:
        if key in m:
            return True, m[key]
        if isinstance(m, DomainMap):
            return True, {}
        return False, None
    if tk is bool:
        for k, v in m.items():
            if type(k) is bool and k is key:
                return True, v
        return False, None
    if tk is int or tk is Uint or tk is float:
        if tk is float and not key.is_integer():
            return False, None
        for k, v in m.items():
            if is_numeric(k) and type(k) is not float and int(k) == int(key):
                if tk is float and float(int(key)) != key:
                    continue
                return True, v
        return False, None
    return False, None


def map_contains(m: dict[Any, Any], key: Any) -> bool:
    """``Contains`` on a map: real presence (a DomainMap's default does not count)."""
    if isinstance(m, DomainMap) and type(key) is str:
        return key in dict.keys(m)
    return map_find(m, key)[0]


def is_zero(v: Any) -> bool:
    """``IsZeroValue`` (``optional.ofNonZeroValue``)."""
    if v is None or v is False:
        return True
    if is_numeric(v) and type(v) is not bool:
        return bool(v == 0)
    if type(v) in (str, bytes, list) or isinstance(v, dict):
        return len(v) == 0
    if type(v) is Optional:
        return not v.has
    return False
