"""``dra-gpu explain -o json``'s writer: ``json.dumps(value, indent=2)``'s text, written faster.

Called by ``explain.py``. The output of ``-o json`` on a large cluster lists every device of
every node (100,000 candidates and more); the standard library indents through its pure-Python
encoder, several times slower than its C string encoder. :func:`dumps_indented` writes the same
text (the same layout, key order, separators and ASCII escapes) for JSON values made of dicts
with string keys, lists, strings, ints, bools and None, encoding each string with the C encoder;
for anything else (a float, another key type) it hands the whole value to ``json.dumps``.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii as _quote  # the C one where the C accelerator is built
from typing import Any

__all__ = ["dumps_indented"]


class _Unusual(Exception):
    """A value the fast writer leaves to ``json.dumps``."""


def dumps_indented(value: Any) -> str:
    """``json.dumps(value, indent=2)``."""
    out: list[str] = []
    try:
        _write(value, "\n", out)
    except _Unusual:
        return json.dumps(value, indent=2)
    return "".join(out)


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if type(v) is int:
        return int.__repr__(v)
    raise _Unusual


def _write(v: Any, nl: str, out: list[str]) -> None:
    """Append ``v``'s text at the indentation ``nl`` (a newline and the spaces of its depth)."""
    t = type(v)
    if t is str:
        out.append(_quote(v))
    elif t is dict:
        if not v:
            out.append("{}")
            return
        inner = nl + "  "
        sep = "{" + inner
        for k, x in v.items():
            if type(k) is not str:
                raise _Unusual
            if type(x) is str:
                out.append(f"{sep}{_quote(k)}: {_quote(x)}")
            else:
                out.append(f"{sep}{_quote(k)}: ")
                _write(x, inner, out)
            sep = "," + inner
        out.append(nl + "}")
    elif t is list:
        if not v:
            out.append("[]")
            return
        inner = nl + "  "
        sep = "[" + inner
        for x in v:
            out.append(sep)
            _write(x, inner, out)
            sep = "," + inner
        out.append(nl + "]")
    else:
        out.append(_scalar(v))
