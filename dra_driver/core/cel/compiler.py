"""Compiles DRA CEL selectors: parse (cel-python's parser), type-check, estimate cost, plan closures.

Called by ``environment.py``. cel-python supplies the grammar and parser; its evaluator is not
used because its semantics differ from cel-go where the scheduler's answer depends on them
(``1 == 1.0``, ``1 < 2.5``, error texts such as ``no such key: x``, absorbing errors in ``||``).
The checker here reproduces cel-go's compile-time errors for the DRA environment (undeclared
references, undefined fields of ``device``, operators and functions with no matching overload,
non-bool results) and the planner turns the checked tree into Python closures.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, ClassVar

import celpy
import lark
from celpy.celparser import CELParseError
from celpy.evaluation import celbytes, celstr

from dra_driver.core.cel.library import FUNCTIONS, NAMESPACES, Overload, StaticType, add_values, dispatch
from dra_driver.core.cel.values import (
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    EvalError,
    Optional,
    Uint,
    cel_compare,
    cel_equal,
    format_value,
    is_numeric,
    map_lookup,
)

Env = dict[str, Any]
Plan = Callable[[Env], Any]
Q = "kubernetes.Quantity"
S = "kubernetes.Semver"
DEVICE = "kubernetes.DRADevice"
DEVICE_FIELDS: dict[str, StaticType] = {
    "driver": "string",
    "attributes": ("map", "string", ("map", "string", "any")),
    "capacity": ("map", "string", ("map", "string", Q)),
    "allowMultipleAllocations": "bool",
}
OPT_PREFIX = "__dra_opt__"  # ``x.?f`` is rewritten to ``x.__dra_opt__f`` before parsing
MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
COST_LIMIT = 1_000_000
UNKNOWN_SIZE = 64  # an attribute value's declared maximum size (string length or list length)


class CompileError(Exception):
    """A compile-time error (parse, check or result type), message shaped like cel-go's issues."""


class RuntimeBudget:
    """Counts evaluation cost against the scheduler's per-evaluation limit."""

    __slots__ = ("cost", "limit")

    def __init__(self, limit: int) -> None:
        self.cost, self.limit = 0, limit

    def charge(self, n: int = 1) -> None:
        """Add ``n`` and fail once over the limit."""
        self.cost += n
        if self.cost > self.limit:
            raise EvalError("operation cancelled: actual cost limit exceeded")


_parser_env: celpy.Environment | None = None


def _parser() -> celpy.Environment:
    """cel-python's environment, built on first use (it builds the grammar and raises the recursion limit)."""
    global _parser_env  # noqa: PLW0603
    if _parser_env is None:
        _parser_env = celpy.Environment()
    return _parser_env


_OPT_SELECT = re.compile(r"""("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|\.\?([_a-zA-Z])""")


def _rewrite_optional_select(text: str) -> str:
    def sub(m: re.Match[str]) -> str:
        return m.group(1) if m.group(1) is not None else "." + OPT_PREFIX + m.group(2)

    return _OPT_SELECT.sub(sub, text)


def fmt_type(t: StaticType) -> str:
    """cel-go's spelling of a type in messages."""
    if isinstance(t, tuple):
        if t[0] == "list":
            return f"list({fmt_type(t[1])})"
        if t[0] == "map":
            return f"map({fmt_type(t[1])}, {fmt_type(t[2])})"
        if t[0] == "optional_type":
            return f"optional_type({fmt_type(t[1])})"
    return str(t)


def _is_dyn(t: StaticType) -> bool:
    return t in ("dyn", "any")


def _kind(t: StaticType) -> str:
    return t[0] if isinstance(t, tuple) else t


def _static_fits(param: str, t: StaticType) -> bool:
    if param == "dyn" or _is_dyn(t):
        return True
    return _kind(t) == param


def _join(a: StaticType, b: StaticType) -> StaticType:
    if a == b:
        return a
    if _is_dyn(a) or _is_dyn(b):
        return "dyn"
    if isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0]:
        return (a[0], *(_join(x, y) for x, y in zip(a[1:], b[1:], strict=True)))
    return "dyn"


def _assignable(a: StaticType, b: StaticType) -> bool:
    if _is_dyn(a) or _is_dyn(b) or a == b:
        return True
    if "null_type" in (a, b):
        other = b if a == "null_type" else a
        return _kind(other) in ("optional_type", "map", "list", "bytes", "string") and False
    if isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0]:
        return all(_assignable(x, y) for x, y in zip(a[1:], b[1:], strict=True))
    return False


