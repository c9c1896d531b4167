"""Which Kubernetes release's scheduler the simulator follows: :class:`Rules` and :func:`rules_for`.

Taken by the CEL environment (``cel``) and the allocator (``allocator``); ``dra-gpu explain`` picks
the rules of the API server it talks to (its ``/version`` minor) and the scheduler's feature gates
(``--feature-gates``; default: the release's defaults), tests pick the release they compare with.
Each field is one way the releases' default scheduler answers differently; only the differences
dra-gpu's answers can show are kept. Fields that follow a feature gate are derived from the gate
values ``gates.py`` computes as kube-scheduler computes them, through the release's mapping of gates
to the structured allocator's features (``AllocatorFeatures``) and to the CEL environment's, and
the allocator variant those features pick (``structured.NewAllocator``: stable, incubating or
experimental). dra-gpu simulates the variant and features of each release's defaults (and 1.37 with
``DRAFractionalCapacityRange`` on); other gate values that change them are refused with
:class:`~dra_driver.schedsim.gates.GateError` saying so. Releases older than the oldest known get
the oldest rules, newer or unknown ones the newest. Pure data, no I/O.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass

from dra_driver.schedsim.gates import GateError, gate_values

OLDEST_MINOR = 34
NEWEST_MINOR = 37

# -- the release's Go code, transcribed (checked against it by e2e/test_feature_gates.py) ---------------
# The allocator's features (structured.Features.Set() names) each gate turns on, per release (AllocatorFeatures).
_BINDING_AND_STATUS = "DRADeviceBindingConditions+DRAResourceClaimDeviceStatus"
_COMMON = ("DRAAdminAccess", "DRAPrioritizedList", "DRAPartitionableDevices", "DRADeviceTaints", "DRAConsumableCapacity")
_ALPHA_37 = ("DRAFractionalCapacityRange", "DRAListTypeAttributes", "DRAOptionalNodeOperations", "DRADerivedAttributes")
_FOUR = frozenset({"DRAAdminAccess", "DRAPrioritizedList", "DRAPartitionableDevices", "DRADeviceTaints"})
# Per release: (stable, incubating, experimental) supported features; NewAllocator takes the first that covers them.
_VARIANTS: dict[int, tuple[frozenset[str], frozenset[str], frozenset[str]]] = {
    34: (
        frozenset(),
        _FOUR,
        _FOUR | {"DRADeviceBindingConditions", "DRAResourceClaimDeviceStatus", "DRAConsumableCapacity"},
    ),
    35: (frozenset(), _FOUR, _FOUR | {_BINDING_AND_STATUS, "DRAConsumableCapacity"}),
    36: (
        _FOUR,
        _FOUR | {_BINDING_AND_STATUS, "DRAConsumableCapacity"},
        _FOUR | {_BINDING_AND_STATUS, "DRAConsumableCapacity", "DRAListTypeAttributes"},
    ),
    37: (
        _FOUR,
        _FOUR | {_BINDING_AND_STATUS, "DRAConsumableCapacity", "DRAFractionalCapacityRange"},
        _FOUR | {_BINDING_AND_STATUS, "DRAConsumableCapacity", *_ALPHA_37, "DRADeviceCompatibilityGroups"},
    ),
}
VARIANT_NAMES = ("stable", "incubating", "experimental")


def allocator_gates(minor: int) -> tuple[str, ...]:
    """The gates kube-scheduler 1.<minor> maps to the allocator's or CEL's features (what an answer depends on)."""
    names = [*_COMMON, "DRADeviceBindingConditions", "DRAResourceClaimDeviceStatus"]
    if minor >= 36:
        names.append("DRAListTypeAttributes")
    if minor >= 37:
        names += [*_ALPHA_37, "DRADeviceCompatibilityGroups"]
    return tuple(sorted(set(names)))


def allocator_features(minor: int, gates: Mapping[str, bool]) -> frozenset[str]:
    """The structured allocator's features (``Features.Set()``) kube-scheduler 1.<minor> passes for these gate values."""
    on = {g for g in _COMMON if gates.get(g)}
    binding, status = gates.get("DRADeviceBindingConditions", False), gates.get("DRAResourceClaimDeviceStatus", False)
    if minor == 34:
        on |= {g for g, v in (("DRADeviceBindingConditions", binding), ("DRAResourceClaimDeviceStatus", status)) if v}
    elif binding and status:
        on.add(_BINDING_AND_STATUS)
    if minor >= 37:
        on |= {g for g in (*_ALPHA_37, "DRADeviceCompatibilityGroups") if gates.get(g)}
    return frozenset(on)


