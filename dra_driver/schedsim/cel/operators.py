"""The CEL operators of the scheduler's DRA environment: arithmetic, comparison, ``in``, ``size``, ``type``.

Called by the function library (``library.py``), whose singleton table binds them to ``_+_``,
``_<_``, ``@in`` and so on, and by the list functions (``lists.py``: sums, membership). Each
follows cel-go's rules: int64 and uint64 overflow are errors, division and modulus truncate
toward zero, ``in`` on a list skips elements it cannot compare.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from dra_driver.schedsim.cel.values import (
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    CelType,
    EvalError,
    Uint,
    compare,
    equal,
    map_contains,
    type_name,
)

Impl = Callable[..., Any]


# -- arithmetic --------------------------------------------------------------------------------------
def _int(v: int) -> int:
    if not INT64_MIN <= v <= INT64_MAX:
        raise EvalError("integer overflow")
    return v


def _uint(v: int) -> Uint:
    if not 0 <= v <= UINT64_MAX:
        raise EvalError("unsigned integer overflow")
    return Uint(v)


def add(a: Any, b: Any) -> Any:
    """``_+_``: numbers of one type (overflow checked), strings, bytes, lists."""
    ta = type(a)
    if ta is not type(b) and not (ta is list and type(b) is list):
        raise EvalError("no such overload")
    if ta is int:
        return _int(a + b)
    if ta is Uint:
        return _uint(int(a) + int(b))
    return a + b


def sub(a: Any, b: Any) -> Any:
    """``_-_`` on numbers of one type (overflow checked)."""
    if type(a) is not type(b):
        raise EvalError("no such overload")
    if type(a) is int:
        return _int(a - b)
    if type(a) is Uint:
        return _uint(int(a) - int(b))
    return a - b


def mul(a: Any, b: Any) -> Any:
    """``_*_`` on numbers of one type (overflow checked)."""
    if type(a) is not type(b):
        raise EvalError("no such overload")
    if type(a) is int:
        return _int(a * b)
    if type(a) is Uint:
        return _uint(int(a) * int(b))
    return a * b


def div(a: Any, b: Any) -> Any:
    """``_/_``: integer division truncates toward zero; doubles follow IEEE 754."""
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


def mod(a: Any, b: Any) -> Any:
    """``_%_`` on integers: the sign of the dividend, as Go."""
    if type(a) is not type(b):
        raise EvalError("no such overload")
    if b == 0:
        raise EvalError("modulus by zero")
    if type(a) is int and a == INT64_MIN and b == -1:
        raise EvalError("integer overflow")
    r = abs(int(a)) % abs(int(b))
    r = -r if a < 0 else r
    return Uint(r) if type(a) is Uint else r


def negate(v: Any) -> Any:
    """``-_`` (overflow checked)."""
    if type(v) is bool:
        raise EvalError("no such overload")
    if type(v) is int:
        return _int(-v)
    return -v


def logical_not(v: Any) -> Any:
    """``!_`` on a bool."""
    if type(v) is not bool:
        raise EvalError("no such overload")
    return not v


def cmp_op(test: Callable[[int], bool]) -> Impl:
    """A comparison operator from a test of cel-go's ``Compare`` result (-1, 0, 1)."""

    def op(a: Any, b: Any) -> bool:
        return test(compare(a, b))

    return op


def membership(needle: Any, container: Any) -> bool:
    """``needle in container``: list elements by equality (skipping incomparable ones), map keys."""
    if type(container) is list:
        for x in container:
            try:
                if needle_equal(needle, x):
                    return True
            except EvalError:
                continue
        return False
    if isinstance(container, dict):
        return map_contains(container, needle)
    raise EvalError("no such overload")


def needle_equal(needle: Any, elem: Any) -> bool:
    """``needle.Equal(elem)`` (no null shortcut: ``Null.Equal`` compares types)."""
    if needle is None:
        return elem is None
    return equal(needle, elem)


def size(v: Any) -> int:
    """``size()`` of a string, bytes, list or map."""
    return len(v)


def type_of(v: Any) -> CelType:
    """``type(v)``."""
    return CelType(type_name(v))
