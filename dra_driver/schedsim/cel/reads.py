"""Which parts of a device a selector reads, found statically from its syntax tree.

Called by the compiler (``compiler.py``: :func:`reads` of each selector) and by device views
and projectors (``projection.py``: :class:`Reads`, :data:`ALL`). Finds ``device.attributes["d"].x``,
``["x"]``, ``.?x``, ``has(...)`` (also through ``cel.bind``), ``device.capacity`` likewise,
``device.driver`` and ``device.allowMultipleAllocations``; anything it cannot pin down (a domain
map passed around or iterated, a computed key) widens the read to the whole domain, or to the
whole device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dra_driver.schedsim.cel.nodes import Call, Comprehension, CreateList, CreateMap, Expr, Ident, Literal, Select

__all__ = ["ALL", "Reads", "reads"]

ALL = "*"  # a whole domain, or every domain


@dataclass
class Reads:
    """What an expression reads of ``device``: per map (attributes/capacity) domain -> ids or ALL."""

    driver: bool = False
    multi: bool = False
    everything: bool = False
    maps: dict[str, dict[str, set[str] | str]] = field(default_factory=lambda: {"attributes": {}, "capacity": {}})
    whole_maps: set[str] = field(default_factory=set)  # "attributes"/"capacity" read in full

    def add(self, which: str, domain: str, ident: str | None) -> None:
        """Record ``device.<which>[domain].<ident>`` (ident None: the whole domain)."""
        domains = self.maps[which]
        if ident is None:
            domains[domain] = ALL
            return
        cur = domains.setdefault(domain, set())
        if isinstance(cur, set):
            cur.add(ident)


def _str(e: Expr) -> str | None:
    return e.value if isinstance(e, Literal) and isinstance(e.value, str) else None


class _Analyzer:
    def __init__(self) -> None:
        self.out = Reads()
        self.scopes: list[dict[str, tuple[str, str] | None]] = []  # var -> (map, domain) alias, or None (shadow)

    def alias(self, name: str) -> tuple[str, str] | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def is_device(self, e: Expr) -> bool:
        return isinstance(e, Ident) and e.name == "device" and not any("device" in s for s in self.scopes)

    def device_map(self, e: Expr) -> str | None:
        """``device.attributes`` / ``device.capacity`` -> its name."""
        if isinstance(e, Select) and not e.test_only and self.is_device(e.operand) and e.field in ("attributes", "capacity"):
            return e.field
        return None

    def domain_map(self, e: Expr) -> tuple[str, str] | None:
        """``device.attributes["d"]`` (or a cel.bind alias of it) -> (map, domain)."""
        if isinstance(e, Ident):
            return self.alias(e.name)
        if isinstance(e, Call) and e.function in ("_[_]", "_[?_]") and e.target is None:
            which = self.device_map(e.args[0])
            domain = _str(e.args[1])
            if which is not None and domain is not None:
                return which, domain
        if isinstance(e, Select) and not e.test_only:
            which = self.device_map(e.operand)
            if which is not None:
                return which, e.field
        return None

    def visit(self, e: Expr) -> None:  # noqa: PLR0911, PLR0912, PLR0915 - one branch per expression kind (a visitor)
        # device.attributes["d"].x / ["x"] / .?x / [?"x"] / has(...)
        if isinstance(e, Select):
            dm = self.domain_map(e.operand)
            if dm is not None:
                self.out.add(dm[0], dm[1], e.field)
                return
            dm = self.domain_map(e)
            if dm is not None and not isinstance(e.operand, Ident):
                self.out.add(dm[0], dm[1], None)
                return
            if self.is_device(e.operand):
                if e.field == "driver":
                    self.out.driver = True
                elif e.field == "allowMultipleAllocations":
                    self.out.multi = True
                elif e.field in ("attributes", "capacity"):
                    self.out.whole_maps.add(e.field)
                else:
                    self.out.everything = True
                return
            self.visit(e.operand)
            return
        if isinstance(e, Call) and e.target is None and e.function in ("_[_]", "_[?_]", "_?._") and len(e.args) == 2:
            dm = self.domain_map(e.args[0])
            key = _str(e.args[1])
            if dm is not None and key is not None:
                self.out.add(dm[0], dm[1], key)
                return
            dm = self.domain_map(e)
            if dm is not None:
                self.out.add(dm[0], dm[1], None)
                return
            which = self.device_map(e.args[0])
            if which is not None:  # a computed domain
                self.out.whole_maps.add(which)
                self.visit(e.args[1])
                return
        if isinstance(e, Ident):
            dm = self.alias(e.name)
            if dm is not None:
                self.out.add(dm[0], dm[1], None)  # the bound domain map used as a whole
            elif self.is_device(e):
                self.out.everything = True
            return
        if isinstance(e, Literal):
            return
        if isinstance(e, Call):
            for a in ([e.target] if e.target is not None else []) + e.args:
                self.visit(a)
            return
        if isinstance(e, CreateList):
            for x in e.elements:
                self.visit(x)
            return
        if isinstance(e, CreateMap):
            for en in e.entries:
                self.visit(en.key)
                self.visit(en.value)
            return
        if isinstance(e, Comprehension):
            self.visit(e.iter_range)
            bind = isinstance(e.iter_range, CreateList) and not e.iter_range.elements
            dm = self.domain_map(e.accu_init) if bind else None
            if dm is None:
                self.visit(e.accu_init)
            self.scopes.append({e.accu_var: dm})
            self.scopes.append({e.iter_var: None, **({e.iter_var2: None} if e.iter_var2 else {})})
            if not bind:  # an empty range never runs the loop (cel.bind's step only names the variable)
                self.visit(e.loop_condition)
                self.visit(e.loop_step)
            self.scopes.pop()
            self.visit(e.result)
            self.scopes.pop()
            return
        self.out.everything = True


def reads(root: Expr) -> Reads:
    """What ``root`` reads of the device."""
    a = _Analyzer()
    a.visit(root)
    return a.out
