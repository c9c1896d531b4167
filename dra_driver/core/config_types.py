"""The opaque-config API's vocabulary (``resource.dra-gpu.dev/v1alpha1``): its kinds, the decoded configs, the error.

The types ``dra_driver.core.config`` decodes a user's JSON into, re-exported by it: importers name
``dra_driver.core.config`` (the webhook, the kubelet plugin, the sharing backends). A config is
frozen and normalized (limits in bytes, sorted per-device entries); ``ConfigError`` names the
offending field and carries the text the webhook and the plugin share. Pure: no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

API_GROUP = "resource.dra-gpu.dev"
API_VERSION = f"{API_GROUP}/v1alpha1"
KIND_GPU_CONFIG = "GpuConfig"
KIND_MIG_DEVICE_CONFIG = "MigDeviceConfig"
KINDS = (KIND_GPU_CONFIG, KIND_MIG_DEVICE_CONFIG)

MAX_BYTES = (1 << 63) - 1
"""The largest memory limit a config may ask for (the API server's int64 range)."""


class ConfigError(ValueError):
    """A config the user wrote is invalid; ``path`` names the offending field.

    ``base`` is the path of the config object the field is in (``...opaque.parameters``), or
    "" when the error is about the config entry itself. ``detail`` (the field relative to
    ``base`` and the message) is the text shared by the webhook's and the plugin's messages.
    """

    def __init__(self, path: str, message: str, *, base: str = "") -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
        self.base = base

    @property
    def field(self) -> str:
        """The field path relative to ``base``: "" for the config object itself; the whole path when there is no base."""
        if self.base and self.path.startswith(self.base + "."):
            return self.path[len(self.base) + 1 :]
        return "" if self.base else self.path

    @property
    def detail(self) -> str:
        """``sharing.strategy: unknown value 'Magic'; supported: TimeSlicing, MPS``: the field and the message."""
        return f"{self.field}: {self.message}" if self.field else self.message

    def admission_message(self) -> str:
        """The webhook's wording: ``object at <base> is invalid: <detail>``."""
        if not self.base:
            return str(self)
        return f"object at {self.base} is invalid: {self.detail}"


class SharingStrategy(enum.StrEnum):
    """How one device is shared by the containers that reference its claim."""

    TIME_SLICING = "TimeSlicing"
    MPS = "MPS"


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
class MpsConfig:
    """Settings of the MPS strategy; every limit is optional (None: MPS's own default, no limit).

    Memory limits are normalized to bytes. ``default_per_device_pinned_memory_limit`` holds
    (device name, bytes) pairs sorted by name; ``pinned_memory_limit`` looks one device up.
    """

    default_active_thread_percentage: int | None = None
    """1..100: the share of a GPU's SMs each client may use."""
    default_pinned_device_memory_limit: int | None = None
    """Bytes of device memory each client may pin, on every device of the claim."""
    default_per_device_pinned_memory_limit: tuple[tuple[str, int], ...] = ()
    """Per device name (e.g. ``gpu-0``), overriding the default for that device."""

    def pinned_memory_limit(self, device: str) -> int | None:
        """The pinned device memory limit for ``device`` in bytes: its own entry, else the default, else None."""
        for name, limit in self.default_per_device_pinned_memory_limit:
            if name == device:
                return limit
        return self.default_pinned_device_memory_limit


@dataclass(frozen=True, slots=True)
class Sharing:
    """A sharing strategy with its settings: exactly the one of ``time_slicing``/``mps`` that matches."""

    strategy: SharingStrategy
    time_slicing: TimeSlicingConfig | None = None
    """Set (interval ``Default`` when not given) for TimeSlicing on a full GPU; None otherwise."""
    mps: MpsConfig | None = None
    """Set (``MpsConfig()`` when not given) for MPS; None otherwise."""


@dataclass(frozen=True, slots=True)
class GpuConfig:
    """A normalized, validated config of a full GPU. ``sharing is None`` means exclusive use (the default).

    No time-slicing default is ever applied implicitly: older GPUs break on it.
    """

    sharing: Sharing | None = None


@dataclass(frozen=True, slots=True)
class MigDeviceConfig:
    """A normalized, validated config of a MIG device. ``sharing is None`` means exclusive use.

    Strategy MPS applies its limits to the MIG device. Strategy TimeSlicing is accepted and has
    no effect (``sharing.time_slicing`` stays None): a MIG device's time slice cannot be set,
    and its processes share it by time anyway; ``timeSlicingConfig`` is therefore not a field.
    """

    sharing: Sharing | None = None


DeviceConfig = GpuConfig | MigDeviceConfig
"""A decoded opaque config of this driver."""

DEFAULT_GPU_CONFIG = GpuConfig()
DEFAULT_MIG_DEVICE_CONFIG = MigDeviceConfig()
