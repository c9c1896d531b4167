"""Hypothesis strategies: random CEL selectors over random DRA devices (``devices.py``).

A case is (driver, device, expression). Devices carry attributes of every type (int, bool,
string, version, and list-typed ints, bools, strings and versions; bare names filed under the
driver, qualified names under other domains and the driver's own) and capacities. Expressions
come from a typed grammar that mostly reads names the device has, sometimes names it lacks or
domains it does not have, and covers comparisons (also across types), ``&&``/``||``/``!``/ternary,
``has()``, ``.?x.orValue()``, ``in``, the string functions, the quantity and semver libraries,
``isQuantity``/``isSemver``, ``cel.bind``, list literals with ``exists``/``all``, list-typed
attributes (``includes``, ``in``, ``size``, indexing, ``exists``/``all``, the lists and sets
libraries), arithmetic and ``device.driver``/``allowMultipleAllocations``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from testkit.oracle.devices import (
    BAD_QUANTITIES,
    BAD_VERSIONS,
    DRIVERS,
    IDS,
    INTS,
    LIST_KINDS,
    OTHER_DOMAINS,
    QUANTITIES,
    STRINGS,
    UNKNOWN_DOMAIN,
    VERSIONS,
    DeviceSpec,
    Draw,
    cel_string,
    devices,
)
from tests.differential.regexes import REGEXES, RegexGrammar

INT_TEXTS = ("42", "-7", "+3", " 1", "1_0", "9223372036854775808", "0x10", "x")
DOUBLE_TEXTS = ("1.5", "1e3", "inf", "-Infinity", "NaN", "1e400", "0x1p-2", "1_0", ".5", "x")
TYPE_NAMES = ("int", "uint", "double", "string", "bool", "list", "map", "bytes", "null_type", "type")
OPTIONAL_TAILS = ("hasValue()", "orValue(1) == 1", "value() == 0")


class Grammar(RegexGrammar):
    """Builds one expression for one device; ``draw`` is Hypothesis's draw function (patterns: ``regexes.py``)."""

    OPS = ("==", "!=", "<", "<=", ">", ">=")

    def __init__(self, draw: Draw[Any], dev: DeviceSpec) -> None:
        super().__init__(draw)
        self.dev = dev
        self.bound: list[tuple[str, str]] = []  # (variable, domain) of enclosing cel.bind

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
            lambda: self.list_attr_test(),
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

    def list_attr_test(self) -> str:
        """A test of a list-typed attribute (of a list kind the device has, usually)."""
        a = self.attr(self.pick(LIST_KINDS))
        term = self.any_term(0)
        return self.one_of(
            lambda: f"{a}.includes({term})",
            lambda: f"{term} in {a}",
            lambda: f"{a}.size() {self.op()} {self.pick((0, 1, 2, 4))}",
            lambda: f"size({a}) == {self.pick((1, 2))}",
            lambda: f"{a}.exists(x, x {self.op()} {term})",
            lambda: f"{a}.all(x, x {self.op()} {term})",
            lambda: f"{a}.exists(v, v.compareTo(semver({cel_string(self.pick(VERSIONS))})) {self.op()} 0)",
            lambda: f"{a}[{self.pick((0, 1, 3, -1))}] {self.op()} {term}",
            lambda: f"{a} == {self.list_lit()}",
            lambda: f"sets.{self.pick(('contains', 'intersects'))}({a}, {self.list_lit()})",
            lambda: f"{a}.{self.pick(('sum', 'min', 'max'))}() {self.op()} {term}",
            lambda: f"{a}.sort()[0] {self.op()} {term}",
            lambda: f"{a}.filter(x, x != {term}).size() > 0",
            lambda: (
                f"{self.domain_of_list()}.?{self.pick([x.ident for x in self.dev.attrs] or list(IDS))}.orValue([]).size() > 0"
            ),
        )

    def domain_of_list(self) -> str:
        """``device.attributes["d"]`` of a domain with a list-typed attribute, if the device has one."""
        lists = [a for a in self.dev.attrs if a.kind in LIST_KINDS]
        return self._domain_ref(self.pick(lists).domain) if lists else self.known_domain()

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
