"""Choosing the sharing backend from settings: the simulator's records on fake GPUs, or the NVIDIA tools.

Called by the kubelet plugin with its ``--fake-gpus`` setting.
"""

from __future__ import annotations

from pathlib import Path

from dra_driver.core.sharing import SharingBackend


def make_sharing_backend(
    *, fake: bool, state_dir: Path | None, mps_root: Path, nvidia_bin_dir: Path, boot_id: str = ""
) -> SharingBackend:
    """How time slices and MPS daemons are applied: the simulator's records, or the NVIDIA tools."""
    if fake:
        from dra_driver.sharing_backends.sim import SimulatedSharing

        return SimulatedSharing(state_dir or mps_root.parent / "fake-gpus", mps_root, boot_id)
    from dra_driver.sharing_backends.nvidia import NvidiaSharing

    return NvidiaSharing(bin_dir=nvidia_bin_dir, mps_root=mps_root)
