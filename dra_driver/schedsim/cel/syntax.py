"""CEL source to an expression tree shaped as cel-go's parser shapes it.

Called by the compiler (``compiler.py``); the nodes are defined in ``nodes.py`` and the macro
expansion in ``macros.py``. cel-python's Lark grammar does the parsing; this module
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
from typing import Any, ClassVar

import lark

from dra_driver.schedsim.cel import parser_tables
from dra_driver.schedsim.cel.macros import MacroExpander
from dra_driver.schedsim.cel.nodes import (
    Call,
    CreateList,
    CreateMap,
    Expr,
    Ident,
    Issue,
    Literal,
    MapEntry,
    Select,
    SyntaxIssue,
)
from dra_driver.schedsim.cel.values import Uint

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
_MAX_DECIMAL_DIGITS = 20  # more digits than any int64 or uint64 has
_INT64_MAX = (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1


def _int_body(body: str) -> int | None:
    """The value of an int or uint literal's digits; None past any 64-bit value's (``int()`` refuses 4,300)."""
    if body[:2].lower() == "0x":
        return int(body, 16)
    return None if len(body.lstrip("0")) > _MAX_DECIMAL_DIGITS else int(body)


class Builder(MacroExpander):
    """Converts one Lark tree; collects parse issues (macros: see ``macros.py``)."""

    def __init__(self, text: str, selects: set[int], indexes: set[int]) -> None:
        super().__init__()
        self.text = text
        self.selects = selects
        self.indexes = indexes

    # -- helpers -----------------------------------------------------------------------------------
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
            v = _int_body(text.lstrip("-"))
            if v is not None and text.startswith("-"):
                v = -v
            if v is None or not _INT64_MIN <= v <= _INT64_MAX:
                return self._error(at, "invalid int literal")
            value = v
        elif kind == "UINT_LIT":
            body = text[:-1]
            u = None if body.startswith("-") else _int_body(body)
            if u is None or u > _UINT64_MAX:
                return self._error(at, "invalid uint literal")
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


def grammar_and_options() -> tuple[str, dict[str, Any]]:
    """The grammar the parser is built from (cel-python's, amended) and Lark's options for it."""
    grammar = importlib.resources.files("celpy").joinpath("cel.lark").read_text(encoding="utf-8")
    # cel-python lexes "1." as a float, so "1.size()" fails to parse; in CEL (and cel-go) a float
    # needs a digit after the point, and "1.f()" is a call on the int 1.
    grammar = grammar.replace(_LOOSE_FLOAT, "")
    options: dict[str, Any] = {
        "parser": "lalr",
        "start": "expr",
        "g_regex_flags": re.M,
        "lexer_callbacks": {"IDENT": _keyword_literal},
        "propagate_positions": True,
        "maybe_placeholders": False,
        "priority": "invert",
    }
    return grammar, options


PARSER_TABLES = "cel_parser.json"  # beside this module: see parser_tables.py


@functools.cache
def _lark() -> lark.Lark:
    """A Lark parser for cel-python's published CEL grammar (once per process; from the shipped tables when they fit)."""
    grammar, options = grammar_and_options()
    try:
        text: str | None = importlib.resources.files(__package__).joinpath(PARSER_TABLES).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = None
    return parser_tables.load(text, grammar, options) or lark.Lark(grammar, **options)


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
