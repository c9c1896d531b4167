"""kube-scheduler's feature gates, release by release, evaluated as the component evaluates them.

Called by ``rules.py`` (:func:`dra_driver.schedsim.rules.rules_for` derives a release's
:class:`~dra_driver.schedsim.rules.Rules` from the gate values) and by ``dra-gpu explain``
(``--feature-gates``, parsed by :func:`parse_feature_gates`). Pure data and functions, no I/O.

``TABLES`` holds, per release, the versioned specs of every DRA gate (and of the gates they depend
on) as that release's ``pkg/features/kube_features.go`` declares them, with their dependencies;
``OTHER_GATES`` the names of every other gate the scheduler binary knows (accepted, without effect
on an allocation). :func:`gate_values` evaluates them as ``k8s.io/component-base/featuregate``
does for a binary started with no version flags: the emulation version is the binary's, the
minimum compatibility version one minor below it (``compatibility.NewEffectiveVersion``); a spec
applies from its version on, unless it names a minimum compatibility version above the
component's; the flag's values override the defaults, ``AllAlpha``/``AllBeta`` set every alpha or
beta gate not named, and the same errors stop the binary: an unknown gate, a locked one set to
the other value, one not introduced yet, and a gate on whose dependency is off. ``e2e`` checks
every table against the release's own Go code (``e2e/test_feature_gates.py``, through celdiff),
so a new release cannot silently get the wrong defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


class GateError(ValueError):
    """A ``--feature-gates`` value the scheduler would refuse at start-up (the message says why)."""


@dataclass(frozen=True, slots=True)
class Spec:
    """One entry of a gate's versioned specs (``featuregate.FeatureSpec``)."""

    version: int  # the minor (1.<version>) it applies from
    default: bool
    pre_release: str  # ALPHA | BETA | GA | DEPRECATED
    locked: bool = False  # LockToDefault
    min_compatibility: int | None = None  # MinCompatibilityVersion's minor, if any


