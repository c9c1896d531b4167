"""A claim's ``matchAttribute`` and ``distinctAttribute`` constraints, with the allocator's bookkeeping.

Called by the allocator (``simulate.py``), which adds each device it picks to every constraint of
the claim and removes it again when it backtracks. Attributes are looked up as the Go allocator
looks them up (a bare name is the driver's) and compared as its scalar comparison does (the
incubating and experimental allocators at every release's default gates): a value is its first
scalar, a string, int, bool or version in that order; any other value (a list-typed attribute, or
one with no value a release knows) is *non-scalar*. The first device of a constraint is always
accepted, whatever its value; after it, ``matchAttribute`` accepts only a scalar equal to the
first's, and ``distinctAttribute`` refuses a non-scalar and a scalar equal to one taken, while a
taken non-scalar never conflicts with a later scalar. Its quirks are kept: before Kubernetes 1.37
distinct values are kept one per request name (from 1.37 every value taken), and in 1.34 distinct
scalars are compared by pointer, so two devices never share one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dra_driver.schedsim.allocator.model import DeviceID, Request


def _lookup_attribute(d: Mapping[str, Any], driver: str, name: str) -> Mapping[str, Any] | None:
    attrs: Mapping[str, Any] = d.get("attributes") or {}
    if name in attrs:
        return dict(attrs[name])
    if "/" in name:
        domain, ident = name.split("/", 1)
        if domain == driver and ident in attrs:
            return dict(attrs[ident])
    return None


class _NonScalar:
    """The value of an attribute with no scalar (a list, or nothing the release knows): equal to no other."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<non-scalar>"


NON_SCALAR: Any = _NonScalar()


def attr_key(a: Mapping[str, Any]) -> tuple[str, Any] | Any:
    """(kind, value) of the attribute's first scalar, in the Go comparison's order; else :data:`NON_SCALAR`."""
    for t in ("string", "int", "bool", "version"):
        if a.get(t) is not None:
            return t, a[t]
    return NON_SCALAR


class Constraint:
    """matchAttribute / distinctAttribute with the allocator's bookkeeping quirks."""

    def __init__(
        self,
        requests: set[str],
        attribute: str,
        *,
        distinct: bool,
        every_value: bool = True,
        pointer_compare: bool = False,
    ) -> None:
        self.requests, self.attribute, self.distinct = requests, attribute, distinct
        self.every_value = every_value  # distinct, 1.37+: every value taken, in order (else one per request name)
        self.pointer_compare = pointer_compare  # distinct, 1.34: scalars compared by pointer (never equal)
        self.taken: list[Any] = []
        self.values: dict[str, Any] = {}  # distinct before 1.37: one value per request name (a known quirk)
        self.first: Any = None
        self.n = 0

    def _applies(self, req: Request) -> bool:
        if not self.requests:
            return True
        return req.base in self.requests or (bool(req.sub) and req.name in self.requests)

    def add(self, req: Request, d: Mapping[str, Any], did: DeviceID) -> bool:
        """Whether the device may join; records it if so."""
        if not self._applies(req):
            return True
        attr = _lookup_attribute(d, did[0], self.attribute)
        if attr is None:
            return False
        key = attr_key(attr)
        if self.distinct and self.every_value:
            ok = not self._conflicts(key, self.taken)
            if ok:
                self.taken.append(key)
        elif self.n == 0:  # the first device can always get picked
            ok = True
            if self.distinct:
                self.values[req.base] = key
            else:
                self.first = key
        elif self.distinct:
            ok = not self._conflicts(key, list(self.values.values()))
            if ok:
                self.values[req.base] = key
        else:
            ok = key is not NON_SCALAR and key == self.first
        if ok:
            self.n += 1
        return ok

    def _conflicts(self, key: Any, taken: list[Any]) -> bool:
        """``matchesAttribute`` of distinct: a non-scalar against any value taken, a scalar against an equal one."""
        if key is NON_SCALAR:
            return bool(taken)
        return not self.pointer_compare and key in taken

    def remove(self, req: Request) -> None:
        """Undo the latest :meth:`add` for ``req``."""
        if not self._applies(req):
            return
        if self.distinct and self.every_value:
            self.taken.pop()
        elif self.distinct:
            self.values.pop(req.base, None)
        self.n -= 1
        if self.n == 0:
            self.first = None
