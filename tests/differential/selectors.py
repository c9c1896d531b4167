"""Hypothesis strategies: random DRA devices and random CEL selectors over them.

A case is (driver, device, expression). Devices carry attributes of every type (int, bool,
string, version; bare names filed under the driver, qualified names under other domains and the
driver's own) and capacities. Expressions come from a typed grammar that mostly reads names the
device has, sometimes names it lacks or domains it does not have, and covers comparisons (also
across types), ``&&``/``||``/``!``/ternary, ``has()``, ``.?x.orValue()``, ``in``, the string
functions, the quantity and semver libraries, ``isQuantity``/``isSemver``, ``cel.bind``, list
literals with ``exists``/``all``, arithmetic and ``device.driver``/``allowMultipleAllocations``.
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
INT_TEXTS = ("42", "-7", "+3", " 1", "1_0", "9223372036854775808", "0x10", "x")
DOUBLE_TEXTS = ("1.5", "1e3", "inf", "-Infinity", "NaN", "1e400", "0x1p-2", "1_0", ".5", "x")
TYPE_NAMES = ("int", "uint", "double", "string", "bool", "list", "map", "bytes", "null_type", "type")
OPTIONAL_TAILS = ("hasValue()", "orValue(1) == 1", "value() == 0")
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
        kind = draw(st.sampled_from(KINDS))
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


class Grammar:
    """Builds one expression for one device; ``draw`` is Hypothesis's draw function."""

    OPS = ("==", "!=", "<", "<=", ">", ">=")

    def __init__(self, draw: Draw[Any], dev: DeviceSpec) -> None:
        self.draw = draw
        self.dev = dev
        self.bound: list[tuple[str, str]] = []  # (variable, domain) of enclosing cel.bind

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

    def op(self) -> str:
        return self.pick(self.OPS)

    # -- references ---------------------------------------------------------------------------
    def _domain_ref(self, domain: str, what: str = "attributes") -> str:
        if what == "attributes":
            for var, d in reversed(self.bound):
                if d == domain and not self.chance(3):
                    return var
        return f'device.{what}["{domain}"]'

    def _select(self, base: str, ident: str) -> str:
        if self.chance(4):
            return f'{base}["{ident}"]'
        return f"{base}.{ident}"

    def attr(self, kind: str | None = None) -> str:
        """An attribute reference; of ``kind`` when the device has one (usually)."""
        have = [a for a in self.dev.attrs if kind is None or a.kind == kind]
        if have and not self.chance(6):
            a = self.pick(have)
            return self._select(self._domain_ref(a.domain), a.ident)
        domain = self.pick((self.dev.driver, *OTHER_DOMAINS, UNKNOWN_DOMAIN))
        return self._select(self._domain_ref(domain), self.pick(IDS))

    def cap(self) -> str:
        """A capacity reference (a quantity, or a runtime error when missing)."""
        if self.dev.caps and not self.chance(6):
            c = self.pick(self.dev.caps)
            return self._select(self._domain_ref(c.domain, "capacity"), c.ident)
        domain = self.pick((self.dev.driver, *OTHER_DOMAINS, UNKNOWN_DOMAIN))
        return self._select(f'device.capacity["{domain}"]', self.pick(IDS))

    # -- typed terms -----------------------------------------------------------------------------
    def int_(self, depth: int) -> str:
        choices: list[Callable[[], str]] = [
            lambda: str(self.pick(INTS[:-1])),  # INT64_MIN has no literal form
            lambda: str(self.draw(st.integers(-5, 200))),
            lambda: self.attr("int"),
        ]
        if depth > 0:
            choices += [
                lambda: f"size({self.string(depth - 1)})",
                lambda: f"{self.string(depth - 1)}.size()",
                lambda: f"{self.quantity(depth - 1)}.asInteger()",
                lambda: f"sign({self.quantity(depth - 1)})",
                lambda: f"{self.semver(depth - 1)}.{self.pick(('major', 'minor', 'patch'))}()",
                lambda: f"({self.int_(depth - 1)} {self.pick(('+', '-', '*', '/', '%'))} {self.int_(depth - 1)})",
                lambda: f"-{self.int_(depth - 1)}",
                lambda: f"{self.quantity(depth - 1)}.compareTo({self.quantity(depth - 1)})",
                lambda: f"{self.string(depth - 1)}.indexOf({self.string(0)})",
                lambda: f"int({self.pick(('2.5', '-1.5', '1e19', '3u', cel_string('42'), cel_string('x')))})",
            ]
        return self.pick(choices)()

    def number(self, depth: int) -> str:
        """An int, uint or double term."""
        return self.one_of(
            lambda: self.int_(depth),
            lambda: self.pick(("0u", "1u", "3u", "132u", "18446744073709551615u")),
            lambda: self.pick(("0.0", "1.0", "2.5", "-0.5", "132.0", "1e3", "9.3e18", "1e19")),
            lambda: f"{self.quantity(max(depth - 1, 0))}.asApproximateFloat()",
            lambda: f"double({self.int_(max(depth - 1, 0))})",
            lambda: f"uint({self.int_(max(depth - 1, 0))})",
        )

    def string(self, depth: int) -> str:
        choices: list[Callable[[], str]] = [
            lambda: cel_string(self.pick(STRINGS)),
            lambda: self.attr("string"),
            lambda: self.attr("string"),
            lambda: "device.driver",
        ]
        if depth > 0:
            s = depth - 1
            choices += [
                lambda: f"{self.string(s)}.lowerAscii()",
                lambda: f"{self.string(s)}.upperAscii()",
                lambda: f"{self.string(s)}.trim()",
                lambda: f"{self.string(s)}.replace({self.string(0)}, {self.string(0)})",
                lambda: f"{self.string(s)}.substring({self.pick((0, 1, 3, 40, -1))})",
                lambda: f"{self.string(s)}.substring({self.pick((0, 1))}, {self.pick((0, 2, 5, 99))})",
                lambda: f"{self.string(s)}.charAt({self.pick((0, 1, 5, 21, -1))})",
                lambda: f"string({self.number(s)})",
                lambda: f"({self.string(s)} + {self.string(s)})",
                lambda: f'{self.string(s)}.split({self.pick((cel_string(","), cel_string(" "), cel_string("")))}).join("|")',
            ]
        return self.pick(choices)()

    def quantity(self, depth: int) -> str:
        choices: list[Callable[[], str]] = [
            self.cap,
            self.cap,
            lambda: f"quantity({cel_string(self.pick(QUANTITIES))})",
        ]
        if self.chance(15):
            choices.append(lambda: f"quantity({cel_string(self.pick(BAD_QUANTITIES))})")
        if depth > 0:
            s = depth - 1
            choices += [
                lambda: f"{self.quantity(s)}.{self.pick(('add', 'sub'))}({self.quantity(s)})",
                lambda: f"{self.quantity(s)}.{self.pick(('add', 'sub'))}({self.int_(0)})",
            ]
        return self.pick(choices)()

    def semver(self, depth: int) -> str:
        choices: list[Callable[[], str]] = [
            lambda: self.attr("version"),
            lambda: self.attr("version"),
            lambda: f"semver({cel_string(self.pick(VERSIONS))})",
            lambda: f"semver({cel_string(self.pick(('v1.2', '1', '01.02.03', 'v580.95.5', '1.2.3-rc.1', '1.2-rc')))}, true)",
        ]
        if self.chance(15):
            choices.append(lambda: f"semver({cel_string(self.pick(BAD_VERSIONS))})")
        return self.pick(choices)()

    def any_term(self, depth: int) -> str:
        return self.one_of(
            lambda: self.attr(),
            lambda: self.attr(),
            lambda: self.number(depth),
            lambda: self.string(depth),
            lambda: self.quantity(depth),
            lambda: self.semver(depth),
            lambda: self.pick(("true", "false", "null")),
            lambda: "device.allowMultipleAllocations",
            lambda: self.list_lit(),
        )

    def list_lit(self) -> str:
        kind = self.pick(("int", "string", "mixed"))
        n = self.draw(st.integers(0, 4))
        items = []
        for _ in range(n):
            if kind == "int" or (kind == "mixed" and self.chance(2)):
                items.append(str(self.pick(INTS[:-1])))
            elif kind == "string":
                items.append(cel_string(self.pick(STRINGS)))
            else:
                items.append(self.pick(("2.5", "true", "3u", cel_string("L4"))))
        return "[" + ", ".join(items) + "]"

    # -- booleans -----------------------------------------------------------------------------
    def boolean(self, depth: int) -> str:
        leaf: list[Callable[[], str]] = [
            lambda: self.compare(depth),
            lambda: self.compare(depth),
            lambda: self.string_test(depth),
            lambda: self.quantity_test(depth),
            lambda: self.semver_test(depth),
            lambda: f"has({self._select(self.any_domain(), self.pick(IDS))})",
            lambda: f"has({self.cap()})",
            lambda: self.optional_test(),
            lambda: self.in_test(depth),
            lambda: f"isQuantity({self.pick((cel_string(self.pick(QUANTITIES + BAD_QUANTITIES)), self.string(0)))})",
            lambda: f"isSemver({cel_string(self.pick(VERSIONS + BAD_VERSIONS))})",
            lambda: f"isSemver({self.string(0)}, {self.pick(('true', 'false'))})",
            lambda: self.attr("bool"),
            lambda: self.pick(("true", "false", "device.allowMultipleAllocations")),
            lambda: f"device.allowMultipleAllocations == {self.pick(('true', 'false'))}",
            lambda: f"device.driver == {cel_string(self.pick((*DRIVERS, 'x')))}",
            lambda: self.list_test(depth),
            lambda: self.misc_test(depth),
            lambda: self.misc_test(depth),
        ]
        if depth <= 0:
            return self.pick(leaf)()
        d = depth - 1
        inner: list[Callable[[], str]] = [
            lambda: f"{self.boolean(d)} && {self.boolean(d)}",
            lambda: f"({self.boolean(d)} || {self.boolean(d)})",
            lambda: f"!({self.boolean(d)})",
            lambda: f"({self.boolean(d)} ? {self.boolean(d)} : {self.boolean(d)})",
            lambda: self.bind(d),
        ]
        return self.pick(leaf + inner)()

    def compare(self, depth: int) -> str:
        d = max(depth - 1, 0)
        kind = self.pick(("int", "number", "string", "bool", "quantity", "semver", "any", "any"))
        make: dict[str, Callable[[int], str]] = {
            "int": self.int_,
            "number": self.number,
            "string": self.string,
            "bool": lambda k: self.pick(("true", "false", self.attr("bool"))),
            "quantity": self.quantity,
            "semver": self.semver,
            "any": self.any_term,
        }
        left = make[kind](d)
        right = make[kind](d) if not self.chance(4) else self.any_term(d)
        return f"{left} {self.op()} {right}"

    def string_test(self, depth: int) -> str:
        s = self.string(max(depth - 1, 0))
        return self.one_of(
            lambda: f"{s}.startsWith({self.string(0)})",
            lambda: f"{s}.endsWith({self.string(0)})",
            lambda: f"{s}.contains({self.string(0)})",
            lambda: f"{s}.matches({cel_string(self.pick(REGEXES))})",
            lambda: f"matches({s}, {cel_string(self.pick(REGEXES))})",
            lambda: f"{s}.size() {self.op()} {self.pick((0, 2, 4, 21))}",
            lambda: f"{s}.lowerAscii() == {self.string(0)}",
            lambda: f"{s}.upperAscii().contains({self.string(0)})",
            lambda: f"{s}.indexOf({self.string(0)}) {self.op()} {self.pick((-1, 0, 3))}",
            lambda: f"{s}.lastIndexOf({self.string(0)}) {self.op()} {self.pick((-1, 0, 3))}",
            lambda: f"{s}.split({cel_string(self.pick((',', ' ', '.')))}).size() {self.op()} {self.pick((1, 2, 3))}",
        )

    def quantity_test(self, depth: int) -> str:
        d = max(depth - 1, 0)
        q = self.quantity(d)
        return self.one_of(
            lambda: f"{q}.compareTo({self.quantity(d)}) {self.op()} {self.pick((-1, 0, 1))}",
            lambda: f"{q}.isGreaterThan({self.quantity(d)})",
            lambda: f"{q}.isLessThan({self.quantity(d)})",
            lambda: f"{q}.isInteger()",
            lambda: f"{q}.asInteger() {self.op()} {self.int_(0)}",
            lambda: f"sign({q}) {self.op()} {self.pick((-1, 0, 1))}",
            lambda: f"{q} == {self.quantity(d)}",
            lambda: f"{q}.asApproximateFloat() {self.op()} {self.number(0)}",
        )

    def semver_test(self, depth: int) -> str:
        v = self.semver(depth)
        return self.one_of(
            lambda: f"{v}.compareTo({self.semver(0)}) {self.op()} {self.pick((-1, 0, 1))}",
            lambda: f"{v}.isGreaterThan({self.semver(0)})",
            lambda: f"{v}.isLessThan({self.semver(0)})",
            lambda: f"{v}.{self.pick(('major', 'minor', 'patch'))}() {self.op()} {self.int_(0)}",
            lambda: f"{v} == {self.semver(0)}",
        )

    def optional_test(self) -> str:
        domain = self.pick((self.dev.driver, *OTHER_DOMAINS, UNKNOWN_DOMAIN))
        ident = self.pick([a.ident for a in self.dev.attrs] or list(IDS)) if not self.chance(3) else self.pick(IDS)
        base = f"{self._domain_ref(domain)}.?{ident}"
        default = self.any_term(0)
        return self.one_of(
            lambda: f"{base}.orValue({default}) {self.op()} {self.any_term(0)}",
            lambda: f"{base}.hasValue()",
            lambda: f"{base}.orValue({self.pick(('true', 'false'))})",
        )

    def in_test(self, depth: int) -> str:
        return self.one_of(
            lambda: f"{self.any_term(max(depth - 1, 0))} in {self.list_lit()}",
            lambda: f"{cel_string(self.pick(IDS))} in {self.any_domain()}",
            lambda: f"{cel_string(self.pick((*DRIVERS, *OTHER_DOMAINS, UNKNOWN_DOMAIN)))} in device.attributes",
            lambda: f"{cel_string(self.pick((*DRIVERS, *OTHER_DOMAINS)))} in device.capacity",
        )

    def list_test(self, depth: int) -> str:
        lst = self.list_lit()
        term = self.any_term(max(depth - 1, 0))
        return self.one_of(
            lambda: f"{lst}.exists(x, x {self.op()} {term})",
            lambda: f"{lst}.all(x, x {self.op()} {term})",
            lambda: f"{lst}.exists_one(x, x == {term})",
            lambda: f"size({lst}) {self.op()} {self.pick((0, 1, 3))}",
            lambda: f"{lst}.filter(x, x != {term}).size() > 0",
            lambda: f"{lst}.map(x, x == {term}).exists(y, y)",
            lambda: f"{self.known_domain()}.exists(k, k.startsWith({cel_string(self.pick(('c', 'm', 'u')))}))",
        )

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

    def misc_test(self, depth: int) -> str:
        d = max(depth - 1, 0)
        s = self.string(d)
        lst = self.list_lit()
        return self.one_of(
            lambda: f"{s}.matches({self.regex()})",
            lambda: f"matches({s}, {self.regex()})",
            lambda: f"{s}.find({self.regex()}) {self.pick(('==', '!='))} {self.string(0)}",
            lambda: f"{s}.findAll({self.regex()}).size() {self.op()} {self.pick((0, 1, 2))}",
            lambda: f"{s}.findAll({self.regex()}, {self.pick((-1, 0, 1, 2))}) == {self.list_lit()}",
            lambda: f"{s}.matches({s})",
            lambda: f"int({cel_string(self.pick(INT_TEXTS))}) {self.op()} {self.int_(0)}",
            lambda: f"uint({cel_string(self.pick(('42', '-1', '+3', '18446744073709551616', 'x')))}) {self.op()} 3u",
            lambda: f"double({cel_string(self.pick(DOUBLE_TEXTS))}) {self.op()} {self.number(0)}",
            lambda: f"bool({cel_string(self.pick(('true', 'True', 'TRUE', 't', '1', 'yes', 'F', '0')))})",
            lambda: f"string({self.any_term(0)}) {self.pick(('==', '!=', '<'))} {self.string(0)}",
            lambda: f"type({self.any_term(d)}) == {self.pick(TYPE_NAMES)}",
            lambda: f"dyn({self.any_term(d)}) {self.op()} {self.any_term(0)}",
            lambda: f"{self.attr()}.includes({self.any_term(0)})",
            lambda: f"{lst}.includes({self.any_term(0)})",
            lambda: f"{s}.trim() {self.op()} {self.string(0)}",
            lambda: f"{s}.replace({self.string(0)}, {self.string(0)}, {self.pick((-1, 0, 1, 2))}) == {self.string(0)}",
            lambda: f"{s}.split({self.string(0)}, {self.pick((-1, 0, 1, 2))}).size() {self.op()} {self.pick((0, 1, 2))}",
            lambda: f"strings.quote({s}) {self.op()} {self.string(0)}",
            lambda: f"{lst}.sort() == {self.list_lit()}",
            lambda: f"{lst}.distinct().size() {self.op()} {self.pick((0, 1, 2))}",
            lambda: f"{lst}.reverse() == {self.list_lit()}",
            lambda: f"{lst}.slice({self.pick((0, 1, 2, -1))}, {self.pick((0, 1, 3))}).size() > 0",
            lambda: f"[{lst}, {self.list_lit()}].flatten().size() {self.op()} {self.pick((0, 2, 4))}",
            lambda: f"lists.range({self.pick((0, 3, -1))}).size() {self.op()} {self.pick((0, 3))}",
            lambda: f"{lst}.isSorted()",
            lambda: f"{lst}.{self.pick(('sum', 'min', 'max'))}() {self.op()} {self.any_term(0)}",
            lambda: f"{lst}.{self.pick(('indexOf', 'lastIndexOf'))}({self.any_term(0)}) {self.op()} {self.pick((-1, 0, 1))}",
            lambda: f"{lst}.{self.pick(('first', 'last'))}().orValue({self.any_term(0)}) {self.op()} {self.any_term(0)}",
            lambda: f"sets.{self.pick(('contains', 'equivalent', 'intersects'))}({lst}, {self.list_lit()})",
            lambda: f"{self.known_domain()}.{self.pick(('all', 'exists', 'existsOne'))}(k, v, {self.two_var_body()})",
            lambda: f"{lst}.{self.pick(('all', 'exists', 'exists_one'))}(i, v, v {self.op()} i)",
            lambda: f"{lst}.transformList(i, v, {self.pick(('v', 'i', 'v == i'))}).size() {self.op()} {self.pick((0, 1, 2))}",
            lambda: (
                f"{self.known_domain()}[?{cel_string(self.pick(IDS))}].orValue({self.any_term(0)}) {self.op()} {self.any_term(0)}"
            ),
            lambda: f"{lst}[?{self.pick((0, 1, 5, -1))}].hasValue()",
            lambda: f"optional.{self.pick(('of', 'ofNonZeroValue'))}({self.any_term(0)}).{self.pick(OPTIONAL_TAILS)}",
            lambda: f"optional.none().or(optional.of({self.any_term(0)})).hasValue()",
            lambda: self.map_index_test(string_keys=True),
            lambda: self.map_index_test(string_keys=False),
            lambda: f"b{cel_string(self.pick(('', 'a', 'ä')))} {self.op()} b{cel_string(self.pick(('', 'a', 'b')))}",
            lambda: f"size(b{cel_string(self.pick(('', 'a', 'ä')))}) {self.op()} {self.pick((0, 1, 2))}",
            lambda: f"{self.number(d)} {self.pick(('+', '-', '*', '/', '%'))} {self.number(d)} {self.op()} {self.number(0)}",
            lambda: f"{s} {self.op()} {self.string(0)}",
            lambda: f"{s} + {self.any_term(0)} == {self.string(0)}",
        )

    def any_domain(self) -> str:
        """``device.attributes["d"]`` (or a bound alias) for any domain, the unknown one included."""
        return self._domain_ref(self.pick((self.dev.driver, *OTHER_DOMAINS, UNKNOWN_DOMAIN)))

    def known_domain(self) -> str:
        """``device.attributes["d"]`` for a domain devices use."""
        return self._domain_ref(self.pick((self.dev.driver, *OTHER_DOMAINS)))

    def map_index_test(self, *, string_keys: bool) -> str:
        """Indexing a map literal with a present, missing or cross-type key."""
        if string_keys:
            lit = f"{{{cel_string('a')}: {self.any_term(0)}, {cel_string('b')}: {self.any_term(0)}}}"
            key = self.pick((cel_string("a"), cel_string("c"), "1"))
        else:
            lit = f"{{1: {self.any_term(0)}, 2u: {self.any_term(0)}}}"
            key = self.pick(("1", "2", "1.0", "2u", "3"))
        return f"{lit}[{key}] {self.op()} {self.any_term(0)}"

    def two_var_body(self) -> str:
        return self.pick(
            (
                "k.startsWith('c')",
                "v == 132",
                "k != '' && v != null",
                "type(v) == int",
                "v",
                "string(v) == k",
            )
        )

    def bind(self, depth: int) -> str:
        domain = self.pick((self.dev.driver, *OTHER_DOMAINS, UNKNOWN_DOMAIN))
        var = self.pick(("gpu", "a", "dra"))
        init = f'device.attributes["{domain}"]'
        self.bound.append((var, domain))
        try:
            body = self.boolean(depth)
        finally:
            self.bound.pop()
        return f"cel.bind({var}, {init}, {body})"

    def whole(self, depth: int) -> str:
        """A selector: usually a bool expression; sometimes a non-bool one (a compile or runtime error)."""
        if self.chance(25):
            return self.any_term(1)
        return self.boolean(depth)


