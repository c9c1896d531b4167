"""A fake NVIDIA driver's user space, built at test time: real ELF files under the driver's real names.

Used by the unit, integration and e2e tests of the driver's user space in the claim
(``dra_driver.core.driver_files``). ``Builder`` compiles with gcc, once per session and source:
``libcuda.so.<version>`` with SONAME ``libcuda.so.1`` exporting ``cuInit``,
``libnvidia-ml.so.<version>`` with SONAME ``libnvidia-ml.so.1`` exporting ``nvmlInit_v2`` (each
returning a number the test picks, so a test can tell which copy a program loaded), a
``nvidia-smi`` that prints a line, and a probe program that ``dlopen``s the libraries by SONAME
and prints what they return. ``elf_bytes`` writes a minimal ELF shared object of any class, byte
order and machine by hand (what gcc here cannot make: a 32-bit or a big-endian file).
"""

from __future__ import annotations

import hashlib
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

VERSION = "580.95.05"  # the fake GPUs' driver version (dra_driver.sources.fake)
OLD_VERSION = "535.104.05"

PROBE_SOURCE = r"""
#include <dlfcn.h>
#include <stdio.h>
typedef int (*init_fn)(unsigned int);
static int call(const char *lib, const char *fn) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("%s: dlopen failed: %s\n", lib, dlerror()); return 1; }
    init_fn f = (init_fn)dlsym(h, fn);
    if (!f) { printf("%s: no %s\n", lib, fn); return 1; }
    printf("%s=%d\n", fn, f(0));
    return 0;
}
int main(void) {
    int bad = call("libcuda.so.1", "cuInit") | call("libnvidia-ml.so.1", "nvmlInit_v2");
    fflush(stdout);
    return bad;
}
"""


def gcc() -> str:
    """The C compiler; AssertionError naming what to install when there is none."""
    found = shutil.which("gcc")
    assert found, "gcc is needed to build the fake driver's ELF files: apt-get install -y gcc libc6-dev"
    return found


