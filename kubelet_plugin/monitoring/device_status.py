"""Reports prepared devices in their ResourceClaim's ``status.devices`` (KEP-4817), best effort, off the prepare path.

The DRA servicers (``kubelet_plugin.servicer``) hand every claim prepared (``prepared``) or
unprepared (``unprepared``) to ``DeviceStatusReporter`` after ``kubelet_plugin.prepare.state`` answered
it, so after its checkpoint was saved; the kubelet's answer never waits for the API server.
One worker thread writes, in order:

* one pending write per claim (a newer one replaces an older one not yet written: an
  unprepare right after a prepare writes only the removal), at most ``max_pending`` claims
  waiting; beyond that a write is dropped and logged (the next prepare of the claim, e.g. after
  a kubelet restart, writes it again);
* what to write is built by ``dra_driver.core.device_status`` (an entry over the API's limits is
  logged and not sent) and applied by ``dra_driver.kube.claim_status_api`` (server-side apply,
  field manager = the driver name): prepare writes this driver's entries, unprepare removes them;
* transport errors, 409, 429 and 5xx are retried with exponential backoff, ``attempts`` times
  in all, then given up (logged): with a hung API server (5 s per request) a claim holds the
  worker at most 6 times 5 s plus 15.5 s of backoff; a claim deleted meanwhile (404) is done; a
  refusal by RBAC (403, or 422 naming ``resourceclaims/driver``: the RBAC of
  ``deploy/helm/dra-gpu/templates/rbac.yaml`` missing) is logged once as an error with what to
  grant, later ones at debug level, and never retried; other refusals (400, 422: e.g. the claim
  was deallocated or replaced) are logged and not retried; a server that accepted the write but
  stored none of our entries (the ``DRAResourceClaimDeviceStatus`` feature off) is logged once.

The worker yields to the kubelet: a write waits until no DRA call has been in flight for
``QUIET_S`` (the servicers say when calls start and end), or until its claim waited
``MAX_DEFER_S``, so when many pods land at once the API server and the plugin's one core of
Python serve the prepares first and the status follows.

Every log event carries ``claim_uid``. Turned off with ``--device-status=false`` (Helm
``deviceStatus.enabled``).
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from dra_driver.core.api_errors import ApiError
from dra_driver.core.device_status import DeviceStatus, DeviceStatusError, apply_configuration, device_statuses, entries_of
from kubelet_plugin.prepare.requests import ClaimRef, Outcome

log = structlog.get_logger(__name__)

MAX_PENDING = 1024
ATTEMPTS = 6
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 8.0
QUIET_S = 0.05
"""A status write waits for this long without a DRA call in flight..."""
MAX_DEFER_S = 2.0
"""...or until its claim has waited this long since it was first queued."""
MAX_SINCE = 4096
"""Claims whose first prepare time is remembered (so a repeated prepare re-applies the same entry: a no-op)."""
RBAC_HINT = (
    "grant patch on resource.k8s.io resourceclaims/status and, on Kubernetes >= 1.36, "
    "associated-node:patch on resourceclaims/driver with resourceNames [<driver name>] "
    "(Helm chart: deviceStatus.enabled=true), or turn device status off (--device-status=false)"
)
POLICY_HINT = (
    "the chart's claim status admission policy refused the write: the plugin may change only its own driver's "
    "status.devices entries, of claims allocated to the node its pod-bound service account token names; check that "
    "the plugin runs with its pod's own token (automounted or projected) on the node the claim is allocated to"
)


def _hint(err: ApiError) -> str:
    """What to fix: the chart's ValidatingAdmissionPolicy refused (its message names it), else RBAC."""
    return POLICY_HINT if "ValidatingAdmissionPolicy" in err.message else RBAC_HINT


