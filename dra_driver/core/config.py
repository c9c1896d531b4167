"""The opaque-config API (``resource.dra-gpu.dev/v1alpha1``): strict decoding, normalization, validation, precedence.

Two kinds share one API group/version: ``GpuConfig`` (full GPUs: time-slicing or MPS) and
``MigDeviceConfig`` (MIG devices: MPS; TimeSlicing is accepted and has no effect, because a
MIG device's time slice cannot be set). One function, ``decode_opaque_config``, turns a
user's JSON into a validated, normalized config of either kind or raises ``ConfigError``
naming the field; ``decode_gpu_config`` is the same for callers that accept only
``GpuConfig``. The admission webhook (``webhook.admission`` through ``validate_claim_configs``)
and the kubelet plugin at prepare (``dra_driver.core.prepare`` through
``resolve_device_configs``) both decode with it, so the two never disagree and report the same
message after the config's path (``ConfigError.detail``). ``resolve_configs`` and
``resolve_device_configs`` apply the DRA precedence rules to a claim's allocation.

The API's types (kinds, configs, ``ConfigError``) are in ``dra_driver.core.config_types``,
re-exported here. No sharing default is ever applied: no config (or one without ``sharing``) means exclusive
use, because older GPUs break on an implicit time slice. Pure: no I/O.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from dra_driver.core.config_types import (
    API_GROUP,
    API_VERSION,
    DEFAULT_GPU_CONFIG,
    DEFAULT_MIG_DEVICE_CONFIG,
    KIND_GPU_CONFIG,
    KIND_MIG_DEVICE_CONFIG,
    KINDS,
    MAX_BYTES,
    ConfigError,
    DeviceConfig,
    GpuConfig,
    MigDeviceConfig,
    MpsConfig,
    Sharing,
    SharingStrategy,
    TimeSliceInterval,
    TimeSlicingConfig,
)
from dra_driver.core.quantity import QuantityError, parse_quantity

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "DEFAULT_GPU_CONFIG",
    "DEFAULT_MIG_DEVICE_CONFIG",
    "KINDS",
    "KIND_GPU_CONFIG",
    "KIND_MIG_DEVICE_CONFIG",
    "MAX_BYTES",
    "MAX_QUANTITY_CHARS",
    "SUPPORTED_OBJECT_KINDS",
    "AllocationResult",
    "ConfigError",
    "DeviceConfig",
    "GpuConfig",
    "MigDeviceConfig",
    "MpsConfig",
    "Sharing",
    "SharingStrategy",
    "TimeSliceInterval",
    "TimeSlicingConfig",
    "decode_gpu_config",
    "decode_opaque_config",
    "parse_byte_quantity",
    "resolve_configs",
    "resolve_device_configs",
    "validate_claim_configs",
]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")


# -- decoding helpers ------------------------------------------------------------------------


def _expect_map(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"must be an object, got {_type_name(value)}")
    return value


_JSON_TYPES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "boolean"),  # before int: a bool is an int in Python
    (str, "string"),
    (int, "integer"),
    (float, "number"),
    (Mapping, "object"),
    ((list, tuple), "array"),
)


def _type_name(value: Any) -> str:
    """The JSON type of a decoded value, as a user would name it."""
    if value is None:
        return "null"
    return next((name for t, name in _JSON_TYPES if isinstance(value, t)), type(value).__name__)


def _reject_unknown(obj: Mapping[str, Any], allowed: Collection[str], path: str) -> None:
    for key in obj:
        if key not in allowed:
            raise ConfigError(f"{path}.{key}" if path else str(key), f"unknown field; allowed: {', '.join(sorted(allowed))}")


_E = TypeVar("_E", bound=enum.StrEnum)


def _shown(value: Any) -> str:
    """A value from outside input for a message: scalars shortened, containers by type (they may nest deeply)."""
    if not isinstance(value, str | int | float | bool | None):
        return _type_name(value)
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a huge number"
    return text if len(text) <= 80 else f"{text[:60]}...({len(text)} chars)"


def _enum_value(cls: type[_E], value: Any, path: str) -> _E:
    if not isinstance(value, str):
        raise ConfigError(path, f"must be a string, got {_type_name(value)}")
    try:
        return cls(value)
    except ValueError:
        raise ConfigError(path, f"unknown value {value!r}; supported: {', '.join(m.value for m in cls)}") from None


def _int_in_range(value: Any, low: int, high: int, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(path, f"must be an integer, got {_type_name(value)}")
    if not low <= value <= high:
        raise ConfigError(path, f"must be between {low} and {high}, got {value}")
    return value


MAX_QUANTITY_CHARS = 64
"""A memory size up to int64 bytes needs at most ~25 characters in any form; longer strings are
refused before parsing (bounded work for outside input)."""


def parse_byte_quantity(value: Any, path: str) -> int:
    """A Kubernetes quantity of memory as a positive whole number of bytes; ConfigError naming ``path`` otherwise.

    Accepts the API's forms (``"40Gi"``, ``"1.5Gi"``, ``"500M"``, ``"1e9"``, ``"+2Ki"``, and a
    JSON integer); rejects fractions of a byte (``"100m"``, ``"1.5"``), zero, negative values
    and values beyond int64.
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ConfigError(path, f"must be a quantity such as '4Gi', got {_type_name(value)}")
    if isinstance(value, int) and not -MAX_BYTES <= value <= MAX_BYTES:
        raise ConfigError(path, f"is too large (at most {MAX_BYTES} bytes)")
    text = str(value)
    if len(text) > MAX_QUANTITY_CHARS:
        raise ConfigError(path, f"{text[:24]!r}... ({len(text)} characters) is not a memory size (at most {MAX_QUANTITY_CHARS})")
    try:
        q = parse_quantity(text)
    except QuantityError as err:
        raise ConfigError(path, f"{text!r} is not a quantity: {err}") from None
    if q.sign() <= 0:
        raise ConfigError(path, f"must be greater than zero, got {text!r}")
    if q.magnitude() > 19:  # decided without building 10**exp: the exponent may be 2**31
        raise ConfigError(path, f"{text!r} is too large (at most {MAX_BYTES} bytes)")
    if q.magnitude() < 1:
        raise ConfigError(path, f"{text!r} is not a whole number of bytes")
    exact = q.fraction()  # bounded now: at most 19 digits before the point, MAX_QUANTITY_CHARS after
    if exact.denominator != 1:
        raise ConfigError(path, f"{text!r} is not a whole number of bytes")
    if exact > MAX_BYTES:
        raise ConfigError(path, f"{text!r} is too large (at most {MAX_BYTES} bytes)")
    return int(exact)


