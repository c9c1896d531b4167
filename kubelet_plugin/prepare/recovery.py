"""The checkpoint as each call and each start-up sees it: loaded, recovered, rebuilt when lost.

Called by ``kubelet_plugin.prepare.state`` with the node-wide lock held: ``at_start`` once when the
plugin starts, ``load`` at the start of every call. Reads go through
``dra_driver.files.checkpoint_store``; what it reports (a corrupt generation moved aside, a
deleted one, claims a reboot dropped) becomes a log line and a Node Event.

At a trusted start, CDI specs no claim owns are removed, MIG instances no completed claim owns
are destroyed (dynamic MIG) and MPS daemons a completed claim needs are restarted.

Fail closed when the checkpoint cannot be trusted (the newest generation is torn, deleted,
unreadable): nothing is destroyed on its word. Claims are rebuilt from what remains — the
previous generation, every CDI spec on disk (a spec names the MIG devices it hands out), the
MIG instances — and marked ``recovered``: a retry adopts what exists instead of rolling it back,
the start-up sweep is skipped, and only a claim's own unprepare (or the GC once its
ResourceClaim is gone) removes its resources. A claim of the older generation that was
unprepared since (nothing of it is left) is forgotten. An Event says what was rebuilt and which
MIG instances no claim is known to own (kept). A checkpoint written by a newer dra-gpu raises
``CheckpointTooNew``, and the plugin refuses every call instead of starting empty.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import structlog

from dra_driver.core.checkpoint import Checkpoint, ClaimEntry, ClaimState, MigRecord
from dra_driver.core.claims import ClaimError, validate_claim_uid
from dra_driver.core.mig import MigInstance
from dra_driver.core.mig_publish import DeviceTarget
from dra_driver.core.prepare import spec_device_uuids
from dra_driver.files.cdi_store import CdiStore
from dra_driver.files.checkpoint_store import CheckpointStore, Notice
from kubelet_plugin.prepare.mig_ops import MigOps, owned
from kubelet_plugin.prepare.sharing_ops import SharingOps

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class StartReport:
    """What the start-up load found, for the plugin's metrics (``dra_gpu_checkpoint_recoveries_total``)."""

    reasons: tuple[str, ...] = ()
    """The reasons of the notices it told (``CheckpointRecovered``, ``NodeRebooted``, ``CheckpointRebuilt``...)."""
    fresh: bool = False
    """No checkpoint existed, nor a CDI spec to rebuild one from: a new node, or one whose files were deleted."""


