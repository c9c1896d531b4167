"""Which Kubernetes release's scheduler the simulator follows: :class:`Rules` and :func:`rules_for`.

Taken by the CEL environment (``cel``) and the allocator (``allocator``); ``dra-gpu explain`` picks
the rules of the API server it talks to (its ``/version`` minor), tests pick the release they
compare with. Each field is one way the releases' default scheduler (default feature gates, the
"incubating" structured allocator of ``k8s.io/dynamic-resource-allocation``) answers differently;
only the differences dra-gpu's answers can show are kept. Releases older than the oldest known
get the oldest rules, newer or unknown ones the newest. Pure data, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OLDEST_MINOR = 34
NEWEST_MINOR = 37


@dataclass(frozen=True, slots=True)
class Rules:
    """The rules of one Kubernetes minor release (1.<minor>)."""

    minor: int
    # -- CEL (k8s.io/dynamic-resource-allocation/cel, cel-go) --------------------------------------
    # The declared type of an attribute value: the protobuf ``any`` up to 1.36 (printed ``any``), cel-go's
    # ``dyn`` from 1.37 (the stored-expressions device type with list-type attributes). A selector may
    # evaluate to bool or to that type.
    dyn_attributes: bool
    # ``<x>.includes(<y>)``: absent (1.34, 1.35); DRA's own overload, which fails on lists of more than
    # 48 values (1.36); the Kubernetes lists library's overload, without that limit (1.37+).
    includes: str  # "" | "dra" | "lists"
    # The cel-go release built in (v0.<cel_go>): 26 up to 1.36, 29 from 1.37, where ``lists.range(n)``
    # fails for a negative n or one above 1,000,000 (before: an empty list, or all of them).
    cel_go: int
    # -- the allocator (structured/internal/incubating) -------------------------------------------------
    # A selector's runtime error names the device, and a missing key gets cel.EnhanceRuntimeError's hint.
    selector_error_names_device: bool
    # The 32-device claim limit is checked per request as requests are counted ("adding N devices
    # exceeds ..."), not once for the claim's total ("number of requested devices N exceeds ...").
    claim_limit_per_request: bool
    # A slice with shared counters is gathered for every node (<= 1.36); from 1.37 it is gathered
    # like any other slice, by its node selection (and, from an incomplete pool, with all its slices).
    counter_slices_always_gathered: bool
    # Counters are kept per pool ID (driver and pool); before 1.37 per pool name, so two drivers'
    # pools of the same name shared them.
    counters_per_pool_id: bool
    # distinctAttribute remembers every value taken (1.37); before, one value per request name.
    distinct_keeps_every_value: bool
    # Consumable capacity of 1.37 (KEP-5491's FractionalCapacityRange, beta and on): a validRange
    # with fractional bounds rounds in milli units, a rounded value keeps the step's format, a request
    # that cannot be represented (or a negative one) aborts the attempt instead of skipping the device,
    # allocationMode All checks only the device's static capacity, and a device shared in the cluster
    # without recorded consumed capacity does not charge its counters again.
    fractional_capacity: bool
    # 1.34's default gates (DRAResourceClaimDeviceStatus on, DRAConsumableCapacity off) pick the
    # "experimental" allocator, which refuses a claim whose request asks for capacity.
    refuses_capacity_requests: bool
    # DRAConsumableCapacity (beta, on from 1.36): without it a device that allows multiple allocations
    # is allocated whole like any other and capacity requests are not checked.
    consumable_capacity: bool
    # 1.35's allocator gives CEL ``device.allowMultipleAllocations`` as false for every device.
    selectors_see_multiple_allocations: bool

    @property
    def version(self) -> str:
        """``1.<minor>``."""
        return f"1.{self.minor}"


def rules_for(minor: int | None = None) -> Rules:
    """The rules of Kubernetes 1.<minor>; None (unknown) or a newer release: the newest known."""
    m = NEWEST_MINOR if minor is None else max(OLDEST_MINOR, min(minor, NEWEST_MINOR))
    new = m >= 37
    return Rules(
        minor=m,
        dyn_attributes=new,
        includes="lists" if new else ("dra" if m == 36 else ""),
        cel_go=29 if new else 26,
        selector_error_names_device=new,
        claim_limit_per_request=new,
        counter_slices_always_gathered=not new,
        counters_per_pool_id=new,
        distinct_keeps_every_value=new,
        fractional_capacity=new,
        refuses_capacity_requests=m == 34,
        consumable_capacity=m >= 36,
        selectors_see_multiple_allocations=m != 35,
    )


NEWEST = rules_for(NEWEST_MINOR)


def minor_of(version: str) -> int | None:
    """The minor of ``v1.37.2``, ``1.37``, ``1.37+`` (as ``/version`` reports it); None if unreadable."""
    found = re.match(r"v?1\.(\d+)", version.strip())
    return int(found.group(1)) if found else None
