"""Per-claim GPU usage: what a usage source reports per prepared device, and how long each has been idle. Pure.

Written by the usage sources (``dra_driver.sources.fake_usage`` on fake GPUs,
``dra_driver.sources.nvml_usage`` on real ones); read by the kubelet plugin's usage sampler
(``kubelet_plugin.monitoring.usage``), which keeps an ``IdleTracker`` across its passes and hands rows to the
metrics collector (``dra_driver.obs.usage_metrics``). No clocks are read here: every time is
passed in (seconds since the epoch), so the same samples always give the same verdicts.

The idle rule (``classify``), per sample of one prepared device:

* **unknown** when the source cannot tell the utilization (``None``: a MIG device without GPM,
  an NVML error, no sample at all). Unknown never counts as idle, and it stops the idle clock:
  after it the device is idle again only from its next idle sample. A transient read error can
  so delay an alert, never raise a false one.
* **busy** when utilization >= ``IdlePolicy.utilization_threshold`` (default 0.05), or, only when
  ``IdlePolicy.memory_floor_bytes`` is set, memory used >= that floor (unknown memory never makes
  a device busy).
* **idle** otherwise.

The memory floor is off by default: a process that holds 40 GiB of a GPU and computes nothing
(a notebook with a model loaded, a server with no traffic) is exactly the allocated-but-idle
waste to find. Set a floor to count any device holding memory as in use.

The idle clock (``IdleTracker.observe``): a device seen for the first time starts idle at its
prepare time (so a claim prepared 40 minutes ago and idle at the first sample has been idle 40
minutes); every busy or unknown sample clears it; an idle sample after that restarts it at that
sample's time. A device no longer prepared is forgotten.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

DEFAULT_UTILIZATION_THRESHOLD = 0.05
"""Below 5 % busy (NVML's utilization: the share of time a kernel ran) counts as idle."""


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    """One process on a device, where the source can tell (NVML on shared GPUs; scripted on fake ones)."""

    pid: int
    utilization: float | None
    """0..1 (NVML's SM utilization of that process); None when unknown."""
    memory_bytes: int | None
    """GPU memory the process holds; None when unknown."""


@dataclass(frozen=True, slots=True)
class UsageSample:
    """One reading of one prepared device."""

    device: str
    """The published device name (``gpu-3``, ``gpu-0-mig-1g10gb-6``)."""
    gpu_uuid: str
    """The physical GPU (the parent, for a MIG device)."""
    mig_uuid: str | None
    """The MIG device read, None for a full GPU."""
    utilization: float | None
    """0..1; None when the source cannot tell (see the module's idle rule)."""
    memory_used_bytes: int | None
    """Device memory in use (the MIG device's own, for MIG); None when unknown."""
    at: float
    """When it was read, seconds since the epoch."""
    processes: tuple[ProcessUsage, ...] = ()
    """Per process, where the source gives it; empty otherwise."""


@dataclass(frozen=True, slots=True)
class UsageTarget:
    """A prepared device to read: what the sampler asks a usage source for."""

    claim_uid: str
    device: str
    gpu_uuid: str
    mig_uuid: str | None = None
    shared: bool = False
    """The GPU may run other claims' processes too (time-slicing, MPS, capacity shares, several
    claims on it): per-process numbers are read for it where the source can."""

    @property
    def key(self) -> DeviceKey:
        """(claim UID, device name)."""
        return (self.claim_uid, self.device)


DeviceKey = tuple[str, str]
"""(claim UID, device name): one prepared device of one claim."""


class UsageSource(Protocol):
    """Reads the usage of prepared devices. Implementations are strictly read-only towards the GPUs."""

    def sample(self, targets: Sequence[UsageTarget], now: float) -> dict[DeviceKey, UsageSample]:
        """A sample per target it could read; a target left out is unknown."""
        ...

    def describe(self) -> str:
        """A short description for logs (``fake-usage:<dir>``, ``nvml``)."""
        ...

    def close(self) -> None:
        """Release what the source holds (NVML)."""
        ...


class Activity(enum.Enum):
    """What one sample says about a device."""

    IDLE = "idle"
    BUSY = "busy"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    """When a sample counts as idle (see the module's rule)."""

    utilization_threshold: float = DEFAULT_UTILIZATION_THRESHOLD
    memory_floor_bytes: int | None = None
    """None: memory does not decide. Set: a device holding at least this much is busy."""

    def __post_init__(self) -> None:
        if not 0.0 < self.utilization_threshold <= 1.0:
            raise ValueError(f"utilization threshold {self.utilization_threshold} is not in (0, 1]")
        if self.memory_floor_bytes is not None and self.memory_floor_bytes < 0:
            raise ValueError(f"memory floor {self.memory_floor_bytes} is negative")


def classify(sample: UsageSample | None, policy: IdlePolicy) -> Activity:
    """Idle, busy or unknown, by the module's rule; no sample is unknown."""
    if sample is None or sample.utilization is None:
        return Activity.UNKNOWN
    if sample.utilization >= policy.utilization_threshold:
        return Activity.BUSY
    floor = policy.memory_floor_bytes
    if floor is not None and sample.memory_used_bytes is not None and sample.memory_used_bytes >= floor:
        return Activity.BUSY
    return Activity.IDLE


@dataclass(frozen=True, slots=True)
class DeviceClock:
    """One prepared device's idle clock."""

    prepared_at: float
    idle_since: float | None
    """None while busy or unknown."""
    activity: Activity

    def idle_seconds(self, now: float) -> float:
        """Seconds idle at ``now`` (0 while busy or unknown; never negative)."""
        if self.idle_since is None:
            return 0.0
        return max(0.0, now - self.idle_since)


@dataclass(frozen=True, slots=True)
class IdleTracker:
    """Every prepared device's idle clock; ``observe`` returns the next tracker, this one is unchanged."""

    policy: IdlePolicy = field(default_factory=IdlePolicy)
    clocks: Mapping[DeviceKey, DeviceClock] = field(default_factory=dict)

    def observe(
        self,
        prepared_at: Mapping[DeviceKey, float],
        samples: Mapping[DeviceKey, UsageSample],
        now: float,
    ) -> IdleTracker:
        """The tracker after one pass.

        ``prepared_at`` names every device prepared now (and when its claim was prepared);
        ``samples`` is what the source read (a device without one is unknown).
        """
        clocks: dict[DeviceKey, DeviceClock] = {}
        for key, prepared in prepared_at.items():
            sample = samples.get(key)
            activity = classify(sample, self.policy)
            before = self.clocks.get(key)
            if activity is not Activity.IDLE:
                idle_since = None
            elif before is None:
                idle_since = min(prepared, now)  # new: idle since its prepare, until a busy sample says otherwise
            elif before.idle_since is not None:
                idle_since = before.idle_since
            else:
                idle_since = sample.at if sample is not None else now
            started = prepared if before is None else before.prepared_at
            clocks[key] = DeviceClock(prepared_at=started, idle_since=idle_since, activity=activity)
        return IdleTracker(self.policy, clocks)

    def clock(self, key: DeviceKey) -> DeviceClock | None:
        """A device's clock, None when it is not prepared."""
        return self.clocks.get(key)


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One prepared device of one claim after a pass of the sampler, as the metrics show it."""

    namespace: str
    claim: str
    claim_uid: str
    device: str
    gpu_uuid: str
    mig_uuid: str | None
    utilization: float | None
    memory_used_bytes: int | None
    idle_seconds: float
    """0 while busy or unknown."""
    idle_since: float | None
    """Seconds since the epoch; None while busy or unknown."""
    pods: tuple[str, ...] = ()
    processes: tuple[ProcessUsage, ...] = ()


@dataclass(frozen=True, slots=True)
class UsageSnapshot:
    """Every row of one pass, and when it was taken (0: no pass yet)."""

    rows: tuple[UsageRow, ...] = ()
    taken_at: float = 0.0


def claim_idle_seconds(tracker: IdleTracker, claim_uid: str, now: float) -> float:
    """How long a whole claim has been idle: its least idle device's seconds (0 when any is busy or unknown).

    The same rule as the chart's alert (``min by (namespace, claim)``): a claim is idle only when
    every one of its devices is.
    """
    seconds = [c.idle_seconds(now) for (uid, _), c in tracker.clocks.items() if uid == claim_uid]
    return min(seconds) if seconds else 0.0
