"""The driver's user space a container needs, as data: which files of which driver, and where they go. Pure.

A stock CUDA image carries no driver: ``libcuda.so.1`` and its siblings come from the node. Where
the NVIDIA Container Toolkit's CDI spec lists a device, its claims reference that spec (it mounts
the driver). Elsewhere the kubelet plugin does it itself, without hooks: once at start-up
``dra_driver.files.driver_root`` lists the candidate files under the driver root and reads their
ELF headers; ``select_driver_files`` here decides which of them belong to the running driver;
``dra_driver.core.prepare`` bind-mounts them read-only into every container of a claim, at
``/usr/local/nvidia/lib64/<SONAME>`` and ``/usr/local/nvidia/bin/<tool>``, directories CUDA images
already name in ``LD_LIBRARY_PATH`` and ``PATH``.

What belongs to the driver: a library of ``COMPUTE_LIBRARIES`` whose file is
``<library>.so.<driver version>`` (the version NVML reports, which the kernel module and the
user space must share; an older driver's leftovers are never picked), a shared object of this
machine's ELF class, byte order and architecture (a 32-bit copy in ``usr/lib`` is not), whose
SONAME is ``<library>.so.<n>`` (so no file can land in the container under another library's
name); and the ``UTILITIES`` found beside them, executables of this machine. No firmware (the
kernel module loads it, not the container). The files of one installation only (``LAYOUTS``,
the first that has ``REQUIRED_LIBRARIES``), never a mix.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from dra_driver.core.cdi import Mount

# Where a container finds them: CUDA images set LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64
# and put /usr/local/nvidia/bin first in PATH, for exactly this (a driver mounted from the node).
CONTAINER_LIB_DIR = "/usr/local/nvidia/lib64"
CONTAINER_BIN_DIR = "/usr/local/nvidia/bin"

# The driver's compute and utility libraries (the NVIDIA Container Toolkit's "compute" and
# "utility" capabilities; graphics, video and display libraries are left out). Names without
# ".so": a file is "<name>.so.<driver version>".
COMPUTE_LIBRARIES = (
    "libcuda",  # the CUDA driver API (cuInit...)
    "libnvidia-ml",  # NVML: nvidia-smi, the frameworks' device queries
    "libnvidia-ptxjitcompiler",  # PTX to SASS at load time
    "libnvidia-nvvm",  # NVVM IR JIT (link-time optimisation)
    "libnvidia-gpucomp",  # the compiler back end libcuda loads (drivers 545 and newer)
    "libcudadebugger",  # cuda-gdb's back end
    "libnvidia-cfg",  # GPU configuration queries
    "libnvidia-allocator",  # the driver's buffer allocator
    "libnvidia-opencl",  # the OpenCL ICD
    "libnvidia-pkcs11",  # confidential computing (Hopper and newer)
    "libnvidia-pkcs11-openssl3",
    "libnvidia-fatbinaryloader",  # fat binaries (drivers before 450)
)
# Without these two the installation is not usable: CUDA cannot initialise, nvidia-smi cannot run.
REQUIRED_LIBRARIES = ("libcuda", "libnvidia-ml")
# The tools a workload expects beside the libraries (nvidia-persistenced is a host daemon, not one).
UTILITIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server")

# ELF header values (the System V ABI): file types and the 32/64-bit classes.
ET_EXEC = 2
ET_DYN = 3

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_+.-]+\Z")
_VERSION = re.compile(r"^\d+(\.\d+)+\Z")


@dataclass(frozen=True, slots=True)
class Layout:
    """Where one kind of installation keeps the driver, relative to the driver root."""

    name: str
    prefix: str
    """The installation's root under the driver root ("" for the driver root itself)."""
    lib_dirs: tuple[str, ...]
    bin_dirs: tuple[str, ...]

    def dirs(self, which: tuple[str, ...]) -> tuple[str, ...]:
        """``which`` (lib_dirs or bin_dirs) under the prefix."""
        return tuple(posixpath.join(self.prefix, d) if self.prefix else d for d in which)


