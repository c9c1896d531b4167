"""CDI naming and spec content: the one place that says how our CDI files and ids look.

Pure: builds the spec as data; ``dra_driver.files.cdi_store`` writes it. Called by the kubelet
plugin's prepare logic. One transient spec per claim, named with the claim UID so a runtime's
CDI cache can never confuse two claims; device names include the claim UID too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# 0.5.0 is the first version that allows device names starting with a digit (claim UIDs do).
CDI_VERSION = "0.5.0"
CDI_CLASS = "claim"
SPEC_SUFFIX = ".json"
# The CDI kind of the NVIDIA Container Toolkit's own spec (``nvidia.com/gpu=<uuid>`` device ids).
TOOLKIT_CDI_KIND = "nvidia.com/gpu"
# Fake GPUs get the device nodes a real GPU's container gets (/dev/nvidia<minor>, MIG caps,
# /dev/nvidiactl...), each backed by this host device, which every node has; so the runtime's
# CDI code path is the real one (it stats the host node and allows it in the device cgroup)
# and a container can see its "GPU" in /dev.
FAKE_DEVICE_NODE_HOST = "/dev/null"
# The driver's user space (``dra_driver.core.driver_files``) is bind-mounted read-only: no write,
# no set-user-id, no device files through it, whatever the host's file says.
READ_ONLY_BIND = ("ro", "nosuid", "nodev", "bind")

_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*\Z")
_ENV_UNSAFE = re.compile(r"[^A-Z0-9]")


def cdi_vendor(driver: str) -> str:
    """CDI vendor for a driver: ``k8s.<driver>``."""
    return f"k8s.{driver}"


def cdi_kind(driver: str) -> str:
    """The spec's ``kind``: ``k8s.<driver>/claim``."""
    return f"{cdi_vendor(driver)}/{CDI_CLASS}"


def spec_file_name(driver: str, claim_uid: str) -> str:
    """File name of a claim's spec: ``k8s.<driver>-claim_<uid>.json``."""
    return f"{cdi_vendor(driver)}-{CDI_CLASS}_{claim_uid}{SPEC_SUFFIX}"


def spec_file_prefix(driver: str) -> str:
    """The prefix all of this driver's claim spec files share (for scans and cleanup)."""
    return f"{cdi_vendor(driver)}-{CDI_CLASS}_"


def cdi_device_name(claim_uid: str, device: str, share_id: str | None = None) -> str:
    """``<claimUID>-<device>[-<shareID>]``."""
    name = f"{claim_uid}-{device}" + (f"-{share_id}" if share_id else "")
    if not _NAME_OK.match(name):
        raise ValueError(f"CDI device name {name!r} has characters CDI does not allow")
    return name


def cdi_device_id(driver: str, claim_uid: str, device: str, share_id: str | None = None) -> str:
    """Fully qualified CDI id ``k8s.<driver>/claim=<claimUID>-<device>[-<shareID>]``."""
    return f"{cdi_kind(driver)}={cdi_device_name(claim_uid, device, share_id)}"


def env_prefix(device: str) -> str:
    """Env var prefix for a device: ``gpu-0`` → ``GPU_DEVICE_GPU_0``."""
    return "GPU_DEVICE_" + _ENV_UNSAFE.sub("_", device.upper())


@dataclass(frozen=True, slots=True)
class Mount:
    """A host directory bind-mounted into the container."""

    host_path: str
    container_path: str


@dataclass(frozen=True, slots=True)
class DeviceEdits:
    """What the container gets for one prepared device."""

    device: str
    share_id: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    device_nodes: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    # When set, every device node is this host device (fake GPUs: FAKE_DEVICE_NODE_HOST).
    device_node_host: str = ""


def claim_spec(driver: str, claim_uid: str, devices: list[DeviceEdits], read_only_mounts: Sequence[Mount] = ()) -> dict[str, Any]:
    """The CDI spec (as JSON data) for one claim's devices.

    ``read_only_mounts`` (the driver's user space) go in the spec's own ``containerEdits``, which a
    runtime applies once to every container that gets any device of the spec; a runtime replaces a
    mount at the same container path, so two claims' specs in one container still make one set.
    """
    spec_devices: list[dict[str, Any]] = []
    for d in devices:
        edits: dict[str, Any] = {"env": [f"{k}={v}" for k, v in sorted(d.env.items())]}
        if d.device_nodes:
            host = {"hostPath": d.device_node_host} if d.device_node_host else {}
            edits["deviceNodes"] = [{"path": p, **host} for p in d.device_nodes]
        if d.mounts:
            edits["mounts"] = [
                {"hostPath": m.host_path, "containerPath": m.container_path, "options": ["rbind", "rw"]} for m in d.mounts
            ]
        spec_devices.append({"name": cdi_device_name(claim_uid, d.device, d.share_id), "containerEdits": edits})
    spec: dict[str, Any] = {"cdiVersion": CDI_VERSION, "kind": cdi_kind(driver), "devices": spec_devices}
    if read_only_mounts:
        spec["containerEdits"] = {
            "mounts": [
                {"hostPath": m.host_path, "containerPath": m.container_path, "options": list(READ_ONLY_BIND)}
                for m in read_only_mounts
            ]
        }
    return spec


def validate_spec(spec: dict[str, Any]) -> None:
    """Check the structural rules runtimes enforce; raise ValueError naming the problem."""
    if spec.get("cdiVersion") != CDI_VERSION:
        raise ValueError(f"cdiVersion must be {CDI_VERSION}")
    kind = spec.get("kind", "")
    vendor, _, cls = kind.partition("/")
    if not vendor or not cls or not re.match(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]\Z", vendor):
        raise ValueError(f"kind {kind!r} is not vendor/class")
    names = [d.get("name", "") for d in spec.get("devices", [])]
    if not names:
        raise ValueError("spec has no devices")
    if len(set(names)) != len(names):
        raise ValueError("spec has duplicate device names")
    for n in names:
        if not _NAME_OK.match(n):
            raise ValueError(f"device name {n!r} is invalid")
