"""Prepare and unprepare: checkpoint → plan → CDI → checkpoint, serialized across processes.

Called by the DRA servicers (``kubelet_plugin.servicer``) for NodePrepareResources and
NodeUnprepareResources. Each claim gets its own outcome: a bad claim is that claim's error
string and changes nothing; a good one is answered. Deciding is pure
(``dra_driver.core.prepare.plan_claim``); this module does only the side effects, in an
order that survives a kill -9 at any point:

1. ``PrepareStarted`` is checkpointed before any file is written;
2. the CDI spec is written atomically;
3. ``PrepareCompleted`` with the answer is checkpointed.

A repeat for a completed claim returns the stored answer and re-creates a missing CDI file;
a repeat for a started claim rolls the partial work back and prepares afresh.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog

from dra_driver.core.checkpoint import Checkpoint, ClaimEntry, ClaimState, PreparedDevice
from dra_driver.core.claims import ClaimError, parse_claim, validate_claim_uid
from dra_driver.core.config import ConfigError
from dra_driver.core.gpu import GpuInfo
from dra_driver.core.prepare import plan_claim
from dra_driver.core.schema import gpu_device_name
from dra_driver.files.cdi_store import CdiStore
from dra_driver.files.checkpoint_store import CheckpointStore, Notice
from dra_driver.files.lock import LockTimeout, file_lock
from kubelet_plugin.faults import crash_point

log = structlog.get_logger(__name__)


class ClaimReader(Protocol):
    """Reads a ResourceClaim as API JSON; raises an exception whose text explains a failure."""

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
        gpus: list[GpuInfo],
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
        self.gpus = {gpu_device_name(g.minor): g for g in gpus}
        self._claims = claims
        self._cdi = cdi
        self._store = checkpoints
        self._lock_path = lock_path
        self._device_nodes = device_nodes
        self._toolkit = toolkit_devices
        self._notify = notify
        self._lock_timeout = lock_timeout_s
        self._mutex = threading.Lock()

    # -- start-up ---------------------------------------------------------------------------

    def startup(self) -> None:
        """Load the checkpoint once at start: recover, apply a reboot, remove orphaned CDI files."""
        self._cdi.ensure_root()
        self._store.ensure_dir()
        with self._locked():
            result = self._store.load()
            for n in result.notices:
                self._tell(n)
            for uid in result.dropped_claims:
                self._cdi.remove(uid)
            cp = result.checkpoint
            # A CDI file with no checkpoint entry is left by a kill between checkpoint writes
            # (or by a reboot); nothing references it, so it goes.
            for uid in self._cdi.claim_uids() - set(cp.claims):
                self._cdi.remove(uid)
                log.info("cdi_orphan_removed", claim_uid=uid)
            if result.notices or result.dropped_claims:
                self._store.save(cp)

    def _tell(self, notice: Notice) -> None:
        (log.error if notice.warning else log.info)("checkpoint_notice", reason=notice.reason, detail=notice.message)
        if self._notify is not None:
            try:
                self._notify(notice)
            except Exception as err:  # noqa: BLE001 - an Event is best effort; the log line stays
                log.warning("event_failed", reason=notice.reason, error=str(err))

    def _load(self) -> Checkpoint:
        result = self._store.load()
        for n in result.notices:
            self._tell(n)
        return result.checkpoint

    def _locked(self) -> Any:
        return _Locked(self._mutex, self._lock_path, self._lock_timeout)

    # -- prepare ------------------------------------------------------------------------------

    def prepare(self, refs: list[ClaimRef]) -> dict[str, Outcome]:
        """Prepare every claim; the result has an entry for each requested claim UID."""
        out: dict[str, Outcome] = {}
        fetched: dict[str, dict[str, Any]] = {}
        for ref in refs:
            try:
                validate_claim_uid(ref.uid)
            except ClaimError as err:
                out[ref.uid] = Outcome(error=str(err))
                continue
            try:
                fetched[ref.uid] = self._claims.get_claim(ref.namespace, ref.name)
            except Exception as err:  # noqa: BLE001 - any lookup failure is this claim's error
                out[ref.uid] = Outcome(error=f"reading claim {ref.namespace}/{ref.name}: {err}")
        pending = [r for r in refs if r.uid in fetched]
        if not pending:
            return out
        try:
            with self._locked():
                cp = self._load()
                for ref in pending:
                    cp, out[ref.uid] = self._prepare_one(cp, ref, fetched[ref.uid])
        except (LockTimeout, OSError) as err:
            for ref in pending:
                out.setdefault(ref.uid, Outcome(error=f"preparing: {err}"))
        return out

    def _prepare_one(self, cp: Checkpoint, ref: ClaimRef, obj: dict[str, Any]) -> tuple[Checkpoint, Outcome]:
        bound = log.bind(claim_uid=ref.uid, namespace=ref.namespace, claim=ref.name)
        entry = cp.claims.get(ref.uid)
        if entry is not None and entry.state is ClaimState.PREPARE_COMPLETED:
            if entry.cdi_spec is not None and self._cdi.read(ref.uid) != entry.cdi_spec:
                self._cdi.write(ref.uid, dict(entry.cdi_spec))
                bound.info("cdi_spec_recreated")
            bound.info("claim_already_prepared", devices=[d.device_name for d in entry.devices])
            return cp, Outcome(devices=entry.devices)
        if entry is not None:  # PrepareStarted: a previous attempt died part-way
            cp = self._rollback(cp, ref.uid)
            bound.warning("partial_prepare_rolled_back")
        try:
            claim = parse_claim(obj, uid=ref.uid, driver=self.driver, pool=self.pool, known_devices=set(self.gpus))
            plan = plan_claim(
                driver=self.driver,
                claim=claim,
                gpus=self.gpus,
                device_nodes=self._device_nodes,
                toolkit_devices=self._toolkit,
                prepared=cp.claims,
            )
        except (ClaimError, ConfigError) as err:
            bound.warning("claim_rejected", error=str(err))
            return cp, Outcome(error=str(err))
        started = ClaimEntry(ClaimState.PREPARE_STARTED, ref.namespace, ref.name)
        cp = cp.with_claim(ref.uid, started)
        self._store.save(cp)
        crash_point("after_prepare_started")
        try:
            self._cdi.write(ref.uid, plan.cdi_spec)
            crash_point("after_cdi_written")
            done = ClaimEntry(ClaimState.PREPARE_COMPLETED, ref.namespace, ref.name, plan.devices, plan.cdi_spec)
            cp = cp.with_claim(ref.uid, done)
            self._store.save(cp)
            crash_point("after_prepare_completed")
        except OSError as err:
            cp = self._rollback(cp, ref.uid)
            bound.error("prepare_failed", error=str(err))
            return cp, Outcome(error=f"preparing claim {ref.namespace}/{ref.name}: {err}")
        for d in plan.devices:
            bound.info("device_prepared", device=d.device_name, cdi_device_ids=list(d.cdi_device_ids))
        return cp, Outcome(devices=plan.devices)

    def _rollback(self, cp: Checkpoint, uid: str) -> Checkpoint:
        """Undo whatever a claim's preparation did (today: its CDI file), then forget it."""
        self._cdi.remove(uid)
        crash_point("after_unprepare_cdi_removed")
        cp = cp.without_claim(uid)
        self._store.save(cp)
        return cp

    # -- unprepare ----------------------------------------------------------------------------

    def unprepare(self, refs: list[ClaimRef]) -> dict[str, str]:
        """Unprepare every claim; value is the claim's error ("" on success). Unknown claims succeed."""
        out: dict[str, str] = {}
        valid: list[ClaimRef] = []
        for ref in refs:
            try:
                validate_claim_uid(ref.uid)
                valid.append(ref)
            except ClaimError as err:
                out[ref.uid] = str(err)
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
                    except OSError as err:
                        out[ref.uid] = f"unpreparing claim {ref.namespace}/{ref.name}: {err}"
        except (LockTimeout, OSError) as err:
            for ref in valid:
                out.setdefault(ref.uid, f"unpreparing: {err}")
        return out

    def prepared_claims(self) -> Mapping[str, ClaimEntry]:
        """The checkpoint's claims (for status and tests)."""
        with self._locked():
            return self._store.load().checkpoint.claims


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