def cel_features(minor: int, gates: Mapping[str, bool]) -> frozenset[str]:
    """The CEL environment's features (``cel.Features``, the fields set) kube-scheduler 1.<minor> passes."""
    on = {"EnableConsumableCapacity"} if gates.get("DRAConsumableCapacity") else set()
    if minor >= 36 and gates.get("DRAListTypeAttributes"):
        on.add("EnableListTypeAttributes")
    return frozenset(on)


def allocator_variant(minor: int, features: frozenset[str]) -> str | None:
    """The variant ``structured.NewAllocator`` picks for these features (None: none covers them, an internal error)."""
    for name, supported in zip(VARIANT_NAMES, _VARIANTS[minor], strict=True):
        if features <= supported:
            return name
    return None


@dataclass(frozen=True, slots=True)
class Rules:
    """The rules of one Kubernetes minor release (1.<minor>) at some feature-gate values."""

    minor: int
    # The scheduler's value of every DRA gate (gates.TABLES[minor]), sorted by name, and the names
    # given in --feature-gates (the rest are the release's defaults).
    gates: tuple[tuple[str, bool], ...]
    overridden: tuple[str, ...]
    # The allocator variant (stable/incubating/experimental) and its features (Features.Set() names).
    variant: str
    features: frozenset[str]
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
    # List-typed attributes (ints/bools/strings/versions) are CEL lists: from 1.37 whatever
    # DRAListTypeAttributes says (getAttributeValue converts them first); before, such an attribute
    # fails every selector of the device ("unsupported attribute value").
    list_attributes: bool
    # -- the allocator (structured/internal/<variant>) --------------------------------------------------
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
    # 1.34's experimental allocator compares distinctAttribute's scalars by pointer: two devices'
    # values are never the same one, so only a non-scalar value can break the constraint.
    distinct_compares_pointers: bool
    # Consumable capacity as 1.37 computes it (not gated): every capacity of the device is resolved
    # first and a request that cannot be represented (or a negative one) aborts the attempt instead
    # of skipping the device, allocationMode All checks only the device's static capacity, and a
    # device shared in the cluster without recorded consumed capacity does not charge its counters again.
    strict_capacity: bool
    # DRAFractionalCapacityRange (KEP-5491, 1.37 beta, on only at min-compatibility 1.37, so off in a
    # stock 1.37 scheduler): a validRange whose bounds are exact in milli units rounds and checks its
    # step in milli units, a rounded value keeps the step's format.
    fractional_capacity: bool
    # 1.34's default gates (DRAResourceClaimDeviceStatus on, DRAConsumableCapacity off) pick the
    # "experimental" allocator, which refuses a claim whose request asks for capacity.
    refuses_capacity_requests: bool
    # DRAConsumableCapacity (beta, on from 1.36): without it a device that allows multiple allocations
    # is allocated whole like any other and capacity requests are not checked.
    consumable_capacity: bool
    # 1.35's allocator gives CEL ``device.allowMultipleAllocations`` as false for every device.
    selectors_see_multiple_allocations: bool
    # DRAPartitionableDevices (on from 1.36): without it the allocator ignores slices with counter sets or
    # per-device node selection (1.35; 1.34: the latter only), checks no counters and allocates no device
    # that consumes counters.
    partitionable_devices: bool
    # DRADeviceTaints (on from 1.36): without it device taints are ignored.
    device_taints: bool
    # DRADeviceBindingConditions with DRAResourceClaimDeviceStatus (on from 1.36): without them a device
    # with binding conditions is never selected.
    binding_conditions: bool
    # Pools go by (driver, pool), those whose devices have binding conditions after the others (1.36+);
    # 1.34 and 1.35 keep Go's map order (dra-gpu: the order the pools were first gathered in, the
    # most likely one for a node's few pools; 1.34 puts binding-condition pools last too).
    binding_pools_last: bool
    # 1.35's incubating allocator knows no distinctAttribute: such a constraint aborts ("empty constraint").
    distinct_attribute: bool
    # A node's own slices (nodeName) are gathered before the others, and a pool's slices are walked by
    # name (1.36+); 1.35 gathers and walks them in the order it is given them.
    node_slices_first: bool
    # 1.34's experimental allocator: a pool is what the node gathers (slices in input order, those with
    # binding-condition devices after the others), never completed from the pool's other slices; an
    # incomplete pool's devices are allocated all the same (only allocationMode All refuses it), and
    # the search aborts when it reaches an invalid pool ("pool <name> is invalid: ...").
    pools_as_gathered: bool
    # The next device of a request is looked for after the one just taken (1.36+); before, from the
    # first device again (skipping those taken), which matters where a constraint depends on the order.
    search_resumes: bool
    # After each device of an allocationMode All subrequest the search goes on with that subrequest
    # (1.36+); 1.34 and 1.35 go on as the request's first subrequest (the next call drops the
    # subrequest's index), so such a subrequest gets only as many devices as the first one asks for.
    all_keeps_its_subrequest: bool
    # 1.37 with DRADeviceCompatibilityGroups off: a slice with a device whose counter consumption names
    # compatibility groups is ignored, so its pool is incomplete (before 1.37 the field does not exist).
    ignores_compatibility_groups: bool
    # 1.37 with DRADerivedAttributes off: a (sub)request with derivedAttributes aborts the attempt
    # ("cannot handle request with derived attributes, the feature is disabled"); before, no such field.
    refuses_derived_attributes: bool

    @property
    def version(self) -> str:
        """``1.<minor>``."""
        return f"1.{self.minor}"

    @property
    def device_taint_rules(self) -> bool:
        """Whether the scheduler applies DeviceTaintRules to the slices' devices (``allocator/taint_rules.py``).

        From 1.35 its ``DRADeviceTaintRules`` gate (beta, off in 1.36; GA in 1.37), in 1.34 the
        ``DRADeviceTaints`` gate; either way only where taints are checked at all.
        """
        return self.device_taints and (self.minor == 34 or self.gate("DRADeviceTaintRules"))

    def gate(self, name: str) -> bool:
        """The scheduler's value of one gate of the release's table (False for one it does not know)."""
        return dict(self.gates).get(name, False)

    def describe_gates(self) -> str:
        """The gate values the answers assume: ``Foo=true (default), Bar=false (set), ...`` for the allocator's gates."""
        values = dict(self.gates)
        return ", ".join(
            f"{g}={'true' if values[g] else 'false'} ({'set' if g in self.overridden else 'default'})"
            for g in allocator_gates(self.minor)
        )


