"""CEL source to an expression tree shaped as cel-go's parser shapes it.

Called by the checker (``checker.py``). cel-python's Lark grammar does the parsing; this module
turns its parse tree into :class:`Expr` nodes the way cel-go's parser does: every node has the
source offset cel-go reports errors at (the operator of a binary expression, the ``(`` of a call,
the ``.`` of a selection, the ``[`` of an index or list, the ``?`` of a conditional), chains of
``&&``/``||`` become balanced trees, ``!!x`` and ``--x`` collapse to ``x``, and the macros
(``has``, ``all``, ``exists``, ``exists_one``, ``map``, ``filter``, ``cel.bind``) expand to the same
comprehensions. ``.?f`` and ``[?k]`` (optional selection, absent from cel-python's grammar) are
blanked before parsing without moving any offset. Macro misuse is a :class:`SyntaxIssue`, as in
cel-go, where it is a parse error.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import lark

from dra_driver.core.cel.values import Uint

ACCU = "@result"
UNUSED_ITER = "#unused"


@dataclass(eq=False, slots=True)
class Expr:
    """A node: a unique id and the source offset cel-go reports it at."""

    id: int
    offset: int


@dataclass(eq=False, slots=True)
class Literal(Expr):
    """A constant: bool, int, :class:`Uint`, float, str, bytes or None (null)."""

    value: Any


@dataclass(eq=False, slots=True)
class Ident(Expr):
    """A name."""

    name: str


@dataclass(eq=False, slots=True)
class Select(Expr):
    """``operand.field``, or ``has(operand.field)`` when ``test_only``."""

    operand: Expr
    field: str
    test_only: bool = False


@dataclass(eq=False, slots=True)
class Call(Expr):
    """A function or operator call; ``target`` is the receiver of ``target.f(...)``."""

    function: str
    target: Expr | None
    args: list[Expr]


@dataclass(eq=False, slots=True)
class CreateList(Expr):
    """``[a, b]``."""

    elements: list[Expr]


@dataclass(eq=False, slots=True)
class MapEntry:
    """One ``key: value`` of a map literal (its id and offset are the ``:``)."""

    id: int
    offset: int
    key: Expr
    value: Expr


@dataclass(eq=False, slots=True)
class CreateMap(Expr):
    """``{k: v}``."""

    entries: list[MapEntry]


@dataclass(eq=False, slots=True)
class Comprehension(Expr):
    """A fold, as the macros expand to; ``iter_var2`` is set by the two-variable macros."""

    iter_var: str
    iter_range: Expr
    accu_var: str
    accu_init: Expr
    loop_condition: Expr
    loop_step: Expr
    result: Expr
    iter_var2: str = ""


@dataclass(slots=True)
class Issue:
    """One compile error at a source offset."""

    offset: int
    message: str


class SyntaxIssue(Exception):
    """Parse-time errors (syntax, macro misuse)."""

    def __init__(self, issues: list[Issue]) -> None:
        super().__init__(issues[0].message if issues else "syntax error")
        self.issues = issues


@dataclass(slots=True)
class Source:
    """The expression text with line starts, for cel-go's ``ERROR: <input>:L:C:`` rendering."""

    text: str
    line_starts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.line_starts = [0] + [i + 1 for i, c in enumerate(self.text) if c == "\n"]

    def location(self, offset: int) -> tuple[int, int]:
        """(line, 0-based column) of an offset (code points, as cel-go counts runes)."""
        line = 0
        for i, start in enumerate(self.line_starts):
            if start <= offset:
                line = i
            else:
                break
        return line + 1, offset - self.line_starts[line]

    def render(self, issues: list[Issue]) -> str:
        """cel-go's ``Issues.String()``: errors sorted by location, each with its snippet and caret."""
        located = sorted(((self.location(i.offset), n, i) for n, i in enumerate(issues)), key=lambda x: (x[0], x[1]))
        lines = self.text.split("\n")
        out = []
        for (line, col), _, issue in located[:100]:
            msg = f"ERROR: <input>:{line}:{col + 1}: {issue.message}"
            snippet = lines[line - 1] if line - 1 < len(lines) else ""
            if len(snippet.encode("utf-8")) <= 16384:
                snippet = snippet.replace("\t", " ")
                ind = "".join("\uff0e" if len(c.encode("utf-8")) > 1 else "." for c in snippet[:col])
                at = snippet[col : col + 1]
                ind += "\uff3e" if at and len(at.encode("utf-8")) > 1 else "^"
                msg += "\n | " + snippet + "\n | " + ind
            out.append(msg)
        if len(issues) > 100:
            out.append(f"{len(issues) - 100} more errors were truncated")
        return "\n".join(out)


