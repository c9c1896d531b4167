"""Makes replaced files durable shortly after they are written, on a thread of its own.

Used by ``dra_driver.files.checkpoint_store``: a checkpoint write replaces the file atomically
(``dra_driver.files.atomic``) and marks it here; within ``SYNC_DELAY_S`` the file and its directory
are fsynced, so no NodePrepareResources call waits for the disk, and writes that land within one
delay share one fsync. What an unsynced write risks is a power loss inside that window, and what
that costs is written in ``dra_driver.files.atomic``. ``flush`` syncs at once (the plugin calls it
on shutdown). The thread starts with the first mark and ends when nothing is left to sync.
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
        self._thread: threading.Thread | None = None
        self.synced = 0
        """How many files were fsynced (for tests)."""

    def mark(self, path: Path) -> None:
        """``path`` was just replaced: fsync it (and its directory) within the delay."""
        with self._cv:
            self._pending[path] = None
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fsync", daemon=True)
                self._thread.start()

    def flush(self) -> None:
        """Fsync everything marked so far now, on the caller's thread."""
        with self._cv:
            pending, self._pending = list(self._pending), {}
        self._sync(pending)

    def _run(self) -> None:
        while True:
            time.sleep(self._delay)
            with self._cv:
                pending, self._pending = list(self._pending), {}
                if not pending:
                    self._thread = None
                    return
            self._sync(pending)

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