def _default_combination(m: int) -> tuple[frozenset[str], frozenset[str]]:
    values = gate_values(m)
    return allocator_features(m, values), cel_features(m, values)


def _simulated(m: int) -> list[tuple[frozenset[str], frozenset[str]]]:
    """The (allocator features, CEL features) dra-gpu simulates for release 1.<m>."""
    default = _default_combination(m)
    out = [default]
    if m >= 37:
        out.append((default[0] | {"DRAFractionalCapacityRange"}, default[1]))
    return out


def _refuse(m: int, given: Mapping[str, bool], features: frozenset[str], cel: frozenset[str]) -> GateError:
    default_features, default_cel = _default_combination(m)
    changed = [f"allocator feature {f} {'on' if f in features else 'off'}" for f in sorted(features ^ default_features)]
    changed += [f"CEL feature {f} {'on' if f in cel else 'off'}" for f in sorted(cel ^ default_cel)]
    variant = allocator_variant(m, features) or "no"
    named = ", ".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(given.items()))
    also = " or with DRAFractionalCapacityRange=true" if m >= 37 else ""
    return GateError(
        f"dra-gpu does not simulate kube-scheduler 1.{m} with {named}: that means {', '.join(changed)} "
        f"({variant} allocator); dra-gpu simulates the release's default gates{also}"
    )


