"""Deciding what a claim's preparation is: devices answered to the kubelet and the CDI spec.

Pure and deterministic, because the kubelet may ask to prepare the same claim many times:
the same claim, GPUs and config always give the same answer. The kubelet plugin's state
(``kubelet_plugin.prepare.claim_steps``) calls ``plan_claim`` and then performs the side effects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.core.cdi import TOOLKIT_CDI_KIND, DeviceEdits, Mount, cdi_device_id, claim_spec, env_prefix, validate_spec
from dra_driver.core.checkpoint import ClaimEntry, ClaimState, MigRecord, PreparedDevice
from dra_driver.core.claims import ClaimAllocation, ClaimError
from dra_driver.core.config import (
    AllocationResult,
    ConfigError,
    DeviceConfig,
    GpuConfig,
    SharingStrategy,
    parse_byte_quantity,
)
from dra_driver.core.driver_files import DriverFiles
from dra_driver.core.mig_publish import DeviceTarget
from dra_driver.core.schema import CAPACITY_MEMORY
from dra_driver.core.sharing import (
    CAPACITY_COMPUTE_SHARE,
    CONTAINER_MPS_PIPE_DIR,
    MpsDaemon,
    TimeSlice,
    claim_daemon_id,
    mps_client_env,
    mps_dirs,
    shared_daemon_id,
)

# Device nodes every CUDA container needs besides its GPUs' own /dev/nvidia<minor>.
CONTROL_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


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
    """The outcome of preparing one claim: the kubelet's answer, the CDI spec, the sharing to apply."""

    devices: tuple[PreparedDevice, ...]
    cdi_spec: dict[str, Any]
    configs: Mapping[str, DeviceConfig]
    time_slices: tuple[TimeSlice, ...] = ()
    mps_daemons: tuple[MpsDaemon, ...] = ()


def device_env(claim_uid: str, dev: ResolvedDevice, device: str, config: DeviceConfig, share_id: str | None) -> dict[str, str]:
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


def spec_device_uuids(spec: Mapping[str, Any]) -> set[str]:
    """The device UUIDs (GPU or MIG) a claim's CDI spec hands to containers, read back from its env.

    The inverse of ``device_env``'s ``<prefix>_UUID`` entries; used to tell which MIG instances a
    claim holds when its checkpoint entry was lost. Tolerates any shape (the file is outside input).
    """
    out: set[str] = set()
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    for dev in devices if isinstance(devices, list) else ():
        edits = dev.get("containerEdits") if isinstance(dev, Mapping) else None
        env = edits.get("env") if isinstance(edits, Mapping) else None
        for item in env if isinstance(env, list) else ():
            if isinstance(item, str) and item.startswith("GPU_DEVICE_"):
                key, _, value = item.partition("=")
                if key.endswith("_UUID") and not key.endswith("_PARENT_UUID") and value:
                    out.add(value)
    return out


CONTAINER_SHM_DIR = "/dev/shm"  # noqa: S108 - the container's shared memory, where MPS clients expect it


def _mps_mounts(mps_root: str, daemon_id: str) -> tuple[Mount, ...]:
    dirs = mps_dirs(mps_root, daemon_id)
    return (Mount(dirs.pipe, CONTAINER_MPS_PIPE_DIR), Mount(dirs.shm, CONTAINER_SHM_DIR))


