"""MIG side effects of prepare and unprepare: carve, find, destroy, and MIG mode on and off.

Called by ``kubelet_plugin.prepare.state`` with its lock held; the decisions (which placement, who
owns what) come from the checkpoint and ``dra_driver.core``. Every side effect is followed by
a named fault-injection point (``kubelet_plugin.prepare.faults``), so the crash tests can kill the
process right after it and prove the next start recovers: no leaked instance, no placement
given twice.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

import structlog

from dra_driver.core.checkpoint import MigRecord
from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import MigBackend, MigError, MigErrorCode, MigInstance, can_toggle_mig_mode
from dra_driver.core.mig_publish import DeviceTarget
from dra_driver.core.prepare import ResolvedDevice, carves
from kubelet_plugin.prepare.faults import crash_point

log = structlog.get_logger(__name__)


class MigOps:
    """MIG operations on this node's GPUs through one backend (NVML, or NVML over the simulator)."""

    def __init__(self, backend: MigBackend, gpus: Iterable[GpuInfo]) -> None:
        self.backend = backend
        self._gpus = {g.uuid: g for g in gpus}

    def gpu(self, uuid: str) -> GpuInfo:
        """The GPU with this UUID; KeyError if the node has none."""
        return self._gpus[uuid]

    # -- prepare ------------------------------------------------------------------------------

    def carve(self, target: DeviceTarget) -> ResolvedDevice:
        """Create the GPU instance at exactly the target's placement and its full-size CI."""
        if target.profile is None or target.placement is None:
            raise ValueError(f"device {target.name} is not a MIG placement")
        gpu, profile, placement = target.gpu, target.profile, target.placement
        bound = log.bind(device=target.name, gpu=gpu.uuid)
        mode = self.backend.mode(gpu)
        if not mode.current:
            if not can_toggle_mig_mode(gpu):
                raise MigError(
                    "enable MIG mode", MigErrorCode.RESET_REQUIRED, f"{gpu.product_name} needs a GPU reset to enable MIG"
                )
            self.backend.set_mode(gpu, True)
            bound.info("mig_mode_enabled")
            crash_point("after_mig_mode_enabled")
        gi_id = self.backend.create_gpu_instance(gpu, profile.profile_id, placement.start)
        bound.info("gpu_instance_created", profile=profile.name, start=placement.start, gi_id=gi_id)
        crash_point("after_gi_created")
        inst = self.backend.create_compute_instance(gpu, gi_id)
        bound.info("compute_instance_created", gi_id=gi_id, ci_id=inst.ci_id, mig_uuid=inst.uuid)
        crash_point("after_ci_created")
        return self.resolved(target, inst)

    def resolved(self, target: DeviceTarget, inst: MigInstance) -> ResolvedDevice:
        """A MIG target with its live instance: record, UUID and caps device nodes.

        The record is marked carved for dynamic targets only: static instances are never destroyed.
        """
        if target.profile is None or target.placement is None:
            raise ValueError(f"device {target.name} is not a MIG placement")
        if inst.ci_id is None or not inst.uuid:
            raise MigError("resolve MIG device", MigErrorCode.NOT_FOUND, f"GPU instance {inst.gi_id} has no compute instance")
        record = MigRecord(
            parent_uuid=target.gpu.uuid,
            profile_id=target.profile.profile_id,
            profile=target.profile.name,
            start=target.placement.start,
            size=target.placement.size,
            gi_id=inst.gi_id,
            ci_id=inst.ci_id,
            mig_uuid=inst.uuid,
            carved=target.dynamic,
        )
        caps = self.backend.caps_device_nodes(target.gpu, inst.gi_id, inst.ci_id)
        return ResolvedDevice(target=target, mig=record, caps_nodes=caps)

    def ensure_whole(self, gpu: GpuInfo) -> None:
        """Make a GPU usable whole for a full-GPU claim: MIG mode off (it must hold no instance)."""
        if not self.backend.mode(gpu).current:
            return
        if self.backend.instances(gpu):
            raise MigError("use the full GPU", MigErrorCode.IN_USE, f"GPU {gpu.uuid} has MIG instances")
        if not can_toggle_mig_mode(gpu):
            raise MigError("disable MIG mode", MigErrorCode.RESET_REQUIRED, f"{gpu.product_name} needs a GPU reset")
        self.backend.set_mode(gpu, False)
        log.info("mig_mode_disabled", gpu=gpu.uuid, reason="full GPU prepared")
        crash_point("after_mig_mode_disabled")

    def find(self, rec: MigRecord) -> MigInstance | None:
        """The live instance a record stands for (same GPU, profile and placement; GI id and MIG UUID if known)."""
        gpu = self._gpus.get(rec.parent_uuid)
        if gpu is None:
            return None
        for inst in self.backend.instances(gpu):
            if inst.profile_id == rec.profile_id and inst.placement.start == rec.start and is_instance_of(rec, inst):
                return inst
        return None

    def adopt(self, target: DeviceTarget, *, keep: Collection[MigRecord] = ()) -> ResolvedDevice | None:
        """A recovered claim's instance at exactly the target's placement, made whole; None if absent.

        Used instead of rolling back when a lost checkpoint means a container may already use
        the instance. An instance another claim owns (``keep``) is never adopted. A GPU instance
        left without its compute instance gets one.
        """
        if target.profile is None or target.placement is None:
            raise ValueError(f"device {target.name} is not a MIG placement")
        intent = MigRecord(target.gpu.uuid, target.profile.profile_id, target.profile.name, target.placement.start, 0)
        inst = self.find(intent)
        if inst is None or owned(inst, keep):
            return None
        if inst.ci_id is None:
            inst = self.backend.create_compute_instance(target.gpu, inst.gi_id)
            log.info("compute_instance_created", gi_id=inst.gi_id, ci_id=inst.ci_id, mig_uuid=inst.uuid, reason="adopted")
        log.warning("mig_instance_adopted", device=target.name, gpu=target.gpu.uuid, gi_id=inst.gi_id, mig_uuid=inst.uuid)
        return self.resolved(target, inst)

    def apply_claim(
        self, provisional: Mapping[str, ResolvedDevice], *, keep: Collection[MigRecord], adopt: bool = False
    ) -> dict[str, ResolvedDevice]:
        """Perform a claim's MIG side effects; return its devices resolved for the CDI spec.

        Dynamic placements are carved (``adopt``, a recovered claim: an instance already at the
        allocated placement and not in ``keep`` is used as it is, because a container may be
        using it); a full GPU of a dynamic node gets MIG mode off; a static instance is resolved.
        """
        out = dict(provisional)
        for name, dev in provisional.items():
            t = dev.target
            if carves(t):
                found = self.adopt(t, keep=keep) if adopt else None
                out[name] = found if found is not None else self.carve(t)
            elif t.dynamic and not t.is_mig:
                self.ensure_whole(t.gpu)
            elif t.instance is not None and t.instance.ci_id is not None:
                out[name] = self.resolved(t, t.instance)
        return out

    def release_unused(self, held: Iterable[MigRecord], used: Iterable[MigRecord], *, keep: Collection[MigRecord]) -> None:
        """Destroy the carved instances in ``held`` that neither ``used`` nor ``keep`` names (a recovered claim, re-prepared)."""
        still = [*used, *keep]
        for rec in held:
            if rec.gi_id is not None:
                self.destroy(rec, keep=still)

    def dynamic_instances(self) -> list[MigInstance]:
        """Every MIG instance on the GPUs this node partitions dynamically (their catalog is known)."""
        return [
            inst for gpu in self._gpus.values() if self.backend.catalog(gpu) is not None for inst in self.backend.instances(gpu)
        ]

    @staticmethod
    def record_of(inst: MigInstance) -> MigRecord:
        """A carved-instance record for a live instance (to own one found after a lost checkpoint)."""
        return MigRecord(
            inst.parent_uuid,
            inst.profile_id,
            inst.profile_name,
            inst.placement.start,
            inst.placement.size,
            inst.gi_id,
            inst.ci_id,
            inst.uuid or None,
            carved=True,
        )

    # -- unprepare ----------------------------------------------------------------------------

    def destroy(self, rec: MigRecord, *, keep: Collection[MigRecord] = ()) -> bool:
        """Destroy the instance a record stands for, CIs first; False when there was none.

        ``keep`` holds the carved instances other claims own: never destroyed.
        """
        inst = self.find(rec)
        if inst is None or owned(inst, keep):
            return False
        self.destroy_instance(inst, reason="claim unprepared")
        return True

    def destroy_instance(self, inst: MigInstance, *, reason: str) -> None:
        """Destroy one GPU instance and its compute instances. NOT_FOUND counts as done."""
        gpu = self._gpus[inst.parent_uuid]
        bound = log.bind(gpu=gpu.uuid, gi_id=inst.gi_id, profile=inst.profile_name, start=inst.placement.start)
        try:
            self.backend.destroy_compute_instances(gpu, inst.gi_id)
            crash_point("after_unprepare_ci_destroyed")
            self.backend.destroy_gpu_instance(gpu, inst.gi_id)
        except MigError as err:
            if err.code is not MigErrorCode.NOT_FOUND:
                raise
        bound.info("mig_instance_destroyed", mig_uuid=inst.uuid, reason=reason)
        crash_point("after_unprepare_gi_destroyed")

    def release_mode(self, gpu: GpuInfo) -> None:
        """Turn MIG mode off when nothing is carved and the GPU allows it (Hopper and newer)."""
        if not can_toggle_mig_mode(gpu) or not self.backend.mode(gpu).current or self.backend.instances(gpu):
            return
        self.backend.set_mode(gpu, False)
        log.info("mig_mode_disabled", gpu=gpu.uuid, reason="no MIG instance left")
        crash_point("after_unprepare_mig_mode_disabled")

    # -- start-up -----------------------------------------------------------------------------

    def sweep(self, keep: Collection[MigRecord]) -> list[MigInstance]:
        """Destroy every instance not owned by a completed claim (``keep``: their carved instances).

        Returns what was destroyed. An instance that cannot be destroyed (in use) is logged and
        kept; the next start tries again.
        """
        gone: list[MigInstance] = []
        for gpu in self._gpus.values():
            if self.backend.catalog(gpu) is None:
                continue
            for inst in self.backend.instances(gpu):
                if owned(inst, keep):
                    continue
                try:
                    self.destroy_instance(inst, reason="not owned by a prepared claim")
                    gone.append(inst)
                except MigError as err:
                    log.error("mig_instance_not_destroyed", gpu=gpu.uuid, gi_id=inst.gi_id, error=str(err))
            try:
                self.release_mode(gpu)
            except MigError as err:
                log.error("mig_mode_not_released", gpu=gpu.uuid, error=str(err))
        return gone


def is_instance_of(rec: MigRecord, inst: MigInstance) -> bool:
    """True when a live instance can be the one a record names: same GPU, GI id and MIG UUID where known.

    NVML reuses GI ids once an instance is destroyed, but a MIG UUID is new on every creation, so
    a record of a destroyed instance (say, from a checkpoint generation older than its destroy)
    never names the instance that reused its GI id. A GPU instance whose compute instance is gone
    has no UUID; it matches by GI id.
    """
    if rec.parent_uuid != inst.parent_uuid or (rec.gi_id is not None and rec.gi_id != inst.gi_id):
        return False
    return not (rec.mig_uuid and inst.uuid and rec.mig_uuid != inst.uuid)


def owned(inst: MigInstance, records: Iterable[MigRecord]) -> bool:
    """True when one of the carved-instance ``records`` (each with its GI id) names ``inst``."""
    return any(r.gi_id is not None and is_instance_of(r, inst) for r in records)
