"""What one explanation computes once per device *shape* and shares between nodes and devices.

Used by the allocator (``simulate.py``: :meth:`NodeAllocator.view`, :meth:`NodeAllocator.selector_outcome`,
:meth:`NodeAllocator.capacity_ok`, :meth:`NodeAllocator.fits_alone`)
and by candidate explanations (``candidates.py``). Selectors see a device through its driver,
attributes, capacity and ``allowMultipleAllocations`` only, so devices that share those (the
reader in ``fastread.py`` gives equal parts one copy) share one :class:`~dra_driver.schedsim.cel.DeviceView`
and one outcome of a request's selectors, however many nodes publish them. A device's own name
never enters a cached outcome: messages that name the device are worded by the caller. One
:class:`ShapeCache` serves one explanation (one set of claims, classes and rules); a
``NodeAllocator`` made without one gets its own, which computes the same answers. Counter checks
are shared the same way: while an attempt reserves nothing of a pool, whether a device's counters
fit depends only on the pool's available counters and the device's consumption (the reader gives
equal consumptions one copy too).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from dra_driver.schedsim.cel import DeviceView

# (driver, id of attributes, id of capacity, allowMultipleAllocations as selectors see it): the
# parts are kept alive by the view's device, so their ids stay theirs while the cache lives.
ViewKey = tuple[str, int, int, bool | None]


class _NotStored(enum.Enum):
    NOT_STORED = enum.auto()


NOT_STORED = _NotStored.NOT_STORED
"""The ``get`` default of the outcome caches, whose stored outcomes may be None (every selector accepts)."""


@dataclass(frozen=True, slots=True)
class SelectorOutcome:
    """Why a request's selectors reject a device: the first selector that is false or fails.

    ``group``: 0 for the class's selectors, 1 for the request's; ``index``: the selector's place
    in its list; ``stage``: ``false`` (it evaluated to false), ``compile`` (it does not compile)
    or ``runtime`` (its evaluation failed); for the last two, ``error_kind`` and ``message`` are
    the :class:`~dra_driver.schedsim.cel.CelError`'s.
    """

    group: int
    index: int
    expression: str
    stage: str
    error_kind: str = ""
    message: str = ""


@dataclass(slots=True)
class ShapeCache:
    """What is computed once per shape: views, selector outcomes, capacity and counter checks (each keyed as noted)."""

    views: dict[ViewKey, DeviceView] = field(default_factory=dict)
    # (claim index, request name) -> view key (as :attr:`views`) -> the outcome; None: every selector accepts the device.
    outcomes: dict[tuple[int, str], dict[ViewKey, SelectorOutcome | None]] = field(default_factory=dict)
    # (claim index, request name) -> the class's then the request's selectors, compiled (see ``simulate.py``).
    chains: dict[tuple[int, str], tuple[Any, ...]] = field(default_factory=dict)
    # (claim index, request name) -> what its selectors read of a device (``NodeAllocator._projection``) -> the outcome.
    projections: dict[tuple[int, str], dict[tuple[Any, ...], SelectorOutcome | None]] = field(default_factory=dict)
    # Devices whose outcome was found by projection, without a view: kept alive, so their parts' ids in outcomes stay theirs.
    alive: list[Any] = field(default_factory=list)
    # (id of capacity, 1.37's arithmetic, milli units) -> (the capacity, kept alive; capacity_fits' answer; its
    # error, or None), for requests that ask for no capacity on devices nothing uses yet.
    capacity: dict[tuple[int, bool, bool], tuple[Any, tuple[bool, str], str | None]] = field(default_factory=dict)
    # The content of a pool's available counters -> id of a device's consumesCounters -> (the
    # consumesCounters, kept alive; whether it fits them), for pools the attempt reserves nothing of yet.
    counters: dict[tuple[Any, ...], dict[int, tuple[Any, bool]]] = field(default_factory=dict)
    # id of an attributes or capacity map -> (the map, kept alive; its conversion error for CEL, or
    # None), as the reader found them (``fastread.DeviceMemo.errors``): a view of a device whose
    # parts are all here is given its error instead of looking for it.
    conversion_errors: dict[int, tuple[Any, str | None]] = field(default_factory=dict)
    # id of an attributes map -> (the map, kept alive; the map it was read from; the names whose
    # values differ, each one string for another), as the reader found them (``fastread.DeviceMemo.derived``):
    # a device whose selectors read none of those names has the outcome of the same device with the other map.
    derived: dict[int, tuple[Any, Any, tuple[str, ...]]] = field(default_factory=dict)
    # (claim index, request name, driver) -> the attribute names (bare and with the domain) the
    # request's selectors read of a device of the driver; None where they read a whole map or domain, or the whole device.
    names_read: dict[tuple[int, str, str], frozenset[str] | None] = field(default_factory=dict)
