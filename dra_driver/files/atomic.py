"""Crash-safe file replacement: temp file in the same directory, (fsync,) rename.

Used by the CDI store and the checkpoint store. A reader sees either the old or the new file,
never a torn one, whatever moment the process is killed at: written data lives in the page cache
until the kernel itself goes. Files are created owner-only.

What fsyncing protects: after a power loss or a kernel crash, the file under the name is
the newest one, not an older generation or an empty or half-written file (ext4 and xfs may show a
renamed file whose data never reached the disk). What losing that costs is little, because a power
loss is a reboot and a reboot drops every claim of the old boot by its boot id
(``dra_driver.files.checkpoint_store``): an older generation tells the same as the newest (the old
boot id), and an empty or torn file is moved aside and the checkpoint rebuilt from what the node
holds (after a reboot: nothing; nothing is destroyed), with a warning Event that says so. So the
checkpoint's writes are fsynced in the background, shortly after
(``dra_driver.files.background_sync``), not before the kubelet's answer; ``durable`` fsyncs the
data before the rename, for the simulators' state files. CDI specs are never fsynced: they matter
within one boot.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

# Names of the temp files a write leaves behind when it is killed (``remove_stale_temps`` finds them).
TMP_PREFIX = ".dra-gpu-tmp-"
# Names of files moved aside to be unlinked later (``move_aside``); temp files too.
MOVED_ASIDE = f"{TMP_PREFIX}removed."


def temp_beside(path: Path, prefix: str = TMP_PREFIX) -> Path:
    """A fresh temp name in ``path``'s directory, for ``path`` (``remove_stale_temps`` finds it)."""
    return path.parent / f"{prefix}{path.name}.{secrets.token_hex(4)}"


def fsync_dir(directory: Path) -> None:
    """Fsync a directory so a rename or unlink in it is durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o600, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically; ``durable``: the data is on disk before the rename (one fsync).

    Atomic either way: a process killed at any moment leaves the old file or the new one. See the
    module's docstring for what the fsync protects, and why the directory is not fsynced.
    """
    tmp = temp_beside(path)
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


def move_aside(path: Path) -> Path | None:
    """Rename ``path`` to a temp name beside it, for the caller to unlink later; None when it is missing.

    Gone from its name at once (atomic, nothing freed), so readers of the directory no longer see
    it. Unlinking a file whose blocks are on disk is what costs (about 1.4 ms on an ext4 mounted with
    ``discard``; the blocks are freed and discarded there and then), so the hot path moves files
    aside and ``dra_driver.files.background_sync`` unlinks them. A process killed before that
    leaves a temp file that ``remove_stale_temps`` removes at the next start.
    """
    aside = temp_beside(path, MOVED_ASIDE)
    try:
        path.rename(aside)
    except FileNotFoundError:
        return None
    return aside


def remove_stale_temps(directory: Path) -> list[Path]:
    """Remove temp files a killed writer left in ``directory``; return what was removed."""
    removed = []
    if directory.is_dir():
        for p in directory.iterdir():
            if p.name.startswith(TMP_PREFIX):
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed
