"""Inputs and outputs of the allocation simulator, read from and written as API JSON dicts.

Called by ``simulate.py`` (pools, requests, allocated state) and ``dra-gpu explain`` (results).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.core.quantity import Quantity, QuantityError, parse_quantity

DeviceID = tuple[str, str, str]  # driver, pool, device


def qty(value: Any) -> Quantity:
    """A quantity from API JSON (string or number); an unparsable one counts as zero.

    Parsed once per distinct text: the allocator reads the same counters and capacities for
    every device of every node. The result is shared, so it must not be changed in place (the
    arithmetic returns new quantities).
    """
    return _qty_text(str(value))


@functools.lru_cache(maxsize=4096)
def _qty_text(text: str) -> Quantity:
    try:
        return parse_quantity(text)
    except QuantityError:
        return parse_quantity("0")


def slice_spec(s: Mapping[str, Any]) -> Mapping[str, Any]:
    """A ResourceSlice's ``spec`` (empty if absent)."""
    return s.get("spec") or {}


class AllocationAborted(Exception):
    """The scheduler's Filter error: the whole attempt stops (not "unsuitable node")."""


@dataclass(slots=True)
class Request:
    """One request or subrequest as the allocator sees it."""

    name: str  # "gpu" or "gpu/sub"
    base: str  # the main request's name
    sub: str  # the subrequest's name, "" if none
    class_name: str
    selectors: list[str]
    mode: str
    count: int
    admin_access: bool
    tolerations: Sequence[Mapping[str, Any]]
    capacity: dict[str, Quantity]
    has_capacity: bool = False  # the request sets ``capacity`` (even empty)
    derived_attributes: int = 0  # how many ``derivedAttributes`` it defines (1.37+)

    @property
    def own_name(self) -> str:
        """The name the scheduler's messages give it: a subrequest's own name (without its request's), else the request's."""
        return self.sub or self.base

    @staticmethod
    def parse(base: str, sub: str, spec: Mapping[str, Any]) -> Request:
        """From an ``exactly`` or ``firstAvailable[i]`` block."""
        sels = [str((s.get("cel") or {}).get("expression", "")) for s in spec.get("selectors") or []]
        caps = {k: qty(v) for k, v in ((spec.get("capacity") or {}).get("requests") or {}).items()}
        return Request(
            name=f"{base}/{sub}" if sub else base,
            base=base,
            sub=sub,
            class_name=str(spec.get("deviceClassName", "")),
            selectors=sels,
            mode=str(spec.get("allocationMode") or "ExactCount"),
            count=int(spec.get("count") or 1),
            admin_access=bool(spec.get("adminAccess", False)),
            tolerations=list(spec.get("tolerations") or []),
            capacity=caps,
            has_capacity=spec.get("capacity") is not None,
            derived_attributes=len(spec.get("derivedAttributes") or ()),
        )


def claim_requests(claim: Mapping[str, Any]) -> list[list[Request]]:
    """Per request of the claim: its alternatives (one unless ``firstAvailable``)."""
    out: list[list[Request]] = []
    for r in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        name = str(r.get("name", ""))
        if r.get("firstAvailable"):
            out.append([Request.parse(name, str(s.get("name", "")), s) for s in r["firstAvailable"]])
        elif r.get("exactly") is not None:
            out.append([Request.parse(name, "", r["exactly"])])
        else:  # v1beta1 shape: the fields on the request itself
            out.append([Request.parse(name, "", r)])
    return out


def claim_key(claim: Mapping[str, Any]) -> str:
    """``namespace/name`` as the scheduler prints a claim (klog.KObj)."""
    meta = claim.get("metadata") or {}
    ns = meta.get("namespace") or ""
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))


@dataclass(slots=True)
class AllocatedState:
    """Devices and capacity already in use in the cluster (from allocated claims)."""

    devices: dict[DeviceID, str] = field(default_factory=dict)  # dedicated device -> claim holding it
    shared_ids: set[DeviceID] = field(default_factory=set)  # devices with at least one shared allocation
    shared: dict[DeviceID, dict[str, Quantity]] = field(default_factory=dict)  # aggregated consumed capacity

    @staticmethod
    def from_claims(claims: Sequence[Mapping[str, Any]]) -> AllocatedState:
        """The scheduler's view of allocated claims (``GatherAllocatedState``).

        Admin-access results do not count. A result with a share id is a shared allocation; its
        consumed capacity (when the result records one, even empty) adds to the device's aggregate.
        """
        st = AllocatedState()
        for c in claims:
            alloc = (c.get("status") or {}).get("allocation") or {}
            for r in (alloc.get("devices") or {}).get("results") or []:
                if r.get("adminAccess"):
                    continue
                dev = (str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
                if r.get("shareID"):
                    st.shared_ids.add(dev)
                    if r.get("consumedCapacity") is not None:
                        agg = st.shared.setdefault(dev, {})
                        for k, v in r["consumedCapacity"].items():
                            agg[k] = agg[k].add(qty(v)) if k in agg else qty(v)
                else:
                    st.devices[dev] = claim_key(c)
        return st

    def in_use(self, dev: DeviceID) -> bool:
        """``IsDeviceAllocated``: dedicated, shared or with consumed capacity (for counter accounting)."""
        return dev in self.devices or dev in self.shared_ids or dev in self.shared


@dataclass(slots=True)
class Candidate:
    """One device's verdict for one request."""

    node: str | None
    device: str  # "<pool>/<device>"
    verdict: str  # match | no-match | error | unavailable
    detail: str

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form."""
        return {"node": self.node, "device": self.device, "verdict": self.verdict, "detail": self.detail}


@dataclass(slots=True)
class Result:
    """One device in an allocation."""

    claim: str
    request: str
    driver: str
    pool: str
    device: str
    share_id: bool = False
    consumed: dict[str, Quantity] = field(default_factory=dict)
    admin_access: bool = False
    # The (slice, device) it came from, for the claim's node selector; not part of the answer.
    source: tuple[Mapping[str, Any], Mapping[str, Any]] | None = field(default=None, compare=False, repr=False)


@dataclass(slots=True)
class NodeOutcome:
    """The simulated scheduling attempt on one node."""

    node: str | None
    results: list[Result] | None  # None: no allocation on this node
    error: str | None  # the attempt aborted (a selector error, an invalid request)
    reason: str | None  # why there is no allocation, in words
