"""Turns a checked expression into Python closures that evaluate it the way cel-go's interpreter does.

Called by the compiler (``compiler.py``). Errors travel as :class:`EvalError` exceptions; the
places where cel-go treats an error as a value catch them: ``&&``/``||`` (an error loses to a
deciding operand), the conditional, ``@not_strictly_false`` and comprehension accumulators (a
fold keeps an error in its accumulator and goes on). Field selection and indexing follow cel-go's
attribute rules (``no such key: x``, ``index out of bounds: 5``, optional chains). The
optimizations the Kubernetes environment turns on (``OptOptimize``) are reproduced because they
change answers: type conversions of constants run at plan time (a failure is a compile-class
``program instantiation failed`` error), ``x in [constants]`` becomes a set lookup with cel-go's
numeric keys, and constant regex patterns compile at plan time. What the closures call while
they run (field access, set keys) is in ``runtime.py``. These plans charge no cost: a selector
whose worst case could reach the cost limit gets a metered plan instead (``metered.py``).
"""

from __future__ import annotations

import math
from typing import Any

from dra_driver.schedsim.cel import library, regex
from dra_driver.schedsim.cel.checker import Checked
from dra_driver.schedsim.cel.nodes import (
    Call,
    Comprehension,
    CreateList,
    CreateMap,
    Expr,
    Ident,
    Literal,
    Select,
)
from dra_driver.schedsim.cel.runtime import (
    Activation,
    ErrorValue,
    Plan,
    presence_test,
    select_value,
    set_key,
    set_keys,
)
from dra_driver.schedsim.cel.semver import Semver
from dra_driver.schedsim.cel.strings import find_all_compiled
from dra_driver.schedsim.cel.values import (
    CelType,
    EvalError,
    Optional,
    Panic,
    Uint,
    equal,
    go_type_name,
    go_v,
    map_find,
    not_equal,
    type_name,
)

_NO_CONST = object()
CONVERSIONS = frozenset({"bool", "bytes", "double", "dyn", "int", "string", "type", "uint"})
TYPE_IDENTS = frozenset({"bool", "bytes", "double", "int", "list", "map", "null_type", "string", "type", "uint"})


class PlanError(Exception):
    """The program cannot be built (cel-go: ``program instantiation failed: ...``)."""


