"""CEL expression trees as cel-go's parser shapes them, compile issues, and cel-go's rendering of issues.

Called by the parser (``syntax.py``, ``macros.py``) which builds the trees, and by the stages that
read them: the checker, the planner, the read analysis (``projection.py``) and the compiler, which
renders :class:`Issue` lists as cel-go prints them (``ERROR: <input>:1:5: ...`` with the source
line and a caret). Every node has a unique id and the source offset cel-go reports it at.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
