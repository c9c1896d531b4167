"""Reads the few ELF header fields the driver's file selection needs: class, byte order, machine, type, SONAME.

Called by ``dra_driver.files.driver_root`` for each candidate file under the driver root, once
at start-up. A small reader rather than a library: it reads the file header, the program headers
and the dynamic segment, nothing else, and every offset and size is checked against the file
(a malformed or hostile file gives None, never an exception or a large read). The SONAME is
found as the dynamic linker finds it: ``DT_SONAME`` indexes the string table that ``DT_STRTAB``
gives as a virtual address, mapped to a file offset through the ``PT_LOAD`` segment holding it.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from dra_driver.core.driver_files import ElfHeader

_MAGIC = b"\x7fELF"
_CLASS32, _CLASS64 = 1, 2
_LITTLE, _BIG = 1, 2
_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_STRTAB, _DT_SONAME = 0, 5, 14
_MAX_PHNUM = 512  # real objects have a dozen; PN_XNUM (0xffff) and beyond are refused
_MAX_DYNAMIC = 1 << 16  # bytes of dynamic section read at most (a few hundred entries in practice)
_MAX_SONAME = 255  # a file name


class _Malformed(Exception):
    """The file is not a well-formed ELF file (never leaves this module)."""


@dataclass(frozen=True, slots=True)
class _Layout:
    """The struct formats of one ELF class and byte order."""

    header: str  # e_type .. e_phnum, after e_ident
    program: str  # one program header
    dynamic: str  # one dynamic entry (d_tag, d_val)
    is64: bool


def read_elf_header(path: Path) -> ElfHeader | None:
    """The ELF header fields of ``path`` (a regular file; a symbolic link is not followed), or None.

    None when the file cannot be opened or is not a well-formed ELF file; a shared object without
    a SONAME has ``soname`` "".
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # a FIFO or a device is never read
                return None
            return _read(_File(f, st.st_size))
        except (OSError, struct.error, _Malformed):
            return None


def _read(f: _File) -> ElfHeader:
    ident = f.at(0, 16)
    if ident[:4] != _MAGIC or ident[4] not in (_CLASS32, _CLASS64) or ident[5] not in (_LITTLE, _BIG):
        raise _Malformed
    endian = "<" if ident[5] == _LITTLE else ">"
    if ident[4] == _CLASS64:
        layout = _Layout(endian + "HHIQQQIHHH", endian + "IIQQQQQQ", endian + "qQ", is64=True)
    else:
        layout = _Layout(endian + "HHIIIIIHHH", endian + "IIIIIIII", endian + "iI", is64=False)
    fields = struct.unpack(layout.header, f.at(16, struct.calcsize(layout.header)))
    e_type, e_machine, phoff, phentsize, phnum = fields[0], fields[1], fields[4], fields[8], fields[9]
    loads, dynamic = _segments(f, layout, phoff, phentsize, phnum)
    soname = _soname(f, layout, dynamic, loads) if dynamic is not None else ""
    return ElfHeader(elf_class=ident[4], byte_order=ident[5], machine=e_machine, file_type=e_type, soname=soname)


def _segments(
    f: _File, layout: _Layout, phoff: int, phentsize: int, phnum: int
) -> tuple[list[tuple[int, int, int]], tuple[int, int] | None]:
    """The ``PT_LOAD`` segments as (vaddr, offset, filesz) and the ``PT_DYNAMIC`` one as (offset, filesz)."""
    if phnum > _MAX_PHNUM or (phnum and phentsize < struct.calcsize(layout.program)):
        raise _Malformed
    table = f.at(phoff, phnum * phentsize)
    loads: list[tuple[int, int, int]] = []
    dynamic: tuple[int, int] | None = None
    for i in range(phnum):
        entry = struct.unpack_from(layout.program, table, i * phentsize)
        if layout.is64:  # p_type, p_flags, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_align
            p_type, p_offset, p_vaddr, p_filesz = entry[0], entry[2], entry[3], entry[5]
        else:  # p_type, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_flags, p_align
            p_type, p_offset, p_vaddr, p_filesz = entry[0], entry[1], entry[2], entry[4]
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC and dynamic is None:
            dynamic = (p_offset, p_filesz)
    return loads, dynamic


def _soname(f: _File, layout: _Layout, dynamic: tuple[int, int], loads: list[tuple[int, int, int]]) -> str:
    """The SONAME, "" when there is none."""
    entry_size = struct.calcsize(layout.dynamic)
    offset, filesz = dynamic
    data = f.at(offset, min(filesz, _MAX_DYNAMIC) // entry_size * entry_size)
    strtab: int | None = None
    index: int | None = None
    for tag, value in struct.iter_unpack(layout.dynamic, data):
        if tag == _DT_NULL:
            break
        if tag == _DT_STRTAB:
            strtab = value
        elif tag == _DT_SONAME:
            index = value
    if index is None:
        return ""
    base = next((off + strtab - vaddr for vaddr, off, sz in loads if strtab is not None and vaddr <= strtab < vaddr + sz), None)
    if base is None:
        raise _Malformed
    raw = f.at(base + index, max(0, min(_MAX_SONAME + 1, f.size - base - index)))
    name, nul, _ = raw.partition(b"\0")
    if not nul or not name:
        raise _Malformed
    try:
        return name.decode("ascii")
    except UnicodeDecodeError:
        raise _Malformed from None


class _File:
    """An open file and its size: reads only what lies inside it."""

    def __init__(self, f: BinaryIO, size: int) -> None:
        self._f = f
        self.size = size

    def at(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset``; _Malformed unless they lie inside the file."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise _Malformed
        self._f.seek(offset)
        data = self._f.read(length)
        if len(data) != length:
            raise _Malformed
        return data
