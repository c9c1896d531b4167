"""The node's boot id, read once at start-up: a change means the node rebooted (tmpfs, MIG, MPS state gone).

Called by ``kubelet_plugin.main`` before any socket exists (a module of its own, so that the plugin
reads it without loading the checkpoint's modules); the id is then handed to the checkpoint store
and the simulators, which must agree on the boot.
"""

from __future__ import annotations

from pathlib import Path

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
MAX_BOOT_ID_BYTES = 256  # the kernel's is a 36-character UUID and a newline


class BootIdError(ValueError):
    """The node's boot id cannot be read, or is empty: claims could not be told apart by boot."""


def read_boot_id(path: Path = BOOT_ID_PATH) -> str:
    """The node's boot id (changes on every reboot).

    BootIdError names the file when it cannot be read or is empty (an empty id would make every
    start look like a reboot).
    """
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_BOOT_ID_BYTES + 1)  # bounded: a wrong BOOT_ID_FILE may be anything
        boot_id = raw.decode().strip()
    except (OSError, UnicodeDecodeError) as err:
        raise BootIdError(f"cannot read the node's boot id from {path}: {err}") from err
    if len(raw) > MAX_BOOT_ID_BYTES:
        raise BootIdError(f"the node's boot id file {path} is over {MAX_BOOT_ID_BYTES} bytes: not a boot id")
    if not boot_id:
        raise BootIdError(f"the node's boot id file {path} is empty")
    return boot_id
