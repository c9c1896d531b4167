"""The locks that serialize prepare and unprepare on a node.

Two plugin pods overlap during a rolling update, and the kubelet may send calls to either;
both take this ``flock`` on ``<plugin dir>/serialize.lock`` around every state change
(``NodeLock`` adds the plugin's own threads). The simulators use ``file_lock`` for their state.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class LockTimeout(TimeoutError):
    """The lock was not acquired in time (another process holds it)."""


@contextmanager
def file_lock(path: Path, timeout_s: float = 10.0) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (created owner-only) for the ``with`` body."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"timed out after {timeout_s:.0f}s waiting for {path}") from None
                time.sleep(0.01)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


class NodeLock:
    """The node-wide prepare lock: an in-process mutex and the cross-process flock, taken together.

    The kubelet plugin's state (``kubelet_plugin.prepare.state``) holds it around every checkpoint
    read-modify-write; the mutex orders the plugin's own threads, the flock a second plugin pod.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mutex = threading.Lock()

    @contextmanager
    def held(self, timeout_s: float) -> Iterator[None]:
        """Hold both for the ``with`` body; LockTimeout when either is not had within ``timeout_s``."""
        if not self._mutex.acquire(timeout=timeout_s):
            raise LockTimeout(f"timed out after {timeout_s:.0f}s waiting for the prepare lock")
        try:
            with file_lock(self.path, timeout_s):
                yield
        finally:
            self._mutex.release()
