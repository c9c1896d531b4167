"""Choosing the GPU source and the MIG backend from settings: fake GPUs, or NVML.

Called by the apps (plugin, controller, CLI) with their ``--fake-gpus`` setting. NVML is
imported lazily so a fake-GPU install never loads libnvidia-ml. Fake GPUs get MIG through the
same NVML backend as real ones, talking to the MIG simulator instead of libnvidia-ml.
"""

from __future__ import annotations

from pathlib import Path

from dra_driver.core.gpu import GpuInfo, GpuSource
from dra_driver.core.mig import MigBackend
from dra_driver.core.sharing import SharingBackend
from dra_driver.sources.fake import FakeGpuSource

SIM_STATE_FILE = "mig-state.json"


def make_source(*, fake_gpus: str | None, node_name: str) -> GpuSource:
    """A FakeGpuSource when ``fake_gpus`` names a profile, else the NVML source."""
    if fake_gpus:
        return FakeGpuSource(fake_gpus, node_name)
    from dra_driver.sources.nvml import NvmlGpuSource

    return NvmlGpuSource()


def make_mig_backend(
    *,
    fake: bool,
    gpus: list[GpuInfo],
    state_dir: Path | None = None,
    latency: str = "zero",
    boot_id: str = "",
) -> MigBackend:
    """The MIG backend: NVML, or for fake GPUs NVML over the simulator.

    The simulator keeps its state in ``state_dir`` (which survives a plugin restart as a real
    GPU's state does); without ``state_dir`` it lives in memory only (``dra-gpu inventory``).
    """
    from dra_driver.sources.nvml_mig import NvmlMigBackend

    if not fake:
        return NvmlMigBackend()
    from dra_driver.sources.migsim import MigSimulator, SimulatedNvml, latency_from_name

    proc_root = None
    state_file = None
    if state_dir is not None:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        state_file = state_dir / SIM_STATE_FILE
        proc_root = state_dir / "proc"
    sim = MigSimulator(gpus, state_file=state_file, boot_id=boot_id, latency=latency_from_name(latency), proc_root=proc_root)
    return NvmlMigBackend(nvml=SimulatedNvml(sim), proc_root=proc_root or Path("/nonexistent-proc"))


def make_sharing_backend(*, fake: bool, state_dir: Path | None, mps_root: Path, nvidia_bin_dir: Path) -> SharingBackend:
    """How time slices and MPS daemons are applied: the simulator's records, or the NVIDIA tools."""
    if fake:
        from dra_driver.sources.sharing_sim import SimulatedSharing

        return SimulatedSharing(state_dir or mps_root.parent / "fake-gpus", mps_root)
    from dra_driver.sources.sharing_nvidia import NvidiaSharing

    return NvidiaSharing(bin_dir=nvidia_bin_dir, mps_root=mps_root)
