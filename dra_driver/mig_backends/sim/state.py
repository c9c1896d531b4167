"""The MIG simulator's persistent state: what a node's GPUs hold, as one JSON document.

Written and read by ``dra_driver.mig_backends.sim.simulator`` (atomically, under a flock, so two
processes share it like two NVML clients share a GPU); ``load_instances`` and ``load_modes`` are the
read-only views tests and e2e scenarios use to check what a driver left on the GPUs.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dra_driver.core.mig import MigInstance, MigMode, Placement
from dra_driver.files.atomic import write_atomic
from dra_driver.files.lock import file_lock

FORMAT_VERSION = 1


@dataclass(slots=True)
class CiState:
    """A compute instance and its MIG device."""

    ci_id: int
    profile_id: int
    start: int
    slices: int
    uuid: str
    busy: bool = False
    """A process uses the MIG device (test hook): destroying the CI fails with IN_USE."""


@dataclass(slots=True)
class GiState:
    """A GPU instance."""

    gi_id: int
    profile_id: int
    profile_name: str
    start: int
    size: int
    serial: int
    """Creation number on this node: tells a stale handle from one to a GI re-made with the same id."""
    cis: list[CiState] = field(default_factory=list)


@dataclass(slots=True)
class GpuState:
    """One GPU's MIG mode and instances."""

    uuid: str
    minor: int
    mode_current: bool = False
    mode_pending: bool = False
    gis: list[GiState] = field(default_factory=list)

    def gi(self, gi_id: int) -> GiState | None:
        """The GI with this id, if it exists."""
        return next((g for g in self.gis if g.gi_id == gi_id), None)


@dataclass(slots=True)
class NodeState:
    """Every simulated GPU of a node."""

    boot_id: str = ""
    creations: int = 0
    """Counter of created GIs and CIs; feeds MIG UUIDs (new on every creation) and handle serials."""
    gpus: dict[str, GpuState] = field(default_factory=dict)


def encode(state: NodeState) -> bytes:
    """The state as the JSON stored on disk."""
    return (json.dumps({"version": FORMAT_VERSION, **asdict(state)}, indent=1, sort_keys=True) + "\n").encode()


def _gi(raw: dict[str, Any]) -> GiState:
    cis = [CiState(**c) for c in raw.get("cis", [])]
    return GiState(**{**raw, "cis": cis})


def decode(data: bytes) -> NodeState:
    """Parse stored state; ValueError when it is not simulator state."""
    raw = json.loads(data)
    if not isinstance(raw, dict) or raw.get("version") != FORMAT_VERSION:
        raise ValueError("not a MIG simulator state file (or an unknown version)")
    gpus = {uuid: GpuState(**{**g, "gis": [_gi(x) for x in g.get("gis", [])]}) for uuid, g in dict(raw.get("gpus", {})).items()}
    return NodeState(boot_id=str(raw.get("boot_id", "")), creations=int(raw.get("creations", 0)), gpus=gpus)


def write_state(path: Path, state: NodeState) -> None:
    """Replace the state file atomically and durably (``dra_driver.files.atomic``)."""
    write_atomic(path, encode(state), mode=0o644)


def state_lock(path: Path, timeout_s: float = 60.0) -> AbstractContextManager[None]:
    """An exclusive flock on ``path`` (the state file's lock file) for a ``with`` body."""
    return file_lock(path, timeout_s)


def read_state(path: Path) -> NodeState:
    """The state stored at ``path``; an empty state when the file does not exist or is empty."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return NodeState()
    return decode(data) if data.strip() else NodeState()


def instances_of(gpu: GpuState) -> list[MigInstance]:
    """The GPU's instances in the core model (the lowest CI of each GI), ordered by GI id."""
    out = []
    for gi in sorted(gpu.gis, key=lambda g: g.gi_id):
        ci = min(gi.cis, key=lambda c: c.ci_id) if gi.cis else None
        out.append(
            MigInstance(
                parent_uuid=gpu.uuid,
                profile_id=gi.profile_id,
                profile_name=gi.profile_name,
                placement=Placement(gi.start, gi.size),
                gi_id=gi.gi_id,
                ci_id=ci.ci_id if ci else None,
                uuid=ci.uuid if ci else None,
            )
        )
    return out


def load_instances(state_file: Path) -> dict[str, list[MigInstance]]:
    """Every GPU's instances as last stored, keyed by GPU uuid (GPUs never touched are absent)."""
    state = read_state(state_file)
    return {uuid: instances_of(g) for uuid, g in state.gpus.items()}


def load_modes(state_file: Path) -> dict[str, MigMode]:
    """Every GPU's MIG mode as last stored, keyed by GPU uuid (GPUs never touched are absent)."""
    state = read_state(state_file)
    return {uuid: MigMode(current=g.mode_current, pending=g.mode_pending) for uuid, g in state.gpus.items()}
