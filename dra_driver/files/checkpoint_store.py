"""The checkpoint file on disk: atomic writes, the last good generation, recovery, boot id.

Called by the kubelet plugin's state under the serialize lock. Every write keeps the previous
good file as ``checkpoint.prev.json``; a corrupt or unreadable ``checkpoint.json`` (torn,
edited, a directory, a permission error) is moved aside (never silently reset) and the
previous generation is used, and the caller is told so it can log it and raise a Kubernetes
Event. A load says whether its result can be trusted: only the newest generation (or a node
with no checkpoint at all) is; a previous generation is one write behind, so the caller must
not destroy anything on its word alone (see ``kubelet_plugin.prepare.recovery``). A checkpoint written by
a newer dra-gpu raises ``CheckpointTooNew``: nothing is moved or reset. A boot id change drops
claims: their CDI files lived on tmpfs. A load of a file this process wrote or read, and nothing
has changed since (same inode, size and times), returns what it knows without reading it again.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from dra_driver.core.checkpoint import MAX_CHECKPOINT_BYTES, Checkpoint, CheckpointError, CheckpointTooNew, decode, encode
from dra_driver.files.atomic import fsync_dir, move_aside, remove_stale_temps, temp_beside, write_atomic
from dra_driver.files.background_sync import BackgroundSync

log = structlog.get_logger(__name__)


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
    trusted: bool = True
    """False when the newest generation was lost: the result may miss the last write."""
    fresh: bool = False
    """True when no generation exists at all (a new node, or one whose files were deleted)."""


class CheckpointStore:
    """``checkpoint.json`` (and its previous generation) in the plugin's data directory."""

    def __init__(self, directory: Path, boot_id: str) -> None:
        self.dir = directory
        self.boot_id = boot_id
        self.path = directory / "checkpoint.json"
        self.prev = directory / "checkpoint.prev.json"
        self._known: tuple[tuple[int, ...], Checkpoint] | None = None
        """The newest generation as this process last wrote or read it, with the file's identity then."""
        self._latest: Checkpoint | None = None
        """The newest generation this process last saved or read and trusted (``latest``)."""
        self.sync = BackgroundSync()
        """Fsyncs each write shortly after it (``dra_driver.files.background_sync``)."""

    def _identity(self) -> tuple[int, ...] | None:
        """Device, inode, size, mtime and ctime of ``checkpoint.json``; None when it cannot be stat'ed.

        Every save replaces the file (a new inode), and any other write changes its mtime and ctime,
        so an unchanged identity means unchanged content: a load need not read and verify it again.
        """
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def _remember(self, cp: Checkpoint) -> None:
        self._latest = cp
        ident = self._identity()
        self._known = None if ident is None else (ident, cp)

    def _quarantine(self, path: Path) -> Path:
        target = path.with_name(f"{path.stem}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.json")
        os.replace(path, target)
        fsync_dir(self.dir)
        return target

    def _try(self, path: Path) -> tuple[Checkpoint | None, str | None]:
        """(checkpoint, None), (None, why it is unusable), or (None, None) when absent.

        Raises CheckpointTooNew: a newer binary's file is neither used nor moved aside.
        """
        try:
            with path.open("rb") as f:
                raw = f.read(MAX_CHECKPOINT_BYTES + 1)
        except FileNotFoundError:
            return None, None
        except OSError as err:  # a directory, a permission error, an I/O error: unusable, not fatal
            return None, f"unreadable: {err.strerror or err}"
        try:
            return decode(raw), None
        except CheckpointTooNew:
            raise
        except CheckpointError as err:
            return None, str(err)

    def latest(self) -> Checkpoint | None:
        """The checkpoint this process last saved or read and trusted, without the lock or any I/O; None before.

        For observers off the prepare path (the plugin's metrics): one save behind at worst, and
        blind to another plugin pod's writes until this process reads the file again.
        """
        return self._latest

    def ensure_dir(self) -> None:
        """Create the directory (owner-only) and drop temp files a killed writer left; once, at start.

        Called under the node lock: a plugin of another release still serving (a rolling update)
        writes its temp files under that lock too, so none of them is in flight here.
        """
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        remove_stale_temps(self.dir)

    def load(self) -> LoadResult:
        """Read the newest good generation; never raises for corruption, never loses it silently.

        Raises CheckpointTooNew when a generation it would use was written by a newer binary.
        """
        known = self._known
        if known is not None and known[0] == self._identity():
            return LoadResult(known[1])
        self._known = None
        notices: list[Notice] = []
        trusted = True
        cp, err = self._try(self.path)
        if err is not None:
            trusted = False
            where = self._move_aside(self.path)
            prev, prev_err = self._try(self.prev)
            if prev is not None:
                cp = prev
                notices.append(
                    Notice(
                        "CheckpointRecovered",
                        f"checkpoint unusable ({err}); {where}; using the previous generation, which may miss "
                        "the last change: claims are rebuilt from it, the CDI specs and the MIG instances; nothing is destroyed",
                    )
                )
            else:
                detail = f"previous generation also unusable ({prev_err})" if prev_err else "no previous generation"
                notices.append(
                    Notice(
                        "CheckpointLost",
                        f"checkpoint unusable ({err}); {where}; {detail}; claims are rebuilt from the CDI specs "
                        "and the MIG instances; nothing is destroyed",
                    )
                )
        elif cp is None:
            # save() keeps checkpoint.json in place from its first write on, so a missing newest
            # generation beside a previous one was deleted: the previous one may miss a write.
            cp, prev_err = self._try(self.prev)
            if cp is not None or prev_err is not None:
                trusted = False
                notices.append(
                    Notice(
                        "CheckpointMissing",
                        f"{self.path.name} is missing but a previous generation "
                        + ("exists" if cp is not None else f"is unusable ({prev_err})")
                        + "; claims are rebuilt from it, the CDI specs and the MIG instances; nothing is destroyed",
                    )
                )
            else:
                return LoadResult(Checkpoint(node_boot_id=self.boot_id), notices, fresh=True)
        if cp is None:
            return LoadResult(Checkpoint(node_boot_id=self.boot_id), notices, trusted=False)
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
            return LoadResult(Checkpoint(node_boot_id=self.boot_id), notices, dropped, trusted=trusted)
        if trusted and not notices:
            self._remember(cp)
        return LoadResult(cp, notices, trusted=trusted)

    def _move_aside(self, path: Path) -> str:
        """Quarantine an unusable file; say where it went (or why it stayed)."""
        try:
            return f"moved to {self._quarantine(path).name}"
        except OSError as err:
            log.error("checkpoint_quarantine_failed", path=str(path), error=str(err))
            return f"could not be moved aside ({err.strerror or err})"

    def save(self, cp: Checkpoint) -> None:
        """Write ``cp`` atomically, keeping the current file as the previous generation; fsynced soon after.

        Atomic for any kill of the process; on disk within ``SYNC_DELAY_S`` (what a power loss
        before that costs: ``dra_driver.files.atomic``).
        """
        data = encode(cp)
        self._known = None
        if self.path.exists():
            # The current file becomes the previous generation without freeing a file on this thread
            # (freeing blocks is the slow part of a save): linked under a temp name, the old previous
            # generation moved aside (unlinked in the background), the link renamed into its place;
            # the rename below then frees nothing either. A failure puts the old one back; a kill
            # leaves at worst no previous generation beside a good current file, and temp files
            # the next start removes.
            link = temp_beside(self.prev)
            os.link(self.path, link)
            old = move_aside(self.prev)
            try:
                link.rename(self.prev)
            except OSError:
                if old is not None:
                    old.rename(self.prev)
                link.unlink(missing_ok=True)
                raise
            if old is not None:
                self.sync.discard(old)
        write_atomic(self.path, data, durable=False)
        self.sync.mark(self.path)
        self._remember(cp)

    def close(self) -> None:
        """Fsync the last write now, and every later one before ``save`` returns (the plugin's shutdown)."""
        self.sync.close()
