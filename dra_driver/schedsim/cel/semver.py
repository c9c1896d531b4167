"""Semantic versions as the Kubernetes CEL semver library and DRA version attributes see them.

Called by the CEL library (``semver()``, ``isSemver()``, version attributes of devices). Parsing
follows the strict SemVer 2.0.0 rules of the Go parser Kubernetes uses (blang/semver v4): three
numeric parts without leading zeroes, dot-separated pre-release and build identifiers; build
metadata is ignored when comparing. ``normalize=True`` is the library's lenient mode (``v``
prefix, short versions, leading zeroes).
"""

from __future__ import annotations

import functools

_ALNUM = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-")
_UINT64_MAX = (1 << 64) - 1


class SemverError(ValueError):
    """Not a semantic version (the message is the Go parser's)."""


@functools.total_ordering
class Semver:
    """A parsed version; ``==`` and ordering ignore build metadata."""

    __slots__ = ("build", "major", "minor", "patch", "pre")

    def __init__(self, major: int, minor: int, patch: int, pre: tuple[str | int, ...] = (), build: tuple[str, ...] = ()) -> None:
        self.major, self.minor, self.patch, self.pre, self.build = major, minor, patch, pre, build

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1 by SemVer precedence."""
        a = (self.major, self.minor, self.patch)
        b = (other.major, other.minor, other.patch)
        if a != b:
            return -1 if a < b else 1
        if not self.pre and not other.pre:
            return 0
        if not self.pre:
            return 1
        if not other.pre:
            return -1
        for x, y in zip(self.pre, other.pre, strict=False):
            c = _cmp_pre(x, y)
            if c:
                return c
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare(other) == 0

    def __lt__(self, other: Semver) -> bool:
        return self.compare(other) < 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.pre))

    def __str__(self) -> str:
        s = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            s += "-" + ".".join(str(p) for p in self.pre)
        if self.build:
            s += "+" + ".".join(self.build)
        return s

    def __repr__(self) -> str:
        return f"Semver({self})"


def _cmp_pre(x: str | int, y: str | int) -> int:
    if isinstance(x, int) and isinstance(y, int):
        return (x > y) - (x < y)
    if isinstance(x, int):
        return -1
    if isinstance(y, int):
        return 1
    return (x > y) - (x < y)


def _number(part: str, what: str) -> int:
    if not part or not part.isdigit() or not part.isascii():
        raise SemverError(f"Invalid character(s) found in {what} number {part!r}".replace("'", '"'))
    if len(part) > 1 and part[0] == "0":
        raise SemverError(f'{what.capitalize()} number must not contain leading zeroes "{part}"')
    v = int(part)
    if v > _UINT64_MAX:
        raise SemverError(f'strconv.ParseUint: parsing "{part}": value out of range')
    return v


def parse_semver(s: str) -> Semver:  # noqa: PLR0912 - follows the Go semver parser case by case
    """Strict parse (``semver.Parse``)."""
    if not s:
        raise SemverError("Version string empty")
    parts = s.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major = _number(parts[0], "major")
    minor = _number(parts[1], "minor")
    rest = parts[2]
    build: tuple[str, ...] = ()
    pre: tuple[str | int, ...] = ()
    plus = rest.find("+")
    if plus >= 0:
        build_s = rest[plus + 1 :]
        rest = rest[:plus]
        build = tuple(build_s.split("."))
        for b in build:
            if not b:
                raise SemverError("Build meta data is empty")
            if not set(b) <= _ALNUM:
                raise SemverError(f'Invalid character(s) found in build meta data "{b}"')
    dash = rest.find("-")
    if dash >= 0:
        pre_s = rest[dash + 1 :]
        rest = rest[:dash]
        items: list[str | int] = []
        for p in pre_s.split("."):
            if not p:
                raise SemverError("Prerelease is empty")
            if not set(p) <= _ALNUM:
                raise SemverError(f'Invalid character(s) found in prerelease "{p}"')
            if p.isdigit():
                if len(p) > 1 and p[0] == "0":
                    raise SemverError(f'Version number must not contain leading zeroes "{p}"')
                items.append(int(p))
            else:
                items.append(p)
        pre = tuple(items)
    patch = _number(rest, "patch")
    return Semver(major, minor, patch, pre, build)


def normalize_and_parse(s: str) -> Semver:
    """The library's ``semver(s, true)``: strip ``v``, leading zeroes, fill short versions."""
    if s.startswith("v"):
        s = s[1:]
    parts = s.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            trimmed = part.lstrip("0")
            if not trimmed or trimmed[0] not in "0123456789":
                trimmed = "0" + trimmed
            parts[i] = trimmed
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return parse_semver(".".join(parts))


def is_semver(s: str, *, normalize: bool = False) -> bool:
    """Whether ``s`` parses."""
    try:
        (normalize_and_parse if normalize else parse_semver)(s)
    except SemverError:
        return False
    return True
