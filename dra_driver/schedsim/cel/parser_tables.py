"""The CEL parser's LALR tables, shipped with the package so a process need not build them.

Called by ``syntax.py`` (:func:`load`, when it first needs a parser) and by
``scripts/gen_cel_parser.py`` (:func:`dump`, which writes ``cel_parser.json`` beside this module).
Building the tables from the grammar takes Lark about half a second, on every start of
``dra-gpu explain``; loading them takes milliseconds. The file is plain JSON (no pickle: reading it
runs no code) and records the Lark version and a digest of the grammar and options it was built
from: when either differs from what :func:`load` is given, it returns None and the caller builds
the parser as before. A unit test checks that the shipped file is what the generator writes now.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import lark
from lark.grammar import Rule
from lark.lexer import TerminalDef

# Options given at load time (callables and flags), so not part of the stored tables.
RUNTIME_OPTIONS = frozenset({"lexer_callbacks", "g_regex_flags", "postlex", "transformer", "tree_class", "_plugins"})
_TUPLE = "("  # {"(": [...]}: a tuple
_PAIRS = "{"  # {"{": [[key, value], ...]}: a dict whose keys are not all plain strings


def digest(grammar: str, options: Mapping[str, Any]) -> str:
    """What the tables depend on: the grammar text and the options that shape the tables."""
    shaping = {k: repr(v) for k, v in sorted(options.items()) if k not in RUNTIME_OPTIONS}
    return hashlib.sha256(json.dumps([grammar, shaping]).encode("utf-8")).hexdigest()


def _encode(x: Any) -> Any:
    if isinstance(x, tuple):
        return {_TUPLE: [_encode(v) for v in x]}
    if isinstance(x, list):
        return [_encode(v) for v in x]
    if isinstance(x, dict):
        if all(type(k) is str and k not in (_TUPLE, _PAIRS) for k in x):
            return {k: _encode(v) for k, v in x.items()}
        return {_PAIRS: [[_encode(k), _encode(v)] for k, v in x.items()]}
    if isinstance(x, bool) or x is None or isinstance(x, str | float):
        return x
    if isinstance(x, int):
        return int(x)  # an IntFlag (regex flags) as its number
    raise TypeError(f"cannot store {type(x).__name__} in the parser tables")


def _decode(d: dict[str, Any]) -> Any:
    if len(d) == 1:
        if _TUPLE in d:
            return tuple(d[_TUPLE])
        if _PAIRS in d:
            return dict(d[_PAIRS])
    return d


def dump(parser: lark.Lark, grammar: str, options: Mapping[str, Any]) -> str:
    """The JSON text of ``parser``'s tables (built from ``grammar`` with ``options``)."""
    data, memo = parser.memo_serialize([TerminalDef, Rule])
    data["options"] = {k: v for k, v in data["options"].items() if k not in RUNTIME_OPTIONS}
    body = {"lark": lark.__version__, "digest": digest(grammar, options), "data": _encode(data), "memo": _encode(memo)}
    return json.dumps(body, sort_keys=True, separators=(",", ":")) + "\n"


def load(text: str | None, grammar: str, options: Mapping[str, Any]) -> lark.Lark | None:
    """The parser stored in ``text`` if it was built by this Lark from this grammar and these options, else None."""
    if not text:
        return None
    try:
        body = json.loads(text, object_hook=_decode)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("lark") != lark.__version__ or body.get("digest") != digest(grammar, options):
        return None
    runtime = {k: v for k, v in options.items() if k in RUNTIME_OPTIONS}
    # Lark's own loader of serialized tables (what its standalone mode uses). It is private and
    # untyped: lark is pinned (1.3.1), and a table from another version never reaches it (checked above).
    parser: lark.Lark = lark.Lark._load_from_dict(body["data"], body["memo"], **runtime)  # type: ignore[no-untyped-call]
    return parser
