"""The type-checker of the DRA CEL environment, with cel-go's rules and error messages.

Called by the compiler (``compiler.py``). It types every node of a :mod:`syntax` tree against
:mod:`decls`, resolves each call to the overloads that match (the planner dispatches on them),
and collects every issue at the offset cel-go reports it (issues print sorted by location). After
a clean check the validators of the Kubernetes environment run: homogeneous list and map literals
and constant ``matches`` patterns.
"""

from __future__ import annotations

from dra_driver.schedsim.cel import regex
from dra_driver.schedsim.cel.decls import VARIABLES, Overload, attribute_type, device_fields, functions, new_expression_functions
from dra_driver.schedsim.cel.nodes import (
    Call,
    Comprehension,
    CreateList,
    CreateMap,
    Expr,
    Ident,
    Issue,
    Literal,
    Select,
)
from dra_driver.schedsim.cel.types import (
    BOOL,
    BYTES,
    DEVICE,
    DOUBLE,
    DYN,
    ERROR,
    ERROR_KIND,
    INT,
    LIST_KIND,
    MAP_KIND,
    NULL,
    STRING,
    STRUCT_KIND,
    TYPE_PARAM_KIND,
    UINT,
    Mapping,
    Type,
    assignable,
    assignable_list,
    equivalent,
    format_signature,
    format_type,
    is_dyn,
    is_dyn_or_error,
    list_of,
    map_of,
    most_general,
    optional_of,
    param,
    substitute,
    unwrap_optional,
)
from dra_driver.schedsim.cel.values import Uint
from dra_driver.schedsim.rules import NEWEST, Rules


class Checked:
    """The result of a check: types and overload references per node id, and the issues."""

    def __init__(self) -> None:
        self.types: dict[int, Type] = {}
        self.refs: dict[int, list[str]] = {}
        self.issues: list[Issue] = []


def _literal_type(v: object) -> Type:  # noqa: PLR0911 - one branch per literal kind / checked node kind, as cel-go's checker
    if v is None:
        return NULL
    if isinstance(v, bool):
        return BOOL
    if isinstance(v, Uint):
        return UINT
    if isinstance(v, int):
        return INT
    if isinstance(v, float):
        return DOUBLE
    if isinstance(v, str):
        return STRING
    return BYTES


def qualified_name(e: Expr) -> str | None:
    """``a.b.c`` for a chain of selections on an identifier, else None."""
    if isinstance(e, Ident):
        return e.name
    if isinstance(e, Select) and not e.test_only:
        prefix = qualified_name(e.operand)
        return None if prefix is None else f"{prefix}.{e.field}"
    return None


