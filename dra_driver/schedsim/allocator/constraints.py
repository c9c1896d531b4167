"""A claim's ``matchAttribute`` and ``distinctAttribute`` constraints, with the allocator's bookkeeping.

Called by the allocator (``simulate.py``), which adds each device it picks to every constraint of
the claim and removes it again when it backtracks. Attributes are looked up as the Go allocator
looks them up (a bare name is the driver's); its quirks are kept (before Kubernetes 1.37, distinct
values are kept one per request name; from 1.37 every value taken is kept).
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


def _attr_key(a: Mapping[str, Any]) -> tuple[str, Any] | None:
    for t in ("string", "int", "bool", "version"):
        if t in a:
            return t, a[t]
    return None


class Constraint:
    """matchAttribute / distinctAttribute with the allocator's bookkeeping quirks."""

    def __init__(self, requests: set[str], attribute: str, *, distinct: bool, every_value: bool = True) -> None:
        self.requests, self.attribute, self.distinct = requests, attribute, distinct
        self.every_value = every_value  # distinct, 1.37+: every value taken, in order (else one per request name)
        self.taken: list[tuple[str, Any]] = []
        self.values: dict[str, tuple[str, Any]] = {}  # distinct before 1.37: one value per request name (a known quirk)
        self.first: tuple[str, Any] | None = None
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
        key = _attr_key(attr) if attr is not None else None
        if key is None or (self.distinct and self.every_value):
            return key is not None and self._take(key)
        if self.n == 0:
            if self.distinct:
                self.values[req.base] = key
            else:
                self.first = key
            self.n = 1
            return True
        if self.distinct:
            if any(v == key for v in self.values.values()):
                return False
            self.values[req.base] = key
        elif key != self.first:
            return False
        self.n += 1
        return True

    def _take(self, key: tuple[str, Any]) -> bool:
        """A distinct value, from 1.37: one not taken yet joins the others."""
        if key in self.taken:
            return False
        self.taken.append(key)
        self.n += 1
        return True

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
