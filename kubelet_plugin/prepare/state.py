"""Prepare and unprepare: checkpoint → plan → side effects → CDI → checkpoint, serialized across processes.

Called by the DRA servicers (``kubelet_plugin.servicer``) for NodePrepareResources and
NodeUnprepareResources, and by the plugin's main loop for start-up and the GC pass. Each claim
gets its own outcome: a bad claim is that claim's error string and changes nothing; a good one
is answered; an unexpected exception in one claim rolls back that claim only. Deciding is pure
(``dra_driver.core.prepare``); the side effects live beside this module, one concern each:

* ``kubelet_plugin.prepare.requests``: the request's refs checked and claims read under one deadline,
  before the node-wide lock (``dra_driver.files.lock.NodeLock``) is taken;
* ``kubelet_plugin.prepare.recovery``: the checkpoint loaded for each call and at start-up, rebuilt
  without destroying anything when it cannot be trusted;
* ``kubelet_plugin.prepare.mig_ops`` and ``kubelet_plugin.prepare.sharing_ops``: MIG instances and MIG mode,
  MPS daemons and time slices;
* ``kubelet_plugin.prepare.gc``: which claims whose ResourceClaim is gone to unprepare.

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
is adopted, never destroyed. Unprepare undoes sharing, destroys compute then GPU instance, turns
MIG mode off when the GPU holds nothing and allows it, removes the CDI file, then forgets the
claim.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from dra_driver.core.checkpoint import Checkpoint, CheckpointTooNew, ClaimEntry, ClaimState
from dra_driver.core.claims import ClaimAllocation, ClaimError, parse_claim
from dra_driver.core.config import ConfigError, resolve_configs
from dra_driver.core.driver_files import DriverFiles
from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import MigError, MigStrategy
from dra_driver.core.mig_publish import DeviceTarget, Publication, full_gpu_states, publish_node
from dra_driver.core.prepare import ClaimPlan, ResolvedDevice, carves, mig_intent, plan_claim, provisional_devices
from dra_driver.core.sharing import SharingBackend
from dra_driver.files.cdi_store import CdiStore
from dra_driver.files.checkpoint_store import CheckpointStore, Notice
from dra_driver.files.lock import LockTimeout, NodeLock
from kubelet_plugin.prepare import gc
from kubelet_plugin.prepare.faults import crash_point
from kubelet_plugin.prepare.group_commit import GroupCommit
from kubelet_plugin.prepare.mig_ops import MigOps
from kubelet_plugin.prepare.recovery import Recovery, StartReport
from kubelet_plugin.prepare.requests import LOOKUP_BUDGET_S, ClaimLookups, ClaimReader, ClaimRef, Outcome, check_refs
from kubelet_plugin.prepare.sharing_ops import SharingOps

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class _PrepareCall:
    """One NodePrepareResources call's claims (ref, ResourceClaim JSON, precheck error) and its answers."""

    claims: list[tuple[ClaimRef, dict[str, Any], str]]
    out: dict[str, Outcome]


@dataclass(slots=True)
class _UnprepareCall:
    """One NodeUnprepareResources call's claims and its answers."""

    refs: list[ClaimRef]
    out: dict[str, str]


