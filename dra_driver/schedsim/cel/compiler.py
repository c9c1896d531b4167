"""Compiles DRA CEL selectors: parse (cel-python's grammar), check (cel-go's rules), plan (closures).

Called by ``environment.py``. cel-python supplies the grammar and the parser; its evaluator is not
used because its semantics differ from cel-go's wherever the scheduler's answer depends on them
(cross-type numeric equality, error texts such as ``no such key: x``, errors absorbed by ``||``,
type-checking at all). The stages are :mod:`syntax` (cel-go's tree shape, locations, macros),
:mod:`checker` (types, overloads, validators) and :mod:`planner` (evaluation). Compile errors print
as cel-go's issues do (``ERROR: <input>:1:5: ...`` with the source line and a caret).
"""

from __future__ import annotations

from dra_driver.schedsim.cel import types
from dra_driver.schedsim.cel.checker import check
from dra_driver.schedsim.cel.nodes import (
    Call,
    Comprehension,
    CreateList,
    CreateMap,
    Expr,
    Issue,
    Select,
    Source,
    SyntaxIssue,
)
from dra_driver.schedsim.cel.planner import PlanError, plan
from dra_driver.schedsim.cel.projection import Reads, reads
from dra_driver.schedsim.cel.runtime import BUDGET, Plan, RuntimeBudget
from dra_driver.schedsim.cel.syntax import parse
from dra_driver.schedsim.rules import NEWEST, Rules

COST_LIMIT = 1_000_000
UNKNOWN_SIZE = 64  # an attribute value's declared maximum size (string length or list length)

__all__ = ["BUDGET", "COST_LIMIT", "CompileError", "Plan", "RuntimeBudget", "compile_expression"]


class CompileError(Exception):
    """A compile-time error; ``stage`` says which cel-go step failed and so which prefix it gets.

    ``check`` (``compilation failed: ERROR: <input>:...``), ``result`` (``must evaluate to bool or
    the unknown type, not X``) or ``plan`` (``program instantiation failed: ...``).
    """

    def __init__(self, message: str, *, stage: str = "check") -> None:
        super().__init__(message)
        self.stage = stage


def _estimate(e: Expr) -> float:
    """A rough worst-case cost (the API server's estimate is only used by validation)."""
    if isinstance(e, Select):
        return 1 + _estimate(e.operand)
    if isinstance(e, Call):
        inner = sum(_estimate(a) for a in e.args) + (_estimate(e.target) if e.target is not None else 0)
        heavy = e.function in ("contains", "startsWith", "endsWith", "matches", "find", "findAll", "split", "replace")
        return 1 + inner + (UNKNOWN_SIZE if heavy or e.function == "@in" else 0)
    if isinstance(e, CreateList):
        return 1 + sum(_estimate(x) for x in e.elements)
    if isinstance(e, CreateMap):
        return 1 + sum(_estimate(en.key) + _estimate(en.value) for en in e.entries)
    if isinstance(e, Comprehension):
        size = len(e.iter_range.elements) if isinstance(e.iter_range, CreateList) else UNKNOWN_SIZE
        body = _estimate(e.loop_condition) + _estimate(e.loop_step) + 1
        return _estimate(e.iter_range) + _estimate(e.accu_init) + size * body + _estimate(e.result)
    return 0


def compile_expression(text: str, rules: Rules = NEWEST) -> tuple[str, Plan, float, Reads]:
    """(result type as cel-go prints it, plan, estimated cost, what it reads) in ``rules``' release. Raises :class:`CompileError`.

    A selector evaluates to bool or to the type of an attribute value (the unknown type: ``any``
    before 1.37, ``dyn`` from 1.37).
    """
    source = Source(text)
    try:
        root = parse(text)
    except SyntaxIssue as err:
        raise CompileError(source.render(err.issues)) from None
    except RecursionError:
        raise CompileError(source.render([Issue(0, "max recursion depth exceeded")])) from None
    checked = check(root, rules)
    if checked.issues:
        raise CompileError(source.render(checked.issues))
    result = checked.types[root.id]
    if result not in (types.BOOL, types.DYN if rules.dyn_attributes else types.ANY):
        raise CompileError(f"must evaluate to bool or the unknown type, not {result.display()}", stage="result")
    try:
        program = plan(root, checked)
    except PlanError as err:
        raise CompileError(str(err), stage="plan") from None
    return result.display(), program, _estimate(root), reads(root)
