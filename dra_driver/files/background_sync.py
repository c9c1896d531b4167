"""Makes replaced files durable shortly after they are written, on a thread of its own.

Used by ``dra_driver.files.checkpoint_store``: a checkpoint write replaces the file atomically
(``dra_driver.files.atomic``) and marks it here; within ``SYNC_DELAY_S`` the file and its directory
are fsynced, so no NodePrepareResources call waits for the disk, and writes that land within one
delay share one fsync. What an unsynced write risks is a power loss inside that window, and what
that costs is written in ``dra_driver.files.atomic``. Files moved aside (``atomic.move_aside``) are
unlinked here too (``discard``), so freeing their blocks is not on a call's path either. ``flush``
syncs at once, waiting for a batch the thread is syncing; ``close`` flushes and makes every later mark sync on the caller's thread
(the plugin's shutdown: a call still finishing after it is durable before it returns). The thread
starts with the first mark and ends when nothing is left to sync.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import structlog

from dra_driver.files.atomic import fsync_dir

log = structlog.get_logger(__name__)

SYNC_DELAY_S = 0.05


class BackgroundSync:
    """Files to fsync soon (the newest content under each path), and the thread that does it."""

    def __init__(self, delay_s: float = SYNC_DELAY_S) -> None:
        self._delay = delay_s
        self._cv = threading.Condition()
        self._pending: dict[Path, None] = {}
        self._discards: list[Path] = []
        self._thread: threading.Thread | None = None
        self._syncing = threading.Lock()
        """Held while a batch is fsynced, so that ``flush`` waits for one in progress."""
        self._closed = False
        self.synced = 0
        """How many files were fsynced (for tests)."""
        self.discarded = 0
        """How many files moved aside were unlinked (for tests)."""

    def mark(self, path: Path) -> None:
        """``path`` was just replaced: fsync it (and its directory) within the delay."""
        with self._cv:
            self._pending[path] = None
        self._wake()

    def discard(self, path: Path) -> None:
        """Unlink ``path`` (a file moved aside, no longer named by anything) within the delay."""
        with self._cv:
            self._discards.append(path)
        self._wake()

    def _wake(self) -> None:
        """Make sure the thread runs (or, closed or without a thread, do the work now)."""
        with self._cv:
            inline = self._closed
            if not inline and self._thread is None:
                thread = threading.Thread(target=self._run, name="fsync", daemon=True)
                try:
                    thread.start()
                    self._thread = thread
                except RuntimeError as err:  # no thread to be had: durable now instead
                    log.error("fsync_thread_failed", error=str(err))
                    inline = True
        if inline:
            self.flush()

    def flush(self) -> None:
        """Fsync everything marked so far now, on the caller's thread (after a batch in progress)."""
        with self._syncing:
            self._take_and_do()

    def close(self) -> None:
        """Flush, and from now on fsync each mark before it returns (shutdown)."""
        with self._cv:
            self._closed = True
        self.flush()

    def _run(self) -> None:
        while True:
            time.sleep(self._delay)
            try:
                with self._syncing:  # taken before the batch: a flush then waits for this batch
                    if not self._take_and_do(stop_thread_if_idle=True):
                        return
            except Exception as err:  # noqa: BLE001 - the thread must outlive any one batch, or later writes go unsynced
                log.error("fsync_failed", error=f"{type(err).__name__}: {err}")

    def _take_and_do(self, *, stop_thread_if_idle: bool = False) -> bool:
        """(``_syncing`` held) Fsync what is marked and unlink what is discarded; False when there was nothing.

        ``stop_thread_if_idle``: the thread's own call; with nothing to do, it ends (a later mark starts another).
        """
        with self._cv:
            pending, self._pending = list(self._pending), {}
            discards, self._discards = self._discards, []
            if not pending and not discards:
                if stop_thread_if_idle:
                    self._thread = None
                return False
        try:
            self._sync(pending)
        finally:
            self._unlink(discards)
        return True

    def _unlink(self, paths: list[Path]) -> None:
        for path in paths:
            try:
                path.unlink(missing_ok=True)
                self.discarded += 1
            except OSError as err:  # left for remove_stale_temps at the next start
                log.error("discard_failed", path=str(path), error=str(err))

    def _sync(self, paths: list[Path]) -> None:
        dirs: dict[Path, None] = {}
        for path in paths:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # removed since: nothing to make durable
            except OSError as err:
                log.error("fsync_failed", path=str(path), error=str(err))
                continue
            try:
                os.fsync(fd)
                self.synced += 1
            except OSError as err:
                log.error("fsync_failed", path=str(path), error=str(err))
            finally:
                os.close(fd)
            dirs[path.parent] = None
        for d in dirs:
            try:
                fsync_dir(d)
            except OSError as err:
                log.error("fsync_failed", path=str(d), error=str(err))
