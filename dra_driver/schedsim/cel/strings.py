"""CEL's string functions (the core ones and the Kubernetes ``strings`` library) with Go's semantics.

Called by the function library (``library.py``), which binds them to their overloads, and by the
planner (:func:`find_all_compiled` for constant ``findAll`` patterns). Regular expressions are
RE2's (``regex.py``); indexes count code points as cel-go counts runes.
"""

from __future__ import annotations

import re
from typing import Any

from dra_driver.schedsim.cel import regex
from dra_driver.schedsim.cel.values import EvalError


# -- strings ---------------------------------------------------------------------------------------
def contains(s: Any, sub: Any) -> bool:
    """``s.contains(sub)``."""
    if type(s) is not str or type(sub) is not str:
        raise EvalError("no such overload")
    return sub in s


def starts_with(s: Any, sub: Any) -> bool:
    """``s.startsWith(prefix)``."""
    if type(s) is not str or type(sub) is not str:
        raise EvalError("no such overload")
    return s.startswith(sub)


def ends_with(s: Any, sub: Any) -> bool:
    """``s.endsWith(suffix)``."""
    if type(s) is not str or type(sub) is not str:
        raise EvalError("no such overload")
    return s.endswith(sub)


def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return regex.compile_re2(pattern)
    except (regex.RegexError, regex.RegexUnsupported) as err:
        raise EvalError(str(err)) from None


def match(s: Any, pattern: Any) -> bool:
    """``s.matches(pattern)``: an RE2 search anywhere in ``s``."""
    if type(pattern) is not str:
        raise EvalError("no such overload")
    return _regex(pattern).search(s) is not None


def find(s: str, pattern: str) -> str:
    """``s.find(pattern)``: the first match, or the empty string."""
    try:
        rx = regex.compile_re2(pattern)
    except regex.RegexError as err:
        raise EvalError(f"Illegal regex: {err!s}") from None
    except regex.RegexUnsupported as err:
        raise EvalError(str(err)) from None
    m = rx.search(s)
    return m.group(0) if m else ""


def find_all(s: str, pattern: str, n: int = -1) -> list[str]:
    """``s.findAll(pattern[, n])``."""
    try:
        rx = regex.compile_re2(pattern)
    except regex.RegexError as err:
        raise EvalError(f"Illegal regex: {err!s}") from None
    except regex.RegexUnsupported as err:
        raise EvalError(str(err)) from None
    return find_all_compiled(rx, s, n)


def find_all_compiled(rx: re.Pattern[str], s: str, n: int) -> list[str]:
    """Go's ``FindAllString(s, n)`` with a compiled pattern."""
    if n == 0:
        return []
    out: list[str] = []
    pos = 0
    prev_end = -1
    while pos <= len(s):
        m = rx.search(s, pos)
        if m is None:
            break
        if m.end() == m.start() and m.start() == prev_end:
            pos = m.start() + 1  # Go skips an empty match right after the previous match
            continue
        out.append(m.group(0))
        prev_end = m.end()
        pos = m.end() if m.end() > m.start() else m.end() + 1
        if 0 < n <= len(out):
            break
    return out


def char_at(s: str, i: int) -> str:
    """``s.charAt(i)``; ``i == size(s)`` gives the empty string."""
    if i < 0 or i > len(s):
        raise EvalError(f"index out of range: {i}")
    return s[i : i + 1]


def index_of(s: str, sub: str, off: int = 0) -> int:
    """``s.indexOf(sub[, offset])``."""
    if sub == "":
        return off
    if off < 0:
        raise EvalError(f"index out of range: {off}")
    if off >= len(s):
        return -1
    return s.find(sub, off)


def last_index_of(s: str, sub: str, off: int | None = None) -> int:
    """``s.lastIndexOf(sub[, offset])``."""
    if off is None:
        if sub == "":
            return len(s)
        if len(s.encode("utf-8")) < len(sub.encode("utf-8")):
            return -1
        off = len(s) - 1
    if sub == "":
        return off
    if off < 0:
        raise EvalError(f"index out of range: {off}")
    if off >= len(s):
        return -1
    off = min(off, len(s) - len(sub))
    if off < 0:
        return -1
    return s.rfind(sub, 0, off + len(sub))


def lower_ascii(s: str) -> str:
    """``s.lowerAscii()``: only ASCII letters change."""
    return "".join(c.lower() if c.isascii() else c for c in s)


def upper_ascii(s: str) -> str:
    """``s.upperAscii()``: only ASCII letters change."""
    return "".join(c.upper() if c.isascii() else c for c in s)


def replace(s: str, old: str, new: str, n: int = -1) -> str:
    """``s.replace(old, new[, n])``; a negative ``n`` replaces all."""
    return s.replace(old, new, n if n >= 0 else -1)


def split(s: str, sep: str, n: int = -1) -> list[str]:
    """``s.split(sep[, n])`` as Go's ``strings.SplitN``."""
    if n == 0:
        return []
    if sep == "":
        chars = list(s)
        if n > 0 and len(chars) > n:
            return [*chars[: n - 1], "".join(chars[n - 1 :])]
        return chars
    return s.split(sep, n - 1 if n > 0 else -1)


def substring(s: str, start: int, end: int | None = None) -> str:
    """``s.substring(start[, end])``."""
    if end is None:
        if start < 0 or start > len(s):
            raise EvalError(f"index out of range: {start}")
        return s[start:]
    if start > end:
        raise EvalError(f"invalid substring range. start: {start}, end: {end}")
    if start < 0 or start > len(s):
        raise EvalError(f"index out of range: {start}")
    if end < 0 or end > len(s):
        raise EvalError(f"index out of range: {end}")
    return s[start:end]


SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def join(items: list[Any], sep: str = "") -> str:
    """``list.join([sep])``: every element must be a string."""
    for x in items:
        if type(x) is not str:
            raise EvalError(f"join: invalid input: {x}")
    return sep.join(items)


def quote(s: str) -> str:
    """``strings.quote(s)``: double-quoted with Go-style escapes."""
    esc = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v", "\\": "\\\\", '"': '\\"'}
    return '"' + "".join(esc.get(c, c) for c in s) + '"'
