"""Type checks and bounds for the API objects the simulator takes: :class:`Reader`, the API's limits.

Called by the object readers (``objects.py``, ``claim_objects.py``: also :func:`named_reader`,
:func:`read_metadata`, :func:`put_present`), by :func:`dra_driver.schedsim.allocator.explain`
(the input lists) and by ``dra-gpu explain`` (pods and claim templates), before any simulation.
Objects come from files a user wrote or from the API server as plain JSON, so any field may hold
the wrong type. The readers copy only the fields the simulator reads, check each one's type as
Go's JSON decoding would (an object, a list, a string, an int64, a bool, a quantity) and drop
what Go would ignore: unknown fields and nulls. A wrong type, or more items than the API allows
(128 devices per slice, 32 requests per claim, ...), raises :class:`InvalidObject` naming the
object and the field; a message never contains the offending value itself (it may be huge or
deeply nested). Downstream code can then trust the shapes, and the work per object is bounded
by the API's own limits.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any, NoReturn

from dra_driver.core.quantity import QuantityError, parse_quantity

# Limits of resource.k8s.io/v1 (k8s.io/api/resource/v1/types.go).
MAX_DEVICES_PER_SLICE = 128  # ResourceSliceMaxDevices
MAX_COUNTER_SETS = 8  # ResourceSliceMaxCounterSets
MAX_COUNTERS_PER_SET = 32  # ResourceSliceMaxCountersPerCounterSet
MAX_CONSUMPTIONS_PER_DEVICE = 2  # ResourceSliceMaxDeviceCounterConsumptionsPerDevice
MAX_COMPATIBILITY_GROUPS = 2  # DeviceCompatibilityGroupsMaxSize (per counter consumption, 1.37+)
MAX_DERIVED_ATTRIBUTES = 32  # a request's derivedAttributes (1.37+)
MAX_ATTRIBUTES_AND_CAPACITIES = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
MAX_ATTRIBUTE_VALUES = 48  # ResourceSliceMaxAttributeValuesPerDevice
MAX_ATTRIBUTE_VALUE_LENGTH = 64  # DeviceAttributeMaxValueLength
MAX_TAINTS = 16  # DeviceTaintsMaxLength
MAX_BINDING_CONDITIONS = 4  # BindingConditionsMaxSize (also BindingFailureConditionsMaxSize)
MAX_VALID_VALUES = 10  # CapacityRequestPolicy.ValidValues
MAX_REQUESTS = 32  # DeviceRequestsMaxSize
MAX_SUBREQUESTS = 8  # FirstAvailableDeviceRequestMaxSize
MAX_CONSTRAINTS = 32  # DeviceConstraintsMaxSize
MAX_SELECTORS = 32  # DeviceSelectorsMaxSize (also a DeviceClass's)
MAX_TOLERATIONS = 16  # DeviceTolerationsMaxLength
MAX_RESULTS = 32  # AllocationResultsMaxSize
MAX_EXPRESSION_LENGTH = 10 * 1024  # CELSelectorExpressionMaxLength
MAX_NAME_LENGTH = 253  # a DNS subdomain: the longest name of anything here
# A quantity's value below 10**30 (Go parses "1e2147483647"; exact arithmetic on it would not end).
MAX_QUANTITY_DIGITS = 30
# Not API limits: bounds on what one explanation reads, far above any real cluster's need.
MAX_NODE_SELECTOR_TERMS = 64
MAX_NODE_SELECTOR_VALUES = 10_000
MAX_STRING_LENGTH = 1024  # taint and toleration keys and values, operators, modes
MAX_POD_CLAIMS = 128  # claims of one pod (the API sets no limit; each claim holds up to 32 devices)
MAX_SLICES = 20_000
MAX_DEVICES = 200_000  # devices in all slices together
MAX_CLASSES = 10_000
MAX_ALLOCATED_CLAIMS = 200_000
MAX_NODES = 20_000  # nodes with labels


class InvalidObject(ValueError):
    """An API object the simulator cannot read: a field of the wrong type, or too many items."""


_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "a boolean"),
    ((int, float), "a number"),
    (str, "a string"),
    ((list, tuple), "a list"),
    (Mapping, "an object"),
)


def _kind(v: Any) -> str:
    """How a message names the type of ``v`` (never its value)."""
    if v is None:
        return "null"
    for t, name in _KINDS:
        if isinstance(v, t):
            return name
    return type(v).__name__


def show(name: str, limit: int = 80) -> str:
    """``name`` for a message: control characters escaped, cut to ``limit`` characters."""
    text = json.dumps(name[: limit + 1])[1:-1]
    return text if len(name) <= limit else text[:limit] + "..."


@functools.lru_cache(maxsize=4096)
def _quantity_error(text: str) -> str | None:
    try:
        q = parse_quantity(text)
    except QuantityError as err:
        return str(err)[:200]
    if q.magnitude() > MAX_QUANTITY_DIGITS:
        return f"more than {MAX_QUANTITY_DIGITS} digits before the decimal point (the largest int64 quantity, 8Ei, has 19)"
    return None


def plain_quantity(v: Any) -> bool:
    """``v`` is a string :meth:`Reader.quantity` takes as it is: what the fast paths of the readers copy directly."""
    return type(v) is str and len(v) <= MAX_STRING_LENGTH and _quantity_error(v) is None


class Reader:
    """Type checks for the fields of one object; every failure names ``label`` and the field's path."""

    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        self.label = label

    def fail(self, path: str, msg: str) -> NoReturn:
        """Raise :class:`InvalidObject` for ``path``."""
        raise InvalidObject(f"{self.label}: {show(path, 300)}: {msg}" if path else f"{self.label}: {msg}")

    def obj(self, v: Any, path: str, limit: int | None = None) -> Mapping[str, Any]:
        """An object (null or absent reads as empty); its keys must be strings."""
        if v is None:
            return {}
        if type(v) is not dict and not isinstance(v, Mapping):
            self.fail(path, f"must be an object, not {_kind(v)}")
        if limit is not None and len(v) > limit:
            self.fail(path, f"{len(v)} entries, at most {limit} allowed")
        for k in v:
            if type(k) is not str and not isinstance(k, str):
                self.fail(path, f"keys must be strings, not {_kind(k)}")
            if len(k) > MAX_NAME_LENGTH:
                self.fail(path, f"key {show(k)} is longer than {MAX_NAME_LENGTH} characters")
        return v

    def top(self, v: Any) -> Mapping[str, Any]:
        """The object itself: an object (null is not one)."""
        if not isinstance(v, Mapping):
            self.fail("", f"must be an object, not {_kind(v)}")
        return self.obj(v, "")

    def seq(self, v: Any, path: str, limit: int) -> list[Any]:
        """A list (null or absent reads as empty) of at most ``limit`` items."""
        if v is None:
            return []
        if not isinstance(v, list | tuple):
            self.fail(path, f"must be a list, not {_kind(v)}")
        if len(v) > limit:
            self.fail(path, f"{len(v)} items, at most {limit} allowed")
        return list(v)

    def text(self, v: Any, path: str, limit: int = MAX_NAME_LENGTH) -> str | None:
        """A string of at most ``limit`` characters, or None."""
        if v is None:
            return None
        if not isinstance(v, str):
            self.fail(path, f"must be a string, not {_kind(v)}")
        if len(v) > limit:
            self.fail(path, f"{len(v)} characters, at most {limit} allowed")
        return v

    def integer(self, v: Any, path: str) -> int | None:
        """An int64, or None."""
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            self.fail(path, f"must be an integer, not {_kind(v)}")
        if not -(2**63) <= v < 2**63:
            self.fail(path, "integer out of range (int64)")
        return v

    def flag(self, v: Any, path: str) -> bool | None:
        """A boolean, or None."""
        if v is None:
            return None
        if not isinstance(v, bool):
            self.fail(path, f"must be a boolean, not {_kind(v)}")
        return v

    def quantity(self, v: Any, path: str) -> str | None:
        """A parsable quantity (a string, or a number as Go's ``resource.Quantity`` also takes), as a string."""
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            self.fail(path, f"must be a quantity string, not {_kind(v)}")
        if isinstance(v, int) and not -(10**30) < v < 10**30:
            self.fail(path, "quantity out of range")
        text = v if isinstance(v, str) else str(v)
        if len(text) > MAX_STRING_LENGTH:
            self.fail(path, f"quantity of {len(text)} characters, at most {MAX_STRING_LENGTH} allowed")
        err = _quantity_error(text)
        if err is not None:
            self.fail(path, f"invalid quantity: {err}")
        return text


