"""Finding the driver's user space under a driver root: ELF headers, layouts, versions, links (real files, gcc-built)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from dra_driver.core.cdi import Mount
from dra_driver.core.driver_files import (
    CONTAINER_BIN_DIR,
    CONTAINER_LIB_DIR,
    LAYOUTS,
    DriverFiles,
    DriverNotFound,
    driver_version,
    library_search_dirs,
    missing_message,
)
from dra_driver.files.driver_root import OutsideRoot, discover, native_platform, resolve_in_root
from dra_driver.files.elf_header import read_elf_header
from testkit.fake_driver import (
    EM_386,
    EM_AARCH64,
    EM_PPC64,
    GKE_AS_ROOT,
    GKE_FROM_HOST,
    GPU_OPERATOR,
    HOST_DEBIAN,
    HOST_RHEL,
    OLD_VERSION,
    USR_LOCAL_NVIDIA,
    VERSION,
    Builder,
    Install,
    elf_bytes,
    install_driver,
)

LIBCUDA = f"{CONTAINER_LIB_DIR}/libcuda.so.1"
LIBNVML = f"{CONTAINER_LIB_DIR}/libnvidia-ml.so.1"


@pytest.fixture(scope="module")
def builder(tmp_path_factory: pytest.TempPathFactory) -> Builder:
    return Builder(tmp_path_factory.mktemp("elf-cache"))


def mounts_by_container_path(files: DriverFiles) -> dict[str, str]:
    return {m.container_path: m.host_path for m in files.mounts}


# -- the ELF reader ---------------------------------------------------------------------------------


def test_a_gcc_built_library_is_read_with_its_soname_and_this_machines_platform(builder: Builder) -> None:
    header = read_elf_header(builder.library("libcuda.so.1", "cuInit"))
    native = native_platform()
    assert header is not None and native is not None
    assert "libcuda.so.1" == header.soname
    assert 3 == header.file_type  # ET_DYN
    assert header.same_platform(native)


def test_an_executable_has_no_soname(builder: Builder) -> None:
    header = read_elf_header(builder.tool("hello"))
    assert header is not None and "" == header.soname


@pytest.mark.parametrize(
    ("elf_class", "big_endian", "machine"), [(1, False, EM_386), (2, True, EM_PPC64), (1, True, 8), (2, False, EM_AARCH64)]
)
def test_every_class_and_byte_order_is_read(tmp_path: Path, elf_class: int, big_endian: bool, machine: int) -> None:
    path = tmp_path / "lib"
    path.write_bytes(elf_bytes(soname="libnvidia-ml.so.1", elf_class=elf_class, big_endian=big_endian, machine=machine))
    header = read_elf_header(path)
    assert header is not None
    assert (elf_class, 2 if big_endian else 1, machine, "libnvidia-ml.so.1") == (
        header.elf_class,
        header.byte_order,
        header.machine,
        header.soname,
    )


def test_truncated_and_corrupted_files_are_not_elf_and_never_raise(tmp_path: Path, builder: Builder) -> None:
    """Every prefix of a real library reads as nothing or as the same header; a bad string table offset as nothing."""
    data = builder.library("libcuda.so.1", "cuInit").read_bytes()
    path = tmp_path / "lib"
    for cut in [*range(80), *range(80, min(len(data), 20000), 97)]:
        path.write_bytes(data[:cut])
        header = read_elf_header(path)
        assert header is None or header.soname in ("", "libcuda.so.1"), cut
    good = elf_bytes(soname="libcuda.so.1")
    for offset in range(len(good)):  # every byte flipped: a header or None, never an exception
        path.write_bytes(good[:offset] + bytes([good[offset] ^ 0xFF]) + good[offset + 1 :])
        read_elf_header(path)
    path.write_bytes(b"#!/bin/sh\necho not elf\n")
    assert read_elf_header(path) is None


def test_a_link_a_fifo_and_a_missing_file_are_not_read(tmp_path: Path, builder: Builder) -> None:
    (tmp_path / "link").symlink_to(builder.library("libcuda.so.1", "cuInit"))
    os.mkfifo(tmp_path / "fifo")  # would block a plain open for reading
    assert read_elf_header(tmp_path / "link") is None
    assert read_elf_header(tmp_path / "fifo") is None
    assert read_elf_header(tmp_path / "missing") is None


# -- layouts ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "layout", "host_root"),
    [
        (HOST_DEBIAN, "host", "/"),
        (HOST_RHEL, "host", "/"),
        (GPU_OPERATOR, "gpu-operator", "/"),
        (GKE_FROM_HOST, "gke", "/"),
        (USR_LOCAL_NVIDIA, "usr-local-nvidia", "/"),
        (Install("usr/lib/x86_64-linux-gnu", "usr/bin"), "host", "/run/nvidia/driver"),  # driverRoot=/run/nvidia/driver
        (GKE_AS_ROOT, "host", "/home/kubernetes/bin/nvidia"),  # driverRoot=/home/kubernetes/bin/nvidia
    ],
)
def test_each_layout_gives_the_libraries_by_soname_and_the_tools_at_the_cuda_images_paths(
    tmp_path: Path, builder: Builder, where: Install, layout: str, host_root: str
) -> None:
    install_driver(builder, tmp_path, where)
    files = discover(tmp_path, host_root=host_root, version=VERSION)
    assert (VERSION, layout) == (files.version, files.layout)
    assert {
        LIBCUDA: f"{host_root.rstrip('/')}/{where.lib_dir}/libcuda.so.{VERSION}",
        LIBNVML: f"{host_root.rstrip('/')}/{where.lib_dir}/libnvidia-ml.so.{VERSION}",
        f"{CONTAINER_BIN_DIR}/nvidia-smi": f"{host_root.rstrip('/')}/{where.bin_dir}/nvidia-smi",
        f"{CONTAINER_BIN_DIR}/nvidia-cuda-mps-control": f"{host_root.rstrip('/')}/{where.bin_dir}/nvidia-cuda-mps-control",
    } == mounts_by_container_path(files)


def test_every_compute_library_of_the_version_is_mounted_under_its_soname(tmp_path: Path, builder: Builder) -> None:
    install_driver(builder, tmp_path, HOST_DEBIAN)
    lib = tmp_path / HOST_DEBIAN.lib_dir
    shutil.copyfile(builder.library("libnvidia-nvvm.so.4", "nvvmVersion"), lib / f"libnvidia-nvvm.so.{VERSION}")
    shutil.copyfile(builder.library("libnvidia-ptxjitcompiler.so.1", "f"), lib / f"libnvidia-ptxjitcompiler.so.{VERSION}")
    shutil.copyfile(builder.library("libnvidia-glcore.so.1", "f"), lib / f"libnvidia-glcore.so.{VERSION}")  # graphics: not
    shutil.copyfile(builder.library("libnvidia-cfg.so.1", "f"), lib / f"libnvidia-cfg.so.{VERSION}.bak")  # not its name
    files = discover(tmp_path, host_root="/", version=VERSION)
    assert ["libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-nvvm.so.4", "libnvidia-ptxjitcompiler.so.1"] == files.names(
        CONTAINER_LIB_DIR
    )


def test_the_first_layout_with_the_driver_is_taken_whole_never_mixed(tmp_path: Path, builder: Builder) -> None:
    """The host has only libcuda of the version (a broken install): the whole of /usr/local/nvidia is used instead."""
    install_driver(builder, tmp_path, HOST_DEBIAN, nvml=False, cuda_returns=9)
    install_driver(builder, tmp_path, USR_LOCAL_NVIDIA)
    files = discover(tmp_path, host_root="/", version=VERSION)
    assert "usr-local-nvidia" == files.layout
    assert all(m.host_path.startswith("/usr/local/nvidia/") for m in files.mounts), files.mounts


def test_search_order_and_the_charts_nvml_loader_share_one_list() -> None:
    dirs = library_search_dirs()
    assert dirs[0] == "usr/lib/x86_64-linux-gnu"
    assert {"usr/lib64", "usr/local/nvidia/lib64", "run/nvidia/driver/usr/lib/x86_64-linux-gnu"} <= set(dirs)
    assert "home/kubernetes/bin/nvidia/lib64" in dirs
    assert ["host", "usr-local-nvidia", "gpu-operator", "gke"] == [layout.name for layout in LAYOUTS]


# -- versions and platforms -------------------------------------------------------------------------


def test_an_older_drivers_leftovers_are_never_picked(tmp_path: Path, builder: Builder) -> None:
    """libcuda.so.<old> beside the running driver's (same SONAME, earlier in the search): only the running one is mounted."""
    install_driver(builder, tmp_path, HOST_DEBIAN)
    install_driver(builder, tmp_path, Install("usr/lib/x86_64-linux-gnu", "usr/bin"), version=OLD_VERSION, cuda_returns=35)
    (tmp_path / HOST_DEBIAN.lib_dir / "libcuda.so.1").unlink()
    (tmp_path / HOST_DEBIAN.lib_dir / "libcuda.so.1").symlink_to(f"libcuda.so.{OLD_VERSION}")  # even the link is stale
    files = discover(tmp_path, host_root="/", version=VERSION)
    assert f"/usr/lib/x86_64-linux-gnu/libcuda.so.{VERSION}" == mounts_by_container_path(files)[LIBCUDA]
    assert not any(OLD_VERSION in m.host_path for m in files.mounts)