def _decode_mps(raw: Any, path: str) -> MpsConfig:
    obj = _expect_map(raw, path)
    fields = ("defaultActiveThreadPercentage", "defaultPinnedDeviceMemoryLimit", "defaultPerDevicePinnedMemoryLimit")
    _reject_unknown(obj, fields, path)
    threads = obj.get("defaultActiveThreadPercentage")
    if threads is not None:
        threads = _int_in_range(threads, 1, 100, f"{path}.defaultActiveThreadPercentage")
    pinned = obj.get("defaultPinnedDeviceMemoryLimit")
    if pinned is not None:
        pinned = parse_byte_quantity(pinned, f"{path}.defaultPinnedDeviceMemoryLimit")
    per_device: list[tuple[str, int]] = []
    per_raw = obj.get("defaultPerDevicePinnedMemoryLimit")
    if per_raw is not None:
        ppath = f"{path}.defaultPerDevicePinnedMemoryLimit"
        for device, limit in _expect_map(per_raw, ppath).items():
            if not isinstance(device, str) or not _DNS_LABEL.match(device):
                raise ConfigError(f"{ppath}[{device}]", "keys must be device names (lower-case DNS labels such as gpu-0)")
            per_device.append((device, parse_byte_quantity(limit, f"{ppath}[{device}]")))
    return MpsConfig(threads, pinned, tuple(sorted(per_device)))


def _decode_sharing(raw: Any, path: str, *, mig: bool) -> Sharing:
    sharing = _expect_map(raw, path)
    allowed = ("strategy", "mpsConfig") if mig else ("strategy", "timeSlicingConfig", "mpsConfig")
    _reject_unknown(sharing, allowed, path)
    if sharing.get("strategy") is None:
        raise ConfigError(f"{path}.strategy", "required")
    strategy = _enum_value(SharingStrategy, sharing["strategy"], f"{path}.strategy")
    ts_raw, mps_raw = sharing.get("timeSlicingConfig"), sharing.get("mpsConfig")
    if strategy is SharingStrategy.TIME_SLICING:
        if mps_raw is not None:
            raise ConfigError(f"{path}.mpsConfig", "must not be set with strategy TimeSlicing")
        if mig:  # accepted, no effect: a MIG device's time slice cannot be set
            return Sharing(strategy)
        ts = TimeSlicingConfig()
        if ts_raw is not None:
            tpath = f"{path}.timeSlicingConfig"
            ts_map = _expect_map(ts_raw, tpath)
            _reject_unknown(ts_map, ("interval",), tpath)
            if ts_map.get("interval") is not None:
                ts = TimeSlicingConfig(_enum_value(TimeSliceInterval, ts_map["interval"], f"{tpath}.interval"))
        return Sharing(strategy, time_slicing=ts)
    if ts_raw is not None:
        raise ConfigError(f"{path}.timeSlicingConfig", "must not be set with strategy MPS")
    mps = MpsConfig() if mps_raw is None else _decode_mps(mps_raw, f"{path}.mpsConfig")
    return Sharing(strategy, mps=mps)


