"""Choosing the GPU source (and the GPU health source) from settings: fake GPUs, or NVML.

Called by the apps (plugin, controller, CLI) with their ``--fake-gpus`` setting. NVML is
imported lazily so a fake-GPU install never loads libnvidia-ml.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from dra_driver.core.gpu import GpuSource
from dra_driver.core.health import GpuCheck, HealthEvent, HealthSource
from dra_driver.sources.fake import FakeGpuSource


def make_source(*, fake_gpus: str | None, node_name: str) -> GpuSource:
    """A FakeGpuSource when ``fake_gpus`` names a profile, else the NVML source."""
    if fake_gpus:
        return FakeGpuSource(fake_gpus, node_name)
    from dra_driver.sources.nvml import NvmlGpuSource

    return NvmlGpuSource()


class UnmonitoredSource:
    """The health source when NVML's cannot start: every check says why the GPUs are not monitored."""

    name = "none"

    def __init__(self, why: str) -> None:
        self._why = why

    def resume(self, position: int) -> None:
        """Nothing to resume."""

    def position(self) -> int:
        """No log."""
        return 0

    def events(self, timeout_s: float) -> list[HealthEvent]:
        """No events ever; waits like a real source would."""
        time.sleep(timeout_s)
        return []

    def check(self, gpu_uuids: Sequence[str]) -> dict[str, GpuCheck]:
        """Every GPU unmonitored, with the reason."""
        return {u: GpuCheck(error=self._why) for u in gpu_uuids}

    def close(self) -> None:
        """Nothing to release."""


def make_health_source(*, fake_gpus: str | None, state_dir: Path | None, gpu_uuids: Sequence[str]) -> HealthSource:
    """The fault file's source with fake GPUs, else NVML's; NVML failing to start gives ``UnmonitoredSource``."""
    if fake_gpus:
        from dra_driver.sources.fake_health import FakeHealthSource

        if state_dir is None:
            raise ValueError("fake GPU health needs the fake GPU state dir")
        return FakeHealthSource(state_dir)
    try:
        from dra_driver.sources.nvml_health import NvmlHealthSource

        return NvmlHealthSource(gpu_uuids)
    except Exception as err:  # noqa: BLE001 - NVML (or its binding) failing must not stop the plugin
        return UnmonitoredSource(f"NVML health monitoring could not start: {type(err).__name__}: {err}")
