"""Hypothesis strategies: RE2 patterns for the CEL selector grammar, and the grammar's drawing helpers.

Used by ``selectors.py``, whose :class:`~tests.differential.selectors.Grammar` extends
:class:`RegexGrammar`: patterns for ``matches``, ``find`` and ``findAll`` that are mostly valid
RE2, sometimes invalid (Go's error text must match), sometimes valid only in Python's ``re``
(look-arounds, back-references), which dra-gpu must refuse as Go does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from testkit.oracle.devices import Draw, T, cel_string

REGEXES = (
    "^NVIDIA",
    "H100$",
    "[0-9]+",
    "^gpu-[0-9]+$",
    "(?i)nvidia",
    "a|b",
    ".*",
    "\\d+",
    "\\w+",
    "\\s",
    "^$",
    "(",
    "[z-a]",
    "a{2,1}",
    "\\pL",
)


class Choices:
    """Drawing helpers over Hypothesis's ``draw`` function."""

    def __init__(self, draw: Draw[Any]) -> None:
        self.draw = draw

    # -- helpers ------------------------------------------------------------------------------
    def pick(self, options: tuple[T, ...] | list[T]) -> T:
        """One of ``options``."""
        choice: T = self.draw(st.sampled_from(options))
        return choice

    def one_of(self, *makers: Callable[[], str]) -> str:
        """The text made by one of ``makers``."""
        maker: Callable[[], str] = self.draw(st.sampled_from(makers))
        return maker()

    def chance(self, n: int) -> bool:
        """True with probability 1/n."""
        return bool(self.draw(st.integers(0, n - 1)) == 0)


class RegexGrammar(Choices):
    """RE2 patterns, as CEL string literals."""

    def regex(self) -> str:
        """A CEL string literal holding an RE2 pattern: mostly valid, sometimes not, sometimes Python-only."""
        if self.chance(3):
            return cel_string(self.pick(REGEXES))
        return cel_string(self.re_alt(2))

    def re_alt(self, depth: int) -> str:
        parts = [self.re_seq(depth) for _ in range(self.draw(st.integers(1, 2)))]
        return "|".join(parts)

    def re_seq(self, depth: int) -> str:
        return "".join(self.re_item(depth) for _ in range(self.draw(st.integers(1, 3))))

    def re_item(self, depth: int) -> str:
        atoms = [
            lambda: self.pick(("a", "b", "X", "0", "9", "-", "_", ".", " ", "ä", "\\.", "\\-", "/")),
            lambda: self.pick(("\\d", "\\D", "\\w", "\\W", "\\s", "\\S", "\\b", "\\B", "\\pL", "\\p{Lu}", "\\PN")),
            lambda: self.pick(("^", "$", "\\A", "\\z")),
            lambda: (
                "[" + self.pick(("a-z", "^0-9", "A-Z0-9_", "[:alpha:]", "[:^digit:]", "\\d.", "-a", "a-", "]x", "\\w\\s")) + "]"
            ),
            lambda: self.pick(("(?i)", "(?s)", "(?m)", "(?U)", "(?i:x)", "(?-i)", "(?i-s:y)", "(?-)", "(?z)")),
            lambda: self.pick(
                (
                    "(?=a)",
                    "(?!a)",
                    "(?<=a)",
                    "\\1",
                    "(a)\\1",
                    "[z-a]",
                    "a**",
                    "a{2,1}",
                    "a{1001}",
                    "(",
                    ")",
                    "[a",
                    "\\",
                    "\\Z",
                    "\\p{Foo}",
                    "x{3}",
                    "\\x41",
                    "\\x{263a}",
                    "\\Q.*\\E",
                    "\\C",
                    "(?P<n>a)",
                    "(?<n>a)",
                    "(?P=n)",
                )
            ),
        ]
        if depth > 0:
            atoms.append(lambda: "(" + self.pick(("", "?:", "?i:", "?P<g>")) + self.re_alt(depth - 1) + ")")
        out = self.pick(atoms)()
        if self.chance(3):
            out += self.pick(("*", "+", "?", "*?", "+?", "{2}", "{1,3}", "{0,}", "{2,}?"))
        return out
