"""Plans that charge what the scheduler's CEL charges while they run, for selectors that could reach the limit.

Called by the compiler (``compiler.py``) for a selector whose worst case (``estimate.py``, with
``bound``) could come near the cost limit; every other selector runs the unmetered plan of
``planner.py``, which this one answers exactly like. cel-go charges its cost tracker from an
observer of each step of its plan (``interpreter/runtimecost.go``), and its plan is shaped by its
planner (``interpreter/planner.go``): a variable, a chain of selections and indexes on it, or on a
computed value, is one *attribute*, resolved qualifier by qualifier. So this planner charges:

- an attribute 1 when it resolves (also when it fails), plus 1 for each qualifier it applies
  (a ``.field``, an ``[index]``: also when that fails; an optional one only when present), and
  nothing for the attribute of a presence test, of a branch of ``?:`` or of an index key;
- a call what ``cost.py`` prices (after its arguments; both operands of a binary call are
  evaluated even when the first fails, as in cel-go);
- a list built at run time 10, a map 30 (constant ones are built once, at plan time, for free);
- nothing for literals, ``&&``, ``||``, ``?:``, ``or``/``orValue``, a membership test in a
  constant list (a set lookup) or a comprehension itself, whose steps are charged one by one;
  a comprehension's accumulator is initialized when first read, as cel-go does it.

Going over the limit raises :class:`CostExceeded`, which nothing absorbs (cel-go cancels the
evaluation with a panic), and the selector fails with cel-go's ``operation cancelled: actual cost
limit exceeded``: the scheduler aborts the attempt as for any other selector error.
"""

from __future__ import annotations

from typing import Any

from dra_driver.schedsim.cel import library, regex
from dra_driver.schedsim.cel.checker import Checked
from dra_driver.schedsim.cel.cost import call_cost
from dra_driver.schedsim.cel.metered_steps import CHAIN_CALLS, FAILED, Accumulator, Step, charge, is_attribute, split_attribute
from dra_driver.schedsim.cel.nodes import Call, Comprehension, CreateList, CreateMap, Expr, Ident, Literal, Select
from dra_driver.schedsim.cel.planner import _NO_CONST, TYPE_IDENTS, PlanError, Planner
from dra_driver.schedsim.cel.runtime import (
    Activation,
    ErrorValue,
    Plan,
    presence_test,
    qualify,
    set_key,
    set_keys,
)
from dra_driver.schedsim.cel.semver import Semver
from dra_driver.schedsim.cel.strings import find_all_compiled
from dra_driver.schedsim.cel.values import EvalError, Optional, Panic, Uint, equal, go_type_name, not_equal
from dra_driver.schedsim.rules import Rules

_LIST_COST = 10
_MAP_COST = 30