# -- what every object reader (objects.py, claim_objects.py) starts from ------------------------
def put_present(out: dict[str, Any], key: str, value: Any) -> None:
    """``out[key] = value`` unless the value is None (Go ignores a null field)."""
    if value is not None:
        out[key] = value


def named_reader(kind: str, obj: Any, index: int) -> tuple[Reader, Mapping[str, Any]]:
    """A reader named after the object (``Kind ns/name``, or ``Kind #index`` when it has no usable name)."""
    r = Reader(f"{kind} #{index + 1}")
    o = r.top(obj)
    meta = o.get("metadata")
    if isinstance(meta, Mapping):
        name, ns = meta.get("name"), meta.get("namespace")
        if isinstance(name, str) and name and len(name) <= MAX_NAME_LENGTH:
            prefix = f"{show(ns)}/" if isinstance(ns, str) and ns and len(ns) <= MAX_NAME_LENGTH else ""
            r.label = f"{kind} {prefix}{show(name)}"
    return r, o


def read_metadata(r: Reader, v: Any) -> dict[str, Any]:
    """An object's ``metadata``: its name, namespace and uid (where set)."""
    m = r.obj(v, "metadata")
    out: dict[str, Any] = {}
    for k in ("name", "namespace", "uid"):
        put_present(out, k, r.text(m.get(k), f"metadata.{k}"))
    return out