class Recovery:
    """Loads the checkpoint for the plugin's state, recovering or rebuilding it; tells what it found."""

    def __init__(
        self,
        *,
        cdi: CdiStore,
        store: CheckpointStore,
        mig: MigOps | None,
        sharing: SharingOps,
        targets: Mapping[str, DeviceTarget],
        notify: Callable[[Notice], None] | None,
    ) -> None:
        self._cdi = cdi
        self._store = store
        self._mig = mig
        self._sharing = sharing
        self._targets = targets
        self._notify = notify

    def tell(self, notice: Notice) -> None:
        """Log a notice and send it as a Node Event (best effort)."""
        (log.error if notice.warning else log.info)("checkpoint_notice", reason=notice.reason, detail=notice.message)
        if self._notify is not None:
            try:
                self._notify(notice)
            except Exception as err:  # noqa: BLE001 - an Event is best effort; the log line stays
                log.warning("event_failed", reason=notice.reason, error=str(err))

    def at_start(self) -> StartReport:
        """Recover at start: apply a reboot, handle orphaned CDI files, sweep and restart (trusted), or rebuild.

        Raises CheckpointTooNew (nothing changed); never raises for any other checkpoint state.
        Returns what it found and told.
        """
        result = self._store.load()
        for n in result.notices:
            self.tell(n)
        reasons = [n.reason for n in result.notices]
        cp = result.checkpoint
        untrusted = not result.trusted or (result.fresh and bool(self._cdi.claim_uids()))
        if untrusted:
            cp = self.rebuild(cp)
            reasons.append("CheckpointRebuilt")
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
        if not untrusted and self._mig is not None and any(t.dynamic for t in self._targets.values()):
            for inst in self._mig.sweep(cp.carved_by_others()):
                log.warning("mig_leftover_destroyed", gpu=inst.parent_uuid, gi_id=inst.gi_id, profile=inst.profile_name)
        self._sharing.restart_dead(cp)
        return StartReport(tuple(reasons), fresh=result.fresh and not untrusted)

    def load(self) -> Checkpoint:
        """The checkpoint for a call; an untrusted one is rebuilt and saved first. Raises CheckpointTooNew."""
        result = self._store.load()
        for n in result.notices:
            self.tell(n)
        cp = result.checkpoint
        if not result.trusted:
            cp = self.rebuild(cp)
            self._store.save(cp)
        return cp

    def rebuild(self, cp: Checkpoint) -> Checkpoint:
        """Rebuild claims after the newest checkpoint generation was lost; destroy nothing.

        Started entries become ``recovered`` (their prepare may have finished and been answered);
        every CDI spec without an entry becomes a recovered entry owning the MIG instances its
        spec hands out; completed entries with nothing left are forgotten. MIG instances nobody
        is known to own are kept and reported.
        """
        live = self._mig.dynamic_instances() if self._mig is not None else []
        on_disk = self._cdi.claim_uids()
        finished = sorted(uid for uid, entry in cp.claims.items() if self._unprepared(uid, entry, cp.claims, live, on_disk))
        claims = {uid: entry for uid, entry in cp.claims.items() if uid not in finished}
        from_previous = len(claims)
        completed = [r for e in claims.values() if e.state is ClaimState.PREPARE_COMPLETED for r in e.mig_records()]
        for uid, entry in claims.items():
            if entry.state is ClaimState.PREPARE_STARTED:
                claims[uid] = replace(entry, recovered=True, mig_intents=self._found(entry, live, completed))
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
            f"checkpoint rebuilt without destroying anything: {from_previous} claim(s) kept from the previous generation, "
            f"{len(finished)} found unprepared since and forgotten ({', '.join(finished) or 'none'}), "
            f"{len(adopted)} adopted from CDI specs ({', '.join(adopted) or 'none'}); "
            f"{len(unowned)} MIG instance(s) no claim is known to own kept in place"
            + (f" ({kept})" if unowned else "")
            + "; each is removed by its claim's unprepare, or by an administrator"
        )
        self.tell(Notice("CheckpointRebuilt", message))
        return replace(cp, claims=claims)

    def _found(self, entry: ClaimEntry, live: list[MigInstance], completed: list[MigRecord]) -> tuple[MigRecord, ...]:
        """A started claim's intents, each with the ids of the live instance at its placement (if any).

        Its prepare may have carved them and been answered before the loss: with ids, the claim
        owns its instances, so a later trusted start's sweep keeps them. An instance a completed
        claim's records name is not taken.
        """
        out: list[MigRecord] = []
        for intent in entry.mig_intents:
            inst = None
            if intent.gi_id is None:
                at = (intent.parent_uuid, intent.profile_id, intent.start)
                inst = next(
                    (i for i in live if (i.parent_uuid, i.profile_id, i.placement.start) == at and not owned(i, completed)), None
                )
            out.append(MigOps.record_of(inst) if inst is not None else intent)
        return tuple(out)

    def _unprepared(
        self, uid: str, entry: ClaimEntry, claims: Mapping[str, ClaimEntry], live: list[MigInstance], on_disk: set[str]
    ) -> bool:
        """True for a completed claim of an older generation that was unprepared since: nothing of it is left.

        Unprepare undoes sharing and destroys MIG instances before it removes the CDI spec, and a
        completed claim always had its spec: a claim with no spec, no live MIG instance (by MIG
        UUID: its GI id may be reused by now) and no running MPS daemon of its own (a daemon other
        claims list runs for them) holds nothing a container could use. Keeping it would make its
        stale records shield, or later destroy, what other claims carve, and its devices would stay
        held: the plugin would refuse the next claim allocated them until the GC (two passes)
        removed it. A spec is removed only by the claim's own unprepare or rollback.
        """
        if entry.state is not ClaimState.PREPARE_COMPLETED or uid in on_disk:
            return False
        if any(owned(inst, entry.mig_records()) for inst in live):
            return False
        others = {d.daemon_id for u, e in claims.items() if u != uid for d in e.mps_daemons}
        return not self._sharing.holds_anything(entry, ignore=others)
