"""Hypothesis strategies: random DRA devices, and the value pools selectors draw from too.

Used by ``selectors.py`` (the CEL selector grammar builds expressions over a generated device)
and ``allocations.py`` (devices of random ResourceSlices). Devices carry attributes of every type
(int, bool, string, version, and the list-typed ints, bools, strings and versions; bare names
filed under the driver, qualified names under other domains and the driver's own) and capacities;
at most one attribute fails conversion in some release (a version that does not parse, alone or
in a list, or a list-typed value, which releases before 1.37 do not convert): Go reports the first
in random map order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import strategies as st

T = TypeVar("T")
Draw = Callable[[st.SearchStrategy[T]], T]

DRIVERS = ("gpu.dra-gpu.dev", "dra.example.com")
OTHER_DOMAINS = ("resource.kubernetes.io", "other.example.com")
UNKNOWN_DOMAIN = "unknown.example.org"
IDS = ("model", "cores", "index", "migCapable", "driverVersion", "uuid", "numaNode", "memory", "slots", "family")
KINDS = ("int", "bool", "string", "version")
LIST_KINDS = ("ints", "bools", "strings", "versions")

INTS = (0, 1, -1, 2, 3, 7, 8, 80, 132, 1000, 1024, 2**31, 2**53 + 1, 2**63 - 1, -(2**63))
STRINGS = (
    "",
    "NVIDIA H100 80GB HBM3",
    "nvidia a100",
    "L4",
    "Hopper",
    "0000:18:00.0",
    "gpu-0",
    "gpu-12",
    "GPU-ab12-CD",
    " padded ",
    "a,b,c",
    "Straße",
    "ÄÖÜ",
    "1.2.3",
    "v1.2",
    "40Gi",
    "3g.40gb",
    "x\ty",
    'quo"te',
    "back\\slash",
    "٣",
)
VERSIONS = (
    "1.2.3",
    "580.95.5",
    "570.0.0",
    "13.0.0",
    "9.0.0",
    "0.0.0",
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-0.3.7",
    "1.0.0-x.7.z.92",
    "1.0.0+build.5",
    "2.0.0-rc.1+b.2",
    "18446744073709551615.0.0",
)
BAD_VERSIONS = ("1.2", "01.2.3", "1.2.3-", "v1.2.3", "")
QUANTITIES = (
    "0",
    "1",
    "4",
    "-1",
    "80Gi",
    "81559Mi",
    "40Gi",
    "42949672960",
    "1000m",
    "500m",
    "1.5Gi",
    "1.5",
    "100M",
    "1e3",
    "2k",
    "1Ki",
    "1E",
    "9223372036854775807",
    "12345678901234567890",
    "0.1",
    "1n",
    "100Pi",
)
BAD_QUANTITIES = ("", "40GB", "1.2.3", "abc", "1e", "--1", "Gi")


def cel_string(s: str) -> str:
    """A CEL double-quoted string literal."""
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\t":
            out.append("\\t")
        elif c == "\n":
            out.append("\\n")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


@dataclass(frozen=True)
class Attr:
    """One attribute as the device publishes it and as CEL sees it."""

    name: str  # as published: "cores" or "domain/cores"
    domain: str
    ident: str
    kind: str
    value: Any


@dataclass
class DeviceSpec:
    """A generated device and the names it carries."""

    driver: str
    json: dict[str, Any]
    attrs: list[Attr] = field(default_factory=list)
    caps: list[Attr] = field(default_factory=list)


def _value(draw: Draw[Any], kind: str, *, bad_ok: bool = False) -> Any:
    if kind == "int":
        return draw(st.sampled_from(INTS) | st.integers(-(10**6), 10**6))
    if kind == "bool":
        return draw(st.booleans())
    if kind == "string":
        return draw(st.sampled_from(STRINGS) | st.text(alphabet="abcXYZ019 -._/ä", max_size=10))
    if bad_ok and draw(st.integers(0, 40)) == 0:
        return draw(st.sampled_from(BAD_VERSIONS))
    return draw(
        st.sampled_from(VERSIONS)
        | st.builds(lambda a, b, c: f"{a}.{b}.{c}", st.integers(0, 600), st.integers(0, 99), st.integers(0, 20))
    )


def _names(draw: Draw[Any], driver: str, n: int, used: set[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(published name, domain, id) without two names landing on the same (domain, id)."""
    out = []
    for _ in range(n):
        ident = draw(st.sampled_from(IDS))
        form = draw(st.sampled_from(("bare", "bare", "bare", "own", "other")))
        if form == "other":
            domain = draw(st.sampled_from(OTHER_DOMAINS))
        else:
            domain = driver
        if (domain, ident) in used:
            continue
        used.add((domain, ident))
        name = ident if form == "bare" else f"{domain}/{ident}"
        out.append((name, domain, ident))
    return out


@st.composite
def devices(draw: Draw[Any], driver: str | None = None, name: str = "dev") -> DeviceSpec:
    """A device with up to 8 attributes and 3 capacities."""
    drv = driver or draw(st.sampled_from(DRIVERS))
    spec = DeviceSpec(drv, {"name": name})
    attributes: dict[str, Any] = {}
    bad_version = False  # at most one unparsable version: Go reports the first in random map order
    for pub, domain, ident in _names(draw, drv, draw(st.integers(0, 8)), set()):
        # At most one attribute that fails conversion in some release (a list before 1.37, a bad version).
        kind = draw(st.sampled_from(KINDS if bad_version else KINDS + KINDS + LIST_KINDS))
        if kind in LIST_KINDS:
            value: Any = [_value(draw, kind[:-1], bad_ok=True) for _ in range(draw(st.integers(1, 4)))]
            if kind == "versions" and sum(v in BAD_VERSIONS for v in value) > 1:
                value = [v for v in value if v not in BAD_VERSIONS] or [value[0]]
            bad_version = True
        else:
            value = _value(draw, kind, bad_ok=not bad_version)
            bad_version = bad_version or (kind == "version" and value in BAD_VERSIONS)
        attributes[pub] = {kind: value}
        spec.attrs.append(Attr(pub, domain, ident, kind, value))
    capacity: dict[str, Any] = {}
    for pub, domain, ident in _names(draw, drv, draw(st.integers(0, 3)), set()):
        value = draw(st.sampled_from(QUANTITIES))
        capacity[pub] = {"value": value}
        spec.caps.append(Attr(pub, domain, ident, "quantity", value))
    if attributes:
        spec.json["attributes"] = attributes
    if capacity:
        spec.json["capacity"] = capacity
    multi = draw(st.sampled_from((None, None, True, False)))
    if multi is not None:
        spec.json["allowMultipleAllocations"] = multi
    return spec