@st.composite
def regex_cases(draw: Draw[Any]) -> tuple[str, dict[str, Any], str]:
    """A RE2 pattern from the grammar used by ``matches``, ``find`` or ``findAll`` on a string."""
    dev = draw(devices())
    g = Grammar(draw, dev)
    subject = cel_string(draw(st.sampled_from(STRINGS) | st.text(alphabet="abAB09 _-.\n\tä/", max_size=8)))
    pattern = g.regex()
    k = draw(st.integers(0, 3))
    n = draw(st.integers(0, 6))
    expr = draw(
        st.sampled_from(
            (
                f"{subject}.matches({pattern})",
                f"matches({subject}, {pattern})",
                f"{subject}.find({pattern}).size() == {k}",
                f"{subject}.find({pattern}) == {subject}.substring(0, {k})",
                f"{subject}.findAll({pattern}).size() == {k}",
                f"{subject}.findAll({pattern}, {k}).join('|').size() == {n}",
                f"{subject}.findAll({pattern}).join('|').size() == {n}",
                f"dyn({subject}).matches(dyn({pattern}))",
                f"{subject}.find(dyn({pattern})).size() == {k}",
            )
        )
    )
    return dev.driver, dev.json, expr


@st.composite
def selector_cases(draw: Draw[Any]) -> tuple[str, dict[str, Any], str]:
    """(driver, device JSON, expression)."""
    dev = draw(devices())
    expr = Grammar(draw, dev).whole(draw(st.integers(0, 3)))
    return dev.driver, dev.json, expr