class _Checker:
    """One compile: type-checks and plans the tree; collects the estimated cost."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.scopes: list[dict[str, StaticType]] = []

    # -- errors -------------------------------------------------------------------------------
    def err(self, tree: Any, msg: str) -> CompileError:
        line, col = 1, 1
        meta = getattr(tree, "meta", None)
        if meta is not None and not getattr(meta, "empty", True):
            line, col = meta.line, meta.column
        elif isinstance(tree, lark.Token) and tree.line is not None:
            line, col = tree.line, tree.column or 1
        src = self.text.splitlines()[line - 1] if self.text.splitlines() else self.text
        return CompileError(f"ERROR: <input>:{line}:{col}: {msg}\n | {src}\n | {'.' * (col - 1)}^")

    # -- entry ----------------------------------------------------------------------------------
    def expr(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        return self.visit(t)

    def visit(self, t: Any) -> tuple[StaticType, Plan, float]:
        name = t.data if isinstance(t, lark.Tree) else None
        method = getattr(self, f"v_{name}", None)
        if method is None:
            raise self.err(t, f"unsupported syntax: {name}")
        result: tuple[StaticType, Plan, float] = method(t)
        return result

    def _pass(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        return self.visit(t.children[0])

    v_member = _pass
    v_primary = _pass

    def v_paren_expr(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        return self.visit(t.children[0])

    def v_expr(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        if len(t.children) == 1:
            return self.visit(t.children[0])
        ct, cp, cc = self.visit(t.children[0])
        at, ap, ac = self.visit(t.children[1])
        bt, bp, bc = self.visit(t.children[2])
        if not _static_fits("bool", ct):
            raise self.err(
                t, f"found no matching overload for '_?_:_' applied to '({fmt_type(ct)}, {fmt_type(at)}, {fmt_type(bt)})'"
            )
        if not _assignable(at, bt):
            raise self.err(
                t, f"found no matching overload for '_?_:_' applied to '({fmt_type(ct)}, {fmt_type(at)}, {fmt_type(bt)})'"
            )

        def cond(env: Env) -> Any:
            c = cp(env)
            if type(c) is not bool:
                raise EvalError("no such overload")
            return ap(env) if c else bp(env)

        return _join(at, bt), cond, cc + max(ac, bc)

    def _logic(self, t: lark.Tree[Any], op: str) -> tuple[StaticType, Plan, float]:
        if len(t.children) == 1:
            return self.visit(t.children[0])
        lt, lp, lc = self.visit(t.children[0])
        rt, rp, rc = self.visit(t.children[1])
        for x in (lt, rt):
            if not _static_fits("bool", x):
                raise self.err(t, f"found no matching overload for '{op}' applied to '({fmt_type(lt)}, {fmt_type(rt)})'")
        short = op == "_||_"

        def logic(env: Env) -> Any:
            left: Any
            try:
                left = lp(env)
                if type(left) is not bool:
                    raise EvalError("no such overload")  # noqa: TRY301
                if left is short:
                    return short
            except EvalError as e:
                left = e
            try:
                right = rp(env)
                if type(right) is not bool:
                    raise EvalError("no such overload")  # noqa: TRY301
                if right is short:
                    return short
            except EvalError as e:
                right = e
            if isinstance(left, EvalError):
                raise left
            if isinstance(right, EvalError):
                raise right
            return not short

        return "bool", logic, lc + rc

    def v_conditionalor(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        return self._logic(t, "_||_")

    def v_conditionaland(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        return self._logic(t, "_&&_")

    # -- relations --------------------------------------------------------------------------------
    _REL: ClassVar[dict[str, str]] = {
        "relation_lt": "_<_",
        "relation_le": "_<=_",
        "relation_gt": "_>_",
        "relation_ge": "_>=_",
        "relation_eq": "_==_",
        "relation_ne": "_!=_",
        "relation_in": "@in",
    }

    def v_relation(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        if len(t.children) == 1:
            return self.visit(t.children[0])
        optree, right = t.children
        op = self._REL[optree.data]
        lt, lp, lc = self.visit(optree.children[0])
        rt, rp, rc = self.visit(right)
        bad = self.err(t, f"found no matching overload for '{op}' applied to '({fmt_type(lt)}, {fmt_type(rt)})'")
        cost = lc + rc + 1
        if op in ("_==_", "_!=_"):
            if not _assignable(lt, rt):
                raise bad
            neg = op == "_!=_"
            return "bool", (lambda env: cel_equal(lp(env), rp(env)) is not neg), cost
        if op == "@in":
            if not (_is_dyn(rt) or _kind(rt) in ("list", "map")):
                raise bad
            if isinstance(rt, tuple) and not _assignable(lt, rt[1]):
                raise bad
            return "bool", (lambda env: _in(lp(env), rp(env))), cost + UNKNOWN_SIZE
        ordered = ("int", "uint", "double")
        ok = (_kind(lt) in ordered and _kind(rt) in ordered) or (lt == rt and lt in ("string", "bytes", "bool"))
        if _is_dyn(lt) or _is_dyn(rt):
            other = rt if _is_dyn(lt) else lt
            ok = _is_dyn(other) or other in (*ordered, "string", "bytes", "bool")
        if not ok:
            raise bad
        test: Callable[[int], bool] = {
            "_<_": lambda c: c == -1,
            "_<=_": lambda c: c in (-1, 0),
            "_>_": lambda c: c == 1,
            "_>=_": lambda c: c in (0, 1),
        }[op]
        return "bool", (lambda env: test(cel_compare(lp(env), rp(env)))), cost

    # -- arithmetic -----------------------------------------------------------------------------
    def v_addition(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        return self._arith(t, {"addition_add": "_+_", "addition_sub": "_-_"})

    def v_multiplication(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        return self._arith(t, {"multiplication_mul": "_*_", "multiplication_div": "_/_", "multiplication_mod": "_%_"})

    def _arith(self, t: lark.Tree[Any], ops: dict[str, str]) -> tuple[StaticType, Plan, float]:
        if len(t.children) == 1:
            return self.visit(t.children[0])
        optree, right = t.children
        op = ops[optree.data]
        lt, lp, lc = self.visit(optree.children[0])
        rt, rp, rc = self.visit(right)
        allowed = {
            "_+_": ("int", "uint", "double", "string", "bytes", "list"),
            "_-_": ("int", "uint", "double"),
            "_*_": ("int", "uint", "double"),
            "_/_": ("int", "uint", "double"),
            "_%_": ("int", "uint"),
        }[op]
        if _is_dyn(lt) and _is_dyn(rt):
            result: StaticType = "dyn"
        elif _is_dyn(lt) or _is_dyn(rt):
            known = rt if _is_dyn(lt) else lt
            if _kind(known) not in allowed:
                raise self.err(t, f"found no matching overload for '{op}' applied to '({fmt_type(lt)}, {fmt_type(rt)})'")
            result = known
        else:
            if _kind(lt) not in allowed or _kind(lt) != _kind(rt) or not _assignable(lt, rt):
                raise self.err(t, f"found no matching overload for '{op}' applied to '({fmt_type(lt)}, {fmt_type(rt)})'")
            result = _join(lt, rt)
        fn = _ARITH[op]
        return result, (lambda env: fn(lp(env), rp(env))), lc + rc + 1

    def v_unary(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        if len(t.children) == 1:
            return self.visit(t.children[0])
        op, operand = t.children
        ot, opl, oc = self.visit(operand)
        if op.data == "unary_not":
            if not _static_fits("bool", ot):
                raise self.err(t, f"found no matching overload for '!_' applied to '({fmt_type(ot)})'")

            def not_(env: Env) -> Any:
                v = opl(env)
                if type(v) is not bool:
                    raise EvalError("no such overload")
                return not v

            return "bool", not_, oc + 1
        if not (_is_dyn(ot) or ot in ("int", "double")):
            raise self.err(t, f"found no matching overload for '-_' applied to '({fmt_type(ot)})'")
        return ot, (lambda env: _negate(opl(env))), oc + 1

    # -- members --------------------------------------------------------------------------------
    def v_member_dot(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        operand, field_tok = t.children
        field = str(field_tok)
        optional = field.startswith(OPT_PREFIX)
        if optional:
            field = field[len(OPT_PREFIX) :]
        ns = self._namespace_ident(operand)
        if ns is not None and not optional:
            raise self.err(t, f"undeclared reference to '{ns}.{field}' (in container '')")
        ot, op, oc = self.visit(operand)
        rtype = self._select_type(t, ot, field, optional)
        if optional:
            return rtype, (lambda env: _opt_select(op(env), field)), oc + 1
        return rtype, (lambda env: _select(op(env), field)), oc + 1

    def _select_type(self, t: Any, ot: StaticType, field: str, optional: bool) -> StaticType:
        wrap_opt = optional
        if _kind(ot) == "optional_type":
            ot = ot[1] if isinstance(ot, tuple) else "dyn"
            wrap_opt = True
        if ot == DEVICE:
            if field not in DEVICE_FIELDS:
                raise self.err(t, f"undefined field '{field}'")
            ft = DEVICE_FIELDS[field]
        elif _is_dyn(ot):
            ft = "dyn"
        elif isinstance(ot, tuple) and ot[0] == "map":
            ft = ot[2]
        else:
            raise self.err(t, f"type '{fmt_type(ot)}' does not support field selection")
        return ("optional_type", ft) if wrap_opt else ft

    def v_member_index(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        operand, key = t.children
        ot, op, oc = self.visit(operand)
        kt, kp, kc = self.visit(key)
        base = ot
        opt = _kind(ot) == "optional_type"
        if opt:
            base = ot[1] if isinstance(ot, tuple) else "dyn"
        if _is_dyn(base):
            rt: StaticType = "dyn"
        elif isinstance(base, tuple) and base[0] == "list":
            if not (_is_dyn(kt) or kt in ("int", "uint", "double")):
                raise self.err(t, f"found no matching overload for '_[_]' applied to '({fmt_type(ot)}, {fmt_type(kt)})'")
            rt = base[1]
        elif isinstance(base, tuple) and base[0] == "map":
            if not _assignable(kt, base[1]):
                raise self.err(t, f"found no matching overload for '_[_]' applied to '({fmt_type(ot)}, {fmt_type(kt)})'")
            rt = base[2]
        else:
            raise self.err(t, f"found no matching overload for '_[_]' applied to '({fmt_type(ot)}, {fmt_type(kt)})'")
        if opt:
            return ("optional_type", rt), (lambda env: _opt_index(op(env), kp(env))), oc + kc + 1
        return rt, (lambda env: _index(op(env), kp(env))), oc + kc + 1

    def v_member_object(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        raise self.err(t, "message construction is not supported in the DRA environment")

    def _namespace_ident(self, t: Any) -> str | None:
        """``strings`` in ``strings.quote(...)`` when it is not a variable."""
        node = t
        while isinstance(node, lark.Tree) and node.data in ("member", "primary") and len(node.children) == 1:
            node = node.children[0]
        if isinstance(node, lark.Tree) and node.data == "ident":
            name = str(node.children[0])
            bound = any(name in s for s in self.scopes)
            if (name in NAMESPACES or name == "cel") and not bound:
                return name
        return None

    def v_member_dot_arg(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        operand, name_tok = t.children[0], t.children[1]
        args = list(t.children[2].children) if len(t.children) > 2 else []
        name = str(name_tok)
        ns = self._namespace_ident(operand)
        if ns == "cel" and name == "bind":
            return self._bind(t, args)
        if ns is not None:
            return self._call(t, f"{ns}.{name}", None, args)
        if name in MACROS and len(args) in (2, 3) and (name == "map" or len(args) == 2):
            return self._comprehension(t, name, operand, args)
        return self._call(t, name, operand, args)

    def v_ident_arg(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        name = str(t.children[0])
        args = list(t.children[1].children) if len(t.children) > 1 else []
        if name == "has":
            return self._has(t, args)
        if name == "dyn" and len(args) == 1:
            _, p, c = self.visit(args[0])
            return "dyn", p, c
        return self._call(t, name, None, args)

    def v_dot_ident_arg(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        name = str(t.children[0])
        args = list(t.children[1].children) if len(t.children) > 1 else []
        return self._call(t, name, None, args)

    def v_dot_ident(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        return self._ident(t, str(t.children[0]))

    def v_ident(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        return self._ident(t, str(t.children[0]))

    def _ident(self, t: lark.Tree[Any], name: str) -> tuple[StaticType, Plan, float]:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name], (lambda env: env[name]), 1
        if name == "device":
            return DEVICE, (lambda env: env["device"]), 1
        if name in ("int", "uint", "double", "string", "bool", "bytes", "list", "map", "null_type", "type"):
            from dra_driver.core.cel.values import CelType

            tv = CelType(name)
            return "type", (lambda env: tv), 1
        raise self.err(t, f"undeclared reference to '{name}' (in container '')")

    # -- literals --------------------------------------------------------------------------------
    def v_literal(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        tok = t.children[0]
        if not isinstance(tok, lark.Token):
            raise self.err(t, "unsupported literal")
        kind, text = tok.type, str(tok)
        value: Any
        typ: StaticType
        if kind == "INT_LIT":
            body = text.lstrip("-")
            value = int(body, 16) if body[:2].lower() == "0x" else int(body)
            value = -value if text.startswith("-") else value
            if not INT64_MIN <= value <= INT64_MAX:
                raise self.err(t, f"invalid int literal '{text}'")
            typ = "int"
        elif kind == "UINT_LIT":
            body = text[:-1]
            if body.startswith("-"):
                raise self.err(t, f"invalid uint literal '{text}'")
            v = int(body, 16) if "x" in body.lower() else int(body)
            if v > UINT64_MAX:
                raise self.err(t, f"invalid uint literal '{text}'")
            value, typ = Uint(v), "uint"
        elif kind == "FLOAT_LIT":
            value, typ = float(text), "double"
        elif kind in ("STRING_LIT", "MLSTRING_LIT"):
            value, typ = str(celstr(tok)), "string"
        elif kind == "BYTES_LIT":
            value, typ = bytes(celbytes(tok)), "bytes"
        elif kind == "BOOL_LIT":
            value, typ = text == "true", "bool"
        elif kind == "NULL_LIT":
            value, typ = None, "null_type"
        else:
            raise self.err(t, f"unsupported literal {text}")
        return typ, (lambda env: value), 0

    def v_list_lit(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        elems = [self.visit(e) for e in (t.children[0].children if t.children else [])]
        et: StaticType = elems[0][0] if elems else "dyn"
        for e in elems[1:]:
            et = _join(et, e[0])
        plans = [e[1] for e in elems]
        return ("list", et), (lambda env: [p(env) for p in plans]), sum(e[2] for e in elems) + 1

    def v_map_lit(self, t: lark.Tree[Any]) -> tuple[StaticType, Plan, float]:
        items = t.children[0].children if t.children else []
        pairs = [(self.visit(items[i]), self.visit(items[i + 1])) for i in range(0, len(items), 2)]
        kt: StaticType = pairs[0][0][0] if pairs else "dyn"
        vt: StaticType = pairs[0][1][0] if pairs else "dyn"
        for k, v in pairs[1:]:
            kt, vt = _join(kt, k[0]), _join(vt, v[0])
        for k, _v in pairs:
            if not (_is_dyn(k[0]) or k[0] in ("int", "uint", "string", "bool")):
                raise self.err(t, f"unsupported map key type: {fmt_type(k[0])}")
        kps = [(k[1], v[1]) for k, v in pairs]

        def build(env: Env) -> Any:
            out: dict[Any, Any] = {}
            for kp, vp in kps:
                k = kp(env)
                if type(k) not in (int, Uint, str, bool):
                    raise EvalError("unsupported key type")
                if map_lookup(out, k)[0]:
                    raise EvalError(f"Failed with repeated key: {format_value(k)}")
                out[k] = vp(env)
            return out

        return ("map", kt, vt), build, sum(k[2] + v[2] for k, v in pairs) + 1

    # -- calls ----------------------------------------------------------------------------------
    def _call(self, t: lark.Tree[Any], name: str, target: Any, args: list[Any]) -> tuple[StaticType, Plan, float]:
        overloads = FUNCTIONS.get(name)
        if overloads is None:
            raise self.err(t, f"undeclared reference to '{name}' (in container '')")
        member = target is not None
        checked = [self.visit(a) for a in args]
        tt: tuple[StaticType, Plan, float] | None = self.visit(target) if member else None
        arg_types = ([tt[0]] if tt is not None else []) + [c[0] for c in checked]
        candidates: list[Overload] = [
            ov
            for ov in overloads
            if ov.member == member
            and len(ov.params) == len(arg_types)
            and all(_static_fits(p, a) for p, a in zip(ov.params, arg_types, strict=True))
        ]
        if not candidates:
            if member:
                shown = f"{fmt_type(arg_types[0])}.({', '.join(fmt_type(a) for a in arg_types[1:])})"
            else:
                shown = f"({', '.join(fmt_type(a) for a in arg_types)})"
            raise self.err(t, f"found no matching overload for '{name}' applied to '{shown}'")
        result: StaticType = candidates[0].result
        for ov in candidates[1:]:
            result = _join(result, ov.result)
        if result == "list":
            result = ("list", "dyn")
        result = self._refine(name, arg_types, result)
        plans = ([tt[1]] if tt is not None else []) + [c[1] for c in checked]
        cost = sum(c[2] for c in checked) + (tt[2] if tt else 0) + 1
        if name in (
            "contains",
            "startsWith",
            "endsWith",
            "matches",
            "find",
            "findAll",
            "split",
            "replace",
            "indexOf",
            "lastIndexOf",
            "lowerAscii",
            "upperAscii",
            "trim",
            "join",
            "distinct",
            "sort",
            "sum",
            "min",
            "max",
            "isSorted",
            "sets.contains",
            "sets.equivalent",
            "sets.intersects",
            "flatten",
        ):
            cost += UNKNOWN_SIZE
        if len(candidates) == 1 and all(p != "dyn" for p in candidates[0].params) and not any(_is_dyn(a) for a in arg_types):
            impl = candidates[0].impl
            if len(plans) == 1:
                p0 = plans[0]
                return result, (lambda env: _guard(impl, p0(env))), cost
            if len(plans) == 2:
                p0, p1 = plans
                return result, (lambda env: _guard(impl, p0(env), p1(env))), cost
        ovs = tuple(candidates)
        return result, (lambda env: dispatch(name, ovs, [p(env) for p in plans])), cost

    @staticmethod
    def _refine(name: str, arg_types: list[StaticType], result: StaticType) -> StaticType:  # noqa: PLR0911
        """Element types for generic list/optional functions."""
        first = arg_types[0] if arg_types else "dyn"
        if name in ("slice", "reverse", "sort", "distinct") and isinstance(first, tuple):
            return first
        if name in ("sum", "min", "max") and isinstance(first, tuple) and first[0] == "list":
            item: StaticType = first[1]
            return item
        if name in ("optional.of", "optional.ofNonZeroValue"):
            return ("optional_type", first)
        if name == "value" and isinstance(first, tuple):
            elem: StaticType = first[1]
            return elem
        if name == "orValue" and isinstance(first, tuple):
            return arg_types[1] if first[1] == "dyn" else _join(first[1], arg_types[1])
        if name == "or" and isinstance(first, tuple):
            return first
        if name == "type":
            return "type"
        return result

    def _has(self, t: lark.Tree[Any], args: list[Any]) -> tuple[StaticType, Plan, float]:
        if len(args) != 1:
            raise self.err(t, "invalid argument to has() macro")
        node = args[0]
        while (
            isinstance(node, lark.Tree)
            and node.data
            in ("expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication", "unary", "member")
            and len(node.children) == 1
        ):
            node = node.children[0]
        if not (isinstance(node, lark.Tree) and node.data == "member_dot"):
            raise self.err(t, "invalid argument to has() macro")
        operand, field_tok = node.children
        field = str(field_tok)
        ot, op, oc = self.visit(operand)
        self._select_type(node, ot, field, False)

        def has(env: Env) -> Any:
            v = op(env)
            if isinstance(v, dict):
                if type(v) is not dict:
                    return field in dict.keys(v)
                return field in v
            raise EvalError("no such overload")

        if ot == DEVICE:
            return "bool", (lambda env: True), oc + 1
        return "bool", has, oc + 1

    def _bind(self, t: lark.Tree[Any], args: list[Any]) -> tuple[StaticType, Plan, float]:
        if len(args) != 3:
            raise self.err(t, "cel.bind() takes three arguments")
        var = _simple_ident(args[0])
        if var is None:
            raise self.err(t, "cel.bind() variable names must be simple identifiers")
        it, ip, ic = self.visit(args[1])
        self.scopes.append({var: it})
        try:
            bt, bp, bc = self.visit(args[2])
        finally:
            self.scopes.pop()

        def bind(env: Env) -> Any:
            inner = dict(env)
            inner[var] = ip(env)
            return bp(inner)

        return bt, bind, ic + bc + 1

    def _comprehension(self, t: lark.Tree[Any], macro: str, operand: Any, args: list[Any]) -> tuple[StaticType, Plan, float]:
        var = _simple_ident(args[0])
        if var is None:
            raise self.err(t, f"{macro}() variable name must be a simple identifier")
        rt, rp, rc = self.visit(operand)
        if _is_dyn(rt):
            et: StaticType = "dyn"
            size = UNKNOWN_SIZE
        elif isinstance(rt, tuple) and rt[0] in ("list", "map"):
            et = rt[1]
            size = 32 if rt[0] == "map" else UNKNOWN_SIZE
        else:
            raise self.err(
                t, f"expression of type '{fmt_type(rt)}' cannot be range of a comprehension (must be list, map, or dynamic)"
            )
        size = _literal_size(operand, size)
        self.scopes.append({var: et})
        try:
            parts = [self.visit(a) for a in args[1:]]
        finally:
            self.scopes.pop()
        body_cost = sum(p[2] for p in parts) + 1
        cost = rc + size * body_cost
        if macro in ("all", "exists", "exists_one", "filter") and not _static_fits("bool", parts[0][0]):
            raise self.err(t, f"found no matching overload for '_&&_' applied to '(bool, {fmt_type(parts[0][0])})'")
        result: StaticType = "bool"
        if macro == "map":
            result = ("list", parts[-1][0])
        elif macro == "filter":
            result = ("list", et)
        plan = _COMPREHENSIONS[macro](var, rp, [p[1] for p in parts])
        return result, plan, cost


def _simple_ident(t: Any) -> str | None:
    node = t
    while isinstance(node, lark.Tree) and len(node.children) == 1 and node.data not in ("ident", "literal"):
        node = node.children[0]
    if isinstance(node, lark.Tree) and node.data == "ident":
        return str(node.children[0])
    return None


def _literal_size(t: Any, default: int) -> int:
    node = t
    while (
        isinstance(node, lark.Tree)
        and len(node.children) == 1
        and node.data not in ("list_lit", "map_lit", "ident_arg", "member_dot_arg")
    ):
        node = node.children[0]
    if isinstance(node, lark.Tree) and node.data == "list_lit":
        return len(node.children[0].children) if node.children else 0
    if isinstance(node, lark.Tree) and node.data == "member_dot_arg" and str(node.children[1]) == "range":
        arg = node.children[2].children[0] if len(node.children) > 2 else None
        while isinstance(arg, lark.Tree) and len(arg.children) == 1:
            arg = arg.children[0]
        if isinstance(arg, lark.Token) and arg.type == "INT_LIT":
            return max(int(str(arg)), 0)
    return default


# -- runtime helpers -------------------------------------------------------------------------------
def _guard(impl: Callable[..., Any], *args: Any) -> Any:
    return impl(*args)


def _in(v: Any, container: Any) -> bool:
    if type(container) is list:
        for x in container:
            try:
                if cel_equal(x, v):
                    return True
            except EvalError:
                continue
        return False
    if isinstance(container, dict):
        if type(v) not in (int, Uint, str, bool, float):
            raise EvalError("no such overload")
        found, _ = map_lookup(container, v)
        if isinstance(container, dict) and type(container) is not dict and type(v) is str:
            return v in dict.keys(container)
        return found
    raise EvalError("no such overload")


def _select(v: Any, field: str) -> Any:
    if type(v) is Optional:
        if not v.has:
            return v
        return Optional(True, _select(v.value, field))
    if isinstance(v, dict):
        found, r = map_lookup(v, field)
        if not found:
            raise EvalError(f"no such key: {field}")
        return r
    raise EvalError("no such overload")


def _opt_select(v: Any, field: str) -> Any:
    if type(v) is Optional:
        if not v.has:
            return v
        v = v.value
    if isinstance(v, dict):
        if type(v) is not dict:
            return Optional(True, v[field]) if field in dict.keys(v) else Optional(False)
        found, r = map_lookup(v, field)
        return Optional(True, r) if found else Optional(False)
    raise EvalError("no such overload")


def _index(c: Any, k: Any) -> Any:
    if type(c) is Optional:
        if not c.has:
            return c
        return Optional(True, _index(c.value, k))
    if type(c) is list:
        if type(k) is float:
            if not k.is_integer():
                raise EvalError("unsupported index value")
            k = int(k)
        if type(k) not in (int, Uint):
            raise EvalError("no such overload")
        if k < 0 or k >= len(c):
            raise EvalError(f"index '{int(k)}' out of range in list size '{len(c)}'")
        return c[int(k)]
    if isinstance(c, dict):
        found, r = map_lookup(c, k)
        if not found:
            raise EvalError(f"no such key: {format_value(k)}")
        return r
    raise EvalError("no such overload")


def _opt_index(c: Any, k: Any) -> Any:
    if type(c) is Optional and not c.has:
        return c
    inner = c.value if type(c) is Optional else c
    return Optional(True, _index(inner, k))


def _negate(v: Any) -> Any:
    t = type(v)
    if t is int:
        if v == INT64_MIN:
            raise EvalError("integer overflow")
        return -v
    if t is float:
        return -v
    raise EvalError("no such overload")


def _same_numeric(a: Any, b: Any) -> type:
    ta = type(a)
    if ta is not type(b) or not is_numeric(a):
        raise EvalError("no such overload")
    return ta


def _sub(a: Any, b: Any) -> Any:
    t = _same_numeric(a, b)
    if t is int:
        r = a - b
        if not INT64_MIN <= r <= INT64_MAX:
            raise EvalError("integer overflow")
        return r
    if t is Uint:
        r = int(a) - int(b)
        if r < 0:
            raise EvalError("unsigned integer overflow")
        return Uint(r)
    return a - b


def _mul(a: Any, b: Any) -> Any:
    t = _same_numeric(a, b)
    if t is int:
        r = a * b
        if not INT64_MIN <= r <= INT64_MAX:
            raise EvalError("integer overflow")
        return r
    if t is Uint:
        r = int(a) * int(b)
        if r > UINT64_MAX:
            raise EvalError("unsigned integer overflow")
        return Uint(r)
    return a * b


def _div(a: Any, b: Any) -> Any:
    t = _same_numeric(a, b)
    if t is float:
        if b == 0:
            if a == 0 or math.isnan(a):
                return float("nan")
            return float("inf") if (a > 0) == (str(b)[0] != "-") else float("-inf")
        return a / b
    if b == 0:
        raise EvalError("division by zero")
    q = abs(int(a)) // abs(int(b))
    if (a < 0) != (b < 0):
        q = -q
    if t is int and not INT64_MIN <= q <= INT64_MAX:
        raise EvalError("integer overflow")
    return Uint(q) if t is Uint else q


def _mod(a: Any, b: Any) -> Any:
    t = _same_numeric(a, b)
    if t is float:
        raise EvalError("no such overload")
    if b == 0:
        raise EvalError("modulus by zero")
    r = abs(int(a)) % abs(int(b))
    if a < 0:
        r = -r
    return Uint(r) if t is Uint else r


_ARITH: dict[str, Callable[[Any, Any], Any]] = {"_+_": add_values, "_-_": _sub, "_*_": _mul, "_/_": _div, "_%_": _mod}


def _range_items(v: Any) -> list[Any]:
    if type(v) is list:
        return v
    if isinstance(v, dict):
        return list(dict.keys(v))
    raise EvalError("no such overload")


def _comp_all(var: str, rp: Plan, parts: list[Plan]) -> Plan:
    pred = parts[0]

    def run(env: Env) -> Any:
        err: EvalError | None = None
        inner = dict(env)
        budget = env["@budget"]
        for x in _range_items(rp(env)):
            budget.charge()
            inner[var] = x
            try:
                r = pred(inner)
                if type(r) is not bool:
                    raise EvalError("no such overload")  # noqa: TRY301
                if not r:
                    return False
            except EvalError as e:
                err = err or e
        if err is not None:
            raise err
        return True

    return run


def _comp_exists(var: str, rp: Plan, parts: list[Plan]) -> Plan:
    pred = parts[0]

    def run(env: Env) -> Any:
        err: EvalError | None = None
        inner = dict(env)
        budget = env["@budget"]
        for x in _range_items(rp(env)):
            budget.charge()
            inner[var] = x
            try:
                r = pred(inner)
                if type(r) is not bool:
                    raise EvalError("no such overload")  # noqa: TRY301
                if r:
                    return True
            except EvalError as e:
                err = err or e
        if err is not None:
            raise err
        return False

    return run


def _comp_exists_one(var: str, rp: Plan, parts: list[Plan]) -> Plan:
    pred = parts[0]

    def run(env: Env) -> Any:
        n = 0
        inner = dict(env)
        budget = env["@budget"]
        for x in _range_items(rp(env)):
            budget.charge()
            inner[var] = x
            r = pred(inner)
            if type(r) is not bool:
                raise EvalError("no such overload")
            n += r
        return n == 1

    return run


def _comp_map(var: str, rp: Plan, parts: list[Plan]) -> Plan:
    def run(env: Env) -> Any:
        out = []
        inner = dict(env)
        budget = env["@budget"]
        for x in _range_items(rp(env)):
            budget.charge()
            inner[var] = x
            if len(parts) == 2:
                keep = parts[0](inner)
                if type(keep) is not bool:
                    raise EvalError("no such overload")
                if not keep:
                    continue
            out.append(parts[-1](inner))
        return out

    return run


def _comp_filter(var: str, rp: Plan, parts: list[Plan]) -> Plan:
    pred = parts[0]

    def run(env: Env) -> Any:
        out = []
        inner = dict(env)
        budget = env["@budget"]
        for x in _range_items(rp(env)):
            budget.charge()
            inner[var] = x
            r = pred(inner)
            if type(r) is not bool:
                raise EvalError("no such overload")
            if r:
                out.append(x)
        return out

    return run


_COMPREHENSIONS: dict[str, Callable[[str, Plan, list[Plan]], Plan]] = {
    "all": _comp_all,
    "exists": _comp_exists,
    "exists_one": _comp_exists_one,
    "map": _comp_map,
    "filter": _comp_filter,
}


def compile_expression(text: str) -> tuple[StaticType, Plan, float]:
    """Parse, check and plan ``text``: (result type, plan, estimated cost). Raises :class:`CompileError`."""
    rewritten = _rewrite_optional_select(text)
    try:
        tree = _parser().compile(rewritten)
    except CELParseError as err:
        line = getattr(err, "line", None) or 1
        col = getattr(err, "column", None) or 1
        first = str(err.args[0]).splitlines()[0] if err.args else "syntax error"
        raise CompileError(f"ERROR: <input>:{line}:{col}: Syntax error: {first}") from None
    except RecursionError:
        raise CompileError("ERROR: <input>:1:1: expression recursion limit exceeded") from None
    return _Checker(text).expr(tree)