def _claim_mps_daemons(
    claim_uid: str,
    keys: Sequence[tuple[str, str | None]],
    configs: Mapping[str, DeviceConfig],
    devices: Mapping[str, ResolvedDevice],
) -> tuple[dict[str, MpsDaemon], dict[str, str]]:
    """Per-claim MPS daemons (devices with equal MPS configs share one) and device → daemon id."""
    groups: dict[DeviceConfig, list[str]] = {}
    for device, share_id in keys:
        sharing = configs[device].sharing
        if share_id is None and sharing is not None and sharing.strategy is SharingStrategy.MPS:
            group = groups.setdefault(configs[device], [])
            if device not in group:
                group.append(device)
    daemons: dict[str, MpsDaemon] = {}
    daemon_of: dict[str, str] = {}
    for config, group in groups.items():
        mps = config.sharing.mps if config.sharing is not None else None
        limits = []
        for device in group:
            limit = mps.pinned_memory_limit(device) if mps is not None else None
            if limit is not None:
                limits.append((devices[device].uuid, limit))
        daemon = MpsDaemon(
            daemon_id=claim_daemon_id(claim_uid, group),
            gpu_uuids=tuple(devices[d].uuid for d in group),
            exclusive_gpus=tuple(devices[d].target.gpu.uuid for d in group if not devices[d].target.is_mig),
            active_thread_percentage=mps.default_active_thread_percentage if mps is not None else None,
            pinned_memory_limits=tuple(sorted(limits)),
        )
        daemons[daemon.daemon_id] = daemon
        for device in group:
            daemon_of[device] = daemon.daemon_id
    return daemons, daemon_of


def _share_edits(
    device: str, share_id: str, dev: ResolvedDevice, config: DeviceConfig, result: AllocationResult, *, mps_root: str
) -> tuple[MpsDaemon, dict[str, str], tuple[Mount, ...]]:
    """A consumable-capacity share: the GPU's shared MPS daemon, the client env with its limits, mounts."""
    if config.sharing is not None:
        raise ClaimError(
            f"device {device} share {share_id}: a {config.sharing.strategy.value} config does not apply to a "
            "share of a GPU shared by capacity; the share runs under the GPU's MPS daemon with what it was allocated"
        )
    memory, compute = _share_grant(result, device)
    gpu = dev.target.gpu
    daemon = MpsDaemon(shared_daemon_id(gpu), (gpu.uuid,), exclusive_gpus=(gpu.uuid,), shared=True)
    p = env_prefix(f"{device}-{share_id}")
    env = {**mps_client_env(gpu.uuid, memory, compute), f"{p}_SHARING_STRATEGY": "ConsumableCapacity"}
    if memory is not None:
        env[f"{p}_MEMORY_LIMIT"] = str(memory)
    if compute is not None:
        env[f"{p}_COMPUTE_SHARE"] = str(compute)
    return daemon, env, _mps_mounts(mps_root, daemon.daemon_id)


def _share_grant(result: AllocationResult, device: str) -> tuple[int | None, int | None]:
    """The memory (bytes) and computeShare (percent) a consumable-capacity share was granted."""
    consumed = dict(result.consumed_capacity)
    where = f"device {device} share {result.share_id}: consumedCapacity"
    memory = compute = None
    try:
        if CAPACITY_MEMORY in consumed:
            memory = parse_byte_quantity(consumed[CAPACITY_MEMORY], f"{where}.{CAPACITY_MEMORY}")
        if consumed.get(CAPACITY_COMPUTE_SHARE) not in (None, "0"):
            compute = int(str(consumed[CAPACITY_COMPUTE_SHARE]))
    except (ConfigError, ValueError) as err:
        raise ClaimError(f"{where} is not usable: {err}") from None
    if compute is not None and not 0 <= compute <= 100:
        raise ClaimError(f"{where}.{CAPACITY_COMPUTE_SHARE} {compute} is not a percentage")
    return memory, compute


