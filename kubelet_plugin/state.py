"""Prepare and unprepare: checkpoint → plan → CDI → checkpoint, serialized across processes.

Called by the DRA servicers (``kubelet_plugin.servicer``) for NodePrepareResources and
NodeUnprepareResources. Each claim gets its own outcome: a bad claim is that claim's error
string and changes nothing; a good one is answered. Deciding is pure
(``dra_driver.core.prepare.plan_claim``); this module does only the side effects, in an
order that survives a kill -9 at any point:

1. ``PrepareStarted`` is checkpointed, with the MIG instances it is about to carve, before
   any side effect;
2. dynamic MIG: MIG mode on if needed, the GPU instance at exactly the allocated placement,
   its full-size compute instance (``kubelet_plugin.mig_ops``);
3. the CDI spec is written atomically;
4. ``PrepareCompleted`` with the answer (and the carved instances' ids) is checkpointed.

A repeat for a completed claim returns the stored answer and re-creates a missing CDI file
(and, should its MIG instance have vanished, carves it again); a repeat for a started claim
rolls the partial work back — whatever of its intended instances exists is destroyed — and
prepares afresh. Unprepare destroys compute then GPU instance, turns MIG mode off when the
GPU holds nothing and allows it, removes the CDI file, then forgets the claim. At start-up
(dynamic MIG) every instance not owned by a completed claim is destroyed; a periodic pass
(``collect_garbage``) unprepares claims whose ResourceClaim is gone.

Outside input is bounded and isolated: the request's UIDs and names are checked (a UID twice
in one request is an error for that UID), claims are read concurrently under one deadline
(``LOOKUP_BUDGET_S``, below the kubelet's 45 s) with a clear error for each claim not read in
time, and claims are decoded and their configs validated before the node-wide lock is taken.
Every claim gets its own answer: an unexpected exception in one claim rolls back that claim
only.

Fail closed when the checkpoint cannot be trusted (the newest generation is torn, deleted,
unreadable; see ``dra_driver.files.checkpoint_store``): nothing is destroyed on its word.
Claims are rebuilt from what remains — the previous generation, every CDI spec on disk (a
spec names the MIG devices it hands out), the MIG instances — and marked ``recovered``: a
retry adopts what exists instead of rolling it back, the start-up sweep is skipped, and only
a claim's own unprepare (or the GC once its ResourceClaim is gone) removes its resources. An
Event says what was rebuilt and which MIG instances no claim is known to own (kept). A
checkpoint written by a newer dra-gpu makes the plugin refuse every call with a clear error
instead of starting empty.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import structlog

from dra_driver.core.checkpoint import Checkpoint, CheckpointTooNew, ClaimEntry, ClaimState, MigRecord, PreparedDevice
from dra_driver.core.claims import ClaimAllocation, ClaimError, parse_claim, validate_claim_ref, validate_claim_uid
from dra_driver.core.config import ConfigError, TimeSliceInterval, resolve_configs
from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import MigError, MigInstance, MigStrategy
from dra_driver.core.mig_publish import DeviceTarget, Publication, full_gpu_states, publish_node
from dra_driver.core.prepare import ClaimPlan, ResolvedDevice, plan_claim, spec_device_uuids
from dra_driver.core.sharing import SharingBackend
from dra_driver.files.cdi_store import CdiStore
from dra_driver.files.checkpoint_store import CheckpointStore, Notice
from dra_driver.files.lock import LockTimeout, file_lock
from kubelet_plugin.faults import crash_point
from kubelet_plugin.mig_ops import MigOps, owned

log = structlog.get_logger(__name__)

LOOKUP_BUDGET_S = 25.0
"""All claim lookups of one call share this deadline: with the lock wait (10 s) it stays below
the kubelet's 45 s, so every claim gets an answer of its own."""
LOOKUP_WORKERS = 16
"""Concurrent claim lookups per plugin (bounded: a hung API server cannot pile up threads)."""