@functools.lru_cache(maxsize=64)
def _rules(m: int, given: tuple[tuple[str, bool], ...]) -> Rules:
    values = gate_values(m, dict(given))
    features, cel = allocator_features(m, values), cel_features(m, values)
    if (features, cel) not in _simulated(m):
        raise _refuse(m, dict(given), features, cel)
    variant = allocator_variant(m, features) or "none"  # (every simulated combination picks one)
    new = m >= 37
    return Rules(
        minor=m,
        gates=tuple(sorted(values.items())),
        overridden=tuple(sorted(k for k, _ in given)),
        variant=variant,
        features=features,
        dyn_attributes=new,
        includes="lists" if new else ("dra" if m == 36 else ""),
        cel_go=29 if new else 26,
        list_attributes=new,
        selector_error_names_device=new,
        claim_limit_per_request=new,
        counter_slices_always_gathered=not new,
        counters_per_pool_id=new,
        distinct_keeps_every_value=new,
        distinct_compares_pointers=m == 34,
        strict_capacity=new,
        fractional_capacity="DRAFractionalCapacityRange" in features,
        refuses_capacity_requests=variant == "experimental" and "DRAConsumableCapacity" not in features,
        consumable_capacity="DRAConsumableCapacity" in features,
        selectors_see_multiple_allocations=m != 35,
        partitionable_devices="DRAPartitionableDevices" in features,
        device_taints="DRADeviceTaints" in features,
        binding_conditions=_BINDING_AND_STATUS in features
        or {"DRADeviceBindingConditions", "DRAResourceClaimDeviceStatus"} <= features,
        binding_pools_last=m >= 36,
        distinct_attribute=m != 35,
        node_slices_first=m >= 36,
        pools_as_gathered=m == 34,
        search_resumes=m >= 36,
        all_keeps_its_subrequest=m >= 36,
        ignores_compatibility_groups=new and "DRADeviceCompatibilityGroups" not in features,
        refuses_derived_attributes=new and "DRADerivedAttributes" not in features,
    )


def rules_for(minor: int | None = None, gates: Mapping[str, bool] | None = None) -> Rules:
    """The rules of Kubernetes 1.<minor>; None (unknown) or a newer release: the newest known.

    ``gates``: the scheduler's ``--feature-gates`` (see :func:`~dra_driver.schedsim.gates.parse_feature_gates`);
    raises :class:`~dra_driver.schedsim.gates.GateError` where the scheduler would refuse them or
    dra-gpu does not simulate what they select.
    """
    m = NEWEST_MINOR if minor is None else max(OLDEST_MINOR, min(minor, NEWEST_MINOR))
    return _rules(m, tuple(sorted((gates or {}).items())))


NEWEST = rules_for(NEWEST_MINOR)


def minor_of(version: str) -> int | None:
    """The minor of ``v1.37.2``, ``1.37``, ``1.37+`` (as ``/version`` reports it); None if unreadable."""
    found = re.match(r"v?1\.(\d+)", version.strip())
    return int(found.group(1)) if found else None
