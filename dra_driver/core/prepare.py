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
from dra_driver.core.checkpoint import ClaimEntry, ClaimState, MigRecord, PreparedDevice
from dra_driver.core.claims import ClaimAllocation, ClaimError
from dra_driver.core.config import GpuConfig, resolve_device_configs
from dra_driver.core.mig_publish import DeviceTarget

# Device nodes every CUDA container needs besides its GPUs' own /dev/nvidia<minor>.
CONTROL_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
TOOLKIT_CDI_KIND = "nvidia.com/gpu"


@dataclass(frozen=True, slots=True)
class ResolvedDevice:
    """A device as the container will see it: a full GPU, or a MIG instance that exists."""

    target: DeviceTarget
    mig: MigRecord | None = None
    """The carved instance (dynamic) or the existing one (static); None for a full GPU."""
    caps_nodes: tuple[str, ...] = ()
    """``/dev/nvidia-caps/nvidia-cap<N>`` nodes of the MIG instance (real GPUs)."""

    @property
    def uuid(self) -> str:
        """The UUID CUDA knows the device by: the GPU's, or the MIG device's."""
        if self.mig is not None and self.mig.mig_uuid:
            return self.mig.mig_uuid
        if self.target.instance is not None and self.target.instance.uuid:
            return self.target.instance.uuid
        return self.target.gpu.uuid


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    """The outcome of preparing one claim: the kubelet's answer and the CDI spec to write."""

    devices: tuple[PreparedDevice, ...]
    cdi_spec: dict[str, Any]
    configs: Mapping[str, GpuConfig]


def device_env(claim_uid: str, dev: ResolvedDevice, device: str, config: GpuConfig, share_id: str | None) -> dict[str, str]:
    """The env a container gets for one device: what it is, which claim, how it is shared."""
    p = env_prefix(device if not share_id else f"{device}-{share_id}")
    env = {p: device, f"{p}_UUID": dev.uuid, f"{p}_RESOURCE_CLAIM": claim_uid}
    if dev.target.profile is not None:
        env[f"{p}_MIG_PROFILE"] = dev.target.profile.name
        env[f"{p}_PARENT_UUID"] = dev.target.gpu.uuid
    if config.sharing is not None:
        env[f"{p}_SHARING_STRATEGY"] = config.sharing.strategy.value
        if config.sharing.time_slicing is not None:
            env[f"{p}_TIMESLICE_INTERVAL"] = config.sharing.time_slicing.interval.value
    return env


def plan_claim(
    *,
    driver: str,
    claim: ClaimAllocation,
    devices: Mapping[str, ResolvedDevice],
    device_nodes: bool,
    toolkit_devices: frozenset[str] = frozenset(),
    prepared: Mapping[str, ClaimEntry] | None = None,
    node_targets: Mapping[str, DeviceTarget] | None = None,
) -> ClaimPlan:
    """Plan one claim's preparation, or raise ClaimError / ConfigError with a clear message.

    ``devices`` maps the claim's device names to what they resolve to (for dynamic MIG, after
    carving; before it, with ``mig`` None, to check the claim without side effects).
    ``device_nodes`` adds ``/dev/nvidia*`` nodes (real GPUs). ``toolkit_devices`` holds device
    names of the host's NVIDIA Container Toolkit CDI spec; a device whose UUID is listed also
    gets ``nvidia.com/gpu=<uuid>`` so the runtime mounts the driver libraries. ``prepared``
    (other claims' checkpoint entries) lets the plan refuse a device another claim holds
    exclusively, or one that overlaps it (a full GPU and its MIG slices, two placements on the
    same memory slices): the driver is the last line of defence. ``node_targets`` (every
    device the node publishes) is how other claims' device names are told apart.
    """
    configs = resolve_device_configs(driver, claim.results, claim.config)
    targets = {**(node_targets or {}), **{name: d.target for name, d in devices.items()}}
    held = _exclusively_held(prepared or {}, exclude_uid=claim.uid)
    by_device: dict[tuple[str, str | None], list[str]] = {}
    for r in claim.results:
        names = by_device.setdefault((r.device, r.share_id), [])
        if r.base_request not in names:
            names.append(r.base_request)
    edits: list[DeviceEdits] = []
    pools = {(r.device, r.share_id): r.pool for r in claim.results}
    shared = {(r.device, r.share_id) for r in claim.results if r.share_id or r.admin_access}
    admin = {(r.device, r.share_id) for r in claim.results if r.admin_access}
    out: list[PreparedDevice] = []
    for (device, share_id), requests in by_device.items():
        dev = devices[device]
        if (device, share_id) not in shared:
            holder = _holder(device, dev.target, held, targets)
            if holder:
                raise ClaimError(holder)
        nodes = (f"/dev/nvidia{dev.target.gpu.minor}", *dev.caps_nodes, *CONTROL_DEVICE_NODES) if device_nodes else ()
        edits.append(DeviceEdits(device, share_id, device_env(claim.uid, dev, device, configs[device], share_id), nodes))
        ids = [cdi_device_id(driver, claim.uid, device, share_id)]
        if dev.uuid in toolkit_devices:
            ids.append(f"{TOOLKIT_CDI_KIND}={dev.uuid}")
        out.append(
            PreparedDevice(
                tuple(requests), pools[(device, share_id)], device, tuple(ids), share_id, (device, share_id) in admin, dev.mig
            )
        )
    spec = claim_spec(driver, claim.uid, edits)
    validate_spec(spec)
    return ClaimPlan(devices=tuple(out), cdi_spec=spec, configs=configs)


def overlaps(a: DeviceTarget, b: DeviceTarget) -> bool:
    """True when two devices of this node cannot be used by two claims at once.

    The same device; a full GPU and anything on it; two MIG placements sharing a memory slice.
    """
    if a.name == b.name:
        return True
    if a.gpu.uuid != b.gpu.uuid:
        return False
    if a.placement is None or b.placement is None:
        return True
    return a.placement.overlaps(b.placement)


def _holder(device: str, target: DeviceTarget, held: Mapping[str, str], targets: Mapping[str, DeviceTarget]) -> str:
    """Why ``device`` cannot be prepared exclusively now ("" when it can)."""
    if device in held:
        return f"device {device} is already prepared for claim {held[device]}"
    for other, holder in sorted(held.items()):
        t = targets.get(other)
        if t is not None and overlaps(target, t):
            return f"device {device} overlaps device {other}, which is prepared for claim {holder}"
    return ""


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