def plan_claim(
    *,
    driver: str,
    claim: ClaimAllocation,
    configs: Mapping[str, DeviceConfig],
    devices: Mapping[str, ResolvedDevice],
    device_nodes: bool,
    device_node_host: str = "",
    toolkit_devices: frozenset[str] = frozenset(),
    driver_files: DriverFiles | None = None,
    driver_missing: str = "",
    prepared: Mapping[str, ClaimEntry] | None = None,
    node_targets: Mapping[str, DeviceTarget] | None = None,
    mps_root: str = "/var/lib/kubelet/plugins/gpu.dra-gpu.dev/mps",
) -> ClaimPlan:
    """Plan one claim's preparation, or raise ClaimError / ConfigError with a clear message.

    ``configs`` is the claim's config per device name, resolved once per prepare by the caller
    (``resolve_configs`` with the claim's MIG devices) and reused for every plan of that prepare.
    ``devices`` maps the claim's device names to what they resolve to (for dynamic MIG, after
    carving; before it, with ``mig`` None, to check the claim without side effects).
    ``device_nodes`` adds ``/dev/nvidia*`` nodes, backed by ``device_node_host`` if set (fake GPUs).
    A device whose UUID the host's NVIDIA Container Toolkit CDI spec lists (``toolkit_devices``)
    also gets ``nvidia.com/gpu=<uuid>``; otherwise the spec mounts ``driver_files`` read-only, or,
    with none and ``driver_missing`` saying why, the claim is refused before any side effect.
    ``prepared`` (other claims' checkpoint entries) lets the plan refuse a device another claim holds
    exclusively or one that overlaps it (the driver is the last line of defence); ``node_targets``
    (every device the node publishes) tells other claims' device names apart.
    """
    # Who holds what is read only for a device this claim wants exclusively: a node's many shared
    # and admin-access claims never scan every other claim (or copy the node's targets) per plan.
    exclusive: tuple[dict[str, str], dict[str, DeviceTarget]] | None = None
    by_device, first, admin = _group_results(claim)
    daemons, daemon_of = _claim_mps_daemons(claim.uid, list(by_device), configs, devices)
    time_slices: dict[str, TimeSlice] = {}
    edits: list[DeviceEdits] = []
    out: list[PreparedDevice] = []
    needs_driver = False
    for (device, share_id), requests in by_device.items():
        dev = devices[device]
        result = first[(device, share_id)]
        if not (share_id or (device, share_id) in admin):
            if exclusive is None:
                exclusive = (
                    _exclusively_held(prepared or {}, exclude_uid=claim.uid),
                    {**(node_targets or {}), **{name: d.target for name, d in devices.items()}},
                )
            holder = _holder(device, dev.target, *exclusive)
            if holder:
                raise ClaimError(holder)
        env, mounts, daemon, time_slice = _device_sharing(
            claim.uid, (device, share_id), dev, config=configs[device], result=result, daemon_of=daemon_of, mps_root=mps_root
        )
        if daemon is not None:
            daemons[daemon.daemon_id] = daemon
        if time_slice is not None:
            time_slices[time_slice.gpu_uuid] = time_slice
        nodes = (f"/dev/nvidia{dev.target.gpu.minor}", *dev.caps_nodes, *CONTROL_DEVICE_NODES) if device_nodes else ()
        edits.append(DeviceEdits(device, share_id, env, nodes, mounts, device_node_host))
        ids = [cdi_device_id(driver, claim.uid, device, share_id)]
        if _toolkit_lists(dev, toolkit_devices):
            ids.append(f"{TOOLKIT_CDI_KIND}={dev.uuid}")
        else:
            needs_driver = True
        out.append(
            PreparedDevice(tuple(requests), result.pool, device, tuple(ids), share_id, (device, share_id) in admin, dev.mig)
        )
    if needs_driver and driver_files is None and driver_missing:
        raise ClaimError(driver_missing)
    spec = claim_spec(driver, claim.uid, edits, driver_files.mounts if needs_driver and driver_files is not None else ())
    validate_spec(spec)
    return ClaimPlan(
        devices=tuple(out),
        cdi_spec=spec,
        configs=configs,
        time_slices=tuple(time_slices.values()),
        mps_daemons=tuple(daemons.values()),
    )


_Key = tuple[str, str | None]
"""A claim's device and share id: what one CDI device and one prepared device stand for."""


def _group_results(claim: ClaimAllocation) -> tuple[dict[_Key, list[str]], dict[_Key, AllocationResult], set[_Key]]:
    """The claim's results by (device, share id): the requests each serves, its first result, which have admin access."""
    by_device: dict[_Key, list[str]] = {}
    first: dict[_Key, AllocationResult] = {}
    admin: set[_Key] = set()
    for r in claim.results:
        names = by_device.setdefault((r.device, r.share_id), [])
        first.setdefault((r.device, r.share_id), r)
        if r.base_request not in names:
            names.append(r.base_request)
        if r.admin_access:
            admin.add((r.device, r.share_id))
    return by_device, first, admin