# A distribution's packages or the .run installer (Debian/Ubuntu multiarch dirs, RHEL's lib64),
# and the same directories as the root of whatever driverRoot names (GKE's /home/kubernetes/bin/nvidia
# and /usr/local/nvidia hold lib64/ and bin/).
_HOST_LIB_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "lib64",
    "usr/lib",
    "lib",
)
_HOST_BIN_DIRS = ("usr/bin", "bin")
# In search order: the driver root's own layout first, then the installations a host root (driverRoot /)
# may hold elsewhere: /usr/local/nvidia (GKE's and many images' copy), the GPU Operator's driver
# container (its root at /run/nvidia/driver), GKE's installer directory.
LAYOUTS = (
    Layout("host", "", _HOST_LIB_DIRS, _HOST_BIN_DIRS),
    Layout("usr-local-nvidia", "usr/local/nvidia", ("lib64",), ("bin",)),
    Layout("gpu-operator", "run/nvidia/driver", _HOST_LIB_DIRS, _HOST_BIN_DIRS),
    Layout("gke", "home/kubernetes/bin/nvidia", ("lib64",), ("bin",)),
)


def library_search_dirs() -> tuple[str, ...]:
    """Every library directory, relative to the driver root, in search order (the chart's NVML loader uses the same)."""
    return tuple(d for layout in LAYOUTS for d in layout.dirs(layout.lib_dirs))


class FileKind(Enum):
    """What a candidate file was found as."""

    LIBRARY = "library"
    UTILITY = "utility"


@dataclass(frozen=True, slots=True)
class ElfHeader:
    """What the driver's selection reads from an ELF file's headers."""

    elf_class: int
    """1: 32-bit, 2: 64-bit."""
    byte_order: int
    """1: little endian, 2: big endian."""
    machine: int
    """``e_machine`` (62: x86-64, 183: AArch64)."""
    file_type: int
    """``e_type`` (2: executable, 3: shared object or position-independent executable)."""
    soname: str = ""
    """``DT_SONAME`` of a shared object; "" when it has none."""

    def same_platform(self, other: ElfHeader) -> bool:
        """True when code of ``self`` can be loaded by a process of ``other``'s platform."""
        return (self.elf_class, self.byte_order, self.machine) == (other.elf_class, other.byte_order, other.machine)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A file found where a layout keeps the driver, with its ELF header (None: not an ELF file)."""

    layout: str
    kind: FileKind
    name: str
    """Its name in the directory it was found in (``libcuda.so.580.95.05``, ``nvidia-smi``)."""
    path: str
    """The file it resolves to, relative to the driver root (symbolic links followed inside it)."""
    elf: ElfHeader | None


@dataclass(frozen=True, slots=True)
class DriverFiles:
    """The driver's user space as a container gets it: read-only bind mounts, host path to container path."""

    version: str
    layout: str
    mounts: tuple[Mount, ...]

    def names(self, directory: str) -> list[str]:
        """The file names mounted into ``directory`` (CONTAINER_LIB_DIR or CONTAINER_BIN_DIR), for logs."""
        return [posixpath.basename(m.container_path) for m in self.mounts if posixpath.dirname(m.container_path) == directory]


class DriverNotFound(Exception):
    """No usable installation of the running driver; the message says what is missing."""


def is_candidate_library(name: str) -> bool:
    """True for ``<library>.so.<version>`` of a library of COMPUTE_LIBRARIES, of any driver version."""
    return any(_VERSION.match(name.removeprefix(f"{lib}.so.")) for lib in COMPUTE_LIBRARIES if name.startswith(f"{lib}.so."))


def driver_version(versions: Iterable[str]) -> str:
    """The one driver version the node's GPUs report; DriverNotFound when they report none or several."""
    found = sorted(set(versions))
    if len(found) != 1:
        raise DriverNotFound(
            "the GPUs report no driver version" if not found else f"the GPUs report several driver versions ({', '.join(found)})"
        )
    if not _VERSION.match(found[0]):
        raise DriverNotFound(f"the GPUs report the driver version {found[0]!r}, which is not a version")
    return found[0]


