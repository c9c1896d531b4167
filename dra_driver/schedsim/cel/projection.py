"""Which parts of a device a selector reads, and devices seen through those parts only.

Called by ``environment.py``. A fleet has few kinds of hardware and many copies of each: 5,000
nodes with 8 GPUs are 40,000 devices but a handful of (product, driver version) combinations. A
selector's answer depends only on the attributes and capacities it reads, so it is evaluated once
per distinct *projection* of a device onto them and the answer is reused for every device with
the same projection. ``reads.py`` finds the parts statically: ``device.attributes["d"].x``,
``["x"]``, ``.?x``, ``has(...)`` (also through ``cel.bind``), ``device.capacity`` likewise,
``device.driver`` and ``device.allowMultipleAllocations``; anything it cannot pin down (a domain
map passed around or iterated, a computed key) widens the read to the whole domain, or to the
whole device. A map read whole is keyed with its entries in order (CEL iterates a map in its
order). A :class:`DeviceView` holds one device split by domain, built once and shared by every
selector; :meth:`Projector.published_key` gives a view's key from the device's published maps
without one, for selectors that read single entries (the allocator's outcomes by projection).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from dra_driver.core.quantity import QuantityError, parse_quantity
from dra_driver.schedsim.cel.device import device_value
from dra_driver.schedsim.cel.reads import ALL, Reads
from dra_driver.schedsim.cel.semver import SemverError, parse_semver


def _split(name: str, driver: str) -> tuple[str, str]:
    if "/" in name:
        domain, ident = name.split("/", 1)
        return domain, ident
    return driver, name


_UNSET: Any = object()


class DeviceView:
    """One device as CEL sees it, plus hashable pieces for projection keys.

    Built cheaply and filled in on demand: a selector that reads one attribute looks that one up
    in the published map (:meth:`piece`); the maps split by domain (``attributes``, ``capacity``),
    the conversion error (``error``) and the CEL value are each computed once, when first asked for.
    """

    __slots__ = ("_attributes", "_capacity", "_error", "cached_value", "device", "driver", "lists", "multi")

    def __init__(self, device: Mapping[str, Any], driver: str, error: str | None = _UNSET, *, lists: bool = True) -> None:
        self.device = device
        self.driver = driver
        self.lists = lists  # list-typed attributes are CEL lists (1.37+)
        self.multi = bool(device.get("allowMultipleAllocations", False))
        self._attributes: dict[str, dict[str, Any]] | None = None
        self._capacity: dict[str, dict[str, Any]] | None = None
        self._error: str | None = error
        self.cached_value: Any = None

    @staticmethod
    def of(device: Mapping[str, Any], driver: str, error: str | None = _UNSET, *, lists: bool = True) -> DeviceView:
        """A view of ``device`` (API JSON) for ``driver``.

        ``error``: the device's conversion error (what :attr:`error` would find), when the caller
        already knows it (see :func:`attributes_error`, :func:`capacity_error`); else found when first asked for.
        ``lists``: the release converts list-typed attributes (1.37+, the newest rules' default; see
        :func:`~.device.device_value`).
        """
        return DeviceView(device, driver, error, lists=lists)

    @property
    def attributes(self) -> dict[str, dict[str, Any]]:
        """Domain -> id -> hashable value: (kind, value) for the usual one-key form."""
        if self._attributes is None:
            attrs: dict[str, dict[str, Any]] = {}
            for name, attr in (self.device.get("attributes") or {}).items():
                d, i = _split(name, self.driver)
                attrs.setdefault(d, {})[i] = _attr_value(attr)
            self._attributes = attrs
        return self._attributes

    @property
    def capacity(self) -> dict[str, dict[str, Any]]:
        """Domain -> id -> the published quantity text."""
        if self._capacity is None:
            caps: dict[str, dict[str, Any]] = {}
            for name, cap in (self.device.get("capacity") or {}).items():
                d, i = _split(name, self.driver)
                caps.setdefault(d, {})[i] = _cap_value(cap)
            self._capacity = caps
        return self._capacity

    @property
    def error(self) -> str | None:
        """The device fails CEL conversion (an unparsable version or quantity): every selector errs with this."""
        if self._error is _UNSET:
            error = None
            for name, attr in (self.device.get("attributes") or {}).items():
                if type(attr) is dict and len(attr) == 1 and next(iter(attr)) in _PLAIN_KINDS:
                    continue  # the usual form of a kind that always converts
                error = _attribute_error(name, attr, self.lists)
                if error is not None:
                    break
            if error is None:
                for name, cap in (self.device.get("capacity") or {}).items():
                    error = _capacity_error(name, _cap_value(cap))
                    if error is not None:
                        break
            self._error = error
        return self._error

    def value(self) -> dict[str, Any]:
        """The CEL ``device`` value (built once)."""
        if self.cached_value is None:
            self.cached_value = device_value(self.device, driver=self.driver, lists=self.lists)
        value: dict[str, Any] = self.cached_value
        return value

    def piece(self, which: str, domain: str, ident: str | None) -> Any:
        """The hashable value of one read (missing reads as None)."""
        split = self._attributes if which == "attributes" else self._capacity
        if ident is None or split is not None:
            m = self.attributes if which == "attributes" else self.capacity
            dom = m.get(domain)
            if ident is None:
                return _freeze(dom)
            return None if dom is None else dom.get(ident)
        # One entry, looked up in the published map: the names that file under (domain, ident) are
        # "domain/ident" and, in the driver's domain, the bare "ident"; with both, the later one counts.
        raw: Mapping[str, Any] = self.device.get(which) or {}
        qualified = f"{domain}/{ident}" if "/" not in domain else None
        bare = ident if domain == self.driver and "/" not in ident else None
        found_q = qualified is not None and qualified in raw
        found_b = bare is not None and bare in raw
        if found_q and found_b:  # rare: let the split map decide, as it files them in order
            m = self.attributes if which == "attributes" else self.capacity
            return m[domain][ident]
        if not found_q and not found_b:
            return None
        v = raw[qualified] if found_q else raw[bare]  # type: ignore[index] # the found one is not None
        return _attr_value(v) if which == "attributes" else _cap_value(v)


def _attr_value(attr: Any) -> Any:
    """An attribute's hashable value: (kind, value) for the usual one-key form of a scalar."""
    if type(attr) is dict and len(attr) == 1:
        ((kind, value),) = attr.items()
        tv = type(value)
        if tv is str or tv is int or tv is bool or tv is float:
            return (kind, value)
    return _attr_key(attr)


