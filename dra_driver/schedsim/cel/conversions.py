"""CEL's type conversions (``int("12")``, ``uint(1.5)``, ``double("1e3")``, ``string(b"..")``, ...) as cel-go does them.

Called by the function library (``library.py``), which binds them to the conversion overloads
(``string_to_int64`` and so on). Strings are parsed as Go's ``strconv`` parses them, and a value
out of range or unparsable fails with cel-go's error text.
"""

from __future__ import annotations

import math
import re

from dra_driver.schedsim.cel.values import INT64_MAX, INT64_MIN, UINT64_MAX, EvalError, Uint

# -- conversions -------------------------------------------------------------------------------------
_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_UINT_RE = re.compile(r"\+?[0-9]+\Z")


def _conv_error(src: str, dst: str) -> EvalError:
    return EvalError(f"type conversion error from '{src}' to '{dst}'")


def string_to_int(s: str) -> int:
    """``int(string)``: Go's base-10 int64 parse."""
    if not _INT_RE.match(s) or not INT64_MIN <= int(s) <= INT64_MAX:
        raise _conv_error("string", "int")
    return int(s)


def string_to_uint(s: str) -> Uint:
    """``uint(string)``: Go's base-10 uint64 parse (no sign)."""
    if not _UINT_RE.match(s) or s.startswith("+") or int(s) > UINT64_MAX:
        raise _conv_error("string", "uint")
    return Uint(int(s))


_DEC_FLOAT = re.compile(r"[+-]?(?=[0-9_]*\.?[0-9_]*[0-9])[0-9_]*(?:\.[0-9_]*)?(?:[eE][+-]?[0-9][0-9_]*)?\Z")
_HEX_FLOAT = re.compile(r"[+-]?0[xX](?=[0-9a-fA-F_.]*[0-9a-fA-F])[0-9a-fA-F_]*(?:\.[0-9a-fA-F_]*)?[pP][+-]?[0-9][0-9_]*\Z")


def _underscore_ok(s: str) -> bool:
    """Go's ``underscoreOK``: underscores only between digits (a base prefix counts as a digit)."""
    saw = "^"
    body = s[1:] if s[:1] in "+-" else s
    i = 0
    hexa = False
    if len(body) >= 2 and body[0] == "0" and body[1] in "bBoOxX":
        i, saw, hexa = 2, "0", body[1] in "xX"
    for c in body[i:]:
        if c.isdigit() or (hexa and c in "abcdefABCDEF"):
            saw = "0"
        elif c == "_":
            if saw != "0":
                return False
            saw = "_"
        else:
            if saw == "_":
                return False
            saw = "!"
    return saw != "_"


def string_to_double(s: str) -> float:
    """Go's ``strconv.ParseFloat(s, 64)``; any error is a conversion error."""
    low = s.lower()
    body = low[1:] if low[:1] in "+-" else low
    if body in ("inf", "infinity"):
        return -math.inf if low.startswith("-") else math.inf
    if low == "nan":
        return math.nan
    hexa = _HEX_FLOAT.match(s) is not None
    if not (hexa or _DEC_FLOAT.match(s)) or ("_" in s and not _underscore_ok(s)):
        raise _conv_error("string", "double")
    clean = s.replace("_", "")
    v = float.fromhex(clean) if hexa else float(clean)
    if math.isinf(v):
        raise _conv_error("string", "double")
    return v


def string_to_bool(s: str) -> bool:
    """``bool(string)``: the spellings Go's ``strconv.ParseBool`` accepts."""
    if s in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if s in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise _conv_error("string", "bool")


def double_to_int(v: float) -> int:
    """``int(double)``: truncated; out of int64 range is an overflow."""
    if math.isinf(v) or math.isnan(v) or v <= -9.223372036854775808e18 or v >= 9.223372036854775808e18:
        raise EvalError("integer overflow")
    return int(v)


def double_to_uint(v: float) -> Uint:
    """``uint(double)``: truncated; out of uint64 range is an overflow."""
    if math.isinf(v) or math.isnan(v) or v < 0 or v >= 1.8446744073709551616e19:
        raise EvalError("unsigned integer overflow")
    return Uint(int(v))


def uint_to_int(v: int) -> int:
    """``int(uint)``; beyond int64 is an overflow."""
    if v > INT64_MAX:
        raise EvalError("integer overflow")
    return int(v)


def int_to_uint(v: int) -> Uint:
    """``uint(int)``; a negative value is an overflow."""
    if v < 0:
        raise EvalError("unsigned integer overflow")
    return Uint(v)


def bytes_to_string(b: bytes) -> str:
    """``string(bytes)``: must be valid UTF-8."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        raise EvalError("invalid UTF-8 in bytes, cannot convert to string") from None
