"""Fault injection for crash-safety tests: die with SIGKILL at a named point of prepare or unprepare.

Off unless ``DRA_GPU_CRASH_AT`` names a point; the integration tests set it to prove that a
kill -9 at any step leaves state the next start recovers from. Called by
``kubelet_plugin.prepare.state``, ``mig_ops``, ``sharing_ops``.
"""

from __future__ import annotations

import os
import signal

ENV = "DRA_GPU_CRASH_AT"
# Every point follows a side effect, in the order prepare and unprepare reach them.
PREPARE_POINTS = (
    "after_prepare_started",
    "after_mig_mode_enabled",
    "after_mig_mode_disabled",
    "after_gi_created",
    "after_ci_created",
    "after_mps_started",
    "after_time_slice_set",
    "after_cdi_written",
    "after_prepare_completed",
)
UNPREPARE_POINTS = (
    "after_unprepare_mps_stopped",
    "after_unprepare_time_slice_reset",
    "after_unprepare_ci_destroyed",
    "after_unprepare_gi_destroyed",
    "after_unprepare_mig_mode_disabled",
    "after_unprepare_cdi_removed",
)
POINTS = PREPARE_POINTS + UNPREPARE_POINTS


def crash_point(name: str) -> None:
    """SIGKILL this process if ``DRA_GPU_CRASH_AT`` equals ``name``."""
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