class Planner:
    """Plans one checked expression."""

    def __init__(self, checked: Checked) -> None:
        self.checked = checked

    def plan(self, e: Expr) -> Plan:
        """The closure for ``e``."""
        return self._plan(e)[0]

    def _plan(self, e: Expr) -> tuple[Plan, Any]:  # noqa: PLR0911 - one branch per expression kind / call shape, as cel-go's planner
        """(plan, constant value or _NO_CONST)."""
        if isinstance(e, Literal):
            v = e.value
            return (lambda act: v), v
        if isinstance(e, Ident):
            return self._ident(e), _NO_CONST
        if isinstance(e, Select):
            return self._select(e), _NO_CONST
        if isinstance(e, Call):
            return self._call(e)
        if isinstance(e, CreateList):
            return self._create_list(e)
        if isinstance(e, CreateMap):
            return self._create_map(e)
        if isinstance(e, Comprehension):
            return self._comprehension(e), _NO_CONST
        raise PlanError(f"cannot plan {type(e).__name__}")

    # -- leaves ---------------------------------------------------------------------------------
    def _ident(self, e: Ident) -> Plan:
        name = e.name
        if name in TYPE_IDENTS:
            tv = CelType(name)

            def type_ident(act: Activation) -> Any:
                v = act.get(name, tv)
                if type(v) is ErrorValue:
                    raise v.error
                return v

            return type_ident

        def var(act: Activation) -> Any:
            v = act[name]
            if type(v) is ErrorValue:
                raise v.error
            return v

        return var

    def _select(self, e: Select) -> Plan:
        operand = self.plan(e.operand)
        field = e.field
        if e.test_only:
            return lambda act: presence_test(operand(act), field)

        def sel(act: Activation) -> Any:
            obj = operand(act)
            if type(obj) is dict:
                v = obj.get(field, _NO_CONST)
                if v is not _NO_CONST:
                    return v
            return select_value(obj, field, optional=False)

        return sel

    def _create_list(self, e: CreateList) -> tuple[Plan, Any]:
        parts = [self._plan(x) for x in e.elements]
        if all(c is not _NO_CONST for _, c in parts):
            value = [c for _, c in parts]
            return (lambda act: value), value
        plans = [p for p, _ in parts]
        return (lambda act: [p(act) for p in plans]), _NO_CONST

    def _create_map(self, e: CreateMap) -> tuple[Plan, Any]:
        parts = [(self._plan(en.key), self._plan(en.value)) for en in e.entries]

        def build(act: Activation) -> Any:
            out: dict[Any, Any] = {}
            for (kp, _), (vp, _) in parts:
                k = kp(act)
                if type(k) not in (int, Uint, str, bool):
                    raise EvalError(f"unsupported key type: {type_name(k)}")
                if map_find(out, k)[0]:
                    raise EvalError(f"Failed with repeated key: {go_v(k)}")
                out[k] = vp(act)
            return out

        if all(kc is not _NO_CONST and vc is not _NO_CONST for (_, kc), (_, vc) in parts):
            try:
                value = build({})
            except EvalError as err:
                failure = err

                def fail(act: Activation) -> Any:
                    raise failure

                return fail, _NO_CONST
            return (lambda act: value), value
        return build, _NO_CONST

    # -- calls ----------------------------------------------------------------------------------
    def _call(self, e: Call) -> tuple[Plan, Any]:  # noqa: PLR0911, PLR0912 - one branch per expression kind / call shape, as cel-go's planner
        fn = e.function
        arg_exprs = ([e.target] if e.target is not None else []) + e.args
        if fn in ("_&&_", "_||_"):
            return self._logic(fn, arg_exprs), _NO_CONST
        if fn == "_?_:_":
            return self._conditional(arg_exprs), _NO_CONST
        if fn == "@not_strictly_false":
            inner = self.plan(arg_exprs[0])

            def nsf(act: Activation) -> Any:
                try:
                    v = inner(act)
                except EvalError:
                    return True
                return v if type(v) is bool else True

            return nsf, _NO_CONST
        parts = [self._plan(a) for a in arg_exprs]
        plans = [p for p, _ in parts]
        if fn in ("_==_", "_!=_"):
            a, b = plans
            if fn == "_==_":
                return (lambda act: equal(a(act), b(act))), _NO_CONST
            return (lambda act: not_equal(a(act), b(act))), _NO_CONST
        if fn in ("_[_]", "_[?_]", "_?._"):
            opt = fn != "_[_]"
            obj_p, key_p = plans
            return (lambda act: select_value(obj_p(act), key_p(act), optional=opt)), _NO_CONST
        refs = self.checked.refs.get(e.id, [])
        if fn in CONVERSIONS and len(parts) == 1 and parts[0][1] is not _NO_CONST:
            try:
                value = library.call(fn, refs, [parts[0][1]])
            except EvalError as err:
                raise PlanError(str(err)) from None
            return (lambda act: value), value
        if fn == "@in" and parts[1][1] is not _NO_CONST and type(parts[1][1]) is list:
            if not parts[1][1]:
                return (lambda act: False), False  # cel-go folds `x in []` to false, x unevaluated
            return self._set_membership(plans[0], parts[1][1]), _NO_CONST
        if fn in ("or", "orValue") and len(plans) == 2:
            return self.optional_or(fn, plans[0], plans[1]), _NO_CONST
        if fn in ("matches", "find", "findAll") and len(parts) >= 2 and type(parts[1][1]) is str:
            optimized = self.constant_regex(fn, parts[1][1], plans)
            if optimized is not None:
                return optimized, _NO_CONST
        return self._generic(fn, refs, plans), _NO_CONST

    def constant_regex(self, fn: str, pattern: str, plans: list[Plan]) -> Plan | None:
        """cel-go's regex optimization: compile a constant pattern once; the call skips its type guard."""
        try:
            rx = regex.compile_re2(pattern)
        except regex.RegexError as err:
            raise PlanError(str(err)) from None
        except regex.RegexUnsupported:
            return None  # fails at evaluation with its own message
        subject = plans[0]
        if fn == "matches":

            def matches_const(act: Activation) -> Any:
                s = subject(act)
                if type(s) is not str:
                    raise EvalError("no such overload")
                return rx.search(s) is not None

            return matches_const
        if fn == "find":

            def find_const(act: Activation) -> Any:
                s = subject(act)
                if type(s) is not str:
                    raise EvalError("no such overload")
                m = rx.search(s)
                return m.group(0) if m else ""

            return find_const
        limit = plans[2] if len(plans) > 2 else None

        def find_all_const(act: Activation) -> Any:
            s = subject(act)
            if type(s) is not str:
                raise EvalError("no such overload")
            n = -1
            if limit is not None:
                n = limit(act)
                if type(n) is not int:
                    raise EvalError("no such overload")
            return find_all_compiled(rx, s, n)

        return find_all_const

    @staticmethod
    def optional_or(fn: str, lhs: Plan, rhs: Plan) -> Plan:
        """``or``/``orValue`` short-circuit: the alternative is evaluated only for an empty optional."""
        unwrap = fn == "orValue"

        def run(act: Activation) -> Any:
            v = lhs(act)
            if type(v) is not Optional:
                return v
            if v.has:
                return v.value if unwrap else v
            return rhs(act)

        return run

    def _generic(self, fn: str, refs: list[str], plans: list[Plan]) -> Plan:
        call = library.call
        if len(plans) == 1:
            p0 = plans[0]
            return lambda act: call(fn, refs, [p0(act)])
        if len(plans) == 2:
            p0, p1 = plans
            return lambda act: call(fn, refs, [p0(act), p1(act)])
        return lambda act: call(fn, refs, [p(act) for p in plans])

    def _set_membership(self, needle: Plan, items: list[Any]) -> Plan:
        for x in items:
            if type(x) not in (bool, int, Uint, float, str):
                # Non-primitive elements: no set (cel-go keeps the general membership test).
                return lambda act: library.call("@in", [], [needle(act), items])
        keys: set[tuple[str, Any]] = set()
        for x in items:
            for k in set_keys(x):
                if not (k[0] == "double" and isinstance(k[1], float) and math.isnan(k[1])):
                    keys.add(k)

        def member(act: Activation) -> Any:
            v = needle(act)
            k = set_key(v)
            if k is None and type(v) in (Semver, bytes):
                # cel-go looks the value up in a Go map; these types cannot be map keys and panic.
                go_type = "cel.Semver" if type(v) is Semver else "types.Bytes"
                raise Panic(f"runtime error: hash of unhashable type {go_type}")
            return k is not None and k in keys

        return member

    def _logic(self, fn: str, arg_exprs: list[Expr]) -> Plan:
        terms = [self.plan(a) for a in arg_exprs]
        decisive = fn == "_||_"

        def run(act: Activation) -> Any:
            err: EvalError | None = None
            for t in terms:
                try:
                    v = t(act)
                except EvalError as e:
                    if err is None:
                        err = e
                    continue
                if type(v) is bool:
                    if v is decisive:
                        return decisive
                elif err is None:
                    err = EvalError("no such overload")
            if err is not None:
                raise err
            return not decisive

        return run

    def _conditional(self, arg_exprs: list[Expr]) -> Plan:
        cond, then, other = (self.plan(a) for a in arg_exprs)

        def run(act: Activation) -> Any:
            c = cond(act)
            if c is True:
                return then(act)
            if c is False:
                return other(act)
            raise EvalError("no such overload")

        return run

    # -- comprehensions -------------------------------------------------------------------------
    def _comprehension(self, e: Comprehension) -> Plan:  # noqa: PLR0915 - one branch per expression kind / call shape, as cel-go's planner
        rng = self.plan(e.iter_range)
        init = self.plan(e.accu_init)
        cond = self.plan(e.loop_condition)
        step = self.plan(e.loop_step)
        result = self.plan(e.result)
        it_var, it_var2, accu_var = e.iter_var, e.iter_var2, e.accu_var

        def run(act: Activation) -> Any:
            items = rng(act)
            pairs: list[tuple[Any, Any]] | None = None
            if type(items) is list:
                seq: Any = items
                if it_var2:
                    pairs = list(enumerate(items))
            elif isinstance(items, dict):
                seq = list(dict.keys(items))
                if it_var2:
                    pairs = list(dict.items(items))
            elif it_var2:
                raise EvalError(f"unsupported comprehension range type: {go_type_name(items)}")
            else:
                raise EvalError(f"got '{go_type_name(items)}', expected iterable type")
            if pairs is not None:
                return two_vars(act, pairs)
            inner = dict(act)
            try:
                inner[accu_var] = init(act)
            except EvalError as err:
                inner[accu_var] = ErrorValue(err)
            for x in seq:
                inner[it_var] = x
                try:
                    c = cond(inner)
                except EvalError:
                    c = None
                if c is False:
                    break
                try:
                    inner[accu_var] = step(inner)
                except EvalError as err:
                    inner[accu_var] = ErrorValue(err)
            return result(inner)

        def two_vars(act: Activation, pairs: list[tuple[Any, Any]]) -> Any:
            inner = dict(act)
            try:
                inner[accu_var] = init(act)
            except EvalError as err:
                inner[accu_var] = ErrorValue(err)
            for k, v in pairs:
                inner[it_var], inner[it_var2] = k, v
                try:
                    c = cond(inner)
                except EvalError:
                    c = None
                if c is False:
                    break
                try:
                    inner[accu_var] = step(inner)
                except EvalError as err:
                    inner[accu_var] = ErrorValue(err)
            return result(inner)

        return run


def plan(root: Expr, checked: Checked) -> Plan:
    """The closure for a checked expression; raises :class:`PlanError`."""
    return Planner(checked).plan(root)