class Checker:
    """One check of one expression."""

    def __init__(self, rules: Rules = NEWEST, *, new_expressions: bool = False) -> None:
        self.functions = new_expression_functions(rules) if new_expressions else functions(rules.includes, rules.cel_go)
        self.attributes = map_of(STRING, map_of(STRING, attribute_type(rules, new_expressions=new_expressions)))
        self.device_fields = device_fields(rules, new_expressions=new_expressions)
        self.out = Checked()
        self.mapping = Mapping()
        self.scopes: list[dict[str, Type]] = []
        self.counter = 0

    # -- bookkeeping ----------------------------------------------------------------------------
    def error(self, e: Expr | int, message: str) -> None:
        self.out.issues.append(Issue(e if isinstance(e, int) else e.offset, message))

    def set_type(self, e: Expr, t: Type) -> None:
        self.out.types[e.id] = t

    def type(self, e: Expr) -> Type:
        return self.out.types[e.id]

    def fresh(self) -> Type:
        t = param(f"_var{self.counter}")
        self.counter += 1
        return t

    def is_assignable(self, t1: Type, t2: Type) -> bool:
        new = assignable(self.mapping, t1, t2)
        if new is None:
            return False
        self.mapping = new
        return True

    def lookup_ident(self, name: str) -> Type | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return VARIABLES.get(name)

    # -- nodes ----------------------------------------------------------------------------------
    def check(self, e: Expr) -> None:
        if isinstance(e, Literal):
            self.set_type(e, _literal_type(e.value))
        elif isinstance(e, Ident):
            t = self.lookup_ident(e.name)
            if t is None:
                self.set_type(e, ERROR)
                self.error(e, f"undeclared reference to '{e.name}' (in container '')")
            else:
                self.set_type(e, t)
        elif isinstance(e, Select):
            self.check_select(e)
        elif isinstance(e, Call):
            self.check_call(e)
        elif isinstance(e, CreateList):
            elem: Type | None = None
            for x in e.elements:
                self.check(x)
                elem = self.join(elem, self.type(x))
            self.set_type(e, list_of(elem if elem is not None else self.fresh()))
        elif isinstance(e, CreateMap):
            kt: Type | None = None
            vt: Type | None = None
            for entry in e.entries:
                self.check(entry.key)
                kt = self.join(kt, self.type(entry.key))
                self.check(entry.value)
                vt = self.join(vt, self.type(entry.value))
            if kt is None or vt is None:
                kt, vt = self.fresh(), self.fresh()
            self.set_type(e, map_of(kt, vt))
        elif isinstance(e, Comprehension):
            self.check_comprehension(e)

    def join(self, previous: Type | None, current: Type) -> Type:
        """Element types of literals: the more general type, or dyn (cel-go's non-homogeneous mode)."""
        if previous is None:
            return current
        if self.is_assignable(previous, current):
            return most_general(previous, current)
        return DYN

    def check_select(self, e: Select) -> None:
        qname = qualified_name(e)
        if qname is not None and "." in qname:
            t = self.lookup_ident(qname)
            if t is not None:
                self.set_type(e, t)
                return
        result = self.select_field(e, e.operand, e.field, optional=False)
        if e.test_only:
            result = BOOL
        self.set_type(e, substitute(self.mapping, result, False))

    def select_field(self, e: Expr, operand: Expr, name: str, *, optional: bool) -> Type:
        self.check(operand)
        operand_type = substitute(self.mapping, self.type(operand), False)
        target, was_opt = unwrap_optional(operand_type)
        result = ERROR
        if target.kind == MAP_KIND:
            result = target.params[1]
        elif target.kind == STRUCT_KIND:
            if target == DEVICE and name in self.device_fields:
                result = self.attributes if name == "attributes" else self.device_fields[name]
            else:
                self.error(e, f"undefined field '{name}'")
        elif target.kind == TYPE_PARAM_KIND:
            self.is_assignable(DYN, target)
            result = DYN
        else:
            if not is_dyn_or_error(target):
                self.error(e, f"type '{format_type(target)}' does not support field selection")
            result = DYN
        if was_opt or optional:
            return optional_of(result)
        return result

    def check_call(self, e: Call) -> None:
        if e.function == "_?._":
            field = e.args[1]
            if not (isinstance(field, Literal) and isinstance(field.value, str)):
                self.error(field, "unsupported optional field selection")
                return
            result = self.select_field(e, e.args[0], field.value, optional=True)
            self.set_type(e, substitute(self.mapping, result, False))
            self.out.refs[e.id] = ["select_optional_field"]
            return
        for a in e.args:
            self.check(a)
        if e.target is None:
            fn = self.functions.get(e.function)
            if fn is None:
                self.error(e, f"undeclared reference to '{e.function}' (in container '')")
                self.set_type(e, ERROR)
                return
            self.resolve(e, e.function, fn, None)
            return
        prefix = qualified_name(e.target)
        if prefix is not None:
            qualified = self.functions.get(f"{prefix}.{e.function}")
            if qualified is not None:
                e.function = f"{prefix}.{e.function}"
                e.target = None
                self.resolve(e, e.function, qualified, None)
                return
        self.check(e.target)
        fn = self.functions.get(e.function)
        if fn is None:
            self.set_type(e, ERROR)
            self.error(e, f"undeclared reference to '{e.function}' (in container '')")
            return
        self.resolve(e, e.function, fn, e.target)

    def resolve(self, e: Call, name: str, overloads: tuple[Overload, ...], target: Expr | None) -> None:
        arg_exprs = ([target] if target is not None else []) + e.args
        arg_types = [self.type(a) for a in arg_exprs]
        if name in ("_&&_", "_||_"):
            ok = True
            for a, t in zip(arg_exprs, arg_types, strict=True):
                if not self.is_assignable(t, BOOL):
                    self.error(a, f"expected type 'bool' but found '{format_type(t)}'")
                    ok = False
            self.set_type(e, BOOL if ok else ERROR)
            if ok:
                self.out.refs[e.id] = [overloads[0].id]
            return
        result: Type | None = None
        matched: list[str] = []
        for ov in overloads:
            if ov.member != (target is not None):
                continue
            subs = Mapping()
            for p in ov.type_params:
                subs.add(param(p), self.fresh())
            params = [substitute(subs, a, False) for a in ov.args]
            ov_result = substitute(subs, ov.result, False)
            new = assignable_list(self.mapping, arg_types, params)
            if new is None:
                continue
            self.mapping = new
            matched.append(ov.id)
            fn_result = substitute(self.mapping, ov_result, False)
            if result is None:
                result = fn_result
            elif not is_dyn(result) and fn_result != result:
                result = DYN
        if result is None:
            shown = [substitute(self.mapping, t, True) for t in arg_types]
            self.error(e, f"found no matching overload for '{name}' applied to '{format_signature(shown, target is not None)}'")
            self.set_type(e, ERROR)
            return
        self.set_type(e, result)
        self.out.refs[e.id] = matched

    def check_comprehension(self, e: Comprehension) -> None:
        self.check(e.iter_range)
        self.check(e.accu_init)
        range_type = substitute(self.mapping, self.type(e.iter_range), False)
        accu_type = self.type(e.accu_init)
        self.scopes.append({e.accu_var: accu_type})
        var2_type = DYN
        if range_type.kind == LIST_KIND:
            var_type = range_type.params[0]
            if e.iter_var2:
                var_type, var2_type = INT, var_type
        elif range_type.kind == MAP_KIND:
            var_type, var2_type = range_type.params[0], range_type.params[1]
        elif range_type.kind in ("dyn", ERROR_KIND, TYPE_PARAM_KIND):
            self.is_assignable(DYN, range_type)
            var_type = var2_type = DYN
        else:
            self.error(
                e.iter_range,
                f"expression of type '{format_type(range_type)}' cannot be range of a comprehension "
                "(must be list, map, or dynamic)",
            )
            var_type = var2_type = ERROR
        scope = {e.iter_var: var_type}
        if e.iter_var2:
            scope[e.iter_var2] = var2_type
        self.scopes.append(scope)
        self.check(e.loop_condition)
        self.assert_type(e.loop_condition, BOOL)
        self.check(e.loop_step)
        self.assert_type(e.loop_step, accu_type)
        self.scopes.pop()
        self.check(e.result)
        self.scopes.pop()
        self.set_type(e, substitute(self.mapping, self.type(e.result), False))

    def assert_type(self, e: Expr, t: Type) -> None:
        if not self.is_assignable(t, self.type(e)):
            self.error(e, f"expected type '{format_type(t)}' but found '{format_type(self.type(e))}'")

    # -- after the walk -------------------------------------------------------------------------
    def finish(self) -> None:
        for i, t in list(self.out.types.items()):
            self.out.types[i] = substitute(self.mapping, t, True)