class ClaimReader(Protocol):
    """Reads a ResourceClaim as API JSON; raises an exception whose text explains a failure.

    When the claim does not exist, the exception has a true ``not_found`` attribute (the
    garbage collection pass relies on it to tell "gone" from "could not ask").
    """

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The claim object."""
        ...


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A claim as the kubelet names it."""

    namespace: str
    uid: str
    name: str


@dataclass(frozen=True, slots=True)
class Outcome:
    """One claim's answer: devices, or an error (never both)."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


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
        toolkit_devices: frozenset[str] = frozenset(),
        notify: Callable[[Notice], None] | None = None,  # None for tests: notices are only logged
        lock_timeout_s: float = 10.0,
    ) -> None:
        self.driver = driver
        self.pool = node_name
        if publication is None:
            publication = publish_node(full_gpu_states(gpus or []), MigStrategy.NONE)
        self.targets: Mapping[str, DeviceTarget] = publication.targets
        self._mig = mig
        self._sharing = sharing
        self._mps_root = mps_root or checkpoints.dir / "mps"
        self._gone: set[str] = set()  # claims found gone by the previous garbage collection pass
        self._claims = claims
        self._cdi = cdi
        self._store = checkpoints
        self._lock_path = lock_path
        self._device_nodes = device_nodes
        self._toolkit = toolkit_devices
        self._notify = notify
        self._lock_timeout = lock_timeout_s
        self._mutex = threading.Lock()
        self._lookups = ThreadPoolExecutor(max_workers=LOOKUP_WORKERS, thread_name_prefix="claim-lookup")
        self._refusal: str | None = None
        self.lookup_budget_s = LOOKUP_BUDGET_S

    @property
    def refusal(self) -> str | None:
        """Why this plugin refuses every call (a checkpoint from a newer dra-gpu), or None."""
        return self._refusal

    # -- start-up ---------------------------------------------------------------------------

    def startup(self) -> None:
        """Load the checkpoint once at start: recover, apply a reboot, handle orphaned CDI files.

        Never raises for any checkpoint state (no crash loop): a newer binary's checkpoint puts
        the plugin in refusing mode; an untrusted one is rebuilt without destroying anything.
        """
        self._cdi.ensure_root()
        self._store.ensure_dir()
        with self._locked():
            try:
                result = self._store.load()
            except CheckpointTooNew as err:
                self._refuse(str(err))
                return
            for n in result.notices:
                self._tell(n)
            cp = result.checkpoint
            untrusted = not result.trusted or (result.fresh and bool(self._cdi.claim_uids()))
            if untrusted:
                cp = self._rebuild(cp)
            else:
                for uid in result.dropped_claims:
                    self._cdi.remove(uid)
                # A CDI file with no entry in a trusted checkpoint is left by a reboot that
                # dropped the claim; nothing references it, so it goes.
                for uid in self._cdi.claim_uids() - set(cp.claims):
                    self._cdi.remove(uid)
                    log.info("cdi_orphan_removed", claim_uid=uid)
            if untrusted or result.notices or result.dropped_claims:
                try:
                    self._store.save(cp)
                except OSError as err:  # calls will fail per claim and say so; the daemon stays up
                    log.error("checkpoint_save_failed", error=str(err))
            self._recover_devices(cp, sweep=not untrusted)

    def _refuse(self, why: str) -> None:
        self._refusal = f"this node's checkpoint cannot be used: {why}"
        self._tell(Notice("CheckpointTooNew", self._refusal))

    def _recover_devices(self, cp: Checkpoint, *, sweep: bool) -> None:
        """At start: destroy MIG instances no claim owns (trusted state only); restart MPS daemons that died."""
        if sweep and self._mig is not None and any(t.dynamic for t in self.targets.values()):
            for inst in self._mig.sweep(_owned_by_others(cp, "")):
                log.warning("mig_leftover_destroyed", gpu=inst.parent_uuid, gi_id=inst.gi_id, profile=inst.profile_name)
        if self._sharing is not None:
            for uid, entry in cp.claims.items():
                if entry.state is not ClaimState.PREPARE_COMPLETED:
                    continue
                for daemon in entry.mps_daemons:
                    if not self._sharing.mps_running(daemon.daemon_id):
                        self._sharing.start_mps(daemon)
                        log.warning("mps_restarted", claim_uid=uid, daemon=daemon.daemon_id)

    def _rebuild(self, cp: Checkpoint) -> Checkpoint:
        """Rebuild claims after the newest checkpoint generation was lost; destroy nothing.

        Started entries become ``recovered`` (their prepare may have finished and been answered);
        every CDI spec without an entry becomes a recovered entry owning the MIG instances its
        spec hands out. MIG instances nobody is known to own are kept and reported.
        """
        live = self._mig.dynamic_instances() if self._mig is not None else []
        on_disk = self._cdi.claim_uids()
        finished = sorted(uid for uid, entry in cp.claims.items() if self._unprepared(uid, entry, live, on_disk))
        claims = {uid: entry for uid, entry in cp.claims.items() if uid not in finished}
        from_previous = len(claims)
        for uid, entry in claims.items():
            if entry.state is ClaimState.PREPARE_STARTED and not entry.recovered:
                claims[uid] = replace(entry, recovered=True)
        for uid in finished:
            log.warning("claim_unprepared_before_loss_forgotten", claim_uid=uid, namespace=cp.claims[uid].namespace)
        by_uuid = {inst.uuid: inst for inst in live if inst.uuid}
        adopted: list[str] = []
        for uid in sorted(on_disk - set(claims)):
            try:
                validate_claim_uid(uid)
            except ClaimError:
                continue
            spec = self._cdi.read(uid)
            records = tuple(
                self._mig.record_of(by_uuid[u]) for u in sorted(spec_device_uuids(spec or {})) if u in by_uuid and self._mig
            )
            claims[uid] = ClaimEntry(ClaimState.PREPARE_STARTED, "", "", cdi_spec=spec, mig_intents=records, recovered=True)
            adopted.append(uid)
            log.warning("claim_adopted_from_cdi_spec", claim_uid=uid, mig=[r.mig_uuid for r in records])
        held = [r for e in claims.values() for r in (*e.mig_records(), *(d.mig for d in e.devices if d.mig is not None))]
        owned_places = {(r.parent_uuid, r.profile_id, r.start) for e in claims.values() for r in e.mig_records()}
        unowned = [i for i in live if not owned(i, held) and (i.parent_uuid, i.profile_id, i.placement.start) not in owned_places]
        kept = ", ".join(f"{i.parent_uuid}/gi{i.gi_id} {i.profile_name}@{i.placement.start}" for i in unowned)
        message = (
            f"checkpoint rebuilt without destroying anything: {from_previous} claim(s) from the previous generation, "
            f"{len(finished)} of its claim(s) found unprepared since and forgotten ({', '.join(finished) or 'none'}), "
            f"{len(adopted)} adopted from CDI specs ({', '.join(adopted) or 'none'}); "
            f"{len(unowned)} MIG instance(s) no claim is known to own kept in place"
            + (f" ({kept})" if unowned else "")
            + "; each is removed by its claim's unprepare, or by an administrator"
        )
        self._tell(Notice("CheckpointRebuilt", message))
        return replace(cp, claims=claims)

    def _unprepared(self, uid: str, entry: ClaimEntry, live: list[MigInstance], on_disk: set[str]) -> bool:
        """True for a completed claim of an older generation that was unprepared since: nothing of it is left.

        Unprepare undoes sharing and destroys MIG instances before it removes the CDI spec, and a
        completed claim always had its spec: a claim with no spec, no live MIG instance (by MIG
        UUID: its GI id may be reused by now) and no running MPS daemon holds nothing a container
        could use. Keeping it would make its stale records shield, or later destroy, what other
        claims carve.
        """
        if entry.state is not ClaimState.PREPARE_COMPLETED or uid in on_disk:
            return False
        if any(owned(inst, entry.mig_records()) for inst in live):
            return False
        return self._sharing is None or not any(self._sharing.mps_running(d.daemon_id) for d in entry.mps_daemons)

    def _tell(self, notice: Notice) -> None:
        (log.error if notice.warning else log.info)("checkpoint_notice", reason=notice.reason, detail=notice.message)
        if self._notify is not None:
            try:
                self._notify(notice)
            except Exception as err:  # noqa: BLE001 - an Event is best effort; the log line stays
                log.warning("event_failed", reason=notice.reason, error=str(err))

    def _load(self) -> Checkpoint:
        """The checkpoint for a call (lock held); an untrusted one is rebuilt and saved first."""
        try:
            result = self._store.load()
        except CheckpointTooNew as err:
            self._refuse(str(err))
            raise
        for n in result.notices:
            self._tell(n)
        cp = result.checkpoint
        if not result.trusted:
            cp = self._rebuild(cp)
            self._store.save(cp)
        return cp

    def _locked(self) -> Any:
        return _Locked(self._mutex, self._lock_path, self._lock_timeout)

    # -- request checks and claim lookups -----------------------------------------------------

    def _check_refs(
        self, refs: list[ClaimRef], out: dict[str, Any], error: Callable[[str], Any], *, names: bool = True
    ) -> list[ClaimRef]:
        """The refs that may proceed; the others get ``error(message)`` in ``out``.

        A UID that appears twice is refused for every entry (which name is the claim's cannot be
        told, and the checkpoint must record the right one). ``names``: check namespace and name
        too (prepare reads the claim by them; unprepare acts by UID alone).
        """
        seen: dict[str, int] = {}
        for ref in refs:
            seen[ref.uid] = seen.get(ref.uid, 0) + 1
        valid: list[ClaimRef] = []
        for ref in refs:
            if seen[ref.uid] > 1:
                out[ref.uid] = error(f"claim UID {ref.uid!r} appears {seen[ref.uid]} times in one request; refusing all of them")
                continue
            try:
                validate_claim_uid(ref.uid)
                if names:
                    validate_claim_ref(ref.namespace, ref.name)
            except ClaimError as err:
                out[ref.uid] = error(str(err))
                continue
            valid.append(ref)
        return valid

    def _fetch(self, refs: list[ClaimRef], out: dict[str, Outcome]) -> dict[str, dict[str, Any]]:
        """Read the claims concurrently under one deadline; each failure is that claim's error."""
        futures: dict[str, Future[dict[str, Any]]] = {
            ref.uid: self._lookups.submit(self._claims.get_claim, ref.namespace, ref.name) for ref in refs
        }
        wait_futures(futures.values(), timeout=self.lookup_budget_s)
        fetched: dict[str, dict[str, Any]] = {}
        for ref in refs:
            fut = futures[ref.uid]
            what = f"reading claim {ref.namespace}/{ref.name}"
            if not fut.done():
                fut.cancel()
                out[ref.uid] = Outcome(error=f"{what}: no answer from the API server within {self.lookup_budget_s:.0f}s")
                continue
            try:
                fetched[ref.uid] = fut.result()
            except Exception as err:  # noqa: BLE001 - any lookup failure is this claim's error
                out[ref.uid] = Outcome(error=f"{what}: {err}")
        return fetched

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

    # -- prepare ------------------------------------------------------------------------------

    def prepare(self, refs: list[ClaimRef]) -> dict[str, Outcome]:
        """Prepare every claim; the result has an entry for each requested claim UID."""
        out: dict[str, Outcome] = {}
        if self._refusal is not None:
            return {r.uid: Outcome(error=self._refusal) for r in refs}
        valid = self._check_refs(refs, out, lambda msg: Outcome(error=msg))
        fetched = self._fetch(valid, out)
        rejected = {ref.uid: self._precheck(ref, fetched[ref.uid]) for ref in valid if ref.uid in fetched}
        pending = [r for r in valid if r.uid in fetched]
        if not pending:
            return out
        try:
            with self._locked():
                cp = self._load()
                for ref in pending:
                    cp, out[ref.uid] = self._prepare_isolated(cp, ref, fetched[ref.uid], rejected[ref.uid])
        except (LockTimeout, OSError, CheckpointTooNew) as err:
            for ref in pending:
                out.setdefault(ref.uid, Outcome(error=f"preparing: {err}"))
        return out

    def _prepare_isolated(self, cp: Checkpoint, ref: ClaimRef, obj: dict[str, Any], rejected: str) -> tuple[Checkpoint, Outcome]:
        """``_prepare_one``, with an unexpected exception rolling back this claim only."""
        try:
            return self._prepare_one(cp, ref, obj, rejected)
        except Exception as err:
            log.exception("prepare_crashed", claim_uid=ref.uid, namespace=ref.namespace, claim=ref.name)
            cp = self._load()  # what was saved before the failure
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
            provisional = self._provisional(claim)
            first_plan = self._plan(claim, provisional, cp)  # every check, before any side effect
            self._check_sharing_possible(first_plan)
        except (ClaimError, ConfigError) as err:
            bound.warning("claim_rejected", error=str(err))
            return cp, Outcome(error=str(err))
        intents = tuple(_intent(t) for t in dict.fromkeys(d.target for d in provisional.values()) if _carves(t))
        started = ClaimEntry(
            ClaimState.PREPARE_STARTED,
            ref.namespace,
            ref.name,
            mig_intents=intents + (entry.mig_intents if entry is not None and recovered else ()),
            time_slices=first_plan.time_slices,
            mps_daemons=first_plan.mps_daemons,
            recovered=recovered,
        )
        cp = cp.with_claim(ref.uid, started)
        self._store.save(cp)
        crash_point("after_prepare_started")
        try:
            resolved = self._apply(provisional, cp, ref.uid, adopt=recovered)
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
            if recovered:
                self._release_unused(started, done, cp, ref.uid)
            cp = cp.with_claim(ref.uid, done)
            self._store.save(cp)
            crash_point("after_prepare_completed")
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
        return cp, Outcome(devices=plan.devices)

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
        return Outcome(devices=entry.devices)

    def _release_unused(self, started: ClaimEntry, done: ClaimEntry, cp: Checkpoint, uid: str) -> None:
        """A recovered claim, prepared again: destroy the instances it held that its devices no longer use."""
        if self._mig is None:
            return
        keep = [d.mig for d in done.devices if d.mig is not None and d.mig.gi_id is not None] + _owned_by_others(cp, uid)
        for rec in started.mig_intents:
            if rec.gi_id is not None:
                self._mig.destroy(rec, keep=keep)

    def _provisional(self, claim: ClaimAllocation) -> dict[str, ResolvedDevice]:
        """The claim's devices as they resolve before any side effect (dynamic MIG: not carved yet)."""
        out: dict[str, ResolvedDevice] = {}
        for r in claim.results:
            target = self.targets[r.device]
            if target.dynamic and target.is_mig and (r.admin_access or r.share_id):
                raise ClaimError(
                    f"device {r.device}: admin access and shared allocation of a dynamic MIG slice are not supported"
                )
            if target.is_mig and (target.dynamic or target.instance is None) and self._mig is None:
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
            out[r.device] = ResolvedDevice(target=target, mig=None if rec is None else rec)
        return out

    def _apply(
        self, provisional: dict[str, ResolvedDevice], cp: Checkpoint, uid: str, *, adopt: bool = False
    ) -> dict[str, ResolvedDevice]:
        """Perform the claim's MIG side effects; return the devices resolved for the CDI spec.

        ``adopt`` (a recovered claim): an instance already at the allocated placement is used
        as it is, not carved again, because a container may be using it.
        """
        out = dict(provisional)
        for name, dev in provisional.items():
            t = dev.target
            if self._mig is None:
                continue
            if _carves(t):
                found = self._mig.adopt(t, keep=_owned_by_others(cp, uid)) if adopt else None
                out[name] = found if found is not None else self._mig.carve(t)
            elif t.dynamic and not t.is_mig:
                self._mig.ensure_whole(t.gpu)
            elif t.instance is not None and t.instance.ci_id is not None:
                out[name] = self._mig.resolved(t, t.instance)
        return out

    def _check_sharing_possible(self, plan: ClaimPlan) -> None:
        if (plan.time_slices or plan.mps_daemons) and self._sharing is None:
            raise ClaimError("the claim asks for GPU sharing, but this plugin runs without a sharing backend")

    def _apply_sharing(self, plan: ClaimPlan) -> None:
        """Start the plan's MPS daemons and set its time slices (both idempotent)."""
        if self._sharing is None:
            return
        for daemon in plan.mps_daemons:
            self._sharing.start_mps(daemon)
            log.info("mps_ready", daemon=daemon.daemon_id, shared=daemon.shared)
            crash_point("after_mps_started")
        for ts in plan.time_slices:
            self._sharing.set_time_slice(ts.gpu_uuid, ts.interval)
            log.info("time_slice_applied", gpu=ts.gpu_uuid, interval=ts.interval.value)
            crash_point("after_time_slice_set")

    def _undo_sharing(self, cp: Checkpoint, uid: str, entry: ClaimEntry) -> None:
        """Stop the claim's MPS daemons and reset its time slices, unless another claim still uses them."""
        if self._sharing is None:
            return
        others = [e for u, e in cp.claims.items() if u != uid]
        in_use = {d.daemon_id for e in others for d in e.mps_daemons}
        for daemon in entry.mps_daemons:
            if daemon.daemon_id in in_use:
                continue
            self._sharing.stop_mps(daemon)
            log.info("mps_stopped", claim_uid=uid, daemon=daemon.daemon_id)
            crash_point("after_unprepare_mps_stopped")
        sliced = {t.gpu_uuid for e in others for t in e.time_slices}
        for ts in entry.time_slices:
            if ts.gpu_uuid in sliced:
                continue
            self._sharing.set_time_slice(ts.gpu_uuid, TimeSliceInterval.DEFAULT)
            log.info("time_slice_reset", claim_uid=uid, gpu=ts.gpu_uuid)
            crash_point("after_unprepare_time_slice_reset")

    def _plan(self, claim: ClaimAllocation, devices: dict[str, ResolvedDevice], cp: Checkpoint) -> ClaimPlan:
        return plan_claim(
            driver=self.driver,
            claim=claim,
            devices=devices,
            device_nodes=self._device_nodes,
            toolkit_devices=self._toolkit,
            prepared=cp.claims,
            node_targets=self.targets,
            mps_root=str(self._mps_root),
        )

    def _rollback(self, cp: Checkpoint, uid: str) -> Checkpoint:
        """Undo whatever a claim's preparation did — MIG instances, MIG mode, CDI file — then forget it.

        Raises MigError (the claim stays checkpointed) when an instance cannot be destroyed,
        e.g. a process still uses it; the kubelet retries.
        """
        entry = cp.claims.get(uid)
        if entry is not None:
            self._undo_sharing(cp, uid, entry)
        if entry is not None and self._mig is not None:
            keep = _owned_by_others(cp, uid)
            touched: dict[str, None] = {}
            for rec in entry.mig_records():
                self._mig.destroy(rec, keep=keep)
                touched[rec.parent_uuid] = None
            for parent in touched:
                self._mig.release_mode(self._mig.gpu(parent))
        self._cdi.remove(uid)
        crash_point("after_unprepare_cdi_removed")
        cp = cp.without_claim(uid)
        self._store.save(cp)
        return cp

    # -- unprepare ----------------------------------------------------------------------------

    def unprepare(self, refs: list[ClaimRef]) -> dict[str, str]:
        """Unprepare every claim; value is the claim's error ("" on success). Unknown claims succeed."""
        out: dict[str, str] = {}
        if self._refusal is not None:
            return {r.uid: self._refusal for r in refs}
        valid = self._check_refs(refs, out, str, names=False)
        if not valid:
            return out
        try:
            with self._locked():
                cp = self._load()
                for ref in valid:
                    try:
                        if ref.uid in cp.claims:
                            cp = self._rollback(cp, ref.uid)
                            log.info("claim_unprepared", claim_uid=ref.uid, namespace=ref.namespace, claim=ref.name)
                        else:
                            self._cdi.remove(ref.uid)  # a spec nobody recorded is removed all the same
                        out[ref.uid] = ""
                    except (OSError, MigError) as err:
                        log.error("unprepare_failed", claim_uid=ref.uid, error=str(err))
                        out[ref.uid] = f"unpreparing claim {ref.namespace}/{ref.name}: {err}"
                    except Exception as err:  # one claim's bug never fails the others
                        log.exception("unprepare_crashed", claim_uid=ref.uid)
                        cp = self._load()
                        out[ref.uid] = f"internal error unpreparing claim {ref.namespace}/{ref.name}: {type(err).__name__}: {err}"
        except (LockTimeout, OSError, CheckpointTooNew) as err:
            for ref in valid:
                out.setdefault(ref.uid, f"unpreparing: {err}")
        return out

    def collect_garbage(self) -> list[str]:
        """Unprepare claims whose ResourceClaim is gone (deleted, or replaced by one with another UID).

        A PrepareStarted claim is rolled back as soon as its claim is gone: no pod can be using
        it. A PrepareCompleted (or recovered) one only when it was found gone by the previous pass as well, so
        a claim the kubelet is about to unprepare itself is left to it. Returns the UIDs
        unprepared. Lookups happen outside the lock; a failed lookup decides nothing.
        """
        if self._refusal is not None:
            return []
        with self._locked():
            entries = dict(self._load().claims)
        gone: set[str] = set()
        for uid, seen in entries.items():
            if not seen.name:  # adopted from a CDI spec: only the kubelet's unprepare (which names it) removes it
                continue
            try:
                obj = self._claims.get_claim(seen.namespace, seen.name)
            except Exception as err:  # noqa: BLE001 - only a definite "not found" counts
                if getattr(err, "not_found", False):
                    gone.add(uid)
                else:
                    log.info("gc_lookup_failed", claim_uid=uid, error=str(err))
                continue
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            if not isinstance(meta, dict) or meta.get("uid") != uid:
                gone.add(uid)
        done: list[str] = []
        with self._locked():
            cp = self._load()
            for uid in sorted(gone):
                current = cp.claims.get(uid)
                if current is None:
                    continue
                if (current.state is ClaimState.PREPARE_COMPLETED or current.recovered) and uid not in self._gone:
                    continue
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

    def prepared_claims(self) -> Mapping[str, ClaimEntry]:
        """The checkpoint's claims (for status and tests)."""
        with self._locked():
            return self._store.load().checkpoint.claims


