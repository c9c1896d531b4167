"""Deciding what a claim's preparation is: devices answered to the kubelet and the CDI spec.

Pure and deterministic, because the kubelet may ask to prepare the same claim many times:
the same claim, GPUs and config always give the same answer. The kubelet plugin's state
(``kubelet_plugin.state``) calls ``plan_claim`` and then performs the side effects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.core.cdi import DeviceEdits, cdi_device_id, claim_spec, env_prefix, validate_spec
from dra_driver.core.checkpoint import ClaimEntry, ClaimState, PreparedDevice
from dra_driver.core.claims import ClaimAllocation, ClaimError
from dra_driver.core.config import GpuConfig, resolve_device_configs
from dra_driver.core.gpu import GpuInfo

# Device nodes every CUDA container needs besides its GPUs' own /dev/nvidia<minor>.
CONTROL_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
TOOLKIT_CDI_KIND = "nvidia.com/gpu"


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    """The outcome of preparing one claim: the kubelet's answer and the CDI spec to write."""

    devices: tuple[PreparedDevice, ...]
    cdi_spec: dict[str, Any]
    configs: Mapping[str, GpuConfig]


def device_env(claim_uid: str, gpu: GpuInfo, device: str, config: GpuConfig, share_id: str | None) -> dict[str, str]:
    """The env a container gets for one device: what it is, which claim, how it is shared."""
    p = env_prefix(device if not share_id else f"{device}-{share_id}")
    env = {p: device, f"{p}_UUID": gpu.uuid, f"{p}_RESOURCE_CLAIM": claim_uid}
    if config.sharing is not None:
        env[f"{p}_SHARING_STRATEGY"] = config.sharing.strategy.value
        if config.sharing.time_slicing is not None:
            env[f"{p}_TIMESLICE_INTERVAL"] = config.sharing.time_slicing.interval.value
    return env


def plan_claim(
    *,
    driver: str,
    claim: ClaimAllocation,
    gpus: Mapping[str, GpuInfo],
    device_nodes: bool,
    toolkit_devices: frozenset[str] = frozenset(),
    prepared: Mapping[str, ClaimEntry] | None = None,
) -> ClaimPlan:
    """Plan one claim's preparation, or raise ClaimError / ConfigError with a clear message.

    ``gpus`` maps device names to GPUs. ``device_nodes`` adds ``/dev/nvidia*`` nodes (real
    GPUs). ``toolkit_devices`` holds device names of the host's NVIDIA Container Toolkit CDI
    spec; a GPU whose UUID is listed also gets ``nvidia.com/gpu=<uuid>`` so the runtime mounts
    the driver libraries. ``prepared`` (other claims' checkpoint entries) lets the plan refuse
    a device another claim holds exclusively: the driver is the last line of defence.
    """
    configs = resolve_device_configs(driver, claim.results, claim.config)
    held = _exclusively_held(prepared or {}, exclude_uid=claim.uid)
    by_device: dict[tuple[str, str | None], list[str]] = {}
    for r in claim.results:
        names = by_device.setdefault((r.device, r.share_id), [])
        if r.base_request not in names:
            names.append(r.base_request)
    edits: list[DeviceEdits] = []
    devices: list[PreparedDevice] = []
    pools = {(r.device, r.share_id): r.pool for r in claim.results}
    shared = {(r.device, r.share_id) for r in claim.results if r.share_id or r.admin_access}
    admin = {(r.device, r.share_id) for r in claim.results if r.admin_access}
    for (device, share_id), requests in by_device.items():
        gpu = gpus[device]
        if (device, share_id) not in shared and device in held:
            raise ClaimError(f"device {device} is already prepared for claim {held[device]}")
        nodes = (f"/dev/nvidia{gpu.minor}", *CONTROL_DEVICE_NODES) if device_nodes else ()
        edits.append(DeviceEdits(device, share_id, device_env(claim.uid, gpu, device, configs[device], share_id), nodes))
        ids = [cdi_device_id(driver, claim.uid, device, share_id)]
        if gpu.uuid in toolkit_devices:
            ids.append(f"{TOOLKIT_CDI_KIND}={gpu.uuid}")
        devices.append(
            PreparedDevice(tuple(requests), pools[(device, share_id)], device, tuple(ids), share_id, (device, share_id) in admin)
        )
    spec = claim_spec(driver, claim.uid, edits)
    validate_spec(spec)
    return ClaimPlan(devices=tuple(devices), cdi_spec=spec, configs=configs)


def _exclusively_held(prepared: Mapping[str, ClaimEntry], exclude_uid: str) -> dict[str, str]:
    """Device name → holder claim, for devices other claims hold without a share id."""
    out: dict[str, str] = {}
    for uid, entry in prepared.items():
        if uid == exclude_uid or entry.state is not ClaimState.PREPARE_COMPLETED:
            continue
        for d in entry.devices:
            if d.share_id is None and not d.admin_access:
                out[d.device_name] = f"{entry.namespace}/{entry.name} ({uid})"
    return out
