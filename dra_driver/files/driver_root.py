"""Finds the driver's user-space files under the driver root, once, when the kubelet plugin starts.

Called by ``kubelet_plugin.driver_userspace``. Lists, for every layout of
``dra_driver.core.driver_files.LAYOUTS``, the versioned compute libraries and the utilities in its
directories, reads each one's ELF header (``dra_driver.files.elf_header``) and hands the lot to
``select_driver_files``, which decides. Nothing is written.

The driver root is the host's (or the GPU Operator's driver container's) file system seen at a
mount point of the plugin's own, so a symbolic link in it means what it means there: an absolute
target is resolved from the driver root, not from the plugin's root, and a link whose ``..``
would climb above the driver root is refused (``OutsideRoot``; the file is left out and logged),
never followed out of it. The paths a spec names are the resolved ones, under the driver root's
host path, so the runtime follows no link either.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import structlog

from dra_driver.core.driver_files import (
    LAYOUTS,
    UTILITIES,
    Candidate,
    DriverFiles,
    DriverNotFound,
    ElfHeader,
    FileKind,
    is_candidate_library,
    select_driver_files,
)
from dra_driver.files.elf_header import read_elf_header

log = structlog.get_logger(__name__)

MAX_LINKS = 40  # as the kernel's path walk (ELOOP)


class OutsideRoot(Exception):
    """A symbolic link would leave the driver root."""


def resolve_in_root(root: Path, path: str) -> str | None:
    """``path`` (relative to ``root``) with every link followed as if ``root`` were ``/``, relative to ``root``.

    None when a component is missing or the links loop; OutsideRoot when a ``..`` climbs above ``root``.
    """
    pending = [p for p in path.split("/") if p not in ("", ".")]
    done: list[str] = []
    links = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            if not done:
                raise OutsideRoot(f"{path} leads out of the driver root")
            done.pop()
            continue
        here = root.joinpath(*done, part)
        try:
            mode = os.lstat(here).st_mode
        except OSError:
            return None
        if stat.S_ISLNK(mode):
            links += 1
            if links > MAX_LINKS:
                return None
            try:
                target = str(here.readlink())
            except OSError:
                return None
            if target.startswith("/"):
                done = []
            pending = [p for p in target.split("/") if p not in ("", ".")] + pending
            continue
        done.append(part)
    return "/".join(done)


def native_platform() -> ElfHeader | None:
    """The ELF platform (class, byte order, machine) of the running interpreter: what this machine runs."""
    for exe in ("/proc/self/exe", sys.executable):
        try:
            header = read_elf_header(Path(os.path.realpath(exe)))
        except OSError:
            continue
        if header is not None:
            return header
    return None


def scan(root: Path) -> list[Candidate]:
    """Every candidate file of every layout under ``root``, in search order (directories deduplicated per layout)."""
    out: list[Candidate] = []
    for layout in LAYOUTS:
        seen: set[str] = set()
        for kind, dirs in ((FileKind.LIBRARY, layout.dirs(layout.lib_dirs)), (FileKind.UTILITY, layout.dirs(layout.bin_dirs))):
            for directory in dirs:
                real = _resolve_logged(root, directory)
                if real is None or real in seen or not (root / real).is_dir():
                    continue
                seen.add(real)
                out += _candidates(root, layout.name, kind, real)
    return out


def discover(root: Path, *, host_root: str, version: str) -> DriverFiles:
    """The running driver's files under ``root`` (its host path ``host_root``); DriverNotFound saying what is missing."""
    if not root.is_dir():
        raise DriverNotFound("it is not a directory the plugin can read")
    native = native_platform()
    if native is None:
        raise DriverNotFound("the plugin cannot read its own ELF header, so it cannot tell which files this machine runs")
    return select_driver_files(scan(root), version=version, native=native, host_root=host_root)


def _candidates(root: Path, layout: str, kind: FileKind, directory: str) -> list[Candidate]:
    try:
        names = sorted(p.name for p in (root / directory).iterdir())
    except OSError as err:
        log.warning("driver_dir_unreadable", directory=directory, error=str(err))
        return []
    wanted = is_candidate_library if kind is FileKind.LIBRARY else UTILITIES.__contains__
    out = []
    for name in names:
        if not wanted(name):
            continue
        path = _resolve_logged(root, f"{directory}/{name}")
        if path is not None:
            out.append(Candidate(layout, kind, name, path, read_elf_header(root / path)))
    return out


def _resolve_logged(root: Path, path: str) -> str | None:
    try:
        return resolve_in_root(root, path)
    except OutsideRoot:
        log.warning("driver_file_outside_root", path=path, note="a symbolic link leads out of the driver root; left out")
        return None