class MeteredPlanner(Planner):
    """Plans one checked expression with cost charging (see the module docstring)."""

    def __init__(self, checked: Checked, rules: Rules) -> None:
        super().__init__(checked)
        self.minor, self.cel_go = rules.minor, rules.cel_go

    def cost(self, function: str, overload: str, args: list[Any], result: Any) -> int:
        """What cel-go charges for one call in this release (``cost.call_cost``)."""
        return call_cost(function, overload, args, result, minor=self.minor, cel_go=self.cel_go)

    def _plan(self, e: Expr) -> tuple[Plan, Any]:  # noqa: PLR0911 - one branch per expression kind
        if isinstance(e, Literal):
            return super()._plan(e)
        if isinstance(e, Ident | Select) or (isinstance(e, Call) and (e.function in CHAIN_CALLS or e.function == "_?_:_")):
            if isinstance(e, Ident) and e.name in TYPE_IDENTS:
                return super()._plan(e)
            return self.attribute(e, observed=True), _NO_CONST
        if isinstance(e, Call):
            return self._call(e)
        if isinstance(e, CreateList):
            return self._metered_list(e)
        if isinstance(e, CreateMap):
            return self._metered_map(e)
        if isinstance(e, Comprehension):
            return self._metered_comprehension(e), _NO_CONST
        return super()._plan(e)

    # -- attributes -----------------------------------------------------------------------------
    def attribute(self, e: Expr, *, observed: bool) -> Plan:
        """An attribute; ``observed``: its own 1 is charged (not as a ``?:`` branch or an index key)."""
        root, quals = split_attribute(e)
        steps = [self._qualifier(kind, what, opt) for kind, what, opt in quals]
        presence = bool(quals) and quals[-1][0] == "has"
        if isinstance(root, Call) and root.function == "_?_:_":
            root_plan = self._conditional_root(root)
            charged = 0
        elif isinstance(root, Ident) and root.name not in TYPE_IDENTS:
            root_plan = self._variable(root.name)
            charged = 0 if presence or not observed else 1
        else:
            root_plan = self.plan(root)
            charged = 0 if presence or not observed else 1

        def run(act: Activation) -> Any:
            try:
                v = root_plan(act)
                for step in steps:
                    if type(v) is Optional and not v.has:
                        break
                    v = step(act, v)
            except EvalError:
                if charged:
                    charge(act, charged)
                raise
            if charged:
                charge(act, charged)
            return v

        return run

    @staticmethod
    def _variable(name: str) -> Plan:
        def var(act: Activation) -> Any:
            v = act[name]
            if type(v) is Accumulator:
                v = v.get()
            if type(v) is ErrorValue:
                raise v.error
            return v

        return var

    def _conditional_root(self, e: Call) -> Plan:
        args = ([e.target] if e.target is not None else []) + e.args
        cond = self.plan(args[0])
        then, other = (self.attribute(a, observed=False) if is_attribute(a) else self.plan(a) for a in args[1:3])

        def run(act: Activation) -> Any:
            c = cond(act)
            if c is True:
                return then(act)
            if c is False:
                return other(act)
            raise EvalError("no such overload")

        return run

    def _key(self, key: Expr) -> tuple[Plan | None, Any]:
        """(plan, None) for a key computed at run time; (None, value) for a constant one."""
        if isinstance(key, Ident) and key.name in TYPE_IDENTS:
            plan, _ = super()._plan(key)
            return plan, None
        if is_attribute(key):
            return self.attribute(key, observed=False), None
        plan, const = self._plan(key)
        if const is not _NO_CONST:
            return None, const
        return plan, None

    def _qualifier(self, kind: str, what: Any, optional: bool) -> Step:
        if kind == "has":
            field = str(what)

            def has(act: Activation, v: Any) -> Any:
                if type(v) is Optional:
                    present = presence_test(v, field)
                    if present:
                        charge(act, 1)
                    return present
                charge(act, 1)
                return presence_test(v, field)

            return has
        if kind == "field":
            key_plan: Plan | None = None
            const: Any = what
        else:
            key_plan, const = self._key(what)

        def qualifier(act: Activation, v: Any) -> Any:
            if type(v) is Optional or optional:
                obj = v.value if type(v) is Optional else v
                k = const if key_plan is None else key_plan(act)
                found, value = qualify(obj, k, presence=True)
                if not found:
                    return Optional(False)
                charge(act, 1)
                return Optional(True, value)
            if key_plan is None:
                k = const
            else:
                try:
                    k = key_plan(act)
                except EvalError:
                    charge(act, 1)
                    raise
            charge(act, 1)
            return qualify(v, k, presence=False)[1]

        return qualifier

    # -- calls ----------------------------------------------------------------------------------
    def _call(self, e: Call) -> tuple[Plan, Any]:
        fn = e.function
        arg_exprs = ([e.target] if e.target is not None else []) + e.args
        if fn == "@not_strictly_false":
            return self._not_strictly_false(self.plan(arg_exprs[0])), _NO_CONST
        if fn in ("_==_", "_!=_"):
            a, b = (self.plan(x) for x in arg_exprs)
            return self._equality(fn, a, b), _NO_CONST
        if fn in ("matches", "find", "findAll"):
            refs = self.checked.refs.get(e.id, [])
            parts = [self._plan(a) for a in arg_exprs]
            plans = [p for p, _ in parts]
            if len(parts) >= 2 and type(parts[1][1]) is str:
                optimized = self._constant_regex(fn, refs[0] if len(refs) == 1 else "", parts[1][1], plans)
                if optimized is not None:
                    return optimized, _NO_CONST
            return self._generic(fn, refs, plans), _NO_CONST
        return super()._call(e)

    def _not_strictly_false(self, inner: Plan) -> Plan:
        cost = self.cost("@not_strictly_false", "not_strictly_false", [True], True)

        def nsf(act: Activation) -> Any:
            try:
                v = inner(act)
            except EvalError:
                charge(act, cost)
                return True
            charge(act, cost)
            return v if type(v) is bool else True

        return nsf

    def _equality(self, fn: str, a: Plan, b: Plan) -> Plan:
        overload = "equals" if fn == "_==_" else "not_equals"
        decide = equal if fn == "_==_" else not_equal
        cost = self.cost

        def run(act: Activation) -> Any:
            err: EvalError | None = None
            try:
                lhs = a(act)
            except EvalError as x:
                err, lhs = x, FAILED
            try:
                rhs = b(act)
            except EvalError as x:
                err = err or x
                rhs = FAILED
            charge(act, cost(fn, overload, [lhs, rhs], None))
            if err is not None:
                raise err
            return decide(lhs, rhs)

        return run

    def _generic(self, fn: str, refs: list[str], plans: list[Plan]) -> Plan:
        overload = refs[0] if len(refs) == 1 else ""
        cost = self.cost
        call = library.call
        last = len(plans) - 1
        # cel-go evaluates both operands of a binary implementation (an operator's, or one overload's)
        # before looking at errors; a call it dispatches at run time among several overloads, or with
        # three or more arguments, stops at the first error, and then charges nothing for the call.
        stops = last >= 1 and not (last == 1 and (fn in library.SINGLETONS or len(refs) == 1))

        def run(act: Activation) -> Any:
            args: list[Any] = []
            err: EvalError | None = None
            for i, p in enumerate(plans):
                try:
                    args.append(p(act))
                except EvalError as x:
                    err = err or x
                    args.append(FAILED)
                    if stops and i < last:
                        raise
            if err is not None:
                charge(act, cost(fn, overload, args, FAILED))
                raise err
            try:
                result = call(fn, refs, args)
            except EvalError:
                charge(act, cost(fn, overload, args, FAILED))
                raise
            charge(act, cost(fn, overload, args, result))
            return result

        return run

    def _constant_regex(self, fn: str, overload: str, pattern: str, plans: list[Plan]) -> Plan | None:
        """cel-go's constant-pattern call: the same overload, so the same cost, once the subject evaluated."""
        try:
            rx = regex.compile_re2(pattern)
        except regex.RegexError as err:
            raise PlanError(str(err)) from None
        except regex.RegexUnsupported:
            return None
        subject = plans[0]
        limit = plans[2] if len(plans) > 2 else None
        cost = self.cost

        def run(act: Activation) -> Any:
            s = subject(act)
            n: Any = -1
            if limit is not None:
                try:
                    n = limit(act)
                except EvalError:
                    charge(act, cost(fn, overload, [s, pattern, FAILED], FAILED))
                    raise
            if type(s) is not str:
                charge(act, cost(fn, overload, [s, pattern], FAILED))
                raise EvalError("no such overload")
            if fn == "matches":
                charge(act, cost(fn, overload, [s, pattern], None))
                return rx.search(s) is not None
            if fn == "find":
                charge(act, cost(fn, overload, [s, pattern], None))
                m = rx.search(s)
                return m.group(0) if m else ""
            if type(n) is not int:
                charge(act, cost(fn, overload, [s, pattern, n], FAILED))
                raise EvalError("no such overload")
            result = find_all_compiled(rx, s, n)
            charge(act, cost(fn, overload, [s, pattern, n], result))
            return result

        return run

    def _set_membership(self, needle: Plan, items: list[Any]) -> Plan:
        if any(type(x) not in (bool, int, Uint, float, str) for x in items):
            # Non-primitive elements: no set; cel-go keeps the membership call, charged by the list's size.
            cost = self.cost("@in", "in_list", [None, items], None)

            def general(act: Activation) -> Any:
                try:
                    v = needle(act)
                finally:
                    charge(act, cost)
                return library.call("@in", [], [v, items])

            return general
        keys: set[tuple[str, Any]] = set()
        for x in items:
            for k in set_keys(x):
                if not (k[0] == "double" and isinstance(k[1], float) and k[1] != k[1]):
                    keys.add(k)

        def member(act: Activation) -> Any:
            v = needle(act)
            k = set_key(v)
            if k is None and type(v) in (Semver, bytes):
                go_type = "cel.Semver" if type(v) is Semver else "types.Bytes"
                raise Panic(f"runtime error: hash of unhashable type {go_type}")
            return k is not None and k in keys

        return member

    # -- literals built at run time ---------------------------------------------------------------
    def _metered_list(self, e: CreateList) -> tuple[Plan, Any]:
        plan, const = super()._create_list(e)
        if const is not _NO_CONST:
            return plan, const

        def build(act: Activation) -> Any:
            try:
                return plan(act)
            finally:
                charge(act, _LIST_COST)

        return build, _NO_CONST

    def _metered_map(self, e: CreateMap) -> tuple[Plan, Any]:
        parts = [(self._plan(en.key), self._plan(en.value)) for en in e.entries]
        if all(kc is not _NO_CONST and vc is not _NO_CONST for (_, kc), (_, vc) in parts):
            return super()._create_map(e)
        plan, _ = super()._create_map(e)

        def build(act: Activation) -> Any:
            try:
                return plan(act)
            finally:
                charge(act, _MAP_COST)

        return build, _NO_CONST

    # -- comprehensions -------------------------------------------------------------------------
    def _metered_comprehension(self, e: Comprehension) -> Plan:
        rng = self.plan(e.iter_range)
        init = self.plan(e.accu_init)
        cond = self.plan(e.loop_condition)
        step = self.plan(e.loop_step)
        result = self.plan(e.result)
        it_var, it_var2, accu_var = e.iter_var, e.iter_var2, e.accu_var

        def loop(inner: Activation, entries: Any, pairs: bool) -> None:
            for x in entries:
                if pairs:
                    inner[it_var], inner[it_var2] = x
                else:
                    inner[it_var] = x
                try:
                    c = cond(inner)
                except EvalError:
                    c = None
                if c is False:
                    return
                try:
                    inner[accu_var] = step(inner)
                except EvalError as err:
                    inner[accu_var] = ErrorValue(err)

        def run(act: Activation) -> Any:
            items = rng(act)
            if type(items) is list:
                entries: Any = list(enumerate(items)) if it_var2 else items
            elif isinstance(items, dict):
                entries = list(dict.items(items)) if it_var2 else list(dict.keys(items))
            elif it_var2:
                raise EvalError(f"unsupported comprehension range type: {go_type_name(items)}")
            else:
                raise EvalError(f"got '{go_type_name(items)}', expected iterable type")
            inner = dict(act)
            inner[accu_var] = Accumulator(init, act)
            loop(inner, entries, bool(it_var2))
            return result(inner)

        return run


def metered_plan(root: Expr, checked: Checked, rules: Rules) -> Plan:
    """The metered closure for a checked expression; raises ``PlanError`` as :func:`planner.plan` does."""
    return MeteredPlanner(checked, rules).plan(root)


__all__ = ["FAILED", "MeteredPlanner", "metered_plan"]
