r"""RE2 regular expressions (Go's ``regexp`` syntax) on Python's ``re``.

Called by the CEL library (``matches``, ``find``, ``findAll``) and the checker (constant
``matches`` patterns). CEL's regexes are RE2: Python's ``re`` accepts patterns RE2 rejects
(look-arounds, back-references) and reads some differently (``$`` before a final newline,
Unicode ``\\d``/``\\w``/``\\s``/``\\b``, no ``\\pL``, no ``(?U)``). :func:`translate` parses a
pattern with RE2's rules, fails with Go's exact error text (``error parsing regexp: missing
closing ): `(```) and otherwise returns an equivalent Python pattern. Unicode classes cover the
general categories (``\\pL``, ``\\p{Lu}``, ``\\p{Any}``); script names (``\\p{Greek}``) are not
supported and say so. The class tables are in ``regex_classes.py``.
"""

# size-reason: one translator that follows Go's regexp/syntax parser step by step (its methods
# call each other as Go's do, so its errors match Go's text); split, the steps would no longer read
# in Go's order. The tables it reads are already apart (regex_classes.py).

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass, field

from dra_driver.schedsim.cel.regex_classes import (
    ALIASES,
    CATEGORIES,
    MAX_RUNE,
    PERL,
    POSIX,
    SCRIPTS,
    WORD,
    canonical,
    category_ranges,
    class_text,
)


class RegexError(ValueError):
    """A pattern RE2 rejects; ``str()`` is Go's ``error parsing regexp: ...`` text."""


class RegexUnsupported(ValueError):
    """A valid RE2 pattern this translation cannot express (Unicode script classes)."""


def _err(code: str, expr: str) -> RegexError:
    return RegexError(f"error parsing regexp: {code}: `{expr}`")


def _unicode_class(name: str) -> str:
    """The Python class body for a Unicode class name; KeyError if Go does not know the name."""
    canon = canonical(name)
    if canon == "Any":
        return class_text(0, MAX_RUNE)
    if canon == "Ascii":
        return class_text(0, 0x7F)
    if canon in ("Assigned", "Lc") or canon in CATEGORIES:
        return "".join(class_text(lo, hi) for lo, hi in category_ranges().get(canon, []))
    if canon in ALIASES:
        return "".join(class_text(lo, hi) for lo, hi in category_ranges().get(ALIASES[canon], []))
    if canon in SCRIPTS:
        raise RegexUnsupported(f"Unicode script class {name} is not supported by dra-gpu")
    raise KeyError(name)


@dataclass
class _Flags:
    fold: bool = False  # i
    multiline: bool = False  # m
    dotnl: bool = False  # s
    ungreedy: bool = False  # U


@dataclass
class _Group:
    capture: bool
    flags: _Flags
    alts: list[list[tuple[str, int]]] = field(default_factory=list)
    cur: list[tuple[str, int]] = field(default_factory=list)  # (python text, max copies)