def select_driver_files(candidates: Sequence[Candidate], *, version: str, native: ElfHeader, host_root: str) -> DriverFiles:
    """The running driver's files from the first layout that has its required libraries, or DriverNotFound.

    ``candidates`` come in search order (a layout's directories in order; a name found twice is
    taken from the first); ``native`` is this machine's platform; ``host_root`` is the driver
    root's path on the host, which the mounts name.
    """
    best: dict[str, Candidate] = {}
    for layout in LAYOUTS:
        mine = [c for c in candidates if c.layout == layout.name]
        libraries = _libraries(mine, version, native)
        if all(lib in libraries for lib in REQUIRED_LIBRARIES):
            sonames = {c.elf.soname: c for c in libraries.values() if c.elf is not None}
            mounts = [
                Mount(_host_path(host_root, c.path), posixpath.join(CONTAINER_LIB_DIR, soname))
                for soname, c in sorted(sonames.items())
            ]
            mounts += [
                Mount(_host_path(host_root, c.path), posixpath.join(CONTAINER_BIN_DIR, name))
                for name, c in sorted(_utilities(mine, native).items())
            ]
            return DriverFiles(version, layout.name, tuple(mounts))
        if sum(lib in libraries for lib in REQUIRED_LIBRARIES) > sum(lib in best for lib in REQUIRED_LIBRARIES):
            best = libraries
    missing = [f"{lib}.so.{version}" for lib in REQUIRED_LIBRARIES if lib not in best]
    others = sorted(_other_versions(candidates, version))
    found_others = f"; libraries of other drivers there: {', '.join(others)}" if others else ""
    raise DriverNotFound(
        f"it holds no {' or '.join(missing)} of the running driver {version} for this machine "
        f"(searched the {', '.join(layout.name for layout in LAYOUTS)} layouts{found_others})"
    )


def missing_message(reason: str, *, driver_root: str, seen_at: str, toolkit_dirs: Sequence[str]) -> str:
    """The start-up warning and every refused claim's error: neither source of the driver's user space is usable."""
    where = f"the driver root {driver_root}" + (f" (at {seen_at} in the plugin)" if seen_at != driver_root else "")
    return (
        "no NVIDIA driver user space for containers on this node: no NVIDIA Container Toolkit CDI spec "
        f"(kind nvidia.com/gpu in {', '.join(toolkit_dirs)}) lists the device, and {where}: {reason}; "
        "set gpus.nvml.driverRoot (the plugin's --driver-root-host-path, seen at --driver-root) to where the driver is "
        "installed, or generate the toolkit's CDI spec (nvidia-ctk cdi generate)"
    )


def _libraries(candidates: Iterable[Candidate], version: str, native: ElfHeader) -> dict[str, Candidate]:
    """Library name → the first candidate that is that library of ``version`` for this machine."""
    out: dict[str, Candidate] = {}
    for c in candidates:
        if c.kind is not FileKind.LIBRARY or c.elf is None:
            continue
        lib = c.name.removesuffix(f".so.{version}")
        if lib == c.name or lib not in COMPUTE_LIBRARIES or lib in out:
            continue
        if c.elf.same_platform(native) and c.elf.file_type == ET_DYN and _soname_of(lib, c.elf.soname):
            out[lib] = c
    return out


def _soname_of(lib: str, soname: str) -> bool:
    """True for ``<lib>.so`` or ``<lib>.so.<suffix>``: a file name that can only be that library's."""
    return bool(_SAFE_NAME.match(soname)) and (soname == f"{lib}.so" or soname.startswith(f"{lib}.so."))


def _utilities(candidates: Iterable[Candidate], native: ElfHeader) -> dict[str, Candidate]:
    out: dict[str, Candidate] = {}
    for c in candidates:
        if c.kind is not FileKind.UTILITY or c.elf is None or c.name not in UTILITIES or c.name in out:
            continue
        if c.elf.same_platform(native) and c.elf.file_type in (ET_EXEC, ET_DYN):
            out[c.name] = c
    return out


def _other_versions(candidates: Iterable[Candidate], version: str) -> set[str]:
    """Driver versions of required libraries found besides ``version`` (leftovers of another driver)."""
    out: set[str] = set()
    for c in candidates:
        for lib in REQUIRED_LIBRARIES:
            other = c.name.removeprefix(f"{lib}.so.")
            if other not in (c.name, version) and _VERSION.match(other):
                out.add(other)
    return out


def _host_path(host_root: str, path: str) -> str:
    """``path`` (relative to the driver root) as the host names it."""
    return posixpath.normpath(posixpath.join(host_root, path))
