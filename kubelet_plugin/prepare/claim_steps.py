"""One claim's prepare steps: checked before the lock, then planned, carried out and checkpointed under it.

Called by ``kubelet_plugin.prepare.state.DeviceState``: ``check`` in the pre-check of
NodePrepareResources (outside the node-wide lock), ``prepare`` for each claim of a batch and
``rollback`` for a claim's undo (prepare, unprepare and the GC pass), the lock held. The claim
is decoded and its configs resolved once, in ``check``; every later step uses that
``CheckedClaim``. Deciding is pure (``dra_driver.core.prepare``); the side effects are
``kubelet_plugin.prepare.mig_ops`` and ``sharing_ops``.

Prepare's order survives a kill -9 at any point:

1. ``PrepareStarted`` is checkpointed, with the MIG instances it is about to carve, before
   any side effect;
2. dynamic MIG: MIG mode on if needed, the GPU instance at exactly the allocated placement,
   its full-size compute instance; sharing: MPS daemons and time slices;
3. the CDI spec is written atomically;
4. ``PrepareCompleted`` with the answer (and the carved instances' ids) is checkpointed.

A repeat for a completed claim returns the stored answer and re-creates a missing CDI file
(and, should its MIG instance have vanished, carves it again); a repeat for a started claim
rolls the partial work back — whatever of its intended instances exists is destroyed — and
prepares afresh, unless the claim was ``recovered`` after a lost checkpoint: then what exists
is adopted, never destroyed. A rollback (and unprepare) undoes sharing, destroys compute then
GPU instance, turns MIG mode off when the GPU holds nothing and allows it, removes the CDI
file, then forgets the claim.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from dra_driver.core.checkpoint import Checkpoint, ClaimEntry, ClaimState
from dra_driver.core.claims import ClaimAllocation, ClaimError, parse_claim
from dra_driver.core.config import ConfigError, DeviceConfig, resolve_configs
from dra_driver.core.driver_files import DriverFiles
from dra_driver.core.mig import MigError
from dra_driver.core.mig_publish import DeviceTarget
from dra_driver.core.prepare import ClaimPlan, ResolvedDevice, carves, mig_intent, plan_claim, provisional_devices
from dra_driver.files.cdi_store import CdiStore
from dra_driver.files.checkpoint_store import CheckpointStore
from kubelet_plugin.prepare.faults import crash_point
from kubelet_plugin.prepare.mig_ops import MigOps
from kubelet_plugin.prepare.requests import ClaimRef, Outcome
from kubelet_plugin.prepare.sharing_ops import SharingOps

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class CheckedClaim:
    """A claim as the pre-check left it: decoded with its configs resolved, or why it is refused.

    ``claim`` is None exactly when ``rejected`` says why (a claim already completed is still
    answered from the checkpoint).
    """

    ref: ClaimRef
    claim: ClaimAllocation | None = None
    configs: Mapping[str, DeviceConfig] = field(default_factory=dict)
    rejected: str = ""


@dataclass(frozen=True, slots=True)
class SpecInputs:
    """What every claim's CDI spec is built from on this node (``plan_claim``'s node-wide inputs)."""

    device_nodes: bool
    device_node_host: str = ""
    toolkit_devices: frozenset[str] = frozenset()
    driver_files: DriverFiles | None = None
    """The driver's user space, mounted where the toolkit's spec is not used."""
    driver_missing: str = ""
    """Why a device the toolkit does not list is refused ("": not refused)."""
    mps_root: str = ""


class ClaimSteps:
    """Prepares one claim at a time against a checkpoint, and undoes one; the caller holds the lock."""

    def __init__(
        self,
        *,
        driver: str,
        pool: str,
        targets: Mapping[str, DeviceTarget],
        mig: MigOps | None,
        sharing: SharingOps,
        cdi: CdiStore,
        store: CheckpointStore,
        load: Callable[[], Checkpoint],
        spec: SpecInputs,
    ) -> None:
        self.driver = driver
        self.pool = pool
        self.targets = targets
        self._mig = mig
        self._sharing = sharing
        self._cdi = cdi
        self._store = store
        self._load = load
        self._spec = spec
        self.unsaved: dict[str, ClaimEntry] = {}
        """Claims of the batch now running recorded PrepareCompleted in memory only (lock held)."""

    def save(self, cp: Checkpoint) -> None:
        """Save ``cp``; it holds every claim prepared in memory so far, so none is left unsaved."""
        self._store.save(cp)
        self.unsaved = {}

    def check(self, ref: ClaimRef, obj: dict[str, Any]) -> CheckedClaim:
        """Decode the claim and resolve its configs, outside the lock; what prepare uses, or the error."""
        try:
            claim = parse_claim(
                obj,
                uid=ref.uid,
                driver=self.driver,
                pool=self.pool,
                known_devices=set(self.targets),
                namespace=ref.namespace,
                name=ref.name,
            )
            mig = frozenset(r.device for r in claim.results if self.targets[r.device].is_mig)
            configs = resolve_configs(self.driver, claim.results, claim.config, mig_devices=mig)
        except (ClaimError, ConfigError) as err:
            return CheckedClaim(ref, rejected=str(err))
        except Exception as err:  # noqa: BLE001 - a bug in decoding is this claim's error, not the call's
            # no traceback: rendering one for a deeply nested input costs more than the input
            log.error("claim_decode_crashed", claim_uid=ref.uid, error=f"{type(err).__name__}: {str(err)[:200]}")
            return CheckedClaim(ref, rejected=f"internal error decoding claim {ref.namespace}/{ref.name}: {type(err).__name__}")
        return CheckedClaim(ref, claim, configs)

    def prepare(self, cp: Checkpoint, checked: CheckedClaim) -> tuple[Checkpoint, Outcome]:
        """One claim prepared, with an unexpected exception rolling back this claim only."""
        ref = checked.ref
        try:
            return self._prepare_one(cp, checked)
        except Exception as err:
            log.exception("prepare_crashed", claim_uid=ref.uid, namespace=ref.namespace, claim=ref.name)
            cp = self._load().with_claims(self.unsaved)  # what was saved before the failure, and what is to be
            entry = cp.claims.get(ref.uid)
            if entry is not None and entry.state is ClaimState.PREPARE_STARTED and not entry.recovered:
                try:
                    cp = self.rollback(cp, ref.uid)
                except Exception as rb_err:  # noqa: BLE001 - stays PrepareStarted: the next call retries
                    log.error("rollback_failed", claim_uid=ref.uid, error=str(rb_err))
            return cp, Outcome(error=f"internal error preparing claim {ref.namespace}/{ref.name}: {type(err).__name__}: {err}")

    def _prepare_one(self, cp: Checkpoint, checked: CheckedClaim) -> tuple[Checkpoint, Outcome]:
        ref = checked.ref
        bound = log.bind(claim_uid=ref.uid, namespace=ref.namespace, claim=ref.name)
        entry = cp.claims.get(ref.uid)
        if entry is not None and entry.state is ClaimState.PREPARE_COMPLETED:
            answer = self._answer_again(ref.uid, entry, bound)
            if answer is not None:
                return cp, answer
        claim = checked.claim
        if claim is None:
            bound.warning("claim_rejected", error=checked.rejected)
            return cp, Outcome(error=checked.rejected)
        recovered = entry is not None and entry.recovered
        if entry is not None and not recovered:  # PrepareStarted (a previous attempt died part-way), or vanished MIG
            try:
                cp = self.rollback(cp, ref.uid)
            except (MigError, OSError) as err:
                bound.error("rollback_failed", error=str(err))
                return cp, Outcome(error=f"rolling back an earlier attempt of claim {ref.namespace}/{ref.name}: {err}")
            bound.warning("partial_prepare_rolled_back")
        try:
            provisional = provisional_devices(claim, self.targets, mig_backend=self._mig is not None)
            first_plan = self._plan(claim, provisional, cp, configs=checked.configs)  # every check, before any side effect
            self._sharing.check_possible(first_plan)
        except (ClaimError, ConfigError) as err:
            bound.warning("claim_rejected", error=str(err))
            return cp, Outcome(error=str(err))
        intents = tuple(mig_intent(t) for t in dict.fromkeys(d.target for d in provisional.values()) if carves(t))
        started = ClaimEntry(
            ClaimState.PREPARE_STARTED,
            ref.namespace,
            ref.name,
            mig_intents=intents + (entry.mig_intents if entry is not None and recovered else ()),
            time_slices=first_plan.time_slices,
            mps_daemons=first_plan.mps_daemons,
            recovered=recovered,
        )
        return self._carry_out(cp, checked, claim, provisional, started=started, bound=bound)

    def _carry_out(
        self,
        cp: Checkpoint,
        checked: CheckedClaim,
        claim: ClaimAllocation,
        provisional: dict[str, ResolvedDevice],
        *,
        started: ClaimEntry,
        bound: Any,
    ) -> tuple[Checkpoint, Outcome]:
        """A checked claim's side effects, CDI spec and completed entry; rolled back on failure (not if recovered).

        A claim that carves nothing and shares nothing has one side effect, its CDI spec: a kill
        before its completed entry is saved leaves a spec no claim owns, which the restart removes
        (``kubelet_plugin.prepare.recovery``). Its started entry protects nothing and is not saved,
        and its completed entry is saved with the batch (``DeviceState``), before any answer.
        """
        ref = checked.ref
        recovered = started.recovered
        effects = bool(started.mig_intents or started.time_slices or started.mps_daemons or recovered)
        cp = cp.with_claim(ref.uid, started)
        if effects:
            self.save(cp)
        crash_point("after_prepare_started")
        try:
            resolved = (
                self._mig.apply_claim(provisional, keep=cp.carved_by_others(ref.uid), adopt=recovered)
                if self._mig is not None
                else dict(provisional)
            )
            plan = self._plan(claim, resolved, cp, configs=checked.configs)
            self._apply_sharing(plan)
            self._cdi.write(ref.uid, plan.cdi_spec)
            crash_point("after_cdi_written")
            done = ClaimEntry(
                ClaimState.PREPARE_COMPLETED,
                ref.namespace,
                ref.name,
                plan.devices,
                plan.cdi_spec,
                time_slices=plan.time_slices,
                mps_daemons=plan.mps_daemons,
            )
            if recovered and self._mig is not None:  # what it held and no longer uses goes
                used = [d.mig for d in done.devices if d.mig is not None and d.mig.gi_id is not None]
                self._mig.release_unused(started.mig_intents, used, keep=cp.carved_by_others(ref.uid))
            cp = cp.with_claim(ref.uid, done)
            if effects:
                self.save(cp)
                crash_point("after_prepare_completed")
            else:
                self.unsaved[ref.uid] = done
        except (OSError, MigError, ClaimError, ConfigError) as err:
            bound.error("prepare_failed", error=str(err))
            if not recovered:  # a recovered claim keeps what it holds: a container may use it
                try:
                    cp = self.rollback(cp, ref.uid)
                except (MigError, OSError) as rb_err:
                    bound.error("rollback_failed", error=str(rb_err))
            return cp, Outcome(error=f"preparing claim {ref.namespace}/{ref.name}: {err}")
        for d in plan.devices:
            bound.info("device_prepared", device=d.device_name, cdi_device_ids=list(d.cdi_device_ids))
        return cp, Outcome(devices=plan.devices, cdi_spec=plan.cdi_spec)

    def _answer_again(self, uid: str, entry: ClaimEntry, bound: Any) -> Outcome | None:
        """A completed claim's stored answer, its CDI file restored; None when a MIG instance vanished."""
        missing = [r for r in entry.mig_records() if self._mig is not None and self._mig.find(r) is None]
        if missing:
            bound.warning("mig_instance_vanished", instances=[f"{r.profile}@{r.start}" for r in missing])
            return None
        if entry.cdi_spec is not None and self._cdi.read(uid) != entry.cdi_spec:
            self._cdi.write(uid, dict(entry.cdi_spec))
            bound.info("cdi_spec_recreated")
        bound.info("claim_already_prepared", devices=[d.device_name for d in entry.devices])
        return Outcome(devices=entry.devices, cdi_spec=entry.cdi_spec)

    def _apply_sharing(self, plan: ClaimPlan) -> None:
        self._sharing.apply(plan)

    def _plan(
        self, claim: ClaimAllocation, devices: dict[str, ResolvedDevice], cp: Checkpoint, *, configs: Mapping[str, DeviceConfig]
    ) -> ClaimPlan:
        spec = self._spec
        return plan_claim(
            driver=self.driver,
            claim=claim,
            configs=configs,
            devices=devices,
            device_nodes=spec.device_nodes,
            device_node_host=spec.device_node_host,
            toolkit_devices=spec.toolkit_devices,
            driver_files=spec.driver_files,
            driver_missing=spec.driver_missing,
            prepared=cp.claims,
            node_targets=self.targets,
            mps_root=spec.mps_root,
        )

    def rollback(self, cp: Checkpoint, uid: str, *, save: bool = True) -> Checkpoint:
        """Undo whatever a claim's preparation did — sharing, MIG instances, MIG mode, CDI file — then forget it.

        Raises MigError (the claim stays checkpointed) when an instance cannot be destroyed,
        e.g. a process still uses it; the kubelet retries. ``save=False``: the caller saves (a batch
        of unprepares, one save); until then the claim is still on disk, and a kill makes the
        kubelet's retry undo it again (every step finds its work done).
        """
        entry = cp.claims.get(uid)
        if entry is not None:
            self._sharing.undo(cp, uid, entry)
        if entry is not None and self._mig is not None:
            keep = cp.carved_by_others(uid)
            touched: dict[str, None] = {}
            for rec in entry.mig_records():
                self._mig.destroy(rec, keep=keep)
                touched[rec.parent_uuid] = None
            for parent in touched:
                self._mig.release_mode(self._mig.gpu(parent))
        self._cdi.remove(uid)
        crash_point("after_unprepare_cdi_removed")
        self.unsaved.pop(uid, None)
        cp = cp.without_claim(uid)
        if save:
            self.save(cp)
        return cp