class _Translator:
    def __init__(self, pattern: str) -> None:
        self.whole = pattern
        self.flags = _Flags()
        self.stack: list[_Group] = [_Group(capture=False, flags=_Flags())]

    @property
    def top(self) -> _Group:
        return self.stack[-1]

    def push(self, text: str, copies: int = 1) -> None:
        self.top.cur.append((text, copies))

    def wrap_flags(self, text: str) -> str:
        return f"(?i:{text})" if self.flags.fold else text

    def run(self) -> str:  # noqa: PLR0912, PLR0915 - follows Go's regexp/syntax parser step by step, so its errors match
        t = self.whole
        i = 0
        last_repeat = -1  # offset where the previous repetition operator started
        while i < len(t):
            c = t[i]
            repeat_at = -1
            if c == "(":
                if t.startswith("(?", i):
                    i = self.perl_flags(i)
                else:
                    self.stack.append(_Group(capture=True, flags=_Flags(**vars(self.flags))))
                    i += 1
            elif c == "|":
                self.top.alts.append(self.top.cur)
                self.top.cur = []
                i += 1
            elif c == ")":
                if len(self.stack) < 2:
                    raise _err("unexpected )", self.whole)
                g = self.stack.pop()
                g.alts.append(g.cur)
                body = "|".join("".join(a for a, _ in alt) for alt in g.alts)
                copies = max((max((n for _, n in alt), default=1) for alt in g.alts), default=1)
                self.flags = g.flags
                self.push(("(" if g.capture else "(?:") + body + ")", copies)
                i += 1
            elif c == "^":
                self.push("(?m:^)" if self.flags.multiline else "\\A")
                i += 1
            elif c == "$":
                self.push("(?m:$)" if self.flags.multiline else "\\Z")
                i += 1
            elif c == ".":
                self.push("(?s:.)" if self.flags.dotnl else "[^\\n]")
                i += 1
            elif c == "[":
                i = self.char_class(i)
            elif c in "*+?":
                i, repeat_at = self.repeat(i, c, None, last_repeat)
            elif c == "{":
                parsed = _parse_repeat(t, i)
                if parsed is None:
                    self.push("\\{")
                    i += 1
                else:
                    lo, hi, end = parsed
                    if lo < 0 or lo > 1000 or hi > 1000 or (hi >= 0 and lo > hi):
                        raise _err("invalid repeat count", t[i:end])
                    i, repeat_at = self.repeat(i, "{", (lo, hi, end), last_repeat)
            elif c == "\\":
                i = self.escape(i)
            else:
                self.push(self.wrap_flags(re.escape(c)))
                i += 1
            last_repeat = repeat_at
        if len(self.stack) != 1:
            raise _err("missing closing )", self.whole)
        g = self.top
        g.alts.append(g.cur)
        return "|".join("".join(a for a, _ in alt) for alt in g.alts)

    def repeat(self, i: int, op: str, counts: tuple[int, int, int] | None, last_repeat: int) -> tuple[int, int]:
        t = self.whole
        after = counts[2] if counts else i + 1
        greedy = not self.flags.ungreedy
        if after < len(t) and t[after] == "?":
            after += 1
            greedy = not greedy
        if last_repeat >= 0:
            raise _err("invalid nested repetition operator", t[last_repeat:after])
        if not self.top.cur:
            raise _err("missing argument to repetition operator", t[i:after])
        text, copies = self.top.cur.pop()
        if counts is None:
            q = op
            n = copies
        else:
            lo, hi, _ = counts
            q = f"{{{lo}}}" if hi == lo else (f"{{{lo},}}" if hi < 0 else f"{{{lo},{hi}}}")
            m = hi if hi >= 0 else lo
            n = copies * m if m > 0 else copies
            if (lo >= 2 or hi >= 2) and hi != 0 and n > 1000:
                raise _err("invalid repeat count", t[i:after])
        self.push(f"(?:{text}){q}{'' if greedy else '?'}", max(n, 1))
        return after, i

    def perl_flags(self, i: int) -> int:  # noqa: PLR0912 - follows Go's regexp/syntax parser step by step, so its errors match
        t = self.whole
        if t.startswith("(?P<", i) or t.startswith("(?<", i):
            start = i + (4 if t[i + 2] == "P" else 3)
            end = t.find(">", i)
            if end < 0:
                raise _err("invalid named capture", t[i:])
            name = t[start:end]
            if not name or not all(ch == "_" or (ch.isascii() and ch.isalnum()) for ch in name):
                raise _err("invalid named capture", t[i : end + 1])
            self.stack.append(_Group(capture=True, flags=_Flags(**vars(self.flags))))
            return end + 1
        j = i + 2
        flags = _Flags(**vars(self.flags))
        sign = 1
        saw = False
        while j < len(t):
            c = t[j]
            j += 1
            if c in "imsU":
                value = sign > 0
                if c == "i":
                    flags.fold = value
                elif c == "m":
                    flags.multiline = value
                elif c == "s":
                    flags.dotnl = value
                else:
                    flags.ungreedy = value
                saw = True
            elif c == "-":
                if sign < 0:
                    break
                sign = -1
                saw = False
            elif c in ":)":
                if sign < 0 and not saw:
                    break
                if c == ":":
                    self.stack.append(_Group(capture=False, flags=_Flags(**vars(self.flags))))
                self.flags = flags
                return j
            else:
                break
        raise _err("invalid or unsupported Perl syntax", t[i:j])

    def escape(self, i: int) -> int:  # noqa: PLR0911 - follows Go's regexp/syntax parser step by step, so its errors match
        t = self.whole
        nxt = t[i + 1] if i + 1 < len(t) else ""
        simple = {"A": "\\A", "z": "\\Z", "b": f"\\b(?<=[{WORD}]|(?<![{WORD}]))", "B": None}
        if nxt == "b":
            self.push(f"(?:(?<=[{WORD}])(?![{WORD}])|(?<![{WORD}])(?=[{WORD}]))")
            return i + 2
        if nxt == "B":
            self.push(f"(?:(?<=[{WORD}])(?=[{WORD}])|(?<![{WORD}])(?![{WORD}]))")
            return i + 2
        if nxt in ("A", "z"):
            self.push(simple[nxt] or "")
            return i + 2
        if nxt == "C":
            raise _err("invalid escape sequence", "\\C")
        if nxt == "Q":
            end = t.find("\\E", i + 2)
            lit = t[i + 2 :] if end < 0 else t[i + 2 : end]
            for ch in lit:
                self.push(self.wrap_flags(re.escape(ch)))
            return len(t) if end < 0 else end + 2
        if nxt in ("p", "P"):
            body, j = self.unicode_class(i)
            self.push(self.wrap_flags(f"[{body}]"))
            return j
        if nxt and nxt in "dDsSwW":
            cls = PERL[nxt.lower()]
            self.push(self.wrap_flags(f"[^{cls}]" if nxt.isupper() else f"[{cls}]"))
            return i + 2
        cp, j = self.parse_escape(i)
        self.push(self.wrap_flags(class_text(cp, cp) if cp > 0x7F else re.escape(chr(cp))))
        return j

    def parse_escape(self, i: int) -> tuple[int, int]:  # noqa: PLR0912 - follows Go's regexp/syntax parser step by step, so its errors match
        t = self.whole
        if i + 1 >= len(t):
            raise RegexError("error parsing regexp: trailing backslash at end of expression: ``")
        c = t[i + 1]
        j = i + 2
        if c.isascii() and not c.isalnum():
            return ord(c), j
        if c in "1234567" and not (j < len(t) and "0" <= t[j] <= "7"):
            raise _err("invalid escape sequence", t[i:j])
        if c in "01234567":
            r = ord(c) - 48
            for _ in range(2):
                if j < len(t) and "0" <= t[j] <= "7":
                    r = r * 8 + ord(t[j]) - 48
                    j += 1
                else:
                    break
            return r, j
        if c == "x":
            if j >= len(t):
                raise _err("invalid escape sequence", t[i:j])
            if t[j] == "{":
                k = j + 1
                r = 0
                n = 0
                while k < len(t) and t[k] != "}":
                    v = int(t[k], 16) if t[k] in "0123456789abcdefABCDEF" else -1
                    if v < 0:
                        raise _err("invalid escape sequence", t[i : k + 1])
                    r = r * 16 + v
                    n += 1
                    if r > MAX_RUNE:
                        raise _err("invalid escape sequence", t[i : k + 1])
                    k += 1
                if k >= len(t):
                    raise _err("invalid escape sequence", t[i:k])
                if n == 0:
                    raise _err("invalid escape sequence", t[i : k + 1])
                return r, k + 1
            hexd = "0123456789abcdefABCDEF"
            x = t[j] if j < len(t) else ""
            y = t[j + 1] if j + 1 < len(t) else ""
            end = min(j + 2, len(t))
            if not x or not y or x not in hexd or y not in hexd:
                raise _err("invalid escape sequence", t[i:end])
            return int(x + y, 16), j + 2
        named = {"a": 7, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}
        if c in named:
            return named[c], j
        raise _err("invalid escape sequence", t[i:j])

    def unicode_class(self, i: int) -> tuple[str, int]:
        t = self.whole
        negate = t[i + 1] == "P"
        if i + 2 >= len(t):
            raise _err("invalid character class range", t[i:])
        if t[i + 2] != "{":
            seq = t[i : i + 3]
            name = t[i + 2]
            j = i + 3
        else:
            end = t.find("}", i)
            if end < 0:
                raise _err("invalid character class range", t[i:])
            seq = t[i : end + 1]
            name = t[i + 3 : end]
            j = end + 1
        if name.startswith("^"):
            negate = not negate
            name = name[1:]
        try:
            body = _unicode_class(name)
        except KeyError:
            raise _err("invalid character class range", seq) from None
        return ("^" if negate else "") + body, j

    def char_class(self, i: int) -> int:  # noqa: PLR0912, PLR0915 - follows Go's regexp/syntax parser step by step, so its errors match
        t = self.whole
        j = i + 1
        negate = False
        if j < len(t) and t[j] == "^":
            negate = True
            j += 1
        parts: list[str] = []
        negated_parts: list[str] = []
        first = True
        while j >= len(t) or t[j] != "]" or first:
            if j >= len(t):
                raise _err("missing closing ]", t[i:])
            first = False
            if t.startswith("[:", j):
                end = t.find(":]", j + 2)
                if end >= 0:
                    name = t[j : end + 2]
                    key = name[2:-2]
                    neg = key.startswith("^")
                    key = key[1:] if neg else key
                    if key not in POSIX:
                        raise _err("invalid character class range", name)
                    (negated_parts if neg else parts).append(POSIX[key])
                    j = end + 2
                    continue
            if t[j] == "\\" and j + 1 < len(t) and t[j + 1] in "pP":
                body, j = self.unicode_class(j)
                (negated_parts if body.startswith("^") else parts).append(body.lstrip("^"))
                continue
            if t[j] == "\\" and j + 1 < len(t) and t[j + 1] in "dDsSwW":
                cls = PERL[t[j + 1].lower()]
                (negated_parts if t[j + 1].isupper() else parts).append(cls)
                j += 2
                continue
            start = j
            lo, j = self.class_char(j, i)
            hi = lo
            if j + 1 < len(t) and t[j] == "-" and t[j + 1] != "]":
                hi, j = self.class_char(j + 1, i)
                if hi < lo:
                    raise _err("invalid character class range", t[start:j])
            parts.append(class_text(lo, hi))
        j += 1
        pos = "".join(parts)
        if negated_parts:
            # [a\D] is "a or not a digit": an alternation of a class and negated classes.
            alts = [f"[{pos}]"] if pos else []
            alts += [f"[^{n}]" for n in negated_parts]
            body = "(?:" + "|".join(alts) + ")"
            text = f"(?!{body})(?s:.)" if negate else body
        elif not pos:
            text = "(?s:.)" if negate else "(?!)"
        else:
            text = f"[^{pos}]" if negate else f"[{pos}]"
        self.push(self.wrap_flags(text))
        return j

    def class_char(self, j: int, class_start: int) -> tuple[int, int]:
        t = self.whole
        if j >= len(t):
            raise _err("missing closing ]", t[class_start:])
        if t[j] == "\\":
            return self.parse_escape(j)
        return ord(t[j]), j + 1


