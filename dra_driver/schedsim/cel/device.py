"""One ResourceSlice device as CEL's ``device`` variable: attributes and capacities by domain.

Called by the environment (``CompiledSelector.matches``) and by device views (``projection.py``),
which build the value once per device and share it between selectors. Attribute and capacity
names without a domain are filed under the driver's; versions and quantities are parsed (once per
distinct string) and a value that does not parse fails the device with the scheduler's message.
List-typed attributes (``ints``, ``bools``, ``strings``, ``versions``) are CEL lists where the
release converts them (1.37+, whatever DRAListTypeAttributes says), else "unsupported attribute value".
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from dra_driver.core.quantity import Quantity, QuantityError, parse_quantity
from dra_driver.schedsim.cel.errors import CelRuntimeError
from dra_driver.schedsim.cel.semver import Semver, SemverError, parse_semver
from dra_driver.schedsim.cel.values import DomainMap


def split_qualified_name(name: str, driver: str) -> tuple[str, str]:
    """``domain/id`` -> (domain, id); a bare id belongs to the driver's domain."""
    if "/" in name:
        domain, ident = name.split("/", 1)
        return domain, ident
    return driver, name


_LIST_KINDS = (("ints", int), ("bools", bool), ("strings", str))


def _list_value(name: str, attr: Mapping[str, Any]) -> list[Any] | None:
    """A list-typed value, as 1.37's ``getAttributeValue`` looks for one before the scalars (None: none)."""
    for kind, convert in _LIST_KINDS:
        if attr.get(kind) is not None:
            return [convert(x) for x in attr[kind]]
    if attr.get("versions") is None:
        return None
    out = []
    for text in attr["versions"]:
        v = _version(str(text))
        if isinstance(v, SemverError):
            raise CelRuntimeError(f"attribute {name}: parse semantic version: {v}")
        out.append(v)
    return out


def _attribute_value(name: str, attr: Mapping[str, Any], lists: bool) -> Any:
    if lists:
        found = _list_value(name, attr)
        if found is not None:
            return found
    if "int" in attr:
        return int(attr["int"])
    if "bool" in attr:
        return bool(attr["bool"])
    if "string" in attr:
        return str(attr["string"])
    if "version" in attr:
        v = _version(str(attr["version"]))
        if isinstance(v, SemverError):
            raise CelRuntimeError(f"attribute {name}: parse semantic version: {v}")
        return v
    raise CelRuntimeError(f"attribute {name}: unsupported attribute value")


@functools.lru_cache(maxsize=4096)
def _version(text: str) -> Semver | SemverError:
    """Parsed once per distinct string (values are never mutated)."""
    try:
        return parse_semver(text)
    except SemverError as err:
        return err


@functools.lru_cache(maxsize=4096)
def _quantity(text: str) -> Quantity | QuantityError:
    """Parsed once per distinct string (capacities are never mutated)."""
    try:
        return parse_quantity(text)
    except QuantityError as err:
        return err


def device_value(device: Mapping[str, Any], *, driver: str, lists: bool = False) -> dict[str, Any]:
    """The CEL ``device`` value for one API device. Raises :class:`CelRuntimeError` on bad attributes.

    ``lists``: list-typed attributes are CEL lists (Kubernetes 1.37+); else such an attribute fails the device.
    """
    attributes: DomainMap = DomainMap()
    for name, attr in (device.get("attributes") or {}).items():
        domain, ident = split_qualified_name(name, driver)
        attributes.setdefault(domain, {})[ident] = _attribute_value(name, attr, lists)
    capacity: DomainMap = DomainMap()
    for name, cap in (device.get("capacity") or {}).items():
        domain, ident = split_qualified_name(name, driver)
        q = _quantity(str(cap.get("value", "")))
        if isinstance(q, QuantityError):
            raise CelRuntimeError(f"capacity {name}: {q}")
        capacity.setdefault(domain, {})[ident] = q
    return {
        "driver": driver,
        "allowMultipleAllocations": bool(device.get("allowMultipleAllocations", False)),
        "attributes": attributes,
        "capacity": capacity,
    }