def _owned_by_others(cp: Checkpoint, uid: str) -> list[MigRecord]:
    """The MIG instances claims other than ``uid`` have carved or hold after recovery (records with GI ids)."""
    return [
        r
        for other_uid, other in cp.claims.items()
        if other_uid != uid and (other.state is ClaimState.PREPARE_COMPLETED or other.recovered)
        for r in other.mig_records()
        if r.gi_id is not None
    ]


def _carves(t: DeviceTarget) -> bool:
    """True for a device whose preparation creates a MIG instance."""
    return t.dynamic and t.is_mig


def _intent(t: DeviceTarget) -> MigRecord:
    if t.profile is None or t.placement is None:
        raise ValueError(f"device {t.name} is not a MIG placement")
    return MigRecord(t.gpu.uuid, t.profile.profile_id, t.profile.name, t.placement.start, t.placement.size)


class _Locked:
    """The in-process mutex and the cross-process flock, taken together."""

    def __init__(self, mutex: threading.Lock, path: Path, timeout_s: float) -> None:
        self._mutex = mutex
        self._path = path
        self._timeout = timeout_s
        self._cm: Any = None

    def __enter__(self) -> None:
        if not self._mutex.acquire(timeout=self._timeout):
            raise LockTimeout(f"timed out after {self._timeout:.0f}s waiting for the prepare lock")
        try:
            self._cm = file_lock(self._path, self._timeout)
            self._cm.__enter__()
        except BaseException:
            self._mutex.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self._cm.__exit__(*exc)
        finally:
            self._mutex.release()
