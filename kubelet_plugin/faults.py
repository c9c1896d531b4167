"""Fault injection for crash-safety tests: die with SIGKILL at a named point of prepare.

Off unless ``DRA_GPU_CRASH_AT`` names a point; the integration tests set it to prove that a
kill -9 at any step leaves state the next start recovers from. Called by ``kubelet_plugin.state``.
"""

from __future__ import annotations

import os
import signal

ENV = "DRA_GPU_CRASH_AT"
POINTS = ("after_prepare_started", "after_cdi_written", "after_prepare_completed", "after_unprepare_cdi_removed")


def crash_point(name: str) -> None:
    """SIGKILL this process if ``DRA_GPU_CRASH_AT`` equals ``name``."""
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
