"""Choosing the MIG backend from settings: NVML, or for fake GPUs NVML over the MIG simulator.

Called by the apps (plugin, controller, CLI) with their ``--fake-gpus`` setting. Fake GPUs get MIG
through the same NVML backend as real ones, talking to the MIG simulator instead of libnvidia-ml;
pynvml itself is imported lazily by that backend, so a fake-GPU install never loads libnvidia-ml.
"""

from __future__ import annotations

from pathlib import Path

from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import MigBackend

SIM_STATE_FILE = "mig-state.json"


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
    from dra_driver.mig_backends.nvml import NvmlMigBackend

    if not fake:
        return NvmlMigBackend()
    from dra_driver.mig_backends.sim import MigSimulator, SimulatedNvml, latency_from_name

    proc_root = None
    state_file = None
    if state_dir is not None:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        state_file = state_dir / SIM_STATE_FILE
        proc_root = state_dir / "proc"
    sim = MigSimulator(gpus, state_file=state_file, boot_id=boot_id, latency=latency_from_name(latency), proc_root=proc_root)
    return NvmlMigBackend(nvml=SimulatedNvml(sim), proc_root=proc_root or Path("/nonexistent-proc"))
