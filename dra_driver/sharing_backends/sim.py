"""Sharing on fake GPUs: the simulator records time slices and MPS daemons in a state file.

Implements ``dra_driver.core.sharing.SharingBackend`` for ``--fake-gpus``: what real GPUs would
get through ``nvidia-smi`` and ``nvidia-cuda-mps-control`` is written to
``<fake GPU state dir>/sharing-state.json`` (under an flock, atomically), and a daemon's pipe,
log and shm directories are created as the real one's would be, so tests and the e2e suite can
check exactly what was applied and that unprepare restored it. Like the GPUs' MIG state, the
records outlive the plugin process, and like it they do not outlive the node's boot: given the
node's boot id, the simulator forgets every time slice and daemon of an earlier boot when it is
created (a reboot reloads the driver, which resets time slices, and ends the MPS daemons).
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dra_driver.core.config import TimeSliceInterval
from dra_driver.core.sharing import MpsDaemon, mps_dirs
from dra_driver.files.atomic import write_atomic
from dra_driver.files.lock import file_lock

STATE_FILE = "sharing-state.json"


class SimulatedSharing:
    """A ``SharingBackend`` that records instead of touching hardware."""

    def __init__(self, state_dir: Path, mps_root: Path, boot_id: str = "") -> None:
        self._boot_id = boot_id
        self._file = state_dir / STATE_FILE
        self._lock = state_dir / (STATE_FILE + ".lock")
        self._mps_root = mps_root
        self._mutex = threading.Lock()
        state_dir.mkdir(parents=True, exist_ok=True)
        if boot_id:
            with self._state():  # at start, as a reboot resets the GPUs: not at the first change after it
                pass

    @contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        with self._mutex, file_lock(self._lock, 60.0):
            state = read_sharing_state(self._file)
            before = json.dumps(state, sort_keys=True)
            if self._boot_id and state["bootID"] != self._boot_id:
                if state["bootID"]:  # records of an earlier boot (none: written before boot ids were kept)
                    state["timeSlices"], state["mps"] = {}, {}
                state["bootID"] = self._boot_id
            yield state
            if json.dumps(state, sort_keys=True) != before:
                write_atomic(self._file, json.dumps(state, sort_keys=True, indent=1).encode(), mode=0o644)

    def set_time_slice(self, gpu_uuid: str, interval: TimeSliceInterval) -> None:
        """Record the GPU's time slice (``Default`` removes the record: the driver default)."""
        with self._state() as s:
            if interval is TimeSliceInterval.DEFAULT:
                s["timeSlices"].pop(gpu_uuid, None)
            else:
                s["timeSlices"][gpu_uuid] = interval.value

    def start_mps(self, daemon: MpsDaemon) -> None:
        """Record the daemon and create its directories (idempotent)."""
        dirs = mps_dirs(str(self._mps_root), daemon.daemon_id)
        for d in (dirs.pipe, dirs.log, dirs.shm):
            Path(d).mkdir(parents=True, exist_ok=True, mode=0o755)
        with self._state() as s:
            s["mps"][daemon.daemon_id] = daemon.to_json()

    def stop_mps(self, daemon: MpsDaemon) -> None:
        """Forget the daemon and remove its directories."""
        with self._state() as s:
            s["mps"].pop(daemon.daemon_id, None)
        shutil.rmtree(self._mps_root / daemon.daemon_id, ignore_errors=True)

    def mps_running(self, daemon_id: str) -> bool:
        """True when the daemon is recorded and its pipe directory exists."""
        with self._state() as s:
            known = daemon_id in s["mps"]
        return known and Path(mps_dirs(str(self._mps_root), daemon_id).pipe).is_dir()


def read_sharing_state(path: Path) -> dict[str, Any]:
    """The recorded sharing state.

    ``timeSlices``: GPU UUID → interval; ``mps``: id → daemon JSON; ``bootID``: the node boot they
    belong to, empty if unknown.
    """
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raw = {}
    return {
        "timeSlices": dict(raw.get("timeSlices") or {}),
        "mps": dict(raw.get("mps") or {}),
        "bootID": str(raw.get("bootID") or ""),
    }
