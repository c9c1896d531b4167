"""The MIG model: profiles, placements, instances, MIG device names and the backend protocol. Pure.

A *catalog* is what one GPU can be carved into, as NVML reports it: GPU-instance profiles
(``1g.10gb``, ``1g.10gb+me``, ...) with their resources and their possible placements
(``start``/``size`` in memory slices). An *instance* is a carved GPU instance (GI) with its
full-size compute instance (CI) and MIG device UUID.

Written by the MIG backends (``dra_driver.mig_backends.nvml`` over real NVML or over the MIG
simulator in ``dra_driver.mig_backends.sim``); read by the publication rules
(``dra_driver.core.mig_publish``) and the kubelet plugin's prepare logic.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from dra_driver.core.gpu import GpuInfo

# Architectures whose MIG mode can change at run time without a GPU reset (Hopper and newer).
# Ampere needs a reset, which a driver must never do on its own: its MIG mode is left alone.
_NO_RUNTIME_TOGGLE = frozenset({"Ampere"})

_MIG_NAME = re.compile(r"^gpu-(0|[1-9][0-9]*)-mig-([a-z0-9]+(?:-[a-z0-9]+)*)-(0|[1-9][0-9]*)\Z")


class MigStrategy(enum.StrEnum):
    """How a node exposes MIG (``--mig``; Helm ``mig.strategy``)."""

    NONE = "none"
    """Full GPUs only; a GPU with MIG mode on is not published (it cannot run as a full GPU)."""
    STATIC = "static"
    """MIG instances made out of band are published as devices; the driver never changes them."""
    DYNAMIC = "dynamic"
    """Every placement is published with shared counters; instances are carved at prepare."""


class MigErrorCode(enum.StrEnum):
    """NVML outcomes a MIG operation can have, named for what they mean to the caller."""

    INSUFFICIENT_RESOURCES = "InsufficientResources"
    """The placement (or an engine it needs) is taken. NVML never says "already exists" here."""
    NOT_FOUND = "NotFound"
    IN_USE = "InUse"
    """A process still uses the instance, or another NVML client holds it."""
    NOT_SUPPORTED = "NotSupported"
    RESET_REQUIRED = "ResetRequired"
    """The MIG mode change is pending until a GPU reset (Ampere); the driver never resets."""
    INVALID_ARGUMENT = "InvalidArgument"
    NO_PERMISSION = "NoPermission"
    UNKNOWN = "Unknown"


class MigError(Exception):
    """A MIG operation failed; ``code`` says how, the message says on what."""

    def __init__(self, op: str, code: MigErrorCode, detail: str) -> None:
        super().__init__(f"{op}: {detail} ({code.value})")
        self.op = op
        self.code = code
        self.detail = detail


@dataclass(frozen=True, slots=True, order=True)
class Placement:
    """A GPU-instance placement: ``size`` memory slices from ``start``."""

    start: int
    size: int

    def slices(self) -> range:
        """The memory slices this placement occupies."""
        return range(self.start, self.start + self.size)

    def overlaps(self, other: Placement) -> bool:
        """True when the two placements share a memory slice."""
        return self.start < other.start + other.size and other.start < self.start + self.size


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A GPU-instance profile as NVML reports it (``nvidia-smi mig -lgip`` and ``-lgipp``)."""

    name: str
    """``1g.10gb``, ``1g.10gb+me``: the name without NVML's ``MIG `` prefix."""
    profile_id: int
    """The GI profile id NVML creates instances with (``nvidia-smi`` column ``ID``)."""
    slices: int
    """Compute slices (the ``1g`` of ``1g.10gb``)."""
    instance_count: int
    """How many instances of this profile fit on an empty GPU."""
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    placements: tuple[Placement, ...]
    """Possible placements on an empty GPU, in NVML's order."""
    index: int = -1
    """The NVML profile index it is read at (``NVML_GPU_INSTANCE_PROFILE_1_SLICE`` = 0, ...); -1 when not known."""

    @property
    def media_extensions(self) -> bool:
        """True for the ``+me`` profiles, which hold the GPU's scarce JPEG/OFA engines."""
        return self.name.endswith("+me")

    @property
    def slug(self) -> str:
        """The profile in a DNS label: ``1g.10gb+me`` → ``1g10gb-me``."""
        return profile_slug(self.name)