def _cap_value(cap: Any) -> Any:
    return cap.get("value") if isinstance(cap, Mapping) else cap


@functools.lru_cache(maxsize=4096)
def _version_error(text: str) -> str | None:
    try:
        parse_semver(text)
    except SemverError as err:
        return str(err)
    return None


@functools.lru_cache(maxsize=4096)
def _quantity_error(text: str) -> str | None:
    try:
        parse_quantity(text)
    except QuantityError as err:
        return str(err)
    return None


_PLAIN_KINDS = frozenset({"int", "bool", "string"})  # attribute kinds that always convert


_LIST_KINDS = ("ints", "bools", "strings")  # list kinds that always convert (where lists do)
_FINE: Any = object()  # a list-typed value that converts


def _list_error(name: str, attr: Mapping[str, Any]) -> Any:
    """The conversion error of a list-typed value (:data:`_FINE`: it converts; None: the attribute has none)."""
    if any(attr.get(k) is not None for k in _LIST_KINDS):
        return _FINE
    if attr.get("versions") is None:
        return None
    for text in attr["versions"]:
        err = _version_error(str(text))
        if err is not None:
            return f"attribute {name}: parse semantic version: {err}"
    return _FINE


def _attribute_error(name: str, attr: Any, lists: bool = False) -> str | None:
    """The conversion error ``device_value`` raises for this attribute, if any (``lists``: list-typed values convert)."""
    if not isinstance(attr, Mapping):
        return f"attribute {name}: unsupported attribute value"
    listed = _list_error(name, attr) if lists else None
    if listed is not None:
        return None if listed is _FINE else str(listed)
    if "int" in attr or "bool" in attr or "string" in attr:
        return None
    if "version" in attr:
        err = _version_error(str(attr["version"]))
        return None if err is None else f"attribute {name}: parse semantic version: {err}"
    return f"attribute {name}: unsupported attribute value"


def _capacity_error(name: str, value: Any) -> str | None:
    err = _quantity_error(str(value if value is not None else ""))
    return None if err is None else f"capacity {name}: {err}"


def version_error(name: str, text: str) -> str | None:
    """The conversion error of the attribute ``name`` published as ``{"version": text}``, if any."""
    err = _version_error(text)
    return None if err is None else f"attribute {name}: parse semantic version: {err}"