def _decode(raw: Any, path: str) -> DeviceConfig:
    obj = _expect_map(raw, path)
    _reject_unknown(obj, ("apiVersion", "kind", "sharing"), path)  # the same top-level fields in both kinds
    if obj.get("apiVersion") != API_VERSION:
        raise ConfigError(f"{path}.apiVersion", f"must be {API_VERSION!r}, got {_shown(obj.get('apiVersion'))}")
    kind = obj.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"{path}.kind", f"unknown kind {_shown(kind)}; supported: {', '.join(KINDS)}")
    mig = kind == KIND_MIG_DEVICE_CONFIG
    sharing = None if obj.get("sharing") is None else _decode_sharing(obj["sharing"], f"{path}.sharing", mig=mig)
    return MigDeviceConfig(sharing) if mig else GpuConfig(sharing)


def decode_opaque_config(raw: Any, path: str = "parameters") -> DeviceConfig:
    """Strictly decode, normalize and validate one opaque config of this driver, of either kind.

    ``raw`` is the entry's ``opaque.parameters`` as parsed JSON; ``path`` is where it sits in
    the object (for messages). Rejects a wrong ``apiVersion``, an unknown ``kind``, unknown
    fields, wrong types, unknown enum values, out-of-range numbers, bad quantities and
    settings of the other strategy, each with the field path. Normalizes: a TimeSlicing
    strategy without ``timeSlicingConfig`` (or interval) → interval ``Default``; MPS without
    ``mpsConfig`` → ``MpsConfig()`` (no limits); quantities → bytes. No ``sharing`` → exclusive.
    """
    try:
        return _decode(raw, path)
    except ConfigError as err:
        raise ConfigError(err.path, err.message, base=path) from None


def decode_gpu_config(raw: Any, path: str = "parameters") -> GpuConfig:
    """``decode_opaque_config`` for callers that accept only ``GpuConfig`` (the ``kind`` must be it)."""
    config = decode_opaque_config(raw, path)
    if not isinstance(config, GpuConfig):
        raise ConfigError(f"{path}.kind", f"must be {KIND_GPU_CONFIG!r}, got {KIND_MIG_DEVICE_CONFIG!r}", base=path)
    return config


# -- objects at admission --------------------------------------------------------------------

_SPEC_PATHS = {"ResourceClaim": ("spec",), "ResourceClaimTemplate": ("spec", "spec")}
SUPPORTED_OBJECT_KINDS = tuple(_SPEC_PATHS)


def validate_claim_configs(obj: Mapping[str, Any], driver: str) -> list[str]:
    """One message per invalid opaque config of ``driver`` in a ResourceClaim or ResourceClaimTemplate.

    ``obj`` is the object as JSON in resource.k8s.io v1, v1beta1 or v1beta2 (their
    ``devices.config`` entries have the same shape). A message reads ``object at
    spec.devices.config[0].opaque.parameters is invalid: sharing.strategy: unknown value
    'Magic'; supported: TimeSlicing, MPS`` (``spec.spec...`` for a template); the part after
    ``is invalid: `` is what the kubelet plugin reports at prepare after the config's path.
    Other drivers' configs are not ours to judge. Raises ValueError for any other ``kind``.
    """
    kind = obj.get("kind") if isinstance(obj, Mapping) else None
    if not isinstance(kind, str) or kind not in _SPEC_PATHS:
        raise ValueError(f"not a ResourceClaim or ResourceClaimTemplate: kind {_shown(kind)}")
    spec: Any = obj
    for key in _SPEC_PATHS[kind]:
        spec = spec.get(key) if isinstance(spec, Mapping) else None
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    entries = devices.get("config") if isinstance(devices, Mapping) else None
    if not isinstance(entries, list):
        return []
    prefix = ".".join(_SPEC_PATHS[kind])
    messages: list[str] = []
    for index, entry in enumerate(entries):
        opaque = entry.get("opaque") if isinstance(entry, Mapping) else None
        if not isinstance(opaque, Mapping) or opaque.get("driver") != driver:
            continue  # the API server checks the entry's shape; other drivers' configs are theirs
        try:
            decode_opaque_config(opaque.get("parameters"), f"{prefix}.devices.config[{index}].opaque.parameters")
        except ConfigError as err:
            messages.append(err.admission_message())
    return messages