class StatusWriter(Protocol):
    """Applies a claim's status (``dra_driver.kube.claim_status_api.KubeClaimStatusApi``); raises ApiError."""

    def apply_status(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """The stored claim."""
        ...


def _retryable(err: ApiError) -> bool:
    return err.status in (0, 409, 429) or err.status >= 500


def _forbidden(err: ApiError) -> bool:
    """RBAC said no.

    403 from the authorizer (resourceclaims/status), or, from 1.36, the claim strategy's per-driver
    check (resourceclaims/driver), which answers 422 Invalid with a Forbidden cause.
    """
    return err.status == 403 or (err.status == 422 and 'requires resource="resourceclaims/driver"' in err.message)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class _Job:
    ref: ClaimRef
    outcome: Outcome | None
    """The prepared claim's answer; None: remove our entries (unprepared)."""
    at: str
    """When it was prepared (the condition's lastTransitionTime)."""
    queued: float = 0.0
    """``time.monotonic()`` when the claim's first pending write was queued (replacements keep it)."""


class DeviceStatusReporter:
    """The bounded queue and the worker thread that writes claims' device status."""

    def __init__(
        self,
        *,
        driver: str,
        node_name: str,
        writer: Callable[[], StatusWriter],
        max_pending: int = MAX_PENDING,
        attempts: int = ATTEMPTS,
        first_delay_s: float = FIRST_DELAY_S,
        max_delay_s: float = MAX_DELAY_S,
    ) -> None:
        """``writer`` is called once, on the worker thread (it may wait for the API client to load)."""
        self._driver = driver
        self._node = node_name
        self._writer_factory = writer
        self._max_pending = max_pending
        self._attempts = attempts
        self._first_delay = first_delay_s
        self._max_delay = max_delay_s
        self._cv = threading.Condition()
        self._jobs: dict[str, _Job] = {}  # claim UID -> latest write, in arrival order
        self._stop = threading.Event()
        self._busy = False
        self._forbidden_logged = False
        self._since: dict[str, str] = {}  # claim UID -> when this process first reported it prepared
        self._dropped_logged = False
        self._calls = 0  # DRA calls in flight
        self._last_call = float("-inf")  # when the last one ended (monotonic)
        self._thread = threading.Thread(target=self._run, name="device-status", daemon=True)
        self._thread.start()

    # -- the servicers' side: never blocks, never raises ------------------------------------

    def prepared(self, ref: ClaimRef, outcome: Outcome) -> None:
        """Queue writing the entries of a claim just prepared, or answered again (the same entries: a no-op write)."""
        with self._cv:
            if len(self._since) >= MAX_SINCE and ref.uid not in self._since:
                self._since.clear()  # claims unprepared by the GC pass are never popped; a later repeat only moves the time
            at = self._since.setdefault(ref.uid, _now())
        self._queue(_Job(ref, outcome, at))

    def unprepared(self, ref: ClaimRef) -> None:
        """Queue removing this driver's entries of a claim just unprepared."""
        with self._cv:
            self._since.pop(ref.uid, None)
        self._queue(_Job(ref, None, _now()))

    def _queue(self, job: _Job) -> None:
        with self._cv:
            if self._stop.is_set():
                return
            uid = job.ref.uid
            older = self._jobs.get(uid)
            if older is None and len(self._jobs) >= self._max_pending:
                log.warning("device_status_dropped", claim_uid=uid, pending=len(self._jobs), why="queue full")
                return
            queued = older.queued if older is not None else time.monotonic()
            self._jobs[uid] = _Job(job.ref, job.outcome, job.at, queued)  # replaces an older write in place
            self._cv.notify()

    def call_started(self) -> None:
        """A DRA call began: writes wait until calls quiet down (``QUIET_S``, at most ``MAX_DEFER_S``)."""
        with self._cv:
            self._calls += 1

    def call_finished(self) -> None:
        """A DRA call ended.

        The worker is not woken: a call ending only moves the quiet time later, and the worker,
        waiting for the earlier time, looks again when it comes (no wake-up per call in a burst).
        """
        with self._cv:
            self._calls = max(0, self._calls - 1)
            self._last_call = time.monotonic()

    def _wait_turn(self) -> None:
        """(``_cv`` held, a job queued) Wait until the calls are quiet or the oldest job waited ``MAX_DEFER_S``."""
        while not self._stop.is_set() and self._jobs:
            now = time.monotonic()
            # the first job is the oldest: new ones are appended, a replaced one keeps its place and time
            defer_left = next(iter(self._jobs.values())).queued + MAX_DEFER_S - now
            quiet_left = max(0.0, self._last_call + QUIET_S - now) if self._calls == 0 else QUIET_S
            if quiet_left <= 0 or defer_left <= 0:
                return
            self._cv.wait(min(quiet_left, defer_left))

    # -- for tests and shutdown --------------------------------------------------------------

    def idle(self, timeout_s: float) -> bool:
        """Wait until nothing is queued or being written; False on timeout."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._jobs and not self._busy, timeout_s)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the worker (a write in flight may finish within ``timeout_s``); queued writes are dropped."""
        with self._cv:
            self._stop.set()
            self._cv.notify_all()
        self._thread.join(timeout_s)

    # -- the worker ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            writer = self._writer_factory()
        except Exception as err:  # noqa: BLE001 - no API client: no status, the plugin still serves
            log.error("device_status_off", error=f"{type(err).__name__}: {err}", why="no API client")
            with self._cv:
                self._stop.set()
                self._jobs.clear()
                self._cv.notify_all()
            return
        while True:
            with self._cv:
                self._busy = False
                self._cv.notify_all()
                self._cv.wait_for(lambda: bool(self._jobs) or self._stop.is_set())
                self._wait_turn()
                if self._stop.is_set():
                    return
                uid = next(iter(self._jobs))
                job = self._jobs.pop(uid)
                self._busy = True
            try:
                self._write(writer, job)
            except Exception:  # a bug here must not end status reporting for every later claim
                log.exception("device_status_crashed", claim_uid=uid)

    def _superseded(self, uid: str) -> bool:
        with self._cv:
            return uid in self._jobs or self._stop.is_set()

    def _write(self, writer: StatusWriter, job: _Job) -> None:
        ref = job.ref
        bound = log.bind(claim_uid=ref.uid, namespace=ref.namespace, claim=ref.name)
        statuses = self._statuses(bound, job)
        if statuses is None:
            return
        body = apply_configuration(namespace=ref.namespace, name=ref.name, uid=ref.uid, statuses=statuses)
        delay = self._first_delay
        for attempt in range(1, self._attempts + 1):
            if self._superseded(ref.uid):
                bound.debug("device_status_superseded", attempt=attempt)
                return
            try:
                stored = writer.apply_status(ref.namespace, ref.name, body)
            except ApiError as err:
                if not self._retry(bound, err, attempt, removing=job.outcome is None):
                    return
                bound.warning("device_status_retry", attempt=attempt, delay_s=delay, status=err.status, error=str(err)[:300])
                if self._stop.wait(delay):
                    return
                delay = min(delay * 2, self._max_delay)
                continue
            self._done(bound, statuses, stored)
            return

    def _statuses(self, bound: Any, job: _Job) -> tuple[DeviceStatus, ...] | None:
        """The entries to apply (none: remove ours); None when they break the API's limits (logged)."""
        if job.outcome is None:
            return ()
        try:
            return device_statuses(
                driver=self._driver,
                claim_uid=job.ref.uid,
                devices=job.outcome.devices,
                cdi_spec=job.outcome.cdi_spec,
                node_name=self._node,
                now=job.at,
            )
        except DeviceStatusError as err:
            bound.error("device_status_invalid", error=str(err))
            return None

    def _retry(self, bound: Any, err: ApiError, attempt: int, *, removing: bool) -> bool:
        """True when a failed write is to be tried again; otherwise says why not (logged)."""
        if err.not_found:
            bound.info("device_status_claim_gone", removing=removing)
        elif _forbidden(err):
            self._log_forbidden(bound, err)
        elif not _retryable(err):
            bound.error("device_status_rejected", status=err.status, reason=err.reason, error=err.message[:500])
        elif attempt >= self._attempts:
            bound.error("device_status_gave_up", attempts=attempt, status=err.status, error=str(err)[:500])
        else:
            return True
        return False

    def _done(self, bound: Any, statuses: tuple[DeviceStatus, ...], stored: dict[str, Any]) -> None:
        ours = entries_of(stored, self._driver)
        if not statuses:
            bound.info("device_status_removed", left=len(ours))
            return
        if not ours:
            level = bound.debug if self._dropped_logged else bound.warning
            self._dropped_logged = True
            level(
                "device_status_not_stored",
                why="the API server accepted the write but kept none of our status.devices entries "
                "(is the DRAResourceClaimDeviceStatus feature off?)",
            )
            return
        bound.info("device_status_written", devices=[e.get("device") for e in ours])

    def _log_forbidden(self, bound: Any, err: ApiError) -> None:
        if self._forbidden_logged:
            bound.debug("device_status_forbidden", error=err.message[:300])
            return
        self._forbidden_logged = True
        bound.error("device_status_forbidden", error=err.message[:1000], hint=_hint(err), logged="once")