def test_only_an_older_driver_is_not_found_and_the_message_names_both_versions(tmp_path: Path, builder: Builder) -> None:
    install_driver(builder, tmp_path, HOST_DEBIAN, version=OLD_VERSION)
    with pytest.raises(DriverNotFound) as err:
        discover(tmp_path, host_root="/", version=VERSION)
    assert f"libcuda.so.{VERSION} or libnvidia-ml.so.{VERSION}" in str(err.value)
    assert f"libraries of other drivers there: {OLD_VERSION}" in str(err.value)


def test_a_32_bit_or_foreign_copy_is_not_this_machines(tmp_path: Path, builder: Builder) -> None:
    """RHEL keeps 32-bit libraries in usr/lib: the 64-bit copy in usr/lib64 is taken; with only foreign ones, none."""
    native = native_platform()
    assert native is not None and native.machine != EM_386
    install_driver(builder, tmp_path, HOST_RHEL)
    (tmp_path / "usr/lib").mkdir(parents=True)
    for name, machine in (("libcuda", EM_386), ("libnvidia-ml", EM_386), ("libnvidia-cfg", EM_PPC64)):
        soname = f"{name}.so.1"
        (tmp_path / "usr/lib" / f"{name}.so.{VERSION}").write_bytes(elf_bytes(soname=soname, elf_class=1, machine=machine))
    files = discover(tmp_path, host_root="/", version=VERSION)
    assert {LIBCUDA: f"/usr/lib64/libcuda.so.{VERSION}", LIBNVML: f"/usr/lib64/libnvidia-ml.so.{VERSION}"} == {
        k: v for k, v in mounts_by_container_path(files).items() if k.startswith(CONTAINER_LIB_DIR)
    }
    shutil.rmtree(tmp_path / "usr/lib64")
    with pytest.raises(DriverNotFound, match=f"no libcuda.so.{VERSION} or libnvidia-ml.so.{VERSION}"):
        discover(tmp_path, host_root="/", version=VERSION)