@dataclass(frozen=True, slots=True)
class MigCatalog:
    """Everything one GPU can be carved into."""

    memory_slices: int
    """Placement slots of the GPU (8 on A100/H100/H200/B200)."""
    profiles: tuple[MigProfile, ...]

    def by_id(self, profile_id: int) -> MigProfile:
        """The profile with this GI profile id; KeyError when the GPU has none."""
        for p in self.profiles:
            if p.profile_id == profile_id:
                return p
        raise KeyError(f"no MIG profile with id {profile_id}")

    def by_slug(self, slug: str) -> MigProfile | None:
        """The profile whose slug (see ``profile_slug``) is ``slug``, if any."""
        for p in self.profiles:
            if p.slug == slug:
                return p
        return None


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A carved GPU instance and (when present) its compute instance and MIG device."""

    parent_uuid: str
    profile_id: int
    profile_name: str
    placement: Placement
    gi_id: int
    ci_id: int | None = None
    """None for a GI without a compute instance (a half-done carve)."""
    uuid: str | None = None
    """The MIG device UUID (``MIG-...``); None without a compute instance."""


@dataclass(frozen=True, slots=True)
class MigMode:
    """A GPU's MIG mode now, and after the next reset (they differ only on Ampere)."""

    current: bool
    pending: bool


class MigBackend(Protocol):
    """MIG operations on one node's GPUs, NVML-shaped. Implemented over pynvml (real or simulated).

    Every method raises MigError on failure; none of them retries.
    """

    def catalog(self, gpu: GpuInfo) -> MigCatalog | None:
        """What the GPU can be carved into; None when it is not MIG capable."""
        ...

    def mode(self, gpu: GpuInfo) -> MigMode:
        """The GPU's MIG mode."""
        ...

    def set_mode(self, gpu: GpuInfo, enabled: bool) -> None:
        """Turn MIG mode on or off; RESET_REQUIRED when it would only take effect after a reset."""
        ...

    def instances(self, gpu: GpuInfo) -> list[MigInstance]:
        """Every GPU instance on the GPU (with its CI and MIG UUID when it has one)."""
        ...

    def create_gpu_instance(self, gpu: GpuInfo, profile_id: int, start: int) -> int:
        """Create a GI of ``profile_id`` at exactly placement ``start``; return its GI id."""
        ...

    def create_compute_instance(self, gpu: GpuInfo, gi_id: int) -> MigInstance:
        """Create the full-size CI in a GI; return the instance with its MIG UUID."""
        ...

    def destroy_compute_instances(self, gpu: GpuInfo, gi_id: int) -> None:
        """Destroy every CI of a GI (none is fine); NOT_FOUND when the GI does not exist."""
        ...

    def destroy_gpu_instance(self, gpu: GpuInfo, gi_id: int) -> None:
        """Destroy a GI that has no CI left; NOT_FOUND when it does not exist."""
        ...

    def caps_device_nodes(self, gpu: GpuInfo, gi_id: int, ci_id: int) -> tuple[str, ...]:
        """The ``/dev/nvidia-caps/nvidia-cap<N>`` nodes giving access to a GI and its CI."""
        ...


def profile_slug(name: str) -> str:
    """A MIG profile name in DNS-label form: ``1g.10gb+me`` → ``1g10gb-me``."""
    slug = name.lower().replace(".", "").replace("+", "-")
    if not re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", slug):
        raise ValueError(f"MIG profile name {name!r} does not map to a DNS label")
    return slug


def mig_device_name(minor: int, profile_name: str, start: int) -> str:
    """The device name of a MIG placement: ``gpu-<minor>-mig-<profile slug>-<start>``.

    The same name is used for a placement carved on demand (dynamic) and for an instance that
    already sits there (static), so a name always says where on which GPU the slice is.
    """
    if minor < 0 or start < 0:
        raise ValueError("GPU minor and placement start must not be negative")
    name = f"gpu-{minor}-mig-{profile_slug(profile_name)}-{start}"
    if len(name) > 63:
        raise ValueError(f"MIG device name {name!r} is longer than a DNS label allows")
    return name


@dataclass(frozen=True, slots=True)
class MigDeviceName:
    """A parsed MIG device name."""

    minor: int
    slug: str
    start: int


def parse_mig_device_name(name: str) -> MigDeviceName | None:
    """Parse ``gpu-<minor>-mig-<slug>-<start>``; None for any other name."""
    m = _MIG_NAME.match(name)
    if not m:
        return None
    return MigDeviceName(int(m.group(1)), m.group(2), int(m.group(3)))


def can_toggle_mig_mode(gpu: GpuInfo) -> bool:
    """True when MIG mode may be changed at run time (Hopper and newer; never Ampere)."""
    return gpu.mig_capable and gpu.architecture not in _NO_RUNTIME_TOGGLE


def free_placements(profile: MigProfile, taken: Iterable[Placement]) -> list[Placement]:
    """The profile's placements that overlap none of ``taken`` (what NVML would still offer)."""
    used = list(taken)
    return [p for p in profile.placements if not any(p.overlaps(u) for u in used)]
