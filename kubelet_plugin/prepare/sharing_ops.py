"""Sharing side effects of prepare and unprepare: MPS daemons and time slices, started, undone, restarted.

Called by ``kubelet_plugin.prepare.state`` with its lock held (and at start-up, by
``kubelet_plugin.prepare.recovery``); what to apply comes from the claim's plan
(``dra_driver.core.prepare``) and the checkpoint. Mirrors ``kubelet_plugin.prepare.mig_ops``: every side
effect is followed by a named fault-injection point (``kubelet_plugin.prepare.faults``) so the crash
tests can kill the process right after it. Without a sharing backend every call is a no-op,
and a claim that asks for sharing is refused before any side effect.
"""

from __future__ import annotations

from collections.abc import Collection

import structlog

from dra_driver.core.checkpoint import Checkpoint, ClaimEntry, ClaimState
from dra_driver.core.claims import ClaimError
from dra_driver.core.config import TimeSliceInterval
from dra_driver.core.prepare import ClaimPlan
from dra_driver.core.sharing import SharingBackend
from kubelet_plugin.prepare.faults import crash_point

log = structlog.get_logger(__name__)


class SharingOps:
    """Sharing on this node's GPUs through one backend (the NVIDIA tools, or the simulator), or none."""

    def __init__(self, backend: SharingBackend | None) -> None:
        self.backend = backend

    def check_possible(self, plan: ClaimPlan) -> None:
        """ClaimError when the plan asks for sharing and this plugin has no sharing backend."""
        if (plan.time_slices or plan.mps_daemons) and self.backend is None:
            raise ClaimError("the claim asks for GPU sharing, but this plugin runs without a sharing backend")

    def apply(self, plan: ClaimPlan) -> None:
        """Start the plan's MPS daemons and set its time slices (both idempotent)."""
        if self.backend is None:
            return
        for daemon in plan.mps_daemons:
            self.backend.start_mps(daemon)
            log.info("mps_ready", daemon=daemon.daemon_id, shared=daemon.shared)
            crash_point("after_mps_started")
        for ts in plan.time_slices:
            self.backend.set_time_slice(ts.gpu_uuid, ts.interval)
            log.info("time_slice_applied", gpu=ts.gpu_uuid, interval=ts.interval.value)
            crash_point("after_time_slice_set")

    def undo(self, cp: Checkpoint, uid: str, entry: ClaimEntry) -> None:
        """Stop the claim's MPS daemons and reset its time slices, unless another claim still uses them."""
        if self.backend is None:
            return
        others = [e for u, e in cp.claims.items() if u != uid]
        in_use = {d.daemon_id for e in others for d in e.mps_daemons}
        for daemon in entry.mps_daemons:
            if daemon.daemon_id in in_use:
                continue
            self.backend.stop_mps(daemon)
            log.info("mps_stopped", claim_uid=uid, daemon=daemon.daemon_id)
            crash_point("after_unprepare_mps_stopped")
        sliced = {t.gpu_uuid for e in others for t in e.time_slices}
        for ts in entry.time_slices:
            if ts.gpu_uuid in sliced:
                continue
            self.backend.set_time_slice(ts.gpu_uuid, TimeSliceInterval.DEFAULT)
            log.info("time_slice_reset", claim_uid=uid, gpu=ts.gpu_uuid)
            crash_point("after_unprepare_time_slice_reset")

    def restart_dead(self, cp: Checkpoint) -> None:
        """At start: restart every MPS daemon a completed claim needs that is not running."""
        if self.backend is None:
            return
        for uid, entry in cp.claims.items():
            if entry.state is not ClaimState.PREPARE_COMPLETED:
                continue
            for daemon in entry.mps_daemons:
                if not self.backend.mps_running(daemon.daemon_id):
                    self.backend.start_mps(daemon)
                    log.warning("mps_restarted", claim_uid=uid, daemon=daemon.daemon_id)

    def holds_anything(self, entry: ClaimEntry, *, ignore: Collection[str] = ()) -> bool:
        """True when one of the claim's MPS daemons, other than those in ``ignore``, still runs."""
        return self.backend is not None and any(
            self.backend.mps_running(d.daemon_id) for d in entry.mps_daemons if d.daemon_id not in ignore
        )
