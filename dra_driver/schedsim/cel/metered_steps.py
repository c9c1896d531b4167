"""The metered planner's building blocks: charging the budget, lazy accumulators, and the shape of an attribute.

Called by the metered planner (``metered.py``) only, which charges what cel-go's cost tracker
charges (``interpreter/runtimecost.go``) on plans shaped as cel-go's planner shapes them
(``interpreter/planner.go``): :func:`is_attribute` and :func:`split_attribute` say what cel-go
resolves as one attribute, qualifier by qualifier; :data:`FAILED` is an argument that failed, as
the tracker sees it; an :class:`Accumulator` is a comprehension's, initialized when first read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dra_driver.schedsim.cel.nodes import Call, Expr, Ident, Literal, Select
from dra_driver.schedsim.cel.planner import TYPE_IDENTS
from dra_driver.schedsim.cel.runtime import BUDGET, Activation, ErrorValue, Plan, RuntimeBudget
from dra_driver.schedsim.cel.values import EvalError

__all__ = ["CHAIN_CALLS", "FAILED", "Accumulator", "Step", "charge", "is_attribute", "split_attribute"]

CHAIN_CALLS = frozenset({"_[_]", "_[?_]", "_?._"})


class _Failed:
    """An argument that evaluated to an error, as the cost tracker sees it (size 1, no type)."""

    __slots__ = ()


FAILED = _Failed()


def charge(act: Activation, n: int) -> None:
    """Add ``n`` to the evaluation's cost; past the limit, cancel it (``CostExceeded``, as cel-go's tracker panics)."""
    budget: RuntimeBudget = act[BUDGET]
    budget.cost += n
    if budget.cost > budget.limit:
        budget.charge(0)


class Accumulator:
    """A comprehension's accumulator before the first read: its initializer, run once, when read."""

    __slots__ = ("act", "done", "init", "value")

    def __init__(self, init: Plan, act: Activation) -> None:
        self.init, self.act, self.done = init, act, False
        self.value: Any = None

    def get(self) -> Any:
        """The accumulator's value (its initializer run on the first read; an error becomes an error value)."""
        if not self.done:
            self.done = True
            try:
                self.value = self.init(self.act)
            except EvalError as err:
                self.value = ErrorValue(err)
        return self.value


def is_attribute(e: Expr) -> bool:
    """cel-go plans ``e`` as an attribute: a variable, a selection, an index or a conditional."""
    if isinstance(e, Ident):
        return e.name not in TYPE_IDENTS
    if isinstance(e, Select):
        return True
    return isinstance(e, Call) and (e.function in CHAIN_CALLS or e.function == "_?_:_")


def split_attribute(e: Expr) -> tuple[Expr, list[tuple[str, Any, bool]]]:
    """An attribute's root and its qualifiers in order: (kind, field or key expression, optional)."""
    quals: list[tuple[str, Any, bool]] = []
    while True:
        if isinstance(e, Select):
            quals.append(("has" if e.test_only else "field", e.field, False))
            e = e.operand
        elif isinstance(e, Call) and e.function in ("_[_]", "_[?_]") and len(e.args) == 2:
            quals.append(("index", e.args[1], e.function == "_[?_]"))
            e = e.args[0]
        elif isinstance(e, Call) and e.function == "_?._" and len(e.args) == 2 and isinstance(e.args[1], Literal):
            quals.append(("field", e.args[1].value, True))
            e = e.args[0]
        else:
            break
    quals.reverse()
    return e, quals


Step = Callable[[Activation, Any], Any]
