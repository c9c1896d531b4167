"""Compiles DRA CEL selectors: parse (cel-python's grammar), check (cel-go's rules), plan (closures).

Called by ``environment.py``. cel-python supplies the grammar and the parser; its evaluator is not
used because its semantics differ from cel-go's wherever the scheduler's answer depends on them
(cross-type numeric equality, error texts such as ``no such key: x``, errors absorbed by ``||``,
type-checking at all). The stages are :mod:`syntax` (cel-go's tree shape, locations, macros),
:mod:`checker` (types, overloads, validators), :mod:`estimate` (the API server's cost estimate)
and :mod:`planner` (evaluation; :mod:`metered` for a selector that could reach the cost limit,
built when first needed). Compile errors print as cel-go's issues do (``ERROR: <input>:1:5: ...``
with the source line and a caret). A selector compiles in the scheduler's environment (stored
expressions) or, for the API server's validation, in the environment for new expressions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from dra_driver.schedsim.cel import types
from dra_driver.schedsim.cel.checker import Checked, check
from dra_driver.schedsim.cel.costmath import DEVICE_V131, DEVICE_V134
from dra_driver.schedsim.cel.decls import attribute_type, new_list_attributes
from dra_driver.schedsim.cel.estimate import Environment, estimate
from dra_driver.schedsim.cel.nodes import Expr, Issue, Source, SyntaxIssue
from dra_driver.schedsim.cel.planner import PlanError, plan
from dra_driver.schedsim.cel.reads import Reads, reads
from dra_driver.schedsim.cel.runtime import BUDGET, Plan, RuntimeBudget
from dra_driver.schedsim.cel.syntax import parse
from dra_driver.schedsim.rules import NEWEST, Rules

COST_LIMIT = 1_000_000  # resource.CELSelectorExpressionMaxCost (1.34-1.37): estimated and actual
# A selector whose worst case (the estimate with what the interpreter charges beyond it) stays under
# a tenth of the limit cannot reach the limit: it runs unmetered. The margin covers what the
# estimator and the interpreter price differently (see estimate.py and cost.py).
METER_DIVISOR = 10

__all__ = ["BUDGET", "COST_LIMIT", "METER_DIVISOR", "CompileError", "Compiled", "Plan", "RuntimeBudget", "compile_expression"]


class CompileError(Exception):
    """A compile-time error; ``stage`` says which cel-go step failed and so which prefix it gets.

    ``check`` (``compilation failed: ERROR: <input>:...``), ``result`` (``must evaluate to bool or
    the unknown type, not X``) or ``plan`` (``program instantiation failed: ...``).
    """

    def __init__(self, message: str, *, stage: str = "check") -> None:
        super().__init__(message)
        self.stage = stage


@dataclass(frozen=True, slots=True)
class Compiled:
    """A compiled selector: its result type, plans, cost estimates and what it reads.

    ``plan`` charges no cost; ``metered()`` builds (once) the plan that charges what cel-go charges.
    ``estimated_cost``: the API server's worst-case estimate (``MaxCost``); ``bound``: the same with
    what the interpreter charges beyond the estimator (``estimate.py``), which decides whether an
    evaluation needs metering (``bound > limit // METER_DIVISOR``).
    """

    result_type: str
    plan: Plan
    metered: Callable[[], Plan]
    estimated_cost: int
    bound: int
    reads: Reads


def cost_environment(rules: Rules, *, new_expressions: bool = False, bound: bool = False) -> Environment:
    """The estimator's view of a release's environment (stored: the scheduler's; new: the API server's for a new selector)."""
    multi = rules.consumable_capacity or not new_expressions
    return Environment(
        cel_go=rules.cel_go,
        includes=rules.includes if not new_expressions or new_list_attributes(rules) else "",
        device=DEVICE_V134 if multi else DEVICE_V131,
        bound=bound,
    )


def compile_expression(text: str, rules: Rules = NEWEST, *, new_expressions: bool = False) -> Compiled:
    """Compile ``text`` in ``rules``' release. Raises :class:`CompileError`.

    A selector evaluates to bool or to the type of an attribute value (the unknown type: ``any``
    before 1.37, ``dyn`` from 1.37). ``new_expressions``: compile as the API server compiles a new
    selector (``decls.new_expression_functions``), else as the scheduler does.
    """
    source = Source(text)
    try:
        root = parse(text)
    except SyntaxIssue as err:
        raise CompileError(source.render(err.issues)) from None
    except RecursionError:
        raise CompileError(source.render([Issue(0, "max recursion depth exceeded")])) from None
    checked = check(root, rules, new_expressions=new_expressions)
    if checked.issues:
        raise CompileError(source.render(checked.issues))
    result = checked.types[root.id]
    if result not in (types.BOOL, attribute_type(rules, new_expressions=new_expressions)):
        raise CompileError(f"must evaluate to bool or the unknown type, not {result.display()}", stage="result")
    try:
        program = plan(root, checked)
    except PlanError as err:
        raise CompileError(str(err), stage="plan") from None
    try:
        cost = estimate(root, checked, cost_environment(rules, new_expressions=new_expressions))[1]
        bound = estimate(root, checked, cost_environment(rules, new_expressions=new_expressions, bound=True))[1]
    except RecursionError:
        raise CompileError(source.render([Issue(0, "max recursion depth exceeded")])) from None
    return Compiled(result.display(), program, _metered(root, checked, rules), cost, bound, reads(root))


def _metered(root: Expr, checked: Checked, rules: Rules) -> Callable[[], Plan]:
    @functools.cache
    def build() -> Plan:
        from dra_driver.schedsim.cel.metered import metered_plan  # loaded only where a selector needs metering

        return metered_plan(root, checked, rules)

    return build