def test_a_file_whose_soname_is_another_librarys_is_not_mounted(tmp_path: Path, builder: Builder) -> None:
    """A SONAME decides the name in the container (on LD_LIBRARY_PATH): libnvidia-cfg.so.<v> named libc.so.6 must not land."""
    install_driver(builder, tmp_path, HOST_DEBIAN)
    lib = tmp_path / HOST_DEBIAN.lib_dir
    shutil.copyfile(builder.library("libc.so.6", "f"), lib / f"libnvidia-cfg.so.{VERSION}")
    shutil.copyfile(builder.library("../../etc/x", "f"), lib / f"libnvidia-allocator.so.{VERSION}")
    files = discover(tmp_path, host_root="/", version=VERSION)
    assert ["libcuda.so.1", "libnvidia-ml.so.1"] == files.names(CONTAINER_LIB_DIR)


def test_the_driver_version_is_the_gpus_one() -> None:
    assert VERSION == driver_version([VERSION, VERSION])
    with pytest.raises(DriverNotFound, match="several driver versions"):
        driver_version([VERSION, OLD_VERSION])
    with pytest.raises(DriverNotFound, match="not a version"):
        driver_version(["../x"])


# -- symbolic links ---------------------------------------------------------------------------------


def test_links_are_resolved_inside_the_driver_root(tmp_path: Path, builder: Builder) -> None:
    """An absolute link means the driver root's path (as on the host), and the spec names the resolved file."""
    install_driver(builder, tmp_path, Install("opt/nvidia-580/lib", "opt/nvidia-580/bin"))
    (tmp_path / "usr").mkdir()
    (tmp_path / "usr/lib64").symlink_to("/opt/nvidia-580/lib")  # absolute: the host's /opt, not the plugin's
    (tmp_path / "usr/bin").symlink_to("../opt/nvidia-580/bin")
    files = discover(tmp_path, host_root="/run/nvidia/driver", version=VERSION)
    assert f"/run/nvidia/driver/opt/nvidia-580/lib/libcuda.so.{VERSION}" == mounts_by_container_path(files)[LIBCUDA]
    assert (
        "/run/nvidia/driver/opt/nvidia-580/bin/nvidia-smi" == mounts_by_container_path(files)[f"{CONTAINER_BIN_DIR}/nvidia-smi"]
    )


