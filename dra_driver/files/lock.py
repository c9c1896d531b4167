"""The cross-process lock that serializes prepare and unprepare on a node.

Two plugin pods overlap during a rolling update, and the kubelet may send calls to either;
both take this ``flock`` on ``<plugin dir>/serialize.lock`` around every state change.
"""

from __future__ import annotations

import fcntl
import os
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
