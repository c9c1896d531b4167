"""The kubelet plugin's usage sampler: per prepared device, utilization, memory and how long it has been idle.

Started by ``kubelet_plugin.main`` on a thread of its own once the sockets serve; read by the
metrics collector (``dra_driver.obs.usage_metrics``) at scrape time through ``snapshot``. Every
pass (``interval_s``, 10 s by default) it

1. takes the prepared claims from ``claims()`` — the lock-free snapshot of the checkpoint
   (``DeviceState.prepared_snapshot``); it never takes the node lock, so it never delays a
   prepare or unprepare, and is one save behind at worst;
2. turns each completed claim's devices into ``UsageTarget``s through the publication's targets
   (device name → GPU; a MIG device's UUID from its checkpoint record, or from the static
   instance); admin-access devices are left out (they do not hold the device);
3. asks the usage source (fake script or NVML) for a sample of each, and steps the pure
   ``IdleTracker`` (``dra_driver.core.usage``: the idle rule is written there);
4. publishes an immutable ``UsageSnapshot`` (a reference swap: readers never wait).

A device seen for the first time starts its idle clock at its claim's prepare time, which is
the mtime of the claim's CDI spec (``cdi_spec_mtime``: written at prepare, it survives a plugin
restart within the boot), or the time the sampler first saw it when there is none.

Pods: the checkpoint names no pod; ``kubelet_plugin.monitoring.pod_notes.PodNotes`` keeps each claim's pods
from the ResourceClaims the plugin reads anyway. This module (and ``dra_driver.core.usage``) is
loaded once the sockets serve.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from dra_driver.core.cdi import spec_file_name
from dra_driver.core.checkpoint import ClaimEntry, ClaimState
from dra_driver.core.mig_publish import DeviceTarget
from dra_driver.core.usage import (
    DeviceKey,
    IdlePolicy,
    IdleTracker,
    UsageRow,
    UsageSample,
    UsageSnapshot,
    UsageSource,
    UsageTarget,
)
from kubelet_plugin.monitoring.pod_notes import PodNotes

log = structlog.get_logger(__name__)

DEFAULT_INTERVAL_S = 10.0


def make_usage_source(*, fake: bool, state_dir: Path) -> UsageSource:
    """The usage source: the fake GPUs' usage script in ``state_dir`` (``--fake-gpu-state-dir``), or NVML."""
    if fake:
        from dra_driver.sources.fake_usage import FakeUsageSource

        return FakeUsageSource(state_dir)
    from dra_driver.sources.nvml_usage import NvmlUsageSource

    return NvmlUsageSource()


