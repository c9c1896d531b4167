"""Kubernetes ``resource.Quantity`` values: apimachinery's parser, and byte counts rendered canonically.

Called by config decoding (memory sizes in sharing configs), the attribute schema (capacities it
publishes, :func:`format_bytes`) and the scheduler simulator (``dra_driver.schedsim``: CEL's
``quantity()``, device capacities, counters). The parser mirrors apimachinery's exactly,
including the two internal representations (a scaled int64 or an arbitrary-precision decimal)
because ``isInteger()``, ``asInteger()`` and ``asApproximateFloat()`` depend on which one a value
has: ``"1000m"`` is one but not an integer, ``"1.5Gi"`` is a whole number of bytes held as a decimal.
"""

from __future__ import annotations

import math
from fractions import Fraction

_INT64_MAX = (1 << 63) - 1
_INT64_MIN = -(1 << 63)
_NANO = -9  # the smallest scale a quantity keeps; finer fractions round up (away from zero)
_MAX_INT64_FACTORS = 18  # decimal digits that always fit an int64

_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")

MAX_DIGITS = 1000
"""More significant digits than any quantity the API stores needs; longer ones are refused
(``QuantityError``) instead of building integers beyond Python's 4,300-digit string limit."""
MAX_EXPONENT_DIGITS = 19
"""An exponent suffix is an int64 in apimachinery; more digits (after leading zeros) never parse."""