# Per release: "<gate> <minor>:<on|off>:<ALPHA|BETA|GA>[:locked][:min<minor>] ... [<- <dependency>,...]",
# transcribed from the release's pkg/features/kube_features.go (defaultVersionedKubernetesFeatureGates,
# defaultKubernetesFeatureGateDependencies): the DRA gates, DynamicResourceAllocation and what they depend on.
TABLES_TEXT: dict[int, str] = {
    34: """
DRAAdminAccess 32:off:ALPHA 34:on:BETA
DRAConsumableCapacity 34:off:ALPHA
DRADeviceBindingConditions 34:off:ALPHA
DRADeviceTaints 33:off:ALPHA
DRAExtendedResource 34:off:ALPHA
DRAPartitionableDevices 33:off:ALPHA
DRAPrioritizedList 33:off:ALPHA 34:on:BETA
DRAResourceClaimDeviceStatus 32:off:ALPHA 33:on:BETA
DRASchedulerFilterTimeout 34:on:BETA
DynamicResourceAllocation 26:off:ALPHA 32:off:BETA 34:on:GA
""",
    35: """
DRAAdminAccess 32:off:ALPHA 34:on:BETA <- DynamicResourceAllocation
DRAConsumableCapacity 34:off:ALPHA <- DynamicResourceAllocation
DRADeviceBindingConditions 34:off:ALPHA <- DRAResourceClaimDeviceStatus,DynamicResourceAllocation
DRADeviceTaintRules 35:off:ALPHA <- DRADeviceTaints
DRADeviceTaints 33:off:ALPHA <- DynamicResourceAllocation
DRAExtendedResource 34:off:ALPHA <- DynamicResourceAllocation
DRAPartitionableDevices 33:off:ALPHA <- DynamicResourceAllocation
DRAPrioritizedList 33:off:ALPHA 34:on:BETA <- DynamicResourceAllocation
DRAResourceClaimDeviceStatus 32:off:ALPHA 33:on:BETA
DRASchedulerFilterTimeout 34:on:BETA <- DynamicResourceAllocation
DynamicResourceAllocation 26:off:ALPHA 32:off:BETA 34:on:GA 35:on:GA:locked
""",
    36: """
DRAAdminAccess 32:off:ALPHA 34:on:BETA 36:on:GA:locked <- DynamicResourceAllocation
DRAConsumableCapacity 34:off:ALPHA 36:on:BETA <- DynamicResourceAllocation
DRADeviceBindingConditions 34:off:ALPHA 36:on:BETA <- DRAResourceClaimDeviceStatus,DynamicResourceAllocation
DRADeviceTaintRules 35:off:ALPHA 36:off:BETA <- DRADeviceTaints
DRADeviceTaints 33:off:ALPHA 36:on:BETA <- DynamicResourceAllocation
DRAExtendedResource 34:off:ALPHA 36:on:BETA <- DynamicResourceAllocation
DRAListTypeAttributes 36:off:ALPHA <- DynamicResourceAllocation
DRANodeAllocatableResources 36:off:ALPHA <- DynamicResourceAllocation
DRAPartitionableDevices 33:off:ALPHA 36:on:BETA <- DynamicResourceAllocation
DRAPrioritizedList 33:off:ALPHA 34:on:BETA 36:on:GA <- DynamicResourceAllocation
DRAResourceClaimDeviceStatus 32:off:ALPHA 33:on:BETA
DRAResourceClaimGranularStatusAuthorization 36:on:BETA <- DRAResourceClaimDeviceStatus,DynamicResourceAllocation
DRAResourcePoolStatus 36:off:ALPHA <- DynamicResourceAllocation
DRASchedulerFilterTimeout 34:on:BETA <- DynamicResourceAllocation
DRAWorkloadResourceClaims 36:off:ALPHA <- DynamicResourceAllocation,GenericWorkload
DynamicResourceAllocation 26:off:ALPHA 32:off:BETA 34:on:GA 35:on:GA:locked
GenericWorkload 35:off:ALPHA
""",
    37: """
DRAAdminAccess 32:off:ALPHA 34:on:BETA 36:on:GA:locked <- DynamicResourceAllocation
DRAConsumableCapacity 34:off:ALPHA 36:on:BETA <- DynamicResourceAllocation
DRADerivedAttributes 37:off:ALPHA <- DynamicResourceAllocation
DRADeviceBindingConditions 34:off:ALPHA 36:on:BETA <- DRAResourceClaimDeviceStatus,DynamicResourceAllocation
DRADeviceCompatibilityGroups 37:off:ALPHA <- DRAPartitionableDevices,DynamicResourceAllocation
DRADeviceTaintRules 35:off:ALPHA 36:off:BETA 37:on:GA <- DRADeviceTaints
DRADeviceTaints 33:off:ALPHA 36:on:BETA 37:on:GA <- DynamicResourceAllocation
DRAExtendedResource 34:off:ALPHA 36:on:BETA 37:on:GA:locked <- DynamicResourceAllocation
DRAFractionalCapacityRange 37:off:BETA 37:on:BETA:min37 <- DRAConsumableCapacity
DRAListTypeAttributes 36:off:ALPHA <- DynamicResourceAllocation
DRANodeAllocatableResources 36:off:ALPHA <- DynamicResourceAllocation
DRAOptionalNodeOperations 37:off:ALPHA <- DynamicResourceAllocation,NodeDeclaredFeatures
DRAPartitionableDevices 33:off:ALPHA 36:on:BETA <- DynamicResourceAllocation
DRAPartitionableDevicesType 37:off:ALPHA <- DRAPartitionableDevices,DRAResourcePoolStatus,DynamicResourceAllocation
DRAPrioritizedList 33:off:ALPHA 34:on:BETA 36:on:GA 37:on:GA:locked <- DynamicResourceAllocation
DRAResourceClaimDeviceStatus 32:off:ALPHA 33:on:BETA 37:on:GA:locked
DRAResourceClaimGranularStatusAuthorization 36:on:BETA <- DRAResourceClaimDeviceStatus,DynamicResourceAllocation
DRAResourcePoolStatus 36:off:ALPHA <- DynamicResourceAllocation
DRASchedulerFilterTimeout 34:on:BETA <- DynamicResourceAllocation
DRAWorkloadResourceClaims 36:off:ALPHA 37:off:BETA <- DynamicResourceAllocation,GenericWorkload
DynamicResourceAllocation 26:off:ALPHA 32:off:BETA 34:on:GA 35:on:GA:locked
GenericWorkload 35:off:ALPHA 37:off:BETA
NodeDeclaredFeatures 35:off:ALPHA 36:on:BETA 37:on:GA:locked
""",
}

_ALL_ALPHA, _ALL_BETA = "AllAlpha", "AllBeta"


def _parse_spec(text: str) -> Spec:
    version, state, pre, *rest = text.split(":")
    min_compat = next((int(r.removeprefix("min")) for r in rest if r.startswith("min")), None)
    return Spec(int(version), state == "on", pre, "locked" in rest, min_compat)


def _parse_table(text: str) -> tuple[dict[str, tuple[Spec, ...]], dict[str, tuple[str, ...]]]:
    specs: dict[str, tuple[Spec, ...]] = {}
    deps: dict[str, tuple[str, ...]] = {}
    for line in text.strip().splitlines():
        own, _, after = line.partition(" <- ")
        name, *entries = own.split()
        specs[name] = tuple(_parse_spec(e) for e in entries)
        if after:
            deps[name] = tuple(after.split(","))
    return specs, deps


_PARSED = {m: _parse_table(t) for m, t in TABLES_TEXT.items()}
TABLES: dict[int, dict[str, tuple[Spec, ...]]] = {m: p[0] for m, p in _PARSED.items()}
DEPENDENCIES: dict[int, dict[str, tuple[str, ...]]] = {m: p[1] for m, p in _PARSED.items()}