def _device_sharing(
    claim_uid: str,
    key: _Key,
    dev: ResolvedDevice,
    *,
    config: DeviceConfig,
    result: AllocationResult,
    daemon_of: Mapping[str, str],
    mps_root: str,
) -> tuple[dict[str, str], tuple[Mount, ...], MpsDaemon | None, TimeSlice | None]:
    """One device's container env and mounts from its config, with its share's MPS daemon or its GPU's time slice."""
    device, share_id = key
    env = device_env(claim_uid, dev, device, config, share_id)
    if share_id is not None:
        daemon, share_env, mounts = _share_edits(device, share_id, dev, config, result, mps_root=mps_root)
        env.update(share_env)
        return env, mounts, daemon, None
    if device in daemon_of:
        env["CUDA_MPS_PIPE_DIRECTORY"] = CONTAINER_MPS_PIPE_DIR
        return env, _mps_mounts(mps_root, daemon_of[device]), None, None
    sharing = config.sharing
    if sharing is not None and sharing.time_slicing is not None and isinstance(config, GpuConfig) and not dev.target.is_mig:
        return env, (), None, TimeSlice(dev.target.gpu.uuid, sharing.time_slicing.interval)
    return env, (), None, None


def _toolkit_lists(dev: ResolvedDevice, toolkit_devices: frozenset[str]) -> bool:
    """True when the toolkit's CDI spec lists the device the container gets.

    A dynamic MIG slice is known by its UUID only once carved (before, ``dev.uuid`` is its GPU's):
    until then it counts as not listed, so the check made before carving never passes a claim that
    the plan after carving would refuse.
    """
    if carves(dev.target) and (dev.mig is None or not dev.mig.mig_uuid):
        return False
    return dev.uuid in toolkit_devices


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


def carves(t: DeviceTarget) -> bool:
    """True for a device whose preparation creates a MIG instance (a dynamic MIG placement)."""
    return t.dynamic and t.is_mig


def mig_intent(t: DeviceTarget) -> MigRecord:
    """The record of the instance a dynamic MIG placement will carve, written before any NVML call."""
    if t.profile is None or t.placement is None:
        raise ValueError(f"device {t.name} is not a MIG placement")
    return MigRecord(t.gpu.uuid, t.profile.profile_id, t.profile.name, t.placement.start, t.placement.size)


def provisional_devices(
    claim: ClaimAllocation, targets: Mapping[str, DeviceTarget], *, mig_backend: bool
) -> dict[str, ResolvedDevice]:
    """The claim's devices as they resolve before any side effect (dynamic MIG: not carved yet).

    ClaimError for what this node cannot prepare: admin access to or a shared allocation of a
    dynamic MIG slice, or a MIG device without a MIG backend (``mig_backend``).
    """
    out: dict[str, ResolvedDevice] = {}
    for r in claim.results:
        target = targets[r.device]
        if target.dynamic and target.is_mig and (r.admin_access or r.share_id):
            raise ClaimError(f"device {r.device}: admin access and shared allocation of a dynamic MIG slice are not supported")
        if target.is_mig and (target.dynamic or target.instance is None) and not mig_backend:
            raise ClaimError(f"device {r.device} is a MIG device, but this plugin runs without a MIG backend")
        rec = None
        if target.instance is not None:  # static MIG: the instance exists
            rec = MigRecord(
                target.gpu.uuid,
                target.instance.profile_id,
                target.instance.profile_name,
                target.instance.placement.start,
                target.instance.placement.size,
                target.instance.gi_id,
                target.instance.ci_id,
                target.instance.uuid,
                carved=False,
            )
        out[r.device] = ResolvedDevice(target=target, mig=rec)
    return out