def _parse_repeat(t: str, i: int) -> tuple[int, int, int] | None:
    """``{n}``, ``{n,}``, ``{n,m}`` at ``i``: (min, max or -1, end); min -1 when too big."""

    def number(j: int) -> tuple[int, int] | None:
        if j >= len(t) or not "0" <= t[j] <= "9":
            return None
        if t[j] == "0" and j + 1 < len(t) and "0" <= t[j + 1] <= "9":
            return None
        k = j
        while k < len(t) and "0" <= t[k] <= "9":
            k += 1
        v = int(t[j:k])
        return (v if v < 10**8 else -1), k

    first = number(i + 1)
    if first is None:
        return None
    lo, j = first
    if j >= len(t):
        return None
    if t[j] != ",":
        hi = lo
    else:
        j += 1
        if j >= len(t):
            return None
        if t[j] == "}":
            hi = -1
        else:
            second = number(j)
            if second is None:
                return None
            hi, j = second
            if hi < 0:
                lo = -1
    if j >= len(t) or t[j] != "}":
        return None
    return lo, hi, j + 1


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern[str] | RegexError | RegexUnsupported:
    try:
        return re.compile(_Translator(pattern).run())
    except (RegexError, RegexUnsupported) as err:
        return err
    except (re.error, RecursionError, OverflowError) as err:  # pragma: no cover - a translation gap
        print(f"dra-gpu: RE2 translation of {pattern!r} failed: {err}", file=sys.stderr)
        return RegexUnsupported(f"pattern {pattern!r} is not supported by dra-gpu")


def compile_re2(pattern: str) -> re.Pattern[str]:
    """A compiled equivalent of an RE2 pattern; raises :class:`RegexError` (Go's text) or :class:`RegexUnsupported`."""
    got = _compiled(pattern)
    if isinstance(got, Exception):
        raise got
    return got


def compile_error(pattern: str) -> str | None:
    """Go's error for an invalid pattern, else None (unsupported-but-valid patterns are valid)."""
    got = _compiled(pattern)
    return str(got) if isinstance(got, RegexError) else None


def translate(pattern: str) -> str:
    """The Python pattern for an RE2 pattern (raises like :func:`compile_re2`)."""
    return _Translator(pattern).run()
