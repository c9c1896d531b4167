"""Choosing the GPU source from settings: fake GPUs, or NVML.

Called by the apps (plugin, controller, CLI) with their ``--fake-gpus`` setting. NVML is
imported lazily so a fake-GPU install never loads libnvidia-ml.
"""

from __future__ import annotations

from dra_driver.core.gpu import GpuSource
from dra_driver.sources.fake import FakeGpuSource


def make_source(*, fake_gpus: str | None, node_name: str) -> GpuSource:
    """A FakeGpuSource when ``fake_gpus`` names a profile, else the NVML source."""
    if fake_gpus:
        return FakeGpuSource(fake_gpus, node_name)
    from dra_driver.sources.nvml import NvmlGpuSource

    return NvmlGpuSource()