class Builder:
    """Compiles the fake driver's files into ``cache`` (each distinct source once)."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        cache.mkdir(parents=True, exist_ok=True)

    def _compile(self, source: str, args: list[str]) -> Path:
        key = hashlib.sha256(("\0".join(args) + "\0" + source).encode()).hexdigest()[:16]
        out = self.cache / key
        if not out.exists():
            src = self.cache / f"{key}.c"
            src.write_text(source)
            subprocess.run([gcc(), "-O1", "-o", f"{out}.tmp", str(src), *args], check=True, capture_output=True, text=True)
            Path(f"{out}.tmp").rename(out)
        return out

    def library(self, soname: str, function: str, returns: int = 0) -> Path:
        """A shared object with ``soname`` exporting ``int function(unsigned)`` that returns ``returns``."""
        source = f"int {function}(unsigned int flags) {{ (void)flags; return {returns}; }}\n"
        return self._compile(source, ["-shared", "-fPIC", f"-Wl,-soname,{soname}"])

    def program(self, source: str) -> Path:
        """An executable of ``source`` (dynamically linked against this machine's glibc)."""
        return self._compile(source, [])

    def tool(self, line: str) -> Path:
        """An executable that prints ``line``."""
        return self.program(f'#include <stdio.h>\nint main(void) {{ puts("{line}"); return 0; }}\n')

    def probe(self) -> Path:
        """The program that dlopens libcuda.so.1 and libnvidia-ml.so.1 and prints what cuInit and nvmlInit_v2 return."""
        return self.program(PROBE_SOURCE)


@dataclass(frozen=True)
class Install:
    """Where one installation keeps its files, relative to the driver root."""

    lib_dir: str
    bin_dir: str


HOST_DEBIAN = Install("usr/lib/x86_64-linux-gnu", "usr/bin")
HOST_RHEL = Install("usr/lib64", "usr/bin")
GPU_OPERATOR = Install("run/nvidia/driver/usr/lib/x86_64-linux-gnu", "run/nvidia/driver/usr/bin")
GKE_FROM_HOST = Install("home/kubernetes/bin/nvidia/lib64", "home/kubernetes/bin/nvidia/bin")
USR_LOCAL_NVIDIA = Install("usr/local/nvidia/lib64", "usr/local/nvidia/bin")
GKE_AS_ROOT = Install("lib64", "bin")  # driverRoot=/home/kubernetes/bin/nvidia


def install_driver(
    builder: Builder, root: Path, where: Install, *, version: str = VERSION, cuda_returns: int = 0, nvml: bool = True
) -> None:
    """Lay out a driver of ``version`` under ``root`` as the installer does: versioned files, SONAME links, tools."""
    lib = root / where.lib_dir
    lib.mkdir(parents=True, exist_ok=True)
    files = [("libcuda", "libcuda.so.1", "cuInit", cuda_returns)]
    if nvml:
        files.append(("libnvidia-ml", "libnvidia-ml.so.1", "nvmlInit_v2", 0))
    for name, soname, function, returns in files:
        shutil.copyfile(builder.library(soname, function, returns), lib / f"{name}.so.{version}")
        link = lib / soname
        link.unlink(missing_ok=True)
        link.symlink_to(f"{name}.so.{version}")
    tools = root / where.bin_dir
    tools.mkdir(parents=True, exist_ok=True)
    for tool in ("nvidia-smi", "nvidia-cuda-mps-control"):
        shutil.copyfile(builder.tool(f"{tool} of driver {version}"), tools / tool)
        (tools / tool).chmod(0o755)


# -- hand-made ELF ---------------------------------------------------------------------------------

EM_X86_64 = 62
EM_386 = 3
EM_AARCH64 = 183
EM_PPC64 = 21


def elf_bytes(*, soname: str, elf_class: int = 2, big_endian: bool = False, machine: int = EM_X86_64, e_type: int = 3) -> bytes:
    """A minimal ELF file: the header, a PT_LOAD covering the file, a PT_DYNAMIC with DT_STRTAB, DT_SONAME."""
    e = ">" if big_endian else "<"
    is64 = elf_class == 2
    ehsize, phentsize = (64, 56) if is64 else (52, 32)
    phoff = ehsize
    dyn_off = phoff + 2 * phentsize
    dyn_entry = 16 if is64 else 8
    strtab_off = dyn_off + 3 * dyn_entry
    strtab = b"\0" + soname.encode() + b"\0"
    size = strtab_off + len(strtab)
    vaddr = 0x10000
    ident = b"\x7fELF" + bytes([elf_class, 2 if big_endian else 1, 1, 0]) + b"\0" * 8
    if is64:
        header = struct.pack(e + "HHIQQQIHHHHHH", e_type, machine, 1, 0, phoff, 0, 0, ehsize, phentsize, 2, 64, 0, 0)
        load = struct.pack(e + "IIQQQQQQ", 1, 4, 0, vaddr, vaddr, size, size, 0x1000)
        dyn = struct.pack(e + "IIQQQQQQ", 2, 4, dyn_off, vaddr + dyn_off, vaddr + dyn_off, 3 * dyn_entry, 3 * dyn_entry, 8)
        entries = struct.pack(e + "qQqQqQ", 5, vaddr + strtab_off, 14, 1, 0, 0)
    else:
        header = struct.pack(e + "HHIIIIIHHHHHH", e_type, machine, 1, 0, phoff, 0, 0, ehsize, phentsize, 2, 40, 0, 0)
        load = struct.pack(e + "IIIIIIII", 1, 0, vaddr, vaddr, size, size, 4, 0x1000)
        dyn = struct.pack(e + "IIIIIIII", 2, dyn_off, vaddr + dyn_off, vaddr + dyn_off, 3 * dyn_entry, 3 * dyn_entry, 4, 4)
        entries = struct.pack(e + "iIiIiI", 5, vaddr + strtab_off, 14, 1, 0, 0)
    out = ident + header + load + dyn + entries + strtab
    assert len(out) == size
    return out