def test_a_link_out_of_the_driver_root_is_refused(tmp_path: Path, builder: Builder) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    install_driver(builder, outside, HOST_DEBIAN)  # a real driver, but not under the root
    lib = root / HOST_DEBIAN.lib_dir
    lib.mkdir(parents=True)
    escape = "../" * 5 + f"outside/{HOST_DEBIAN.lib_dir}"
    for name in ("libcuda", "libnvidia-ml"):
        (lib / f"{name}.so.{VERSION}").symlink_to(f"{escape}/{name}.so.{VERSION}")
    with pytest.raises(OutsideRoot):
        resolve_in_root(root, f"{HOST_DEBIAN.lib_dir}/libcuda.so.{VERSION}")
    with capture_logs() as logs, pytest.raises(DriverNotFound):
        discover(root, host_root="/", version=VERSION)
    assert {f"{HOST_DEBIAN.lib_dir}/libcuda.so.{VERSION}", f"{HOST_DEBIAN.lib_dir}/libnvidia-ml.so.{VERSION}"} == {
        e["path"] for e in logs if e["event"] == "driver_file_outside_root"
    }


def test_resolution_follows_dot_dot_and_stops_on_loops_and_missing_parts(tmp_path: Path) -> None:
    (tmp_path / "a/b").mkdir(parents=True)
    (tmp_path / "a/b/f").write_text("x")
    (tmp_path / "a/up").symlink_to("b/../b")
    (tmp_path / "loop").symlink_to("loop")
    assert "a/b/f" == resolve_in_root(tmp_path, "a/up/f")
    assert "a/b/f" == resolve_in_root(tmp_path, "/a/./b//f")
    assert resolve_in_root(tmp_path, "loop/f") is None
    assert resolve_in_root(tmp_path, "a/missing/f") is None
    with pytest.raises(OutsideRoot):
        resolve_in_root(tmp_path, "a/../../etc/passwd")


def test_a_missing_driver_root_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(DriverNotFound, match="not a directory"):
        discover(tmp_path / "nope", host_root="/", version=VERSION)
    with pytest.raises(DriverNotFound, match=f"holds no libcuda.so.{VERSION}"):
        discover(tmp_path, host_root="/", version=VERSION)


def test_the_missing_message_names_both_sources_and_the_fix() -> None:
    message = missing_message(
        "it holds no libcuda.so.1", driver_root="/run/nvidia/driver", seen_at="/driver-root", toolkit_dirs=["/etc/cdi"]
    )
    assert message == (
        "no NVIDIA driver user space for containers on this node: no NVIDIA Container Toolkit CDI spec "
        "(kind nvidia.com/gpu in /etc/cdi) lists the device, and the driver root /run/nvidia/driver "
        "(at /driver-root in the plugin): it holds no libcuda.so.1; set gpus.nvml.driverRoot (the plugin's "
        "--driver-root-host-path, seen at --driver-root) to where the driver is installed, or generate the toolkit's CDI spec "
        "(nvidia-ctk cdi generate)"
    )
    assert "(at" not in missing_message("x", driver_root="/d", seen_at="/d", toolkit_dirs=["/etc/cdi"])


def test_mounts_are_the_mount_type_the_cdi_spec_writes() -> None:
    files = DriverFiles(VERSION, "host", (Mount("/usr/lib64/libcuda.so.1", LIBCUDA),))
    assert ["libcuda.so.1"] == files.names(CONTAINER_LIB_DIR)
    assert [] == files.names(CONTAINER_BIN_DIR)
