"""CEL runtime values and their type names, equality and ordering, as cel-go defines them.

Called by the compiler (``compiler.py``) and the function library (``library.py``). Values are
plain Python objects: ``bool``, ``int`` (CEL int), :class:`Uint`, ``float`` (double), ``str``,
``bytes``, ``None`` (null), ``list``, ``dict``, :class:`~.quantity.Quantity`,
:class:`~.semver.Semver`, :class:`Optional` and :class:`CelType`.
"""

from __future__ import annotations

import math
from typing import Any

from dra_driver.core.cel.quantity import Quantity
from dra_driver.core.cel.semver import Semver

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1


class EvalError(Exception):
    """A CEL runtime error (the message is cel-go's where known)."""


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
    """A CEL type value, as ``type(x)`` returns."""

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


def type_name(v: Any) -> str:  # noqa: PLR0911, PLR0912
    """The CEL type name of a runtime value."""
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


_NUMERIC = ("int", "uint", "double")


def is_numeric(v: Any) -> bool:
    """CEL int, uint or double (not bool)."""
    t = type(v)
    return t is int or t is Uint or t is float


def cel_equal(a: Any, b: Any) -> bool:  # noqa: PLR0911, PLR0912
    """``a == b`` with cel-go's heterogeneous equality; raises :class:`EvalError` where cel-go errs.

    Dispatch is on the left operand as in cel-go: a Quantity or Semver on the left compared with
    a value of another type is "no such overload", while ``1 == quantity("1")`` is false.
    """
    if a is None or b is None:
        return a is None and b is None
    ta = type(a)
    if ta is Quantity or ta is Semver:
        if type(b) is not ta:
            raise EvalError("no such overload")
        return bool(a == b)
    if is_numeric(a):
        return is_numeric(b) and _num_cmp(a, b) == 0
    if ta is bool:
        return type(b) is bool and a is b
    if ta is str or ta is bytes:
        return type(b) is ta and a == b
    if ta is list:
        if type(b) is not list or len(a) != len(b):
            return False
        for x, y in zip(a, b, strict=True):
            try:
                if not cel_equal(x, y):
                    return False
            except EvalError:
                continue  # cel-go: only an explicit False makes lists unequal
        return True
    if isinstance(a, dict):
        if not isinstance(b, dict) or len(a) != len(b):
            return False
        for k, v in a.items():
            found, bv = map_lookup(b, k)
            if not found:
                return False
            try:
                if not cel_equal(v, bv):
                    return False
            except EvalError:
                continue
        return True
    if ta is Optional:
        if type(b) is not Optional:
            return False
        if not a.has or not b.has:
            return bool(a.has == b.has)
        return cel_equal(a.value, b.value)
    if ta is CelType:
        return type(b) is CelType and a == b
    return False


def _num_cmp(a: Any, b: Any) -> int:
    if type(a) is float or type(b) is float:
        fa, fb = float(a), float(b)
        if math.isnan(fa) or math.isnan(fb):
            return 2  # NaN: neither equal nor ordered
        return (fa > fb) - (fa < fb)
    ia, ib = int(a), int(b)
    return (ia > ib) - (ia < ib)


def cel_compare(a: Any, b: Any) -> int:
    """Ordering for ``<``/``<=``/``>``/``>=``: numbers across types, else same-type values."""
    if is_numeric(a) and is_numeric(b):
        return _num_cmp(a, b)
    ta = type(a)
    if ta is type(b) and ta in (str, bytes, bool):
        return int((a > b) - (a < b))
    raise EvalError("no such overload")


def map_lookup(m: dict[Any, Any], key: Any) -> tuple[bool, Any]:  # noqa: PLR0911
    """Find ``key`` in a CEL map, with numeric keys equal across int/uint/double."""
    if type(key) is bool:
        for k, v in m.items():
            if type(k) is bool and k is key:
                return True, v
        return False, None
    if is_numeric(key):
        if type(key) is float and not key.is_integer():
            return False, None
        for k, v in m.items():
            if is_numeric(k) and int(k) == int(key):
                return True, v
        return False, None
    if key in m:
        return True, m[key]
    if isinstance(m, DomainMap) and type(key) is str:
        return True, {}
    return False, None


def format_value(v: Any) -> str:
    """How cel-go prints a value inside an error message (``no such key: x``)."""
    if type(v) is bool:
        return "true" if v else "false"
    return str(v)