def spec_at(specs: tuple[Spec, ...], emulation: int, min_compatibility: int) -> Spec | None:
    """``featureSpecAtEmulationAndMinCompatVersion``: the last spec in effect (None: PreAlpha, not introduced yet)."""
    for s in reversed(specs):
        if s.version > emulation:
            continue
        if s.min_compatibility is not None and min_compatibility < s.min_compatibility:
            continue
        return s
    return None


def parse_feature_gates(text: str) -> dict[str, bool]:
    """``--feature-gates`` (``Foo=true,Bar=false``, as ``featureGate.Set`` reads it) as a map; raises :class:`GateError`."""
    out: dict[str, bool] = {}
    for part in text.split(","):
        if not part:
            continue
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq:
            raise GateError(f"missing bool value for {key}")
        value = value.strip()
        parsed = _go_parse_bool(value)
        if parsed is None:
            raise GateError(f'invalid value of {key}={value}, err: strconv.ParseBool: parsing "{value}": invalid syntax')
        out[key] = parsed
    return out


def _go_parse_bool(text: str) -> bool | None:
    """``strconv.ParseBool``."""
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    return None


def known_gates(minor: int) -> frozenset[str]:
    """Every gate name the release's kube-scheduler accepts in ``--feature-gates``."""
    return frozenset(TABLES[minor]) | frozenset(_others(minor)) | {_ALL_ALPHA, _ALL_BETA}


def _others(minor: int) -> dict[str, tuple[str, bool, bool]]:
    """The release's other gates: name -> (prerelease, default, locked) at the stock versions."""
    from dra_driver.schedsim.gate_names import OTHER_GATES  # a long list, read only when a flag is given

    return OTHER_GATES[minor]


def _stages(minor: int) -> dict[str, tuple[str, bool, bool]]:
    """Every gate of the release: name -> (prerelease, default, locked) at the stock versions (None-free: PreAlpha left out)."""
    out = dict(_others(minor))
    for name, specs in TABLES[minor].items():
        spec = spec_at(specs, minor, minor - 1)
        if spec is not None:
            out[name] = (spec.pre_release, spec.default, spec.locked)
    return out


def gate_values(minor: int, overrides: Mapping[str, bool] | None = None) -> dict[str, bool]:
    """The value of every gate of ``TABLES[minor]`` in kube-scheduler 1.<minor> started with ``--feature-gates`` ``overrides``.

    Raises :class:`GateError` with the scheduler's message where it would refuse to start (the
    gates outside the table are checked as well; their values have no effect on an allocation).
    """
    table = TABLES[minor]
    given = dict(overrides or {})
    if not given:
        return {
            name: (s.default if (s := spec_at(specs, minor, minor - 1)) is not None else False) for name, specs in table.items()
        }
    known = known_gates(minor)
    unknown = next((name for name in given if name not in known), None)
    if unknown is not None:
        raise GateError(f"unrecognized feature gate: {unknown}")
    stages = _stages(minor)
    enabled = _explicit(minor, stages, given)
    for special, stage in ((_ALL_ALPHA, "ALPHA"), (_ALL_BETA, "BETA")):
        if special in given:
            for name, (pre, _, _) in stages.items():
                if pre == stage and name not in given:
                    enabled[name] = given[special]
    values = {name: enabled.get(name, stage[1]) for name, stage in stages.items()}
    from dra_driver.schedsim.gate_names import OTHER_DEPENDENCIES  # (as above)

    problems = []
    for name, deps in sorted({**OTHER_DEPENDENCIES[minor], **DEPENDENCIES[minor]}.items()):
        off = [d for d in deps if not values.get(d, False)] if values.get(name, False) else []
        if off:
            problems.append(f"{name} is enabled, but depends on features that are disabled: [{' '.join(off)}]")
    if problems:
        raise GateError(_aggregate(problems))
    return {name: values.get(name, False) for name in table}


def _explicit(minor: int, stages: Mapping[str, tuple[str, bool, bool]], given: Mapping[str, bool]) -> dict[str, bool]:
    """The values set, checked as ``unsafeSetFromMap`` checks them; raises :class:`GateError`."""
    errors: list[str] = []
    enabled: dict[str, bool] = {}
    for name, value in given.items():
        if name in (_ALL_ALPHA, _ALL_BETA):
            continue  # applied after the others
        stage = stages.get(name)
        if stage is None:
            errors.append(
                f"cannot set feature gate {name} to {_go_bool(value)}, feature is PreAlpha at emulated version "
                f"1.{minor}, min compatibility version 1.{minor - 1}"
            )
        elif stage[2] and stage[1] != value:
            errors.append(f"cannot set feature gate {name} to {_go_bool(value)}, feature is locked to {_go_bool(stage[1])}")
        else:
            enabled[name] = value
    if errors:
        raise GateError(_aggregate(errors))
    return enabled


def _aggregate(errors: list[str]) -> str:
    """``utilerrors.NewAggregate(errs).Error()``."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def _go_bool(v: bool) -> str:
    return "true" if v else "false"
