"""What the cost estimator (``estimate.py``) works with: the release's environment, the sizes it keeps, cel-go's kinds.

Called by the estimator and by the compiler (``compiler.py``: :class:`Environment`, re-exported
by ``estimate.py``). :class:`Entry` and :class:`Local` are cel-go's ``entrySizeEstimate`` and a
variable in scope; :func:`cel_kind` and :func:`is_scalar` say how cel-go sees a declared type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dra_driver.schedsim.cel import types
from dra_driver.schedsim.cel.costmath import DEVICE_V134, Decl, Est, fixed
from dra_driver.schedsim.cel.values import Uint

__all__ = ["Entry", "Environment", "Local", "cel_kind", "is_scalar", "literal_size"]

_STRUCT_NAMES = frozenset({"kubernetes.Quantity", "kubernetes.Semver", "kubernetes.NamedFormat", "kubernetes.URL"})


@dataclass(frozen=True, slots=True)
class Environment:
    """What differs between the releases' estimators.

    ``cel_go``: the cel-go minor (26: ``matches()`` as a global function has no size estimate);
    ``includes``: whose ``includes`` is declared ("dra": 1.36's own estimate of 48 values; "lists":
    the Kubernetes lists library's); ``device``: the declared device type (with
    ``allowMultipleAllocations`` where the environment has consumable capacity); ``bound``: charge
    what the interpreter charges beyond the estimate (see the module docstring).
    """

    cel_go: int = 29
    includes: str = "lists"
    device: Decl = DEVICE_V134
    bound: bool = False


@dataclass(slots=True)
class Entry:
    """``entrySizeEstimate``: the container kind and the sizes of its keys (or indices) and values."""

    kind: str
    key: Est
    val: Est


@dataclass(slots=True)
class Local:
    """A comprehension variable or bind in scope: its path, size and entry sizes."""

    path: list[str]
    size: Est | None
    entry: Entry | None


def literal_size(v: Any) -> Est | None:
    """A literal's size (a string's or bytes' length, 1 for a scalar); None for anything else."""
    if isinstance(v, str):
        return fixed(len(v))
    if isinstance(v, bytes):
        return fixed(len(v))
    if v is None or isinstance(v, bool | int | float | Uint):
        return fixed(1)
    return None


def cel_kind(t: types.Type) -> str:
    """cel-go's kind of a type (Quantity, Semver, URL and named formats are object types there)."""
    if t.kind == types.OPAQUE_KIND and (t.name in _STRUCT_NAMES or t.name.startswith("kubernetes.authorization.")):
        return types.STRUCT_KIND
    return t.kind


def is_scalar(t: types.Type) -> bool:
    """A type of fixed size (or an optional of one), as cel-go's ``isScalar``."""
    if t.kind in (types.BOOL_KIND, types.DOUBLE_KIND, types.DURATION_KIND, types.INT_KIND, types.TIMESTAMP_KIND, types.UINT_KIND):
        return True
    return types.is_optional(t) and is_scalar(t.params[0])
