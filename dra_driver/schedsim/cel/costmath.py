"""The arithmetic, constants and size hints cel-go's cost model and the Kubernetes one share.

Used by the static estimator (``estimate.py``, ``estimate_library.py``) and by the run-time
charges (``cost.py``, ``metered.py``). cel-go's estimates are (min, max) ranges of unsigned 64-bit
integers that saturate instead of overflowing (``checker/cost.go``); the constants are
``common/cost.go``'s and the Kubernetes library's (``apiserver/pkg/cel/library/cost.go``,
``limits.go``). The size hints are DRA's declaration of ``device``
(``k8s.io/dynamic-resource-allocation/cel``, resource.k8s.io/v1 limits): what the estimator
assumes of a value the expression cannot know the size of.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dra_driver.schedsim.cel import types
from dra_driver.schedsim.cel.nodes import Expr

# Functions both cost models price at a flat 1 (estimate and charge alike): the authorizer's builders
# and the IP, CIDR, format, quantity, semver and URL accessors.
_AUTHZ_BUILDERS = frozenset(
    {"serviceAccount", "path", "group", "resource", "subresource", "namespace", "name", "allowed", "reason", "error", "errored"}
)
_NOMINAL = frozenset(
    {
        "masked",
        "prefixLength",
        "family",
        "isUnspecified",
        "isLoopback",
        "isLinkLocalMulticast",
        "isLinkLocalUnicast",
        "isGlobalUnicast",
        "format.named",
        "sign",
        "asInteger",
        "isInteger",
        "asApproximateFloat",
        "isGreaterThan",
        "isLessThan",
        "compareTo",
        "add",
        "sub",
        "major",
        "minor",
        "patch",
        "getScheme",
        "getHostname",
        "getHost",
        "getPort",
        "getEscapedPath",
        "getQuery",
    }
)
FLAT_COST_FUNCTIONS = _AUTHZ_BUILDERS | _NOMINAL

U64 = (1 << 64) - 1
_U64_FLOAT = float(U64)  # math.MaxUint64 as Go converts it to float64
TWO_TO_64 = 2.0**64

SELECT_AND_IDENT_COST = 1
CONST_COST = 0
LIST_CREATE_BASE_COST = 10
MAP_CREATE_BASE_COST = 30
STRING_TRAVERSAL_COST_FACTOR = 0.1
REGEX_STRING_LENGTH_COST_FACTOR = 0.25
AUTHZ_CHECK_COST = 350_000
MAX_FORMAT_SIZE = 64  # apiserver/pkg/cel/limits.go
MAX_NAME_FORMAT_REGEX_SIZE = 128
ACCUMULATORS = frozenset({"@result", "@__result__"})

# DRA's declaration of ``device`` (resource.k8s.io/v1 limits).
DRIVER_NAME_MAX_LENGTH = 63
DEVICE_MAX_DOMAIN_LENGTH = 63
DEVICE_MAX_ID_LENGTH = 32
MAX_ATTRIBUTES_AND_CAPACITIES = 32
ATTRIBUTE_MAX_VALUE_LENGTH = 64
MAX_ATTRIBUTE_VALUES = 48

Est = tuple[int, int]  # (min, max), as cel-go's CostEstimate and SizeEstimate
UNKNOWN: Est = (0, U64)


# -- cel-go's saturating arithmetic ---------------------------------------------------------------
def add_u64(x: int, y: int) -> int:
    """``addUint64NoOverflow``."""
    return U64 if y > 0 and x > U64 - y else x + y


def mul_u64(x: int, y: int) -> int:
    """``multiplyUint64NoOverflow``."""
    return U64 if y != 0 and x > U64 // y else x * y


def by_factor(x: int, f: float) -> int:
    """``multiplyByCostFactor``: ``ceil(x * f)`` in float64, saturating."""
    xf = float(x)
    if xf > 0 and f > 0 and xf > _U64_FLOAT / f:
        return U64
    c = math.ceil(xf * f)
    return U64 if c >= TWO_TO_64 else int(c)


def e_add(a: Est, b: Est) -> Est:
    """Sum of two ranges (saturating)."""
    return add_u64(a[0], b[0]), add_u64(a[1], b[1])


def e_mul(a: Est, b: Est) -> Est:
    """Product of two ranges (saturating)."""
    return mul_u64(a[0], b[0]), mul_u64(a[1], b[1])


def e_factor(a: Est, f: float) -> Est:
    """A range times a cost factor, rounded up."""
    return by_factor(a[0], f), by_factor(a[1], f)


def e_union(a: Est, b: Est) -> Est:
    """The range covering both."""
    return min(a[0], b[0]), max(a[1], b[1])


def fixed(n: int) -> Est:
    """The range [n, n]."""
    return n, n


# -- DRA's declaration of the device variable (its DeclTypes) --------------------------------------
@dataclass(frozen=True, eq=False)
class Decl:
    """A DeclType as far as the size estimator reads it: its maximum size, fields, element and key types."""

    max_elements: int
    fields: dict[str, Decl] = field(default_factory=dict)
    elem: Decl | None = None
    key: Decl | None = None


_ATTRIBUTE = Decl(ATTRIBUTE_MAX_VALUE_LENGTH)  # max(64, 48) with list-type attributes: also 64
_DOMAIN = Decl(DEVICE_MAX_DOMAIN_LENGTH)
_ID = Decl(DEVICE_MAX_ID_LENGTH)
_QUANTITY = Decl(0)
_INNER_ATTRIBUTES = Decl(MAX_ATTRIBUTES_AND_CAPACITIES, elem=_ATTRIBUTE, key=_ID)
_INNER_CAPACITY = Decl(MAX_ATTRIBUTES_AND_CAPACITIES, elem=_QUANTITY, key=_ID)
_DEVICE_FIELDS = {
    "driver": Decl(DRIVER_NAME_MAX_LENGTH),
    "attributes": Decl(MAX_ATTRIBUTES_AND_CAPACITIES, elem=_INNER_ATTRIBUTES, key=_DOMAIN),
    "capacity": Decl(MAX_ATTRIBUTES_AND_CAPACITIES, elem=_INNER_CAPACITY, key=_DOMAIN),
}
DEVICE_V131 = Decl(0, fields=_DEVICE_FIELDS)
DEVICE_V134 = Decl(0, fields=_DEVICE_FIELDS | {"allowMultipleAllocations": Decl(1)})


def dra_size(path: list[str] | None, device: Decl) -> Est | None:
    """DRA's ``sizeEstimator.EstimateSize``: the declared maximum size along a path rooted at ``device``."""
    if not path or path[0] != "device":
        return None
    node = device
    for name in path[1:]:
        if name in ("@items", "@values"):
            if node.elem is None:
                return None
            node = node.elem
        elif name == "@keys":
            if node.key is None:
                return None
            node = node.key
        else:
            f = node.fields.get(name)
            if f is None:
                if node.elem is _ATTRIBUTE:
                    node = _ATTRIBUTE
                    continue
                return None
            node = f
    return 0, node.max_elements


@dataclass(slots=True)
class Node:
    """cel-go's ``AstNode``: the path, type and expression of a node and its size computed so far."""

    path: list[str] | None
    type: types.Type
    expr: Expr | None
    computed: Est | None