# -- optional syntax, blanked before parsing ------------------------------------------------------
_OPTIONAL = re.compile(r"""("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|//[^\n]*)|(\.\?)(?=\s*[_a-zA-Z])|(\[\?)""")


def blank_optional_syntax(text: str) -> tuple[str, set[int], set[int]]:
    """Replace the ``?`` of ``.?`` and ``[?`` by a space; return the offsets of those ``.`` and ``[``."""
    selects: set[int] = set()
    indexes: set[int] = set()
    chars = list(text)
    for m in _OPTIONAL.finditer(text):
        if m.group(2):
            selects.add(m.start(2))
            chars[m.start(2) + 1] = " "
        elif m.group(3):
            indexes.add(m.start(3))
            chars[m.start(3) + 1] = " "
    return "".join(chars), selects, indexes


_WS = " \t\n\f\r"
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1


class Builder:
    """Converts one Lark tree; collects parse issues."""

    def __init__(self, text: str, selects: set[int], indexes: set[int]) -> None:
        self.text = text
        self.selects = selects
        self.indexes = indexes
        self.next_id = 1
        self.issues: list[Issue] = []

    # -- helpers -----------------------------------------------------------------------------------
    def _nid(self) -> int:
        i = self.next_id
        self.next_id += 1
        return i

    def token_after(self, pos: int, token: str) -> int:
        """Offset of ``token`` at or after ``pos``, skipping whitespace and comments."""
        t = self.text
        while pos < len(t):
            if t[pos] in _WS:
                pos += 1
            elif t.startswith("//", pos):
                nl = t.find("\n", pos)
                pos = len(t) if nl < 0 else nl + 1
            else:
                break
        if not t.startswith(token, pos):  # defensive: the grammar put it there
            return pos
        return pos

    def _error(self, offset: int, message: str) -> Expr:
        self.issues.append(Issue(offset, message))
        return Literal(self._nid(), offset, None)

    @staticmethod
    def _start(t: Any) -> int:
        if isinstance(t, lark.Token):
            return int(t.start_pos or 0)
        return int(t.meta.start_pos)

    @staticmethod
    def _end(t: Any) -> int:
        if isinstance(t, lark.Token):
            return int(t.end_pos or 0)
        return int(t.meta.end_pos)

    # -- dispatch --------------------------------------------------------------------------------
    def _build(self, t: Any) -> Expr:
        method: Callable[[lark.Tree[Any]], Expr] | None = getattr(self, f"_b_{t.data}", None)
        if method is None:
            return self._error(self._start(t), f"unsupported syntax: {t.data}")
        return method(t)

    def _b_expr(self, t: lark.Tree[Any]) -> Expr:
        if len(t.children) == 1:
            return self._build(t.children[0])
        cond_t, then_t, else_t = t.children
        cond = self._build(cond_t)
        q = self.token_after(self._end(cond_t), "?")
        then = self._build(then_t)
        other = self._build(else_t)
        return Call(self._nid(), q, "_?_:_", None, [cond, then, other])

    def _logic(self, t: lark.Tree[Any], op: str, fn: str) -> Expr:
        # Flatten the left-recursive chain, then balance it as cel-go's parser does.
        terms_t: list[Any] = []
        node = t
        while len(node.children) == 2:
            terms_t.append(node.children[1])
            node = node.children[0]
        terms_t.append(node.children[0])
        terms_t.reverse()
        terms = [self._build(x) for x in terms_t]
        if len(terms) == 1:
            return terms[0]
        ops = [self.token_after(self._end(x), op) for x in terms_t[:-1]]

        def balanced(lo: int, hi: int) -> Expr:
            mid = (lo + hi + 1) // 2
            left = terms[mid] if mid == lo else balanced(lo, mid - 1)
            right = terms[mid + 1] if mid == hi else balanced(mid + 1, hi)
            return Call(self._nid(), ops[mid], fn, None, [left, right])

        return balanced(0, len(ops) - 1)

    def _b_conditionalor(self, t: lark.Tree[Any]) -> Expr:
        return self._logic(t, "||", "_||_")

    def _b_conditionaland(self, t: lark.Tree[Any]) -> Expr:
        return self._logic(t, "&&", "_&&_")

    _BINARY: ClassVar[dict[str, tuple[str, str]]] = {
        "relation_lt": ("<", "_<_"),
        "relation_le": ("<=", "_<=_"),
        "relation_gt": (">", "_>_"),
        "relation_ge": (">=", "_>=_"),
        "relation_eq": ("==", "_==_"),
        "relation_ne": ("!=", "_!=_"),
        "relation_in": ("in", "@in"),
        "addition_add": ("+", "_+_"),
        "addition_sub": ("-", "_-_"),
        "multiplication_mul": ("*", "_*_"),
        "multiplication_div": ("/", "_/_"),
        "multiplication_mod": ("%", "_%_"),
    }

    def _binary(self, t: lark.Tree[Any]) -> Expr:
        if len(t.children) == 1:
            return self._build(t.children[0])
        op_t, right_t = t.children
        token, fn = self._BINARY[op_t.data]
        left = self._build(op_t.children[0])
        at = self._end(op_t) - len(token)
        right = self._build(right_t)
        return Call(self._nid(), at, fn, None, [left, right])

    _b_relation = _binary
    _b_addition = _binary
    _b_multiplication = _binary

    def _b_unary(self, t: lark.Tree[Any]) -> Expr:
        if len(t.children) == 1:
            return self._build(t.children[0])
        kind = t.children[0].data
        count = 0
        node: Any = t
        while isinstance(node, lark.Tree) and node.data == "unary" and len(node.children) == 2 and node.children[0].data == kind:
            count += 1
            node = node.children[1]
        operand = self._build(node)
        if count % 2 == 0:
            return operand
        fn = "!_" if kind == "unary_not" else "-_"
        return Call(self._nid(), self._start(t), fn, None, [operand])

    def _b_member(self, t: lark.Tree[Any]) -> Expr:
        return self._build(t.children[0])

    def _b_primary(self, t: lark.Tree[Any]) -> Expr:
        return self._build(t.children[0])

    def _b_paren_expr(self, t: lark.Tree[Any]) -> Expr:
        return self._build(t.children[0])

    def _b_member_dot(self, t: lark.Tree[Any]) -> Expr:
        operand_t, ident = t.children
        operand = self._build(operand_t)
        dot = self.token_after(self._end(operand_t), ".")
        if dot in self.selects:
            name = Literal(self._nid(), self._start(ident), str(ident))
            return Call(self._nid(), dot, "_?._", None, [operand, name])
        return Select(self._nid(), dot, operand, str(ident))

    def _args(self, t: Any) -> list[Expr]:
        if t is None:
            return []
        return [self._build(c) for c in t.children]

    def _b_member_dot_arg(self, t: lark.Tree[Any]) -> Expr:
        operand_t, ident = t.children[0], t.children[1]
        target = self._build(operand_t)
        open_paren = self.token_after(self._end(ident), "(")
        args = self._args(t.children[2] if len(t.children) > 2 else None)
        return self._call(open_paren, str(ident), target, args)

    def _b_member_index(self, t: lark.Tree[Any]) -> Expr:
        operand_t, key_t = t.children
        operand = self._build(operand_t)
        bracket = self.token_after(self._end(operand_t), "[")
        key = self._build(key_t)
        fn = "_[?_]" if bracket in self.indexes else "_[_]"
        return Call(self._nid(), bracket, fn, None, [operand, key])

    def _b_member_object(self, t: lark.Tree[Any]) -> Expr:
        return self._error(self._start(t), "message construction is not supported by the DRA environment")

    def _b_ident_arg(self, t: lark.Tree[Any]) -> Expr:
        ident = t.children[0]
        open_paren = self.token_after(self._end(ident), "(")
        args = self._args(t.children[1] if len(t.children) > 1 else None)
        return self._call(open_paren, str(ident), None, args)

    def _b_dot_ident_arg(self, t: lark.Tree[Any]) -> Expr:
        return self._b_ident_arg(t)

    def _b_ident(self, t: lark.Tree[Any]) -> Expr:
        tok = t.children[0]
        return Ident(self._nid(), self._start(tok), str(tok))

    def _b_dot_ident(self, t: lark.Tree[Any]) -> Expr:
        return self._b_ident(t)

    def _b_list_lit(self, t: lark.Tree[Any]) -> Expr:
        elems = self._args(t.children[0] if t.children else None)
        return CreateList(self._nid(), self._start(t), elems)

    def _b_map_lit(self, t: lark.Tree[Any]) -> Expr:
        at = self._start(t)
        items = list(t.children[0].children) if t.children else []
        entries = []
        for i in range(0, len(items), 2):
            key = self._build(items[i])
            colon = self.token_after(self._end(items[i]), ":")
            value = self._build(items[i + 1])
            entries.append(MapEntry(self._nid(), colon, key, value))
        return CreateMap(self._nid(), at, entries)

    def _b_literal(self, t: lark.Tree[Any]) -> Expr:
        from celpy.evaluation import celbytes, celstr

        tok = t.children[0]
        if not isinstance(tok, lark.Token):
            return self._error(self._start(t), "unsupported literal")
        kind, text, at = tok.type, str(tok), self._start(tok)
        value: Any
        if kind == "INT_LIT":
            body = text.lstrip("-")
            v = int(body, 16) if body[:2].lower() == "0x" else int(body)
            v = -v if text.startswith("-") else v
            if not _INT64_MIN <= v <= _INT64_MAX:
                return self._error(at, f"invalid int literal '{text}'")
            value = v
        elif kind == "UINT_LIT":
            body = text[:-1]
            if body.startswith("-"):
                return self._error(at, f"invalid uint literal '{text}'")
            u = int(body, 16) if body[:2].lower() == "0x" else int(body)
            if u > _UINT64_MAX:
                return self._error(at, f"invalid uint literal '{text}'")
            value = Uint(u)
        elif kind == "FLOAT_LIT":
            value = float(text)
        elif kind in ("STRING_LIT", "MLSTRING_LIT"):
            value = str(celstr(tok))
        elif kind == "BYTES_LIT":
            value = bytes(celbytes(tok))
        elif kind == "BOOL_LIT":
            value = text == "true"
        elif kind == "NULL_LIT":
            value = None
        else:
            return self._error(at, f"unsupported literal {text}")
        return Literal(self._nid(), at, value)

    # -- calls and macros ------------------------------------------------------------------------
    def _call(self, at: int, name: str, target: Expr | None, args: list[Expr]) -> Expr:
        expanded = self._macro(at, name, target, args)
        if expanded is not None:
            return expanded
        return Call(self._nid(), at, name, target, args)

    def _macro(self, at: int, name: str, target: Expr | None, args: list[Expr]) -> Expr | None:  # noqa: PLR0911 - one branch per CEL macro
        n = len(args)
        if target is None:
            if name == "has" and n == 1:
                arg = args[0]
                if isinstance(arg, Select) and not arg.test_only:
                    return Select(self._nid(), at, arg.operand, arg.field, test_only=True)
                return self._error(arg.offset, "invalid argument to has() macro")
            return None
        if name in ("all", "exists", "exists_one") and n == 2:
            return self._quantifier(at, name, target, args)
        if name == "map" and n in (2, 3):
            return self._map_macro(at, target, args)
        if name == "filter" and n == 2:
            return self._filter_macro(at, target, args)
        if name == "bind" and n == 3 and isinstance(target, Ident) and target.name == "cel":
            var = args[0]
            if not isinstance(var, Ident):
                return self._error(var.offset, "cel.bind() variable names must be simple identifiers")
            return Comprehension(
                self._nid(),
                at,
                UNUSED_ITER,
                CreateList(self._nid(), at, []),
                var.name,
                args[1],
                Literal(self._nid(), at, False),
                Ident(self._nid(), at, var.name),
                args[2],
            )
        if name in ("all", "exists", "existsOne", "exists_one") and n == 3:
            return self._quantifier2(at, name, target, args)
        if name in ("transformList", "transformMap", "transformMapEntry") and n in (3, 4):
            return self._transform2(at, name, target, args)
        if name in ("optMap", "optFlatMap", "sortBy") and n == 2:
            return self._error(at, f"the {name}() macro is not supported by dra-gpu's CEL environment")
        return None

    def _iter_vars(self, a0: Expr, a1: Expr) -> tuple[str, str] | Expr:
        if not isinstance(a0, Ident):
            return self._error(a0.offset, "argument must be a simple name")
        if not isinstance(a1, Ident):
            return self._error(a1.offset, "argument must be a simple name")
        if a0.name == a1.name:
            return self._error(a1.offset, f"duplicate variable name: {a0.name}")
        if a0.name in (ACCU, "__result__"):
            return self._error(a0.offset, "iteration variable overwrites accumulator variable")
        if a1.name in (ACCU, "__result__"):
            return self._error(a1.offset, "iteration variable overwrites accumulator variable")
        return a0.name, a1.name

    def _quantifier2(self, at: int, name: str, target: Expr, args: list[Expr]) -> Expr:
        names = self._iter_vars(args[0], args[1])
        if isinstance(names, Expr):
            return names
        one = self._quantifier(
            at, {"existsOne": "exists_one"}.get(name, name), target, [Ident(self._nid(), at, names[0]), args[2]]
        )
        if isinstance(one, Comprehension):
            one.iter_var2 = names[1]
        return one

    def _transform2(self, at: int, name: str, target: Expr, args: list[Expr]) -> Expr:
        names = self._iter_vars(args[0], args[1])
        if isinstance(names, Expr):
            return names
        fn = args[-1]
        init: Expr
        step: Expr
        if name == "transformList":
            init = CreateList(self._nid(), at, [])
            step = Call(self._nid(), at, "_+_", None, [self._accu(at), CreateList(self._nid(), at, [fn])])
        else:
            init = CreateMap(self._nid(), at, [])
            insert_args = (
                [self._accu(at), Ident(self._nid(), at, names[0]), fn] if name == "transformMap" else [self._accu(at), fn]
            )
            step = Call(self._nid(), at, "cel.@mapInsert", None, insert_args)
        if len(args) == 4:
            step = Call(self._nid(), at, "_?_:_", None, [args[2], step, self._accu(at)])
        return Comprehension(
            self._nid(), at, names[0], target, ACCU, init, Literal(self._nid(), at, True), step, self._accu(at), names[1]
        )

    def _iter_var(self, arg: Expr, message: str) -> str | Expr:
        if not isinstance(arg, Ident):
            return self._error(arg.offset, message)
        if arg.name in (ACCU, "__result__"):
            return self._error(arg.offset, "iteration variable overwrites accumulator variable")
        return arg.name

    def _accu(self, at: int) -> Ident:
        return Ident(self._nid(), at, ACCU)

    def _quantifier(self, at: int, name: str, target: Expr, args: list[Expr]) -> Expr:
        var = self._iter_var(args[0], "argument must be a simple name")
        if isinstance(var, Expr):
            return var
        pred = args[1]
        init: Expr
        cond: Expr
        step: Expr
        result: Expr
        if name == "all":
            init = Literal(self._nid(), at, True)
            cond = Call(self._nid(), at, "@not_strictly_false", None, [self._accu(at)])
            step = Call(self._nid(), at, "_&&_", None, [self._accu(at), pred])
            result = self._accu(at)
        elif name == "exists":
            init = Literal(self._nid(), at, False)
            cond = Call(self._nid(), at, "@not_strictly_false", None, [Call(self._nid(), at, "!_", None, [self._accu(at)])])
            step = Call(self._nid(), at, "_||_", None, [self._accu(at), pred])
            result = self._accu(at)
        else:
            init = Literal(self._nid(), at, 0)
            cond = Literal(self._nid(), at, True)
            plus = Call(self._nid(), at, "_+_", None, [self._accu(at), Literal(self._nid(), at, 1)])
            step = Call(self._nid(), at, "_?_:_", None, [pred, plus, self._accu(at)])
            result = Call(self._nid(), at, "_==_", None, [self._accu(at), Literal(self._nid(), at, 1)])
        return Comprehension(self._nid(), at, var, target, ACCU, init, cond, step, result)

    def _map_macro(self, at: int, target: Expr, args: list[Expr]) -> Expr:
        var = self._iter_var(args[0], "argument is not an identifier")
        if isinstance(var, Expr):
            return var
        fn = args[-1]
        step: Expr = Call(self._nid(), at, "_+_", None, [self._accu(at), CreateList(self._nid(), at, [fn])])
        if len(args) == 3:
            step = Call(self._nid(), at, "_?_:_", None, [args[1], step, self._accu(at)])
        return Comprehension(
            self._nid(),
            at,
            var,
            target,
            ACCU,
            CreateList(self._nid(), at, []),
            Literal(self._nid(), at, True),
            step,
            self._accu(at),
        )

    def _filter_macro(self, at: int, target: Expr, args: list[Expr]) -> Expr:
        var = self._iter_var(args[0], "argument is not an identifier")
        if isinstance(var, Expr):
            return var
        item = Ident(self._nid(), args[0].offset, var)
        step: Expr = Call(self._nid(), at, "_+_", None, [self._accu(at), CreateList(self._nid(), at, [item])])
        step = Call(self._nid(), at, "_?_:_", None, [args[1], step, self._accu(at)])
        return Comprehension(
            self._nid(),
            at,
            var,
            target,
            ACCU,
            CreateList(self._nid(), at, []),
            Literal(self._nid(), at, True),
            step,
            self._accu(at),
        )


