"""Crash-safe file replacement: temp file in the same directory, fsync, rename, fsync the directory.

Used by the CDI store and the checkpoint store. A reader sees either the old or the new file,
never a torn one, whatever moment the process is killed at. Files are created owner-only. The
fsyncs (``durable``) matter only for what must outlive a reboot: the checkpoint, not CDI specs.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

# Names of the temp files a write leaves behind when it is killed (``remove_stale_temps`` finds them).
TMP_PREFIX = ".dra-gpu-tmp-"


def fsync_dir(directory: Path) -> None:
    """Fsync a directory so a rename or unlink in it is durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o600, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically; ``durable``: also through a power loss (two fsyncs).

    Atomic either way: a process killed at any moment leaves the old file or the new one, because
    written data lives in the page cache until the kernel itself goes. Only a kernel crash or power
    loss can lose an unsynced write, and both reboot the node.
    """
    tmp = path.parent / f"{TMP_PREFIX}{path.name}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def remove_durably(path: Path, *, durable: bool = True) -> bool:
    """Unlink ``path`` if present (and, ``durable``, fsync its directory); True if something was removed."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    if durable:
        fsync_dir(path.parent)
    return True


def remove_stale_temps(directory: Path) -> list[Path]:
    """Remove temp files a killed writer left in ``directory``; return what was removed."""
    removed = []
    if directory.is_dir():
        for p in directory.iterdir():
            if p.name.startswith(TMP_PREFIX):
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed
