"""What planned CEL closures use while they run: errors held as values, the cost budget, field access, set keys.

Called by the planners (``planner.py``, ``metered.py``), whose closures call these per evaluation,
and by the environment (through ``compiler.py``), which gives each metered evaluation a
:class:`RuntimeBudget` under the activation key :data:`BUDGET`. Field selection and indexing follow cel-go's attribute rules
(``no such key: x``, ``index out of bounds: 5``, optional chains); :func:`set_keys` and
:func:`set_key` give the numeric keys cel-go uses for ``x in [constants]`` turned into a set.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from dra_driver.schedsim.cel.values import INT64_MAX, DomainMap, EvalError, Optional, Uint, go_v, map_find, type_name

Activation = dict[str, Any]
Plan = Callable[[Activation], Any]
BUDGET = "@budget"


class ErrorValue:
    """An error held as a value (a comprehension accumulator that evaluated to an error)."""

    __slots__ = ("error",)

    def __init__(self, error: EvalError) -> None:
        self.error = error


COST_EXCEEDED = "operation cancelled: actual cost limit exceeded"


class CostExceeded(Exception):
    """The evaluation went over its cost limit: it is cancelled, whatever would have absorbed an error.

    Not an :class:`EvalError`: cel-go cancels the evaluation with a panic that no ``||``, ``&&``,
    ``@not_strictly_false`` or fold accumulator absorbs.
    """

    def __init__(self, cost: int) -> None:
        super().__init__(COST_EXCEEDED)
        self.cost = cost


class RuntimeBudget:
    """The cost charged so far in one evaluation, against the scheduler's per-evaluation limit.

    The metered plans (``metered.py``) charge it what cel-go's cost tracker charges, step by step.
    """

    __slots__ = ("cost", "limit")

    def __init__(self, limit: int) -> None:
        self.cost, self.limit = 0, limit

    def charge(self, n: int = 1) -> None:
        """Add ``n``; over the limit, cancel the evaluation (:class:`CostExceeded`)."""
        self.cost += n
        if self.cost > self.limit:
            raise CostExceeded(self.cost)


# -- attribute qualification ---------------------------------------------------------------------
def _list_index(items: list[Any], key: Any) -> int:
    """``IndexOrError``."""
    t = type(key)
    if t is int:
        return int(key)
    if t is float:
        if key.is_integer() and -9.223372036854775808e18 < key < 9.223372036854775808e18:
            return int(key)
        raise EvalError(f"unsupported index value {go_v(key)} in list")
    if t is Uint:
        if key <= INT64_MAX:
            return int(key)
        raise EvalError(f"unsupported index value {go_v(key)} in list")
    raise EvalError(f"unsupported index type '{type_name(key)}' in list")


def qualify(obj: Any, key: Any, *, presence: bool) -> tuple[bool, Any]:
    """One qualifier: (found, value); a missing key is an error unless ``presence``."""
    if isinstance(obj, dict):
        found, value = map_find(obj, key)
        if found:
            return True, value
        if presence:
            return False, None
        raise EvalError(f"no such key: {go_v(key)}")
    if type(obj) is list:
        i = _list_index(obj, key)
        if 0 <= i < len(obj):
            return True, obj[i]
        if presence:
            return False, None
        raise EvalError(f"index out of bounds: {go_v(key)}")
    if presence:
        return False, None
    raise EvalError(f"no such key: {go_v(key)}")


def select_value(obj: Any, key: Any, *, optional: bool) -> Any:
    """``obj.key`` / ``obj[key]``; on an optional (or an optional qualifier) the result is optional."""
    if type(obj) is Optional:
        if not obj.has:
            return obj
        obj = obj.value
        optional = True
    if optional:
        found, value = qualify(obj, key, presence=True)
        return Optional(True, value) if found else Optional(False)
    return qualify(obj, key, presence=False)[1]


def presence_test(obj: Any, field: str) -> bool:
    """``has(obj.field)``."""
    if type(obj) is Optional:
        if not obj.has:
            return False
        obj = obj.value
    if isinstance(obj, DomainMap):
        return True
    found, _ = qualify(obj, field, presence=True)
    return found


# -- set membership (OptOptimize) -------------------------------------------------------------------
def set_keys(v: Any) -> list[tuple[str, Any]]:
    """The keys a constant list element is filed under (a number under each numeric type it equals)."""
    t = type(v)
    if t is float:
        keys = [("double", v)]
        if not math.isnan(v) and not math.isinf(v):
            if v.is_integer() and -9.223372036854775808e18 < v < 9.223372036854775808e18:
                keys.append(("int", int(v)))
            if v.is_integer() and 0 <= v < 1.8446744073709551616e19:
                keys.append(("uint", int(v)))
        return keys
    if t is int:
        keys = [("int", v), ("double", float(v))]
        if v >= 0:
            keys.append(("uint", v))
        return keys
    if t is Uint:
        keys = [("uint", int(v)), ("double", float(v))]
        if v <= INT64_MAX:
            keys.append(("int", int(v)))
        return keys
    return [(type_name(v), v)]


def set_key(v: Any) -> tuple[str, Any] | None:
    """The key a needle is looked up by; None for a value no constant set can hold (NaN, non-primitives)."""
    t = type(v)
    if t is float:
        return None if math.isnan(v) else ("double", v)
    if t is int:
        return ("int", v)
    if t is Uint:
        return ("uint", int(v))
    if t in (bool, str):
        return (type_name(v), v)
    return None