ERR_FORMAT = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
ERR_NUMERIC = "unable to parse numeric part of quantity"
ERR_SUFFIX = "unable to parse quantity's suffix"


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity (the message is apimachinery's)."""


def _int32_wrap(v: int) -> int:
    return ((v + (1 << 31)) % (1 << 32)) - (1 << 31)


class Quantity:
    """An exact quantity: ``value = unscaled * 10**exp``; ``small`` marks apimachinery's int64 form."""

    __slots__ = ("exp", "format", "ptr", "small", "unscaled")

    def __init__(self, unscaled: int, exp: int, *, small: bool, fmt: str = "DecimalSI", ptr: bool = False) -> None:
        self.unscaled = unscaled
        self.exp = exp
        self.small = small
        self.format = fmt
        self.ptr = ptr  # CEL's add()/sub() return a pointer value, which compares differently (see values.equal)

    # -- value -------------------------------------------------------------------------------
    def fraction(self) -> Fraction:
        """The exact value."""
        if self.exp >= 0:
            return Fraction(self.unscaled * 10**self.exp)
        return Fraction(self.unscaled, 10**-self.exp)

    def magnitude(self) -> int:
        """Digits before the decimal point of ``|value|`` (may be negative or zero); 0 for zero.

        Bounded work whatever the exponent: ``1e2147483647`` has magnitude 2147483648.
        """
        if self.unscaled == 0:
            return 0
        return len(str(abs(self.unscaled))) + self.exp

    def cmp(self, other: Quantity) -> int:
        """-1, 0 or 1, comparing exact values (``"40Gi"`` equals ``"42949672960"``).

        Values of different sign or order of magnitude are told apart without building
        ``10**exp`` (an exponent can be 2**31); only close values are compared exactly.
        """
        sa, sb = self.sign(), other.sign()
        if sa != sb:
            return (sa > sb) - (sa < sb)
        if sa == 0:
            return 0
        ma, mb = self.magnitude(), other.magnitude()
        if ma != mb:
            return sa if ma > mb else -sa
        a, b = self.fraction(), other.fraction()
        return (a > b) - (a < b)

    def sign(self) -> int:
        """-1, 0 or 1."""
        return (self.unscaled > 0) - (self.unscaled < 0)

    def as_int64(self) -> int | None:
        """The ``AsInt64`` of apimachinery: only the int64 form with a non-negative scale converts."""
        if not self.small or self.exp < 0:
            return None
        if self.unscaled == 0:
            return 0
        if self.magnitude() > len(str(_INT64_MAX)):  # beyond int64 without building 10**exp (an exponent can be 2**31)
            return None
        v = self.unscaled * 10**self.exp
        return v if _INT64_MIN <= v <= _INT64_MAX else None

    def as_approximate_float(self) -> float:
        """The ``AsApproximateFloat64`` of apimachinery: float(unscaled) times a power of ten."""
        try:
            base = float(self.unscaled)
        except OverflowError:
            base = math.inf if self.unscaled > 0 else -math.inf
        if self.exp == 0:
            return base
        if self.exp > 308:
            p = math.inf
        elif self.exp < -323:
            p = 0.0
        else:
            p = float(f"1e{self.exp}")
        return base * p

    # -- arithmetic (Quantity.Add / Sub) -----------------------------------------------------
    def add(self, other: Quantity) -> Quantity:
        """``q.Add(y)`` on a copy, keeping the int64 form while it fits."""
        fmt = other.format if self.unscaled == 0 else self.format
        if self.small and other.small:
            r = _small_add(self.unscaled, self.exp, other.unscaled, other.exp)
            if r is not None:
                return Quantity(r[0], r[1], small=True, fmt=fmt)
        return _dec_sum(self, other, fmt)

    def sub(self, other: Quantity) -> Quantity:
        """``q.Sub(y)`` on a copy."""
        fmt = other.format if self.unscaled == 0 else self.format
        if self.small and other.small:
            r = _small_add(self.unscaled, self.exp, -other.unscaled, other.exp)
            if r is not None:
                return Quantity(r[0], r[1], small=True, fmt=fmt)
        return _dec_sum(self, other.neg(), fmt)

    def neg(self) -> Quantity:
        """The negated value, same form."""
        return Quantity(-self.unscaled, self.exp, small=self.small, fmt=self.format)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.cmp(other) == 0

    def __hash__(self) -> int:
        u, e = self.unscaled, self.exp
        if u == 0:
            return hash(0)
        while u % 10 == 0:  # equal values hash equally: 1000 and 1k normalize to (1, 3)
            u //= 10
            e += 1
        return hash((u, e))

    def __repr__(self) -> str:
        return f"Quantity({self.fraction()})"


def _fits(v: int) -> bool:
    return _INT64_MIN <= v <= _INT64_MAX


def _small_add(av: int, ascale: int, bv: int, bscale: int) -> tuple[int, int] | None:  # noqa: PLR0911 - follows apimachinery's quantity parser case by case; splitting it would hide the correspondence
    if bv == 0:
        return av, ascale
    if av == 0:
        return bv, bscale
    if ascale == bscale:
        c = av + bv
        return (c, ascale) if _fits(c) else None
    if ascale > bscale:
        a = av * 10 ** (ascale - bscale)
        if not _fits(a) or not _fits(a + bv):
            return None
        return a + bv, bscale
    b = bv * 10 ** (bscale - ascale)
    if not _fits(b) or not _fits(av + b):
        return None
    return av + b, ascale


def _dec_sum(a: Quantity, b: Quantity, fmt: str) -> Quantity:
    if a.unscaled == 0:
        return Quantity(b.unscaled, b.exp, small=False, fmt=fmt)
    if b.unscaled == 0:
        return Quantity(a.unscaled, a.exp, small=False, fmt=fmt)
    if abs(a.exp - b.exp) > 4 * MAX_DIGITS:
        raise QuantityError(f"{ERR_NUMERIC}: the sum spans more than {4 * MAX_DIGITS} decimal places")
    e = min(a.exp, b.exp)
    u = a.unscaled * 10 ** (a.exp - e) + b.unscaled * 10 ** (b.exp - e)
    return Quantity(u, e, small=False, fmt=fmt)


def from_int(value: int, fmt: str = "DecimalSI") -> Quantity:
    """``resource.NewQuantity(value, fmt)``."""
    return Quantity(value, 0, small=True, fmt=fmt)


def _split(s: str) -> tuple[bool, str, str, str, str]:  # noqa: PLR0912 - follows apimachinery's quantity parser case by case; splitting it would hide the correspondence
    """The ``parseQuantityString`` of apimachinery: (positive, value, num, denom, suffix)."""
    positive = True
    pos, end = 0, len(s)
    if pos < end and s[0] in "+-":
        positive = s[0] == "+"
        pos += 1
    while pos < end and s[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "0", "", ""
    start = pos
    while pos < end and s[pos].isdigit() and s[pos].isascii():
        pos += 1
    if pos >= end:
        return positive, s, s[start:end], "", ""
    num = s[start:pos] or "0"
    denom = ""
    if s[pos] == ".":
        pos += 1
        dstart = pos
        while pos < end and s[pos].isdigit() and s[pos].isascii():
            pos += 1
        denom = s[dstart:pos]
        if pos >= end:
            return positive, s, num, denom, ""
    value = s[:pos]
    sstart = pos
    while pos < end and s[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos >= end:
        return positive, value, num, denom, s[sstart:]
    if s[pos] in "+-":
        pos += 1
    while pos < end and s[pos].isdigit() and s[pos].isascii():
        pos += 1
    if pos >= end:
        return positive, value, num, denom, s[sstart:]
    raise QuantityError(ERR_FORMAT)


def _interpret(suffix: str) -> tuple[int, int, str] | None:
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix], "DecimalSI"
    if suffix in _BINARY:
        return 2, _BINARY[suffix], "BinarySI"
    if len(suffix) > 1 and suffix[0] in "eE":
        rest = suffix[1:]
        body = rest[1:] if rest[0] in "+-" else rest
        # more digits than an int64: strconv.ParseInt fails, so apimachinery reports the suffix
        if not body or not body.isdigit() or not body.isascii() or len(body.lstrip("0")) > MAX_EXPONENT_DIGITS:
            return None
        parsed = int(body.lstrip("0") or "0") * (-1 if rest[0] == "-" else 1)
        if not _fits(parsed):
            return None
        return 10, _int32_wrap(parsed), "DecimalExponent"
    return None


def _dec_from_string(value: str) -> tuple[int, int]:
    """inf.Dec.SetString for the numeric prefix: (unscaled, exp)."""
    sign = 1
    v = value
    if v[:1] in "+-":
        sign = -1 if v[0] == "-" else 1
        v = v[1:]
    if "." in v:
        whole, frac = v.split(".", 1)
    else:
        whole, frac = v, ""
    digits = (whole + frac) or ""
    if not digits or not digits.isdigit():
        raise QuantityError(ERR_NUMERIC)
    return sign * int(digits), -len(frac)


def parse_quantity(s: str) -> Quantity:  # noqa: PLR0912 - follows apimachinery's quantity parser case by case; splitting it would hide the correspondence
    """``resource.ParseQuantity``; raises :class:`QuantityError` with apimachinery's message."""
    if not s:
        raise QuantityError(ERR_FORMAT)
    if s == "0":
        return Quantity(0, 0, small=True)
    positive, value, num, denom, suf = _split(s)
    if len(num.lstrip("0")) + len(denom) > MAX_DIGITS:
        raise QuantityError(f"{ERR_NUMERIC}: more than {MAX_DIGITS} digits")
    interp = _interpret(suf)
    if interp is None:
        raise QuantityError(ERR_SUFFIX)
    base, exponent, fmt = interp
    precision, scale, mantissa = 0, 0, 1
    if fmt in ("DecimalExponent", "DecimalSI"):
        scale = exponent
        precision = _MAX_INT64_FACTORS - (len(num) + len(denom))
    elif exponent >= 0 and not denom:
        mantissa = 1 << exponent
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
    else:
        precision = -1
    if precision >= 0:
        scale -= len(denom)
        if scale >= _NANO:
            shifted = num + denom
            iv = int(shifted)
            if not _fits(iv):
                raise QuantityError(ERR_NUMERIC)
            result = iv * mantissa
            if _fits(result):
                return Quantity(result if positive else -result, scale, small=True, fmt=fmt)
    unscaled, exp = _dec_from_string(value)
    if base == 10:
        exp += exponent
    else:
        unscaled *= 1 << exponent
    neg = unscaled < 0
    unscaled = abs(unscaled)
    if unscaled != 0 and exp < _NANO:
        # round up (away from zero) to nano precision
        if len(str(unscaled)) <= _NANO - exp:  # below one nano: rounds up to exactly 1n
            unscaled, exp = 1, _NANO
        else:
            div = 10 ** (_NANO - exp)
            q, r = divmod(unscaled, div)
            unscaled, exp = q + (1 if r else 0), _NANO
    if fmt == "BinarySI" and Quantity(unscaled, exp, small=False).cmp(from_int(_INT64_MAX)) > 0:
        unscaled, exp = _INT64_MAX, 0
    if fmt == "BinarySI" and unscaled != 0 and Fraction(unscaled) * (Fraction(10) ** exp) < 1:
        fmt = "DecimalSI"
    return Quantity(-unscaled if neg else unscaled, exp, small=False, fmt=fmt)


def is_quantity(s: str) -> bool:
    """Whether ``parse_quantity`` accepts ``s``."""
    try:
        parse_quantity(s)
    except QuantityError:
        return False
    return True


# -- formatting ---------------------------------------------------------------------------------------
_SUFFIXES = (("Ei", 1 << 60), ("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))


def format_bytes(value: int) -> str:
    """Format a non-negative byte count the way the API server canonicalizes a BinarySI quantity.

    ``85899345920`` → ``80Gi``; a value not divisible by 1024 stays a plain integer.
    """
    if value < 0:
        raise ValueError(f"quantity must not be negative, got {value}")
    for suffix, factor in _SUFFIXES:
        if value >= factor and value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)
