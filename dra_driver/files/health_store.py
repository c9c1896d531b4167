"""``health.json`` in the plugin's data directory: the GPUs' health conditions across plugin restarts.

Written by the plugin's health monitor (``kubelet_plugin.monitoring.health_monitor``) after every change,
atomically; read once at start-up. A fatal XID seen before a restart keeps its GPU tainted after
it: only a reset, a repair or a reboot clears it (NVIDIA's driver forgets its taints on restart).

Upgrade rule: the record is versioned (``dra_driver.core.health_record.RECORD_VERSION``); a newer version
or an unreadable file fails closed (every GPU degraded until repaired, and a Notice says why).
After a reboot (another boot id) the conditions are dropped: a reboot resets the GPUs, and what
persists (a lost GPU, a pending memory repair) the checks see again. Sources' read positions are
kept across reboots, so a fault log is never replayed.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dra_driver.core.health import HealthBook
from dra_driver.core.health_record import HealthRecordError, dumps, from_json, unreadable_record_book
from dra_driver.files.atomic import write_atomic

HEALTH_FILE = "health.json"
REPAIRS_DIR = "health-repairs"
"""Where ``dra-gpu health repair`` leaves requests the monitor picks up (``<plugin dir>/health-repairs/<gpu>``)."""
_REPAIR_NAME = re.compile(r"^(gpu-(0|[1-9][0-9]{0,3})|all)\Z")
MAX_RECORD_BYTES = 1 << 20


@dataclass(slots=True)
class HealthLoad:
    """What start-up found: the book, the sources' positions, and what an operator must hear."""

    book: HealthBook
    consumed: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    rebooted: bool = False


class HealthStore:
    """Load and save the health record of one plugin directory."""

    def __init__(self, directory: Path, boot_id: str) -> None:
        self.path = directory / HEALTH_FILE
        self._boot_id = boot_id

    def load(self, gpu_uuids: Iterable[str], now: float) -> HealthLoad:
        """The record; a missing one is an empty book, an unreadable one fails closed."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return HealthLoad(HealthBook())
        except OSError as err:
            return self._unreadable(gpu_uuids, now, f"{type(err).__name__}: {err}")
        try:
            if len(data) > MAX_RECORD_BYTES:
                raise HealthRecordError(f"larger than {MAX_RECORD_BYTES} bytes")
            book, boot_id, consumed = from_json(json.loads(data))
        except (ValueError, RecursionError) as err:  # HealthRecordError is a ValueError, as is bad JSON
            return self._unreadable(gpu_uuids, now, str(err)[:300])
        if boot_id != self._boot_id:
            return HealthLoad(HealthBook(), consumed, rebooted=True)
        known = set(gpu_uuids)
        return HealthLoad(HealthBook({u: c for u, c in book.conditions.items() if u in known}), consumed)

    def _unreadable(self, gpu_uuids: Iterable[str], now: float, why: str) -> HealthLoad:
        problem = f"{self.path}: {why}"
        return HealthLoad(unreadable_record_book(gpu_uuids, now, problem), problems=[problem])

    def save(self, book: HealthBook, consumed: Mapping[str, int]) -> None:
        """Write the record atomically (durable: a fatal condition must survive a crash)."""
        write_atomic(self.path, dumps(book, self._boot_id, consumed), mode=0o600)


def request_repair(plugin_dir: Path, gpu: str, at: float | None = None) -> Path:
    """Ask the running plugin to clear ``gpu``'s conditions raised until now (``gpu-<n>`` or ``all``).

    Called by ``dra-gpu health repair``; raises ValueError for a name that is neither, OSError when
    the plugin directory cannot be written.
    """
    if not _REPAIR_NAME.match(gpu):
        raise ValueError(f"{gpu!r} is not a GPU device name (gpu-<minor>) or 'all'")
    directory = plugin_dir / REPAIRS_DIR
    directory.mkdir(parents=True, exist_ok=True, mode=0o750)
    path = directory / gpu
    write_atomic(path, f"{time.time() if at is None else at}\n".encode(), mode=0o600, durable=False)
    return path
