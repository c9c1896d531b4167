"""GPU sharing as data: the time slices and MPS control daemons a claim needs, and who may undo them. Pure.

``dra_driver.core.prepare`` derives them from a claim's configs and consumed capacity; the
kubelet plugin (``kubelet_plugin.prepare.sharing_ops``) applies them through a ``SharingBackend``
(``nvidia-smi`` and ``nvidia-cuda-mps-control`` on real GPUs, the simulator's records on fake
ones) and records them in the checkpoint so unprepare can undo exactly what prepare did.

Two kinds of MPS daemon:

* per claim (``GpuConfig`` with ``sharing.strategy: MPS``): one daemon for the claim's GPUs with
  the config's default active-thread percentage and pinned-memory limits; containers of the
  claim share it;
* per GPU for consumable-capacity shares (``--sharing consumable``): claims from any namespace
  that each got a slice of one GPU's ``memory`` (and ``computeShare``) share that GPU's daemon;
  each container's own limits are set by its CUDA MPS client environment
  (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``, ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``), which the MPS
  server enforces. The daemon stops with the last share.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from dra_driver.core.config import TimeSliceInterval
from dra_driver.core.gpu import GpuInfo

# Where a container finds its MPS pipe directory; the host directory is bind-mounted there.
CONTAINER_MPS_PIPE_DIR = "/tmp/nvidia-mps"  # noqa: S108 - the path inside the container, fixed by convention
CAPACITY_COMPUTE_SHARE = "computeShare"


@dataclass(frozen=True, slots=True)
class MpsDaemon:
    """One MPS control daemon: which GPUs it serves, and its default limits."""

    daemon_id: str
    gpu_uuids: tuple[str, ...]
    """What the daemon serves (``CUDA_VISIBLE_DEVICES``): GPU or MIG device UUIDs."""
    exclusive_gpus: tuple[str, ...] = ()
    """Full GPUs switched to the EXCLUSIVE_PROCESS compute mode for the daemon (none for MIG devices)."""
    active_thread_percentage: int | None = None
    pinned_memory_limits: tuple[tuple[str, int], ...] = ()
    """(GPU UUID, bytes) pairs, sorted."""
    shared: bool = False
    """True for a per-GPU daemon that consumable-capacity shares of several claims use."""

    def to_json(self) -> dict[str, Any]:
        """Checkpoint JSON."""
        return {
            "id": self.daemon_id,
            "gpuUUIDs": list(self.gpu_uuids),
            "exclusiveGPUs": list(self.exclusive_gpus),
            "activeThreadPercentage": self.active_thread_percentage,
            "pinnedMemoryLimits": {u: b for u, b in self.pinned_memory_limits},
            "shared": self.shared,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> MpsDaemon:
        """Decode leniently (checkpoint upgrade rule)."""
        limits = raw.get("pinnedMemoryLimits") or {}
        pct = raw.get("activeThreadPercentage")
        return cls(
            daemon_id=str(raw["id"]),
            gpu_uuids=tuple(str(u) for u in raw.get("gpuUUIDs") or ()),
            exclusive_gpus=tuple(str(u) for u in raw.get("exclusiveGPUs") or ()),
            active_thread_percentage=None if pct is None else int(pct),
            pinned_memory_limits=tuple(sorted((str(u), int(b)) for u, b in limits.items())),
            shared=bool(raw.get("shared", False)),
        )


@dataclass(frozen=True, slots=True)
class TimeSlice:
    """A compute time slice set on one full GPU for a claim."""

    gpu_uuid: str
    interval: TimeSliceInterval

    def to_json(self) -> dict[str, Any]:
        """Checkpoint JSON."""
        return {"gpuUUID": self.gpu_uuid, "interval": self.interval.value}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TimeSlice:
        """Decode leniently (checkpoint upgrade rule)."""
        return cls(str(raw["gpuUUID"]), TimeSliceInterval(raw["interval"]))


class SharingBackend(Protocol):
    """Applies sharing settings to GPUs. Every method is idempotent and raises OSError on failure."""

    def set_time_slice(self, gpu_uuid: str, interval: TimeSliceInterval) -> None:
        """Set the GPU's compute time slice (``Default`` restores the driver's default)."""
        ...

    def start_mps(self, daemon: MpsDaemon) -> None:
        """Start the daemon with its limits unless it already runs; wait until it answers."""
        ...

    def stop_mps(self, daemon: MpsDaemon) -> None:
        """Stop the daemon if it runs, undo what starting it changed, remove its directories."""
        ...

    def mps_running(self, daemon_id: str) -> bool:
        """True when the daemon runs and answers."""
        ...


def claim_daemon_id(claim_uid: str, devices: Iterable[str]) -> str:
    """The per-claim daemon's id: ``<claim uid>-<first 8 hex of sha256 of the sorted device names>``.

    Device names, not UUIDs, so the id is known before a MIG device is carved.
    """
    digest = hashlib.sha256(",".join(sorted(devices)).encode()).hexdigest()[:8]
    return f"{claim_uid}-{digest}"


def shared_daemon_id(gpu: GpuInfo) -> str:
    """The per-GPU daemon consumable-capacity shares use: ``gpu-<minor>-shared``."""
    return f"gpu-{gpu.minor}-shared"


def mps_client_env(gpu_uuid: str, pinned_bytes: int | None, thread_percentage: int | None) -> dict[str, str]:
    """The CUDA MPS client environment of a container (limits the MPS server enforces for it)."""
    env = {"CUDA_MPS_PIPE_DIRECTORY": CONTAINER_MPS_PIPE_DIR}
    if pinned_bytes:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"{gpu_uuid}={max(1, pinned_bytes >> 20)}M"
    if thread_percentage:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(thread_percentage)
    return env


@dataclass(frozen=True, slots=True)
class MpsDirs:
    """A daemon's host directories, under the plugin's MPS root: ``<root>/<id>/{pipe,log,shm}``."""

    pipe: str
    log: str
    shm: str


def mps_dirs(mps_root: str, daemon_id: str) -> MpsDirs:
    """Where a daemon's pipe, log and shared-memory directories live on the host."""
    base = f"{mps_root.rstrip('/')}/{daemon_id}"
    return MpsDirs(pipe=f"{base}/pipe", log=f"{base}/log", shm=f"{base}/shm")