class DeviceState:
    """The node's prepared claims, kept on disk behind a cross-process lock."""

    def __init__(
        self,
        *,
        driver: str,
        node_name: str,
        gpus: list[GpuInfo] | None = None,
        publication: Publication | None = None,
        mig: MigOps | None = None,
        sharing: SharingBackend | None = None,
        mps_root: Path | None = None,
        claims: ClaimReader,
        cdi: CdiStore,
        checkpoints: CheckpointStore,
        lock_path: Path,
        device_nodes: bool,
        device_node_host: str = "",
        toolkit_devices: frozenset[str] = frozenset(),
        driver_files: DriverFiles | None = None,
        driver_missing: str = "",
        notify: Callable[[Notice], None] | None = None,  # None for tests: notices are only logged
        lock_timeout_s: float = 10.0,
    ) -> None:
        self.driver = driver
        self.pool = node_name
        if publication is None:
            publication = publish_node(full_gpu_states(gpus or []), MigStrategy.NONE)
        self.targets: Mapping[str, DeviceTarget] = publication.targets
        self._mig = mig
        self._sharing = SharingOps(sharing)
        self._mps_root = mps_root or checkpoints.dir / "mps"
        self._gone: set[str] = set()  # claims found gone by the previous garbage collection pass
        self._claims = claims
        self._cdi = cdi
        self._store = checkpoints
        self._device_nodes = device_nodes
        self._device_node_host = device_node_host
        self._toolkit = toolkit_devices
        self._driver_files = driver_files  # the driver's user space, mounted where the toolkit's spec is not used
        self._driver_missing = driver_missing  # why a device the toolkit does not list is refused ("": not refused)
        self._lock = NodeLock(lock_path)
        self._lock_timeout = lock_timeout_s
        self._lookups = ClaimLookups(claims)
        self._recovery = Recovery(cdi=cdi, store=checkpoints, mig=mig, sharing=self._sharing, targets=self.targets, notify=notify)
        self._refusal: str | None = None
        self.lookup_budget_s = LOOKUP_BUDGET_S
        self._prepares: GroupCommit[_PrepareCall] = GroupCommit(self._locked)
        self._unprepares: GroupCommit[_UnprepareCall] = GroupCommit(self._locked)
        self._unsaved: dict[str, ClaimEntry] = {}
        """Claims of the batch now running recorded PrepareCompleted in memory only (lock held)."""

    @property
    def refusal(self) -> str | None:
        """Why this plugin refuses every call (a checkpoint from a newer dra-gpu), or None."""
        return self._refusal

    def startup(self) -> StartReport:
        """Load the checkpoint once at start and recover (``kubelet_plugin.prepare.recovery``); say what it found.

        Never raises for any checkpoint state (no crash loop): a newer binary's checkpoint puts
        the plugin in refusing mode; an untrusted one is rebuilt without destroying anything.
        """
        with self._locked():  # another plugin pod (a rolling update) writes its temp files under it
            self._cdi.ensure_root()
            self._store.ensure_dir()
            try:
                return self._recovery.at_start()
            except CheckpointTooNew as err:
                self._refuse(str(err))
                return StartReport(("CheckpointTooNew",))

    def _refuse(self, why: str) -> None:
        self._refusal = f"this node's checkpoint cannot be used: {why}"
        self._recovery.tell(Notice("CheckpointTooNew", self._refusal))

    def _load(self) -> Checkpoint:
        """The checkpoint for a call (lock held); refusing mode when it is too new."""
        try:
            return self._recovery.load()
        except CheckpointTooNew as err:
            self._refuse(str(err))
            raise

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock.held(self._lock_timeout):
            yield

    # -- prepare ------------------------------------------------------------------------------

    def prepare(self, refs: list[ClaimRef]) -> dict[str, Outcome]:
        """Prepare every claim; the result has an entry for each requested claim UID."""
        out: dict[str, Outcome] = {}
        if self._refusal is not None:
            return {r.uid: Outcome(error=self._refusal) for r in refs}
        valid = check_refs(refs, out, lambda msg: Outcome(error=msg))
        fetched = self._lookups.fetch(valid, out, self.lookup_budget_s)
        pending = [(r, fetched[r.uid], self._precheck(r, fetched[r.uid])) for r in valid if r.uid in fetched]
        if not pending:
            return out
        call = _PrepareCall(pending, out)
        try:
            self._prepares.run(call, self._prepare_batch)
        except (LockTimeout, OSError, CheckpointTooNew) as err:
            for ref, _, _ in pending:
                out.setdefault(ref.uid, Outcome(error=f"preparing: {err}"))
        return out

    def _prepare_batch(self, calls: list[_PrepareCall]) -> None:
        """Every queued call's claims, in order, then one save for what is not saved yet (lock held).

        Claims with no side effect but their CDI spec are recorded PrepareCompleted in memory and
        saved together at the end; none is answered before that save. A failed final save fails
        exactly those claims (their specs are removed).
        """
        self._unsaved = {}
        try:
            cp = self._load()
            for call in calls:
                for ref, obj, rejected in call.claims:
                    if ref.uid in call.out:
                        continue
                    cp, call.out[ref.uid] = self._prepare_isolated(cp, ref, obj, rejected)
            if self._unsaved:
                self._save(cp)
                crash_point("after_prepare_completed")
        except (LockTimeout, OSError, CheckpointTooNew) as err:
            for call in calls:
                for ref, _, _ in call.claims:
                    if ref.uid in self._unsaved:
                        self._cdi.remove(ref.uid)
                        why = f"preparing claim {ref.namespace}/{ref.name}: saving the checkpoint: {err}"
                        call.out[ref.uid] = Outcome(error=why)
                    call.out.setdefault(ref.uid, Outcome(error=f"preparing: {err}"))
        finally:
            self._unsaved = {}

    def _save(self, cp: Checkpoint) -> None:
        """Save ``cp``; it holds every claim prepared in memory so far, so none is left unsaved."""
        self._store.save(cp)
        self._unsaved = {}

    def _precheck(self, ref: ClaimRef, obj: dict[str, Any]) -> str:
        """Decode the claim and validate its configs outside the lock; the error, or ""."""
        try:
            claim = self._parse(ref, obj)
            mig = frozenset(r.device for r in claim.results if self.targets[r.device].is_mig)
            resolve_configs(self.driver, claim.results, claim.config, mig_devices=mig)
        except (ClaimError, ConfigError) as err:
            return str(err)
        except Exception as err:  # noqa: BLE001 - a bug in decoding is this claim's error, not the call's
            # no traceback: rendering one for a deeply nested input costs more than the input
            log.error("claim_decode_crashed", claim_uid=ref.uid, error=f"{type(err).__name__}: {str(err)[:200]}")
            return f"internal error decoding claim {ref.namespace}/{ref.name}: {type(err).__name__}"
        return ""

    def _parse(self, ref: ClaimRef, obj: dict[str, Any]) -> ClaimAllocation:
        return parse_claim(
            obj,
            uid=ref.uid,
            driver=self.driver,
            pool=self.pool,
            known_devices=set(self.targets),
            namespace=ref.namespace,
            name=ref.name,
        )

    def _prepare_isolated(self, cp: Checkpoint, ref: ClaimRef, obj: dict[str, Any], rejected: str) -> tuple[Checkpoint, Outcome]:
        """``_prepare_one``, with an unexpected exception rolling back this claim only."""
        try:
            return self._prepare_one(cp, ref, obj, rejected)
        except Exception as err:
            log.exception("prepare_crashed", claim_uid=ref.uid, namespace=ref.namespace, claim=ref.name)
            cp = self._load().with_claims(self._unsaved)  # what was saved before the failure, and what is to be
            entry = cp.claims.get(ref.uid)
            if entry is not None and entry.state is ClaimState.PREPARE_STARTED and not entry.recovered:
                try:
                    cp = self._rollback(cp, ref.uid)
                except Exception as rb_err:  # noqa: BLE001 - stays PrepareStarted: the next call retries
                    log.error("rollback_failed", claim_uid=ref.uid, error=str(rb_err))
            return cp, Outcome(error=f"internal error preparing claim {ref.namespace}/{ref.name}: {type(err).__name__}: {err}")

    def _prepare_one(self, cp: Checkpoint, ref: ClaimRef, obj: dict[str, Any], rejected: str = "") -> tuple[Checkpoint, Outcome]:
        bound = log.bind(claim_uid=ref.uid, namespace=ref.namespace, claim=ref.name)
        entry = cp.claims.get(ref.uid)
        if entry is not None and entry.state is ClaimState.PREPARE_COMPLETED:
            answer = self._answer_again(ref.uid, entry, bound)
            if answer is not None:
                return cp, answer
        if rejected:
            bound.warning("claim_rejected", error=rejected)
            return cp, Outcome(error=rejected)
        recovered = entry is not None and entry.recovered
        if entry is not None and not recovered:  # PrepareStarted (a previous attempt died part-way), or vanished MIG
            try:
                cp = self._rollback(cp, ref.uid)
            except (MigError, OSError) as err:
                bound.error("rollback_failed", error=str(err))
                return cp, Outcome(error=f"rolling back an earlier attempt of claim {ref.namespace}/{ref.name}: {err}")
            bound.warning("partial_prepare_rolled_back")
        try:
            claim = self._parse(ref, obj)
            provisional = provisional_devices(claim, self.targets, mig_backend=self._mig is not None)
            first_plan = self._plan(claim, provisional, cp)  # every check, before any side effect
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
        return self._carry_out(cp, ref, claim, provisional, started=started, bound=bound)

    def _carry_out(
        self,
        cp: Checkpoint,
        ref: ClaimRef,
        claim: ClaimAllocation,
        provisional: dict[str, ResolvedDevice],
        *,
        started: ClaimEntry,
        bound: Any,
    ) -> tuple[Checkpoint, Outcome]:
        """A checked claim's side effects, CDI spec and completed entry; rolled back on failure (not if recovered).

        A claim that carves nothing and shares nothing has one side effect, its CDI spec: a kill
        before its completed entry is saved leaves a spec no claim owns, which the restart removes
        (``kubelet_plugin.prepare.recovery``). Its started entry protects nothing and is not saved, and its
        completed entry is saved with the batch (``_prepare_batch``), before any answer.
        """
        recovered = started.recovered
        effects = bool(started.mig_intents or started.time_slices or started.mps_daemons or recovered)
        cp = cp.with_claim(ref.uid, started)
        if effects:
            self._save(cp)
        crash_point("after_prepare_started")
        try:
            resolved = (
                self._mig.apply_claim(provisional, keep=cp.carved_by_others(ref.uid), adopt=recovered)
                if self._mig is not None
                else dict(provisional)
            )
            plan = self._plan(claim, resolved, cp)
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
                self._save(cp)
                crash_point("after_prepare_completed")
            else:
                self._unsaved[ref.uid] = done
        except (OSError, MigError, ClaimError, ConfigError) as err:
            bound.error("prepare_failed", error=str(err))
            if not recovered:  # a recovered claim keeps what it holds: a container may use it
                try:
                    cp = self._rollback(cp, ref.uid)
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

    def _plan(self, claim: ClaimAllocation, devices: dict[str, ResolvedDevice], cp: Checkpoint) -> ClaimPlan:
        return plan_claim(
            driver=self.driver,
            claim=claim,
            devices=devices,
            device_nodes=self._device_nodes,
            device_node_host=self._device_node_host,
            toolkit_devices=self._toolkit,
            driver_files=self._driver_files,
            driver_missing=self._driver_missing,
            prepared=cp.claims,
            node_targets=self.targets,
            mps_root=str(self._mps_root),
        )

    def _rollback(self, cp: Checkpoint, uid: str, *, save: bool = True) -> Checkpoint:
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
        self._unsaved.pop(uid, None)
        cp = cp.without_claim(uid)
        if save:
            self._save(cp)
        return cp

    # -- unprepare ----------------------------------------------------------------------------

    def unprepare(self, refs: list[ClaimRef]) -> dict[str, str]:
        """Unprepare every claim; value is the claim's error ("" on success). Unknown claims succeed."""
        out: dict[str, str] = {}
        if self._refusal is not None:
            return {r.uid: self._refusal for r in refs}
        valid = check_refs(refs, out, str, names=False)
        if not valid:
            return out
        try:
            self._unprepares.run(_UnprepareCall(valid, out), self._unprepare_batch)
        except (LockTimeout, OSError, CheckpointTooNew) as err:
            for ref in valid:
                out.setdefault(ref.uid, f"unpreparing: {err}")
        return out

    def _unprepare_batch(self, calls: list[_UnprepareCall]) -> None:
        """Every queued call's claims undone, then one save; answered after it (lock held)."""
        forgotten: list[tuple[_UnprepareCall, ClaimRef]] = []
        try:
            cp = saved = self._load()
            for call in calls:
                for ref in call.refs:
                    try:
                        if ref.uid in cp.claims:
                            cp = self._rollback(cp, ref.uid, save=False)
                            forgotten.append((call, ref))
                            log.info("claim_unprepared", claim_uid=ref.uid, namespace=ref.namespace, claim=ref.name)
                        else:
                            self._cdi.remove(ref.uid)  # a spec nobody recorded is removed all the same
                        call.out[ref.uid] = ""
                    except (OSError, MigError) as err:
                        log.error("unprepare_failed", claim_uid=ref.uid, error=str(err))
                        call.out[ref.uid] = f"unpreparing claim {ref.namespace}/{ref.name}: {err}"
                    except Exception as err:  # one claim's bug never fails the others; it stays recorded
                        log.exception("unprepare_crashed", claim_uid=ref.uid)
                        call.out[ref.uid] = (
                            f"internal error unpreparing claim {ref.namespace}/{ref.name}: {type(err).__name__}: {err}"
                        )
            if cp is not saved:
                self._save(cp)
        except (LockTimeout, OSError, CheckpointTooNew) as err:
            for call, ref in forgotten:  # undone, but still recorded: the kubelet's retry finishes it
                call.out[ref.uid] = f"unpreparing claim {ref.namespace}/{ref.name}: saving the checkpoint: {err}"
            for call in calls:
                for ref in call.refs:
                    call.out.setdefault(ref.uid, f"unpreparing: {err}")

    def collect_garbage(self) -> list[str]:
        """Unprepare claims whose ResourceClaim is gone (``kubelet_plugin.prepare.gc`` decides); the UIDs unprepared.

        Lookups happen outside the lock; a failed lookup decides nothing.
        """
        if self._refusal is not None:
            return []
        with self._locked():
            entries = dict(self._load().claims)
        gone = gc.gone_claims(entries, self._claims)
        done: list[str] = []
        with self._locked():
            cp = self._load()
            for uid, current in gc.due(cp, gone, self._gone):
                try:
                    cp = self._rollback(cp, uid)
                    done.append(uid)
                    log.warning(
                        "claim_gone_unprepared",
                        claim_uid=uid,
                        namespace=current.namespace,
                        claim=current.name,
                        state=current.state.value,
                    )
                except (MigError, OSError) as err:
                    log.error("gc_unprepare_failed", claim_uid=uid, error=str(err))
        self._gone = gone - set(done)
        return done

    def close(self) -> None:
        """Make the last checkpoint write durable now, and every later one as it is made (shutdown)."""
        self._store.close()

    def prepared_claims(self) -> Mapping[str, ClaimEntry]:
        """The checkpoint's claims (for status and tests)."""
        with self._locked():
            return self._store.load().checkpoint.claims

    def prepared_snapshot(self) -> Mapping[str, ClaimEntry]:
        """The claims as this process last saved or read them, without the lock or any I/O (the metrics' scrape).

        Unlike ``prepared_claims`` it never waits for a call in flight, and it is one save behind at worst.
        """
        latest = self._store.latest()
        return latest.claims if latest is not None else {}
