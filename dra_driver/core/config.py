"""The opaque-config API (``GpuConfig``): strict decoding, normalization, validation, precedence.

One function, ``decode_gpu_config``, turns a user's JSON into a validated ``GpuConfig`` or
raises ``ConfigError`` naming the field; the kubelet plugin (at prepare) and, later, the
admission webhook both call it, so the two can never disagree. ``resolve_device_configs``
applies the DRA precedence rules to a claim's allocation. Pure.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

API_GROUP = "resource.dra-gpu.dev"
API_VERSION = f"{API_GROUP}/v1alpha1"
KIND_GPU_CONFIG = "GpuConfig"


class ConfigError(ValueError):
    """A config the user wrote is invalid; ``path`` names the offending field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class SharingStrategy(enum.StrEnum):
    """How one GPU is shared by the containers that reference its claim."""

    TIME_SLICING = "TimeSlicing"


class TimeSliceInterval(enum.StrEnum):
    """The compute time slice a shared GPU gives each process (NVIDIA's 0..3 levels)."""

    DEFAULT = "Default"
    SHORT = "Short"
    MEDIUM = "Medium"
    LONG = "Long"


@dataclass(frozen=True, slots=True)
class TimeSlicingConfig:
    """Settings of the TimeSlicing strategy."""

    interval: TimeSliceInterval = TimeSliceInterval.DEFAULT


@dataclass(frozen=True, slots=True)
class Sharing:
    """A sharing strategy with its settings."""

    strategy: SharingStrategy
    time_slicing: TimeSlicingConfig | None = None


@dataclass(frozen=True, slots=True)
class GpuConfig:
    """A normalized, validated GPU config. ``sharing is None`` means exclusive use (the default).

    No time-slicing default is ever applied implicitly: older GPUs break on it.
    """

    sharing: Sharing | None = None


DEFAULT_GPU_CONFIG = GpuConfig()


def _expect_map(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"must be an object, got {type(value).__name__}")
    return value


def _reject_unknown(obj: Mapping[str, Any], allowed: set[str], path: str) -> None:
    for key in obj:
        if key not in allowed:
            raise ConfigError(f"{path}.{key}" if path else key, f"unknown field; allowed: {', '.join(sorted(allowed))}")


_E = TypeVar("_E", bound=enum.StrEnum)


def _enum_value(cls: type[_E], value: Any, path: str) -> _E:
    if not isinstance(value, str):
        raise ConfigError(path, f"must be a string, got {type(value).__name__}")
    try:
        return cls(value)
    except ValueError:
        raise ConfigError(path, f"unknown value {value!r}; supported: {', '.join(m.value for m in cls)}") from None


def decode_gpu_config(raw: Any, path: str = "parameters") -> GpuConfig:
    """Strictly decode, normalize and validate one ``GpuConfig`` object.

    Rejects a wrong ``apiVersion``/``kind``, unknown fields, wrong types and unknown enum
    values, each with the field path. A TimeSlicing strategy without ``timeSlicingConfig``
    normalizes to interval ``Default``.
    """
    obj = _expect_map(raw, path)
    _reject_unknown(obj, {"apiVersion", "kind", "sharing"}, path)
    if obj.get("apiVersion") != API_VERSION:
        raise ConfigError(f"{path}.apiVersion", f"must be {API_VERSION!r}, got {obj.get('apiVersion')!r}")
    if obj.get("kind") != KIND_GPU_CONFIG:
        raise ConfigError(f"{path}.kind", f"must be {KIND_GPU_CONFIG!r}, got {obj.get('kind')!r}")
    if obj.get("sharing") is None:
        return DEFAULT_GPU_CONFIG
    spath = f"{path}.sharing"
    sharing = _expect_map(obj["sharing"], spath)
    _reject_unknown(sharing, {"strategy", "timeSlicingConfig"}, spath)
    if "strategy" not in sharing:
        raise ConfigError(f"{spath}.strategy", "required")
    strategy = _enum_value(SharingStrategy, sharing["strategy"], f"{spath}.strategy")
    ts_raw = sharing.get("timeSlicingConfig")
    ts = TimeSlicingConfig()
    if ts_raw is not None:
        tpath = f"{spath}.timeSlicingConfig"
        ts_map = _expect_map(ts_raw, tpath)
        _reject_unknown(ts_map, {"interval"}, tpath)
        if ts_map.get("interval") is not None:
            ts = TimeSlicingConfig(_enum_value(TimeSliceInterval, ts_map["interval"], f"{tpath}.interval"))
    return GpuConfig(Sharing(strategy=strategy, time_slicing=ts))


@dataclass(frozen=True, slots=True)
class AllocationResult:
    """One ``status.allocation.devices.results`` entry for this driver."""

    request: str
    """As allocated; may be ``<request>/<subrequest>``."""
    pool: str
    device: str
    share_id: str | None = None
    admin_access: bool = False

    @property
    def base_request(self) -> str:
        """The request name with any ``/subrequest`` suffix stripped."""
        return self.request.split("/", 1)[0]


def resolve_device_configs(
    driver: str, results: Sequence[AllocationResult], config_entries: Sequence[Mapping[str, Any]]
) -> dict[str, GpuConfig]:
    """Pick each result's config by DRA precedence; key: the result's device name.

    ``config_entries`` is ``status.allocation.devices.config``. Class configs rank below claim
    configs; within each, a later entry beats an earlier one; an entry applies to a result
    when its ``requests`` is empty or names the result's request (``main`` or ``main/sub``).
    Other drivers' entries are skipped; every entry of this driver is decoded (so a bad one is
    an error even where another entry wins). Results with no applicable entry get the default.
    """
    decoded: list[tuple[int, int, frozenset[str], GpuConfig]] = []
    for index, entry in enumerate(config_entries):
        path = f"allocation.devices.config[{index}]"
        entry_map = _expect_map(entry, path)
        opaque = entry_map.get("opaque")
        if opaque is None:
            continue  # not an opaque config: nothing for a driver to apply
        opaque_map = _expect_map(opaque, f"{path}.opaque")
        if opaque_map.get("driver") != driver:
            continue
        config = decode_gpu_config(opaque_map.get("parameters"), f"{path}.opaque.parameters")
        rank = 0 if entry_map.get("source") == "FromClass" else 1
        requests = entry_map.get("requests") or []
        if not isinstance(requests, list) or not all(isinstance(r, str) for r in requests):
            raise ConfigError(f"{path}.requests", "must be a list of request names")
        decoded.append((rank, index, frozenset(requests), config))
    decoded.sort(key=lambda d: (d[0], d[1]))
    out: dict[str, GpuConfig] = {}
    for result in results:
        chosen = DEFAULT_GPU_CONFIG
        for _rank, _index, requests, config in decoded:
            if not requests or result.request in requests or result.base_request in requests:
                chosen = config
        out[result.device] = chosen
    return out