def cdi_spec_mtime(cdi_root: Path, driver: str) -> Callable[[str], float | None]:
    """A claim's prepare time: its CDI spec's mtime (None when it has none)."""

    def prepared_at(claim_uid: str) -> float | None:
        try:
            return (cdi_root / spec_file_name(driver, claim_uid)).stat().st_mtime
        except (OSError, ValueError):
            return None

    return prepared_at


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A prepared device: the claim it belongs to, what to read, and whether it can be read."""

    namespace: str
    claim: str
    target: UsageTarget
    readable: bool = True
    """False for a MIG device whose MIG UUID is not known: it reads unknown (never its parent GPU's numbers)."""


def prepared_targets(claims: Mapping[str, ClaimEntry], targets: Mapping[str, DeviceTarget]) -> list[_Prepared]:
    """The devices of every completed claim to sample, in claim UID and device order.

    A device is ``shared`` when its claim time-slices or runs MPS, when it is a capacity share,
    or when it is a full GPU that another claim holds too.
    """
    found: list[tuple[str, ClaimEntry, str, str, str | None, bool, bool]] = []
    holders: dict[str, set[str]] = {}
    for uid in sorted(claims):
        entry = claims[uid]
        if entry.state is not ClaimState.PREPARE_COMPLETED:
            continue
        sharing = bool(entry.time_slices or entry.mps_daemons)
        for d in entry.devices:
            target = targets.get(d.device_name)
            if target is None or d.admin_access:
                continue
            mig_uuid = None
            if target.is_mig:
                mig_uuid = d.mig.mig_uuid if d.mig is not None else target.instance.uuid if target.instance is not None else None
            else:
                holders.setdefault(target.gpu.uuid, set()).add(uid)
            gpu = d.mig.parent_uuid if d.mig is not None else target.gpu.uuid
            found.append((uid, entry, d.device_name, gpu, mig_uuid, target.is_mig, sharing or d.share_id is not None))
    out: list[_Prepared] = []
    for uid, entry, device, gpu, mig_uuid, is_mig, sharing in found:
        shared = sharing or (not is_mig and len(holders[gpu]) > 1)
        what = UsageTarget(uid, device, gpu, mig_uuid, shared)
        out.append(_Prepared(entry.namespace, entry.name, what, readable=not is_mig or mig_uuid is not None))
    return out


class UsageSampler:
    """Samples the prepared devices every ``interval_s`` and keeps the latest rows (``snapshot``)."""

    def __init__(
        self,
        *,
        source: UsageSource,
        claims: Callable[[], Mapping[str, ClaimEntry]],
        targets: Mapping[str, DeviceTarget],
        prepared_at: Callable[[str], float | None] = lambda _uid: None,
        pods: PodNotes | None = None,
        policy: IdlePolicy | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"usage sampling interval {interval_s} is not positive")
        self._source = source
        self._claims = claims
        self._targets = targets
        self._prepared_at = prepared_at
        self._pods = pods
        self._tracker = IdleTracker(policy or IdlePolicy())
        self._first_seen: dict[str, float] = {}
        self.interval_s = interval_s
        self._clock = clock
        self._started = clock()
        self._snapshot = UsageSnapshot()
        self._failing: str | None = None
        self.last_pass_cpu_s = 0.0
        """CPU seconds (this thread's) the last pass took."""

    def snapshot(self) -> UsageSnapshot:
        """The rows of the latest pass (empty before the first). Thread-safe: an immutable value."""
        return self._snapshot

    def sample_once(self) -> UsageSnapshot:
        """One pass (see the module's docstring); never raises for a failing source (its devices read unknown)."""
        cpu0 = time.thread_time()
        now = self._clock()
        try:
            claims = self._claims()
        except Exception as err:  # noqa: BLE001 - the sampler keeps its last rows and tries again next pass
            log.warning("usage_claims_unreadable", error=f"{type(err).__name__}: {err}")
            return self._snapshot
        prepared = prepared_targets(claims, self._targets)
        samples = self._read([p.target for p in prepared if p.readable], now)
        uids = {p.target.claim_uid for p in prepared}
        for uid in uids - self._first_seen.keys():
            at = self._prepared_at(uid)
            # A claim prepared before this sampler started (a plugin restart) may have been busy until
            # a moment ago: its idle clock starts at the first sample, not at its prepare.
            self._first_seen[uid] = now if at is None or at < self._started else at
        for uid in [u for u in self._first_seen if u not in uids]:
            del self._first_seen[uid]
        if self._pods is not None:
            self._pods.retain(uids)
        self._tracker = self._tracker.observe(
            {p.target.key: self._first_seen[p.target.claim_uid] for p in prepared}, samples, now
        )
        rows = []
        for p in prepared:
            clock = self._tracker.clock(p.target.key)
            sample = samples.get(p.target.key)
            rows.append(
                UsageRow(
                    namespace=p.namespace,
                    claim=p.claim,
                    claim_uid=p.target.claim_uid,
                    device=p.target.device,
                    gpu_uuid=p.target.gpu_uuid,
                    mig_uuid=p.target.mig_uuid,
                    utilization=None if sample is None else sample.utilization,
                    memory_used_bytes=None if sample is None else sample.memory_used_bytes,
                    idle_seconds=0.0 if clock is None else clock.idle_seconds(now),
                    idle_since=None if clock is None else clock.idle_since,
                    pods=self._pods.pods(p.target.claim_uid) if self._pods is not None else (),
                    processes=() if sample is None else sample.processes,
                )
            )
        self._snapshot = UsageSnapshot(tuple(rows), now)
        self.last_pass_cpu_s = time.thread_time() - cpu0
        return self._snapshot

    def _read(self, targets: Sequence[UsageTarget], now: float) -> Mapping[DeviceKey, UsageSample]:
        if not targets:
            return {}
        try:
            samples = self._source.sample(targets, now)
        except Exception as err:  # noqa: BLE001 - a source bug makes this pass unknown, not the plugin fail
            why = f"{type(err).__name__}: {err}"
            if why != self._failing:
                log.warning("usage_sample_failed", source=self._source.describe(), error=why, effect="devices read unknown")
                self._failing = why
            return {}
        if self._failing is not None:
            log.info("usage_sample_recovered", source=self._source.describe())
            self._failing = None
        return samples

    def run(self, stop: threading.Event) -> None:
        """Sample every ``interval_s`` until ``stop``; the source is closed at the end. Never raises."""
        log.info("usage_sampler_started", source=self._source.describe(), interval_s=self.interval_s)
        try:
            while True:
                try:
                    self.sample_once()
                except Exception:
                    log.exception("usage_pass_failed")
                if stop.wait(self.interval_s):
                    return
        finally:
            self._source.close()