def to_ast(tree: lark.Tree[Any], blanked: str, selects: set[int], indexes: set[int]) -> Expr:
    """The expression tree of a Lark parse tree; raises :class:`SyntaxIssue` on macro misuse."""
    b = Builder(blanked, selects, indexes)
    e = b._build(tree)
    if b.issues:
        raise SyntaxIssue(b.issues)
    return e


_LOOSE_FLOAT = '/-?/ DIGIT+ "." DIGIT* EXPONENT? | '


def _keyword_literal(tok: lark.Token) -> lark.Token:
    """``true``/``false`` lex as identifiers; retype them in place so they keep their position."""
    if tok.value in ("true", "false"):
        tok.type = "BOOL_LIT"
    return tok


@functools.cache
def _lark() -> lark.Lark:
    """A Lark parser for cel-python's published CEL grammar (built once)."""
    grammar = importlib.resources.files("celpy").joinpath("cel.lark").read_text(encoding="utf-8")
    # cel-python lexes "1." as a float, so "1.size()" fails to parse; in CEL (and cel-go) a float
    # needs a digit after the point, and "1.f()" is a call on the int 1.
    grammar = grammar.replace(_LOOSE_FLOAT, "")
    return lark.Lark(
        grammar,
        parser="lalr",
        start="expr",
        g_regex_flags=re.M,
        lexer_callbacks={"IDENT": _keyword_literal},
        propagate_positions=True,
        maybe_placeholders=False,
        priority="invert",
    )


def parse(text: str) -> Expr:
    """Parse ``text`` into an expression tree; raises :class:`SyntaxIssue`."""
    blanked, selects, indexes = blank_optional_syntax(text)
    try:
        tree = _lark().parse(blanked)
    except lark.exceptions.UnexpectedInput as err:
        pos = getattr(err, "pos_in_stream", None)
        if pos is None:
            pos = len(text)
        context = err.get_context(blanked).splitlines()[0].strip() if blanked else ""
        raise SyntaxIssue([Issue(min(int(pos), len(text)), f"Syntax error: {context or 'unexpected input'}")]) from None
    except lark.exceptions.LarkError as err:
        raise SyntaxIssue([Issue(0, f"Syntax error: {str(err).splitlines()[0]}")]) from None
    return to_ast(tree, blanked, selects, indexes)