def _walk(e: Expr) -> list[Expr]:
    """Pre-order nodes (cel-go's ``MatchDescendants`` order)."""
    out: list[Expr] = []
    stack: list[Expr] = [e]
    while stack:
        n = stack.pop()
        out.append(n)
        kids: list[Expr] = []
        if isinstance(n, Select):
            kids = [n.operand]
        elif isinstance(n, Call):
            kids = ([n.target] if n.target is not None else []) + n.args
        elif isinstance(n, CreateList):
            kids = list(n.elements)
        elif isinstance(n, CreateMap):
            for entry in n.entries:
                kids += [entry.key, entry.value]
        elif isinstance(n, Comprehension):
            kids = [n.iter_range, n.accu_init, n.loop_condition, n.loop_step, n.result]
        stack.extend(reversed(kids))
    return out


def validate(root: Expr, checked: Checked) -> None:  # noqa: PLR0912 - one branch per literal kind / checked node kind, as cel-go's checker
    """The Kubernetes environment's AST validators (after a clean check)."""
    nodes = _walk(root)
    for n in nodes:
        if isinstance(n, Call) and n.function == "matches" and n.args and isinstance(n.args[0], Literal):
            pattern = n.args[0].value
            if isinstance(pattern, str) and regex.compile_error(pattern) is not None:
                checked.issues.append(Issue(n.args[0].offset, "invalid matches argument"))
    types = checked.types
    for n in nodes:
        if isinstance(n, CreateList):
            first: Type | None = None
            for x in n.elements:
                t = types[x.id]
                if first is None:
                    first = t
                elif not equivalent(first, t):
                    checked.issues.append(Issue(x.offset, f"expected type '{format_type(first)}' but found '{format_type(t)}'"))
                    break
        elif isinstance(n, CreateMap):
            kt: Type | None = None
            vt: Type | None = None
            for entry in n.entries:
                k, v = types[entry.key.id], types[entry.value.id]
                if kt is None or vt is None:
                    kt, vt = k, v
                    continue
                if not equivalent(kt, k):
                    checked.issues.append(
                        Issue(entry.key.offset, f"expected type '{format_type(kt)}' but found '{format_type(k)}'")
                    )
                if not equivalent(vt, v):
                    checked.issues.append(
                        Issue(entry.value.offset, f"expected type '{format_type(vt)}' but found '{format_type(v)}'")
                    )


def check(root: Expr, rules: Rules = NEWEST, *, new_expressions: bool = False) -> Checked:
    """Type-check ``root`` in the environment of ``rules``' release; then, when clean, run the validators.

    ``new_expressions``: the environment the API server compiles a new or changed selector in
    (see ``decls.new_expression_functions``), not the scheduler's (stored expressions).
    """
    c = Checker(rules, new_expressions=new_expressions)
    c.check(root)
    c.finish()
    if not c.out.issues:
        validate(root, c.out)
    return c.out


__all__ = ["INT", "STRING", "Checked", "check", "qualified_name"]
