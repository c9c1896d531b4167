"""The scheduler's DRA CEL environment: compile a device selector once, evaluate it per device.

Called by the allocation simulator (``dra_driver.schedsim.allocator``) and ``dra-gpu explain``. The
single variable is ``device`` with ``driver``, ``attributes`` (domain -> id -> value; names
without a domain are filed under the driver's), ``capacity`` (quantities) and
``allowMultipleAllocations``. Errors are :class:`CelCompileError` or :class:`CelRuntimeError`,
both :class:`CelError`, with the scheduler's wording after its prefix (``CEL compile error:`` /
``CEL runtime error:``). The errors (``errors.py``) and the ``device`` value (``device.py``) are
defined below this module and re-exported from it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_driver.core.quantity import Quantity
from dra_driver.schedsim.cel.compiler import BUDGET, COST_LIMIT, CompileError, Plan, RuntimeBudget, compile_expression
from dra_driver.schedsim.cel.device import device_value, split_qualified_name
from dra_driver.schedsim.cel.errors import CelCompileError, CelError, CelRuntimeError
from dra_driver.schedsim.cel.projection import DeviceView, Projector
from dra_driver.schedsim.cel.semver import Semver
from dra_driver.schedsim.cel.values import CelType, EvalError, Optional, Panic, Uint, type_name
from dra_driver.schedsim.rules import NEWEST, Rules

__all__ = [
    "MAX_COST",
    "MAX_EXPRESSION_LENGTH",
    "CelCompileError",
    "CelError",
    "CelRuntimeError",
    "CompiledSelector",
    "DeviceView",
    "compile_selector",
    "device_value",
    "split_qualified_name",
    "validate_selector",
]

MAX_EXPRESSION_LENGTH = 10 * 1024  # resourceapi.CELSelectorExpressionMaxLength
MAX_COST = COST_LIMIT  # resourceapi.CELSelectorExpressionMaxCost, estimated (validation) and actual (scheduling)


_PROJECTION_CACHE_LIMIT = 65536


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """One compiled selector expression; evaluate with :meth:`matches` or, for many devices, :meth:`matches_view`."""

    expression: str
    result_type: str
    estimated_cost: float
    plan: Plan
    projector: Projector
    answers: dict[tuple[Any, ...], bool | CelRuntimeError] = field(default_factory=dict, compare=False)
    lists: bool = False  # the release converts list-typed attributes (Rules.list_attributes)

    def matches(self, device: Mapping[str, Any], *, driver: str, cost_limit: int = MAX_COST) -> bool:
        """Evaluate against one ResourceSlice device (API JSON). Raises :class:`CelRuntimeError`."""
        return self.matches_value(device_value(device, driver=driver, lists=self.lists), cost_limit=cost_limit)

    def matches_view(self, view: DeviceView) -> bool:
        """Like :meth:`matches`, evaluated once per distinct projection of the device (see ``projection.py``).

        Devices that agree on everything the selector reads share one evaluation; a device that
        fails conversion (an unparsable version) fails every selector, as in the scheduler.
        """
        if view.lists is not self.lists:  # a view built for another release's conversion: not shared
            return self.matches(view.device, driver=view.driver)
        if view.error is not None:
            raise CelRuntimeError(view.error)
        key = self.projector.key(view)
        if key is None:
            return self.matches_value(view.value())
        hit = self.answers.get(key)
        if hit is None:
            try:
                hit = self.matches_value(view.value())
            except CelRuntimeError as err:
                hit = err
            if len(self.answers) >= _PROJECTION_CACHE_LIMIT:
                self.answers.clear()
            self.answers[key] = hit
        if isinstance(hit, CelRuntimeError):
            raise CelRuntimeError(hit.message)
        return hit

    def matches_value(self, value: dict[str, Any], *, cost_limit: int = MAX_COST) -> bool:
        """Evaluate against a prepared ``device`` value (see :func:`device_value`)."""
        budget = RuntimeBudget(cost_limit)
        try:
            result = self.plan({"device": value, BUDGET: budget})
        except EvalError as err:
            raise CelRuntimeError(str(err)) from None
        except Panic as err:
            raise CelRuntimeError(f"internal error: {err}") from None
        except RecursionError:
            raise CelRuntimeError("max recursion depth exceeded") from None
        if type(result) is not bool:
            raise CelRuntimeError(f"CEL result of type {type_name(result)} could not be converted to bool: {_not_bool(result)}")
        return result


def _not_bool(v: Any) -> str:  # noqa: PLR0911 - one message per result type, as cel-go words them
    """cel-go's ``ConvertToNative(bool)`` error for a value of each type."""
    t = type(v)
    if t is int:
        return "unsupported type conversion from 'int' to bool"
    if t is Uint:
        return "unsupported type conversion from 'uint' to bool"
    if t is float:
        return "type conversion error from Double to 'bool'"
    if t is str:
        return "unsupported native conversion from string to 'bool'"
    if t is bytes:
        return "type conversion error from Bytes to 'bool'"
    if t is list:
        return "type conversion error from list to 'bool'"
    if isinstance(v, dict):
        return "type conversion error from map to 'bool'"
    if v is None:
        return "type conversion error from 'null_type' to 'bool'"
    if t is Quantity:
        return "type conversion error from 'Quantity' to 'bool'"
    if t is Semver:
        return "type conversion error from 'Semver' to 'bool'"
    if t is Optional:
        return _not_bool(v.value) if v.has else "optional.none() dereference"
    if t is CelType:
        return "type conversion not supported for 'type'"
    return f"type conversion error from '{type_name(v)}' to 'bool'"


_cache: dict[tuple[str, bool, str, int, bool], CompiledSelector | CelCompileError] = {}
_cache_lock = threading.Lock()


def compile_selector(expression: str, rules: Rules = NEWEST) -> CompiledSelector:
    """Compile once per distinct expression and release environment (cached, errors too). Raises :class:`CelCompileError`.

    ``rules``: the Kubernetes release whose environment compiles it (default: the newest known).
    Like the scheduler's cache, this skips the length and estimated-cost limits, which only the
    API server's validation applies; use :func:`validate_selector` for those.
    """
    key = (expression, rules.dyn_attributes, rules.includes, rules.cel_go, rules.list_attributes)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is None:
        try:
            rtype, plan, cost, what = compile_expression(expression, rules)
            hit = CompiledSelector(expression, rtype, cost, plan, Projector(what), lists=rules.list_attributes)
        except CompileError as err:
            prefix = {"check": "compilation failed: ", "result": "", "plan": "program instantiation failed: "}[err.stage]
            hit = CelCompileError(prefix + str(err))
        with _cache_lock:
            _cache[key] = hit
    if isinstance(hit, CelCompileError):
        raise hit
    return hit


def validate_selector(expression: str, rules: Rules = NEWEST) -> list[str]:
    """The API server's checks of a selector: length, compilation, estimated cost (empty list if valid)."""
    if len(expression.encode("utf-8")) > MAX_EXPRESSION_LENGTH:
        return [f"Too long: may not be more than {MAX_EXPRESSION_LENGTH} bytes"]
    try:
        sel = compile_selector(expression, rules)
    except CelCompileError as err:
        return [err.message]
    if sel.estimated_cost > MAX_COST:
        return [
            f"estimated cost {int(sel.estimated_cost)} exceeds budget by factor of more than 100x"
            if sel.estimated_cost > 100 * MAX_COST
            else f"cost estimate {int(sel.estimated_cost)} exceeded budget {MAX_COST}: "
            "too complex, try simplifying the expression"
        ]
    return []