# -- precedence at prepare -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AllocationResult:
    """One ``status.allocation.devices.results`` entry for this driver."""

    request: str
    """As allocated; may be ``<request>/<subrequest>``."""
    pool: str
    device: str
    share_id: str | None = None
    admin_access: bool = False
    consumed_capacity: tuple[tuple[str, str], ...] = ()
    """Consumable capacity this (shared) allocation took: (capacity name, quantity) pairs."""

    @property
    def base_request(self) -> str:
        """The request name with any ``/subrequest`` suffix stripped."""
        return self.request.split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class _Entry:
    rank: int
    index: int
    requests: frozenset[str]
    config: DeviceConfig
    path: str


def _decode_entries(driver: str, config_entries: Sequence[Mapping[str, Any]]) -> list[_Entry]:
    """Every opaque entry of ``driver``, decoded (a bad one is an error), in precedence order (lowest first)."""
    decoded: list[_Entry] = []
    for index, entry in enumerate(config_entries):
        path = f"allocation.devices.config[{index}]"
        entry_map = _expect_map(entry, path)
        opaque = entry_map.get("opaque")
        if opaque is None:
            continue  # not an opaque config: nothing for a driver to apply
        opaque_map = _expect_map(opaque, f"{path}.opaque")
        if opaque_map.get("driver") != driver:
            continue
        config = decode_opaque_config(opaque_map.get("parameters"), f"{path}.opaque.parameters")
        rank = 0 if entry_map.get("source") == "FromClass" else 1
        requests = entry_map.get("requests") or []
        if not isinstance(requests, list) or not all(isinstance(r, str) for r in requests):
            raise ConfigError(f"{path}.requests", "must be a list of request names")
        decoded.append(_Entry(rank, index, frozenset(requests), config, f"{path}.opaque.parameters"))
    decoded.sort(key=lambda d: (d.rank, d.index))
    return decoded


def resolve_configs(
    driver: str,
    results: Sequence[AllocationResult],
    config_entries: Sequence[Mapping[str, Any]],
    *,
    mig_devices: Collection[str] = frozenset(),
) -> dict[str, DeviceConfig]:
    """Pick each result's config by DRA precedence and device type; key: the result's device name.

    ``config_entries`` is ``status.allocation.devices.config``; ``mig_devices`` names the
    results' devices that are MIG devices. Class configs rank below claim configs; within
    each, a later entry beats an earlier one; an entry applies to a result when its
    ``requests`` is empty or names the result's request (``main`` or ``main/sub``) and its kind
    fits the device (``GpuConfig`` for full GPUs, ``MigDeviceConfig`` for MIG devices). An
    entry that names a request explicitly but whose kind does not fit that request's device is
    an error; one with empty ``requests`` just skips such devices. Other drivers' entries are
    skipped; every entry of this driver is decoded (so a bad one is an error even where
    another wins). Results with no applicable entry get their kind's default (no sharing).
    """
    return _choose(_decode_entries(driver, config_entries), results, mig_devices)


def _choose(
    decoded: Sequence[_Entry], results: Sequence[AllocationResult], mig_devices: Collection[str]
) -> dict[str, DeviceConfig]:
    out: dict[str, DeviceConfig] = {}
    for result in results:
        mig = result.device in mig_devices
        want: type[GpuConfig] | type[MigDeviceConfig] = MigDeviceConfig if mig else GpuConfig
        chosen: DeviceConfig = DEFAULT_MIG_DEVICE_CONFIG if mig else DEFAULT_GPU_CONFIG
        for e in decoded:
            named = result.request in e.requests or result.base_request in e.requests
            if e.requests and not named:
                continue
            if isinstance(e.config, want):
                chosen = e.config
            elif named:
                device_kind = "a MIG device" if mig else "a full GPU"
                raise ConfigError(
                    f"{e.path}.kind",
                    f"{type(e.config).__name__} does not apply to device {result.device} of request "
                    f"{result.request!r}, which is {device_kind}; use {want.__name__}",
                    base=e.path,
                )
        out[result.device] = chosen
    return out


def resolve_device_configs(
    driver: str, results: Sequence[AllocationResult], config_entries: Sequence[Mapping[str, Any]]
) -> dict[str, GpuConfig]:
    """``GpuConfig`` per result's device by DRA precedence, for callers that treat every device as a full GPU.

    As ``resolve_configs`` without MIG devices, except that ``MigDeviceConfig`` entries are
    validated (a bad one is still an error) but never apply. Callers that know which devices
    are MIG devices should call ``resolve_configs`` with ``mig_devices``.
    """
    decoded = [e for e in _decode_entries(driver, config_entries) if isinstance(e.config, GpuConfig)]
    return {device: c for device, c in _choose(decoded, results, ()).items() if isinstance(c, GpuConfig)}