def capacity_error(capacity: Mapping[str, Any]) -> str | None:
    """The first conversion error of a device's ``capacity`` map, as :attr:`DeviceView.error` finds it (None: none).

    With the attributes' (``version_error`` of the first version that fails, for attributes of one
    scalar each), a caller that has read a device's parts knows the device's error: the
    attributes' if any, else the capacity's.
    """
    for name, cap in capacity.items():
        error = _capacity_error(name, _cap_value(cap))
        if error is not None:
            return error
    return None


def _attr_key(attr: Any) -> Any:
    """A hashable stand-in for one published attribute: (kind, value) for the usual one-key form."""
    if isinstance(attr, Mapping) and len(attr) == 1:
        ((kind, value),) = attr.items()
        if isinstance(value, str | int | float | bool):
            return (kind, value)
    return _freeze(attr)


def _freeze(v: Any) -> Any:
    """A hashable stand-in for a value read whole: maps in their order (CEL iterates a map in it, so order is read too)."""
    if v is None or isinstance(v, str | int | float | bool | tuple):
        return v
    return json.dumps(v, separators=(",", ":"), default=repr)


class Projector:
    """Computes a selector's projection key of a device view."""

    __slots__ = ("_published", "driver", "everything", "multi", "pieces")

    def __init__(self, r: Reads) -> None:
        self._published: dict[str, tuple[tuple[bool, str | None, str | None], ...] | None] = {}  # see published_key
        self.everything = r.everything
        self.driver = r.driver
        self.multi = r.multi
        pieces: list[tuple[str, str | None, str | None]] = []
        for which in ("attributes", "capacity"):
            if which in r.whole_maps:
                pieces.append((which, None, None))
                continue
            for domain, ids in sorted(r.maps[which].items()):
                if ids == ALL:
                    pieces.append((which, domain, None))
                else:
                    pieces.extend((which, domain, i) for i in sorted(ids))
        self.pieces = tuple(pieces)

    def key(self, v: DeviceView) -> tuple[Any, ...] | None:
        """The projection key; None when the selector reads the whole device (no sharing)."""
        if self.everything:
            return None
        out: list[Any] = [v.driver if self.driver else None, v.multi if self.multi else None]
        for which, domain, ident in self.pieces:
            if domain is None:
                m = v.attributes if which == "attributes" else v.capacity
                out.append(_freeze(m))
            else:
                out.append(v.piece(which, domain, ident))
        return tuple(out)

    def published_key(
        self, attributes: Mapping[str, Any], capacity: Mapping[str, Any], driver: str, multi: bool
    ) -> tuple[Any, ...] | None:
        """:meth:`key` of the view of a device with these published maps, read from them without a view.

        ``multi``: the view's :attr:`DeviceView.multi`. None where it cannot be read this way: the
        selector reads the whole device, a whole map or a whole domain, or the device publishes one
        name both bare and with the driver's domain (the view decides which one counts).
        """
        names = self.published_names(driver)
        if names is None:
            return None
        out: list[Any] = [driver if self.driver else None, multi if self.multi else None]
        for is_attr, qualified, bare in names:
            raw = attributes if is_attr else capacity
            if qualified is not None and qualified in raw:
                if bare is not None and bare in raw:
                    return None
                v = raw[qualified]
            elif bare is not None and bare in raw:
                v = raw[bare]
            else:
                out.append(None)
                continue
            out.append(_attr_value(v) if is_attr else _cap_value(v))
        return tuple(out)

    def published_names(self, driver: str) -> tuple[tuple[bool, str | None, str | None], ...] | None:
        """Per piece the selector reads of a device of ``driver``: (an attribute?, its name with the domain, its bare name).

        The published names :meth:`published_key` looks up (computed once per driver); None where
        the selector reads the whole device, a whole map or a whole domain.
        """
        if driver not in self._published:
            self._published[driver] = self._names(driver)
        return self._published[driver]

    def _names(self, driver: str) -> tuple[tuple[bool, str | None, str | None], ...] | None:
        """Per piece: (an attribute?, its name with the domain, its bare name), as :meth:`DeviceView.piece` looks them up."""
        if self.everything:
            return None
        out = []
        for which, domain, ident in self.pieces:
            if domain is None or ident is None:
                return None
            qualified = f"{domain}/{ident}" if "/" not in domain else None
            bare = ident if domain == driver and "/" not in ident else None
            out.append((which == "attributes", qualified, bare))
        return tuple(out)
