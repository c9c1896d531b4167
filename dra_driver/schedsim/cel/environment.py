"""The scheduler's DRA CEL environment: compile a device selector once, evaluate it per device.

Called by the allocation simulator (``dra_driver.schedsim.allocator``) and ``dra-gpu explain``. The
single variable is ``device`` with ``driver``, ``attributes`` (domain -> id -> value; names
without a domain are filed under the driver's), ``capacity`` (quantities) and
``allowMultipleAllocations``. Errors are :class:`CelCompileError` or :class:`CelRuntimeError`,
both :class:`CelError`, with the scheduler's wording after its prefix (``CEL compile error:`` /
``CEL runtime error:``). The errors (``errors.py``) and the ``device`` value (``device.py``) are
defined below this module and re-exported from it.

Cost, as Kubernetes bounds it: :func:`validate_selector` says what the API server says of a new
selector (10 KiB, compilation, the estimated cost against 1,000,000), and every evaluation is held
to the scheduler's run-time limit of 1,000,000, charged as cel-go charges it (``metered.py``) for
any selector whose worst case could come near it; the others run unmetered, as they cannot.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_driver.core.quantity import Quantity
from dra_driver.schedsim.cel.compiler import BUDGET, COST_LIMIT, METER_DIVISOR, CompileError, Plan, compile_expression
from dra_driver.schedsim.cel.device import device_value, split_qualified_name
from dra_driver.schedsim.cel.errors import CelCompileError, CelError, CelRuntimeError
from dra_driver.schedsim.cel.projection import DeviceView, Projector
from dra_driver.schedsim.cel.runtime import CostExceeded, RuntimeBudget
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

MAX_EXPRESSION_LENGTH = 10 * 1024  # resourceapi.CELSelectorExpressionMaxLength (1.34-1.37), in bytes
MAX_COST = COST_LIMIT  # resourceapi.CELSelectorExpressionMaxCost (1.34-1.37), estimated (validation) and actual (scheduling)
TOO_COMPLEX = "Forbidden: too complex, exceeds cost limit"


_PROJECTION_CACHE_LIMIT = 65536


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """One compiled selector expression; evaluate with :meth:`matches` or, for many devices, :meth:`matches_view`."""

    expression: str
    result_type: str
    estimated_cost: int
    plan: Plan
    projector: Projector
    answers: dict[tuple[Any, ...], bool | CelRuntimeError] = field(default_factory=dict, compare=False)
    lists: bool = False  # the release converts list-typed attributes (Rules.list_attributes)
    bound: int = 0  # the compiler's worst case with what the interpreter charges beyond the estimate
    metered: Callable[[], Plan] | None = field(default=None, compare=False)

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
        """Evaluate against a prepared ``device`` value (see :func:`device_value`).

        Held to ``cost_limit`` as the scheduler holds it: a selector that could come near it runs
        metered, and over it fails with cel-go's ``operation cancelled: actual cost limit exceeded``.
        """
        if self.metered is not None and self.bound > cost_limit // METER_DIVISOR:
            return self.evaluate(value, cost_limit=cost_limit)[0]
        return self._run(self.plan, {"device": value})

    def evaluate_device(self, device: Mapping[str, Any], *, driver: str, cost_limit: int = MAX_COST) -> tuple[bool, int]:
        """:meth:`evaluate` on one ResourceSlice device (API JSON), converted as :meth:`matches` converts it."""
        return self.evaluate(device_value(device, driver=driver, lists=self.lists), cost_limit=cost_limit)

    def evaluate(self, value: dict[str, Any], *, cost_limit: int = MAX_COST) -> tuple[bool, int]:
        """Evaluate metered, whatever the estimate: (result, cost charged). Raises :class:`CelRuntimeError`.

        An error carries the cost charged until it happened (``.cost``; over the limit: when cancelled).
        """
        if self.metered is None:
            raise CelRuntimeError("internal error: no metered plan")
        budget = RuntimeBudget(cost_limit)
        try:
            return self._run(self.metered(), {"device": value, BUDGET: budget}), budget.cost
        except CelRuntimeError as err:
            raise CelRuntimeError(err.message, cost=budget.cost) from None

    @staticmethod
    def _run(plan: Plan, act: dict[str, Any]) -> bool:
        try:
            result = plan(act)
        except EvalError as err:
            raise CelRuntimeError(str(err)) from None
        except CostExceeded as err:
            raise CelRuntimeError(str(err), cost=err.cost) from None
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
            c = compile_expression(expression, rules)
            hit = CompiledSelector(
                expression,
                c.result_type,
                c.estimated_cost,
                c.plan,
                Projector(c.reads),
                lists=rules.list_attributes,
                bound=c.bound,
                metered=c.metered,
            )
        except CompileError as err:
            hit = CelCompileError(_PREFIX[err.stage] + str(err), stage=err.stage)
        with _cache_lock:
            _cache[key] = hit
    if isinstance(hit, CelCompileError):
        raise hit
    return hit


_PREFIX = {"check": "compilation failed: ", "result": "", "plan": "program instantiation failed: "}
_validated: dict[tuple[str, Rules], list[str]] = {}
_VALIDATED_LIMIT = 4096


def validate_selector(expression: str, rules: Rules = NEWEST) -> list[str]:
    """What the API server of ``rules``' release says of a new selector: [] if it takes it.

    Its checks, in its order (``validateCELExpression`` of ``k8s.io/kubernetes/pkg/apis/resource/
    validation``): at most 10 KiB (bytes; a longer one is not compiled), compilation in the
    environment for new expressions, then the estimated cost against 1,000,000. Each problem is
    worded as the API server's field error after the field's path: ``Too long: may not be more
    than 10240 bytes``, ``Invalid value: "<expression>": compilation failed: ...``, ``Internal
    error: program instantiation failed: ...``, ``Forbidden: too complex, exceeds cost limit``.
    """
    key = (expression, rules)
    with _cache_lock:
        hit = _validated.get(key)
    if hit is not None:
        return list(hit)
    problems = _validate(expression, rules)
    with _cache_lock:
        if len(_validated) >= _VALIDATED_LIMIT:
            _validated.clear()
        _validated[key] = problems
    return list(problems)


def _validate(expression: str, rules: Rules) -> list[str]:
    if len(expression.encode("utf-8", "surrogatepass")) > MAX_EXPRESSION_LENGTH:
        return [f"Too long: may not be more than {MAX_EXPRESSION_LENGTH} bytes"]
    try:
        c = compile_expression(expression, rules, new_expressions=True)
    except CompileError as err:
        detail = _PREFIX[err.stage] + str(err)
        if err.stage == "plan":
            return [f"Internal error: {detail}"]
        return [f"Invalid value: {go_quote(expression)}: {detail}"]
    if c.estimated_cost > MAX_COST:
        return [TOO_COMPLEX]
    return []


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(text: str) -> str:
    """Go's ``%q`` of a string (``strconv.Quote``): printable characters kept, the rest escaped."""
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        else:
            n = ord(ch)
            if n < 0x80:
                out.append(f"\\x{n:02x}")
            elif 0xD800 <= n < 0xE000:
                out.append("\\ufffd")
            elif n < 0x10000:
                out.append(f"\\u{n:04x}")
            else:
                out.append(f"\\U{n:08x}")
    out.append('"')
    return "".join(out)
