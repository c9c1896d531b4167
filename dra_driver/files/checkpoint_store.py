"""The checkpoint file on disk: atomic writes, the last good generation, recovery, boot id.

Called by the kubelet plugin's state under the serialize lock. Every write keeps the previous
good file as ``checkpoint.prev.json``; a corrupt ``checkpoint.json`` is moved aside (never
silently reset) and the previous generation is used, and the caller is told so it can log it
and raise a Kubernetes Event. A boot id change drops claims: their CDI files lived on tmpfs.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from dra_driver.core.checkpoint import Checkpoint, CheckpointError, decode, encode
from dra_driver.files.atomic import fsync_dir, remove_stale_temps, write_atomic

log = structlog.get_logger(__name__)

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def read_boot_id(path: Path = BOOT_ID_PATH) -> str:
    """The kernel's boot id (changes on every reboot)."""
    return path.read_text().strip()


@dataclass(frozen=True, slots=True)
class Notice:
    """Something an operator must hear about (becomes a log line and a Kubernetes Event)."""

    reason: str
    message: str
    warning: bool = True


@dataclass(slots=True)
class LoadResult:
    """A loaded checkpoint plus what happened while loading it."""

    checkpoint: Checkpoint
    notices: list[Notice] = field(default_factory=list)
    dropped_claims: list[str] = field(default_factory=list)
    """Claims dropped because the node rebooted (their CDI files must be removed)."""


class CheckpointStore:
    """``checkpoint.json`` (and its previous generation) in the plugin's data directory."""

    def __init__(self, directory: Path, boot_id: str) -> None:
        self.dir = directory
        self.boot_id = boot_id
        self.path = directory / "checkpoint.json"
        self.prev = directory / "checkpoint.prev.json"

    def _quarantine(self, path: Path) -> Path:
        target = path.with_name(f"{path.stem}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.json")
        os.replace(path, target)
        fsync_dir(self.dir)
        return target

    def _try(self, path: Path) -> tuple[Checkpoint | None, str | None]:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None, None
        try:
            return decode(raw), None
        except CheckpointError as err:
            return None, str(err)

    def ensure_dir(self) -> None:
        """Create the directory (owner-only) and drop temp files a killed writer left; once, at start."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        remove_stale_temps(self.dir)

    def load(self) -> LoadResult:
        """Read the newest good generation; never raises for corruption, never loses it silently."""
        notices: list[Notice] = []
        cp, err = self._try(self.path)
        if err is not None:
            moved = self._quarantine(self.path)
            prev, prev_err = self._try(self.prev)
            if prev is not None:
                cp = prev
                notices.append(
                    Notice(
                        "CheckpointRecovered",
                        f"checkpoint corrupt ({err}); moved to {moved.name}; recovered the previous generation",
                    )
                )
            else:
                cp = None
                detail = f"previous generation also unusable ({prev_err})" if prev_err else "no previous generation"
                notices.append(
                    Notice("CheckpointLost", f"checkpoint corrupt ({err}); moved to {moved.name}; {detail}; starting empty")
                )
        elif cp is None:
            cp, _ = self._try(self.prev)  # killed between generations: the previous one is the newest
        if cp is None:
            return LoadResult(Checkpoint(node_boot_id=self.boot_id), notices)
        if cp.node_boot_id != self.boot_id:
            dropped = sorted(cp.claims)
            if dropped:
                notices.append(
                    Notice(
                        "NodeRebooted",
                        f"boot id changed; {len(dropped)} prepared claim(s) will be prepared afresh",
                        warning=False,
                    )
                )
            return LoadResult(Checkpoint(node_boot_id=self.boot_id), notices, dropped)
        return LoadResult(cp, notices)

    def save(self, cp: Checkpoint) -> None:
        """Write ``cp`` atomically, keeping the current file as the previous generation."""
        data = encode(cp)
        if self.path.exists():
            link_tmp = self.dir / ".prev-link"
            link_tmp.unlink(missing_ok=True)
            os.link(self.path, link_tmp)
            os.replace(link_tmp, self.prev)
        write_atomic(self.path, data)
