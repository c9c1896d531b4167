"""Where this node's containers get the NVIDIA driver's user space from, decided once at the plugin's start.

Called by ``kubelet_plugin.main`` while it builds the state. Two sources, per device: the NVIDIA
Container Toolkit's CDI spec, when it lists the device (the claim references it, as before), or
the driver's own files under the driver root (``dra_driver.files.driver_root``), which each
claim's spec bind-mounts read-only (``dra_driver.core.prepare``). A node needs one of them when
its GPUs are real, or when ``--driver-root`` is given with fake GPUs (a test of this path); fake
GPUs without it need none, as before.

When a node needs them and the driver root holds no usable installation, and the toolkit's spec
does not list every GPU, this says so once (log line ``driver_userspace_missing`` and a Node
Event ``DriverUserspaceMissing`` with the same message), and the state refuses every claim that
would get a device neither source covers, with that message as the claim's error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from dra_driver.core.driver_files import (
    CONTAINER_BIN_DIR,
    CONTAINER_LIB_DIR,
    DriverFiles,
    DriverNotFound,
    driver_version,
    missing_message,
)
from dra_driver.core.gpu import GpuInfo
from dra_driver.files.cdi_store import toolkit_device_names
from dra_driver.files.checkpoint_store import Notice
from dra_driver.files.driver_root import discover

log = structlog.get_logger(__name__)

EVENT_REASON = "DriverUserspaceMissing"


@dataclass(frozen=True, slots=True)
class DriverSupply:
    """What the state's plans get: the toolkit's device names, the driver's files, or why there are none."""

    toolkit_devices: frozenset[str] = frozenset()
    files: DriverFiles | None = None
    missing: str = ""
    """Non-empty: a device the toolkit's spec does not list is refused with this message."""


def driver_supply(
    *,
    gpus: Sequence[GpuInfo],
    driver_root: Path | None,
    host_root: str,
    toolkit_dirs: Sequence[Path],
    notify: Callable[[Notice], None],
) -> DriverSupply:
    """Read the toolkit's spec and find the driver's files (``driver_root`` None: none needed)."""
    if driver_root is None:
        return DriverSupply()
    toolkit = toolkit_device_names(list(toolkit_dirs))
    if not gpus:
        log.info("driver_userspace_not_needed", reason="no GPUs")
        return DriverSupply(toolkit)
    try:
        version = driver_version(g.driver_version for g in gpus)
        files = discover(driver_root, host_root=host_root, version=version)
    except DriverNotFound as err:
        message = missing_message(
            str(err), driver_root=host_root, seen_at=str(driver_root), toolkit_dirs=[str(d) for d in toolkit_dirs]
        )
        unlisted = [g.uuid for g in gpus if g.uuid not in toolkit]
        if unlisted:
            log.error("driver_userspace_missing", message=message, gpus_not_in_toolkit_spec=unlisted)
            notify(Notice(EVENT_REASON, message, warning=True))
        else:  # every GPU through the toolkit; only devices it cannot list (MIG slices carved later) are refused
            log.warning("driver_userspace_toolkit_only", message=message)
        return DriverSupply(toolkit, None, message)
    log.info(
        "driver_userspace_found",
        driver_version=files.version,
        layout=files.layout,
        host_root=host_root,
        libraries=files.names(CONTAINER_LIB_DIR),
        utilities=files.names(CONTAINER_BIN_DIR),
        gpus_in_toolkit_spec=sum(g.uuid in toolkit for g in gpus),
    )
    return DriverSupply(toolkit, files)
