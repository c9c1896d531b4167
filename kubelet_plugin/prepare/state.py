"""Prepare and unprepare calls: batched, serialized across processes, each claim answered on its own.

Called by the DRA servicers (``kubelet_plugin.servicer``) for NodePrepareResources and
NodeUnprepareResources, and by the plugin's main loop for start-up and the GC pass. A bad claim
is that claim's error string and changes nothing; an unexpected exception in one claim rolls
back that claim only. Here: calls batched (``group_commit``) under the node-wide lock
(``dra_driver.files.lock.NodeLock``), unprepare, and the GC pass. Beside it, one concern each:
``requests`` (refs checked, claims read under one deadline before the lock), ``claim_steps``
(one claim decoded and its configs resolved once before the lock, then planned, carried out and
checkpointed, or rolled back; its order under a kill -9 is told there), ``recovery`` (the
checkpoint loaded, rebuilt without destroying anything when untrusted), ``mig_ops`` and
``sharing_ops`` (MIG instances and mode, MPS daemons, time slices), ``gc`` (which claims whose
ResourceClaim is gone to unprepare) — all in ``kubelet_plugin.prepare``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import structlog

from dra_driver.core.checkpoint import Checkpoint, CheckpointTooNew, ClaimEntry
from dra_driver.core.driver_files import DriverFiles
from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import MigError, MigStrategy
from dra_driver.core.mig_publish import DeviceTarget, Publication, full_gpu_states, publish_node
from dra_driver.core.sharing import SharingBackend
from dra_driver.files.cdi_store import CdiStore
from dra_driver.files.checkpoint_store import CheckpointStore, Notice
from dra_driver.files.lock import LockTimeout, NodeLock
from kubelet_plugin.prepare import gc
from kubelet_plugin.prepare.claim_steps import CheckedClaim, ClaimSteps, SpecInputs
from kubelet_plugin.prepare.faults import crash_point
from kubelet_plugin.prepare.group_commit import GroupCommit
from kubelet_plugin.prepare.mig_ops import MigOps
from kubelet_plugin.prepare.recovery import Recovery, StartReport
from kubelet_plugin.prepare.requests import LOOKUP_BUDGET_S, ClaimLookups, ClaimReader, ClaimRef, Outcome, check_refs
from kubelet_plugin.prepare.sharing_ops import SharingOps

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class _PrepareCall:
    """One NodePrepareResources call's claims, as their pre-check left them, and its answers."""

    claims: list[CheckedClaim]
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
        if publication is None:
            publication = publish_node(full_gpu_states(gpus or []), MigStrategy.NONE)
        self.targets: Mapping[str, DeviceTarget] = publication.targets
        sharing_ops = SharingOps(sharing)
        self._gone: set[str] = set()  # claims found gone by the previous garbage collection pass
        self._claims = claims
        self._cdi = cdi
        self._store = checkpoints
        self._lock = NodeLock(lock_path)
        self._lock_timeout = lock_timeout_s
        self._lookups = ClaimLookups(claims)
        self._recovery = Recovery(cdi=cdi, store=checkpoints, mig=mig, sharing=sharing_ops, targets=self.targets, notify=notify)
        mps = str(mps_root or checkpoints.dir / "mps")
        spec = SpecInputs(device_nodes, device_node_host, toolkit_devices, driver_files, driver_missing, mps)
        self._steps = ClaimSteps(
            driver=driver,
            pool=node_name,
            targets=self.targets,
            mig=mig,
            sharing=sharing_ops,
            cdi=cdi,
            store=checkpoints,
            load=self._load,
            spec=spec,
        )
        self._refusal: str | None = None
        self.lookup_budget_s = LOOKUP_BUDGET_S
        self._prepares: GroupCommit[_PrepareCall] = GroupCommit(self._locked)
        self._unprepares: GroupCommit[_UnprepareCall] = GroupCommit(self._locked)

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
        pending = [self._steps.check(r, fetched[r.uid]) for r in valid if r.uid in fetched]
        if not pending:
            return out
        call = _PrepareCall(pending, out)
        try:
            self._prepares.run(call, self._prepare_batch)
        except (LockTimeout, OSError, CheckpointTooNew) as err:
            for checked in pending:
                out.setdefault(checked.ref.uid, Outcome(error=f"preparing: {err}"))
        return out

    def _prepare_batch(self, calls: list[_PrepareCall]) -> None:
        """Every queued call's claims, in order, then one save for what is not saved yet (lock held).

        Claims with no side effect but their CDI spec are recorded PrepareCompleted in memory and
        saved together at the end; none is answered before that save. A failed final save fails
        exactly those claims (their specs are removed).
        """
        steps = self._steps
        steps.unsaved = {}
        try:
            cp = self._load()
            for call in calls:
                for checked in call.claims:
                    if checked.ref.uid in call.out:
                        continue
                    cp, call.out[checked.ref.uid] = steps.prepare(cp, checked)
            if steps.unsaved:
                steps.save(cp)
                crash_point("after_prepare_completed")
        except (LockTimeout, OSError, CheckpointTooNew) as err:
            for call in calls:
                for ref in (checked.ref for checked in call.claims):
                    if ref.uid in steps.unsaved:
                        self._cdi.remove(ref.uid)
                        why = f"preparing claim {ref.namespace}/{ref.name}: saving the checkpoint: {err}"
                        call.out[ref.uid] = Outcome(error=why)
                    call.out.setdefault(ref.uid, Outcome(error=f"preparing: {err}"))
        finally:
            steps.unsaved = {}

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
                            cp = self._steps.rollback(cp, ref.uid, save=False)
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
                self._steps.save(cp)
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
                    cp = self._steps.rollback(cp, uid)
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
