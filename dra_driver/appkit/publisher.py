"""The ResourceSlice publisher: keeps one node's pool of this driver equal to its devices.

Used by the standalone controller (``controller.main``) and by the kubelet plugin, which
publishes its node's devices the same way. ``set_devices`` states what should exist;
``reconcile_once`` lists the node's slices, plans with ``dra_driver.core.pool_sync`` and
writes; ``run`` repeats that continuously: after every change or delete seen by a watch
(the kubelet wipes slices at start-up and 30 s after a plugin disappears), periodically, and
with capped, jittered exponential backoff after errors. It never dies on an exception and
writes nothing at steady state. Every write is checked for fields the API server dropped.

Fails closed where a dropped field changes what the scheduler may do (``REFUSED_WHEN_DROPPED``):
dynamic MIG's placements overlap, and only the shared counters keep the scheduler from handing
out two overlapping ones; a GPU shared by capacity without ``allowMultipleAllocations`` would be
handed out whole. A server too old for counter slices (< 1.35), or one that drops such a field
from a write (its feature gate off: alpha and off by default in 1.34 and 1.35), gets no slice of
the pool at all: what was written is deleted, the refusal is logged (``slice_pool_refused``),
kept in ``last_error`` and passed once to ``on_refusal`` (the plugin turns it into a Node Event).

``metrics`` (a ``PublisherMetricsHook``, ``dra_driver.obs.metrics.PublisherMetrics`` in the
daemons) hears of every write, 409 conflict, dropped field and failed reconcile. What it writes
through and reports: ``dra_driver.appkit.slice_api``; which dropped fields refuse the pool:
``dra_driver.appkit.dropped_fields``.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

from dra_driver.appkit.dropped_fields import DROPPED_FIELDS_CAUSE, refusal_for_dropped
from dra_driver.appkit.slice_api import PublisherMetricsHook, ReconcileResult, SliceApi
from dra_driver.core.api_errors import ApiError
from dra_driver.core.pool_sync import PoolPlan, SentRecord, dropped_fields, plan_pool
from dra_driver.core.schema import DeviceSpec
from dra_driver.core.slices import SliceContent, split_pool

log = structlog.get_logger(__name__)

MIN_COUNTERS_MINOR = 35
"""Counter sets in their own slices need Kubernetes 1.35 or newer."""


class Backoff:
    """Capped exponential backoff with jitter: ``initial``, doubled per failure, at most ``cap``.

    Each delay is drawn from [d/2, d] so that many nodes failing together spread out.
    """

    def __init__(self, initial_s: float = 0.5, cap_s: float = 30.0, rng: Callable[[], float] = random.random) -> None:
        self._initial = initial_s
        self._cap = cap_s
        self._rng = rng
        self._failures = 0

    def next(self) -> float:
        """Return the delay before the next attempt; each call counts one more failure."""
        base = min(self._cap, self._initial * (2.0 ** min(self._failures, 32)))
        self._failures += 1
        return base * (0.5 + 0.5 * self._rng())

    def reset(self) -> None:
        """Forget past failures (after a success)."""
        self._failures = 0


class SlicePublisher:
    """Publishes the ResourceSlices of ``driver`` for node ``node_name``; see the module docstring."""

    def __init__(
        self,
        api: SliceApi,
        driver: str,
        node_name: str,
        *,
        resync_s: float = 300.0,
        watch_timeout_s: float = 300.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
        debounce_s: float = 0.2,
        on_refusal: Callable[[str], None] | None = None,
        metrics: PublisherMetricsHook | None = None,
        on_dropped: Callable[[list[str]], None] | None = None,
    ) -> None:
        """``on_refusal`` is called once with the message when the pool is refused (see the module docstring).

        ``on_dropped`` hears the paths of every write the server dropped fields from (the plugin
        withholds unhealthy GPUs when their ``taints`` are dropped: ``kubelet_plugin.monitoring.health_taints``).
        """
        self._api = api
        self._metrics = metrics
        self._on_dropped = on_dropped
        self._on_refusal = on_refusal
        self._refused: str | None = None  # why the pool is not published; sticky for this process
        self._driver = driver
        self._node = node_name
        self._resync_s = resync_s
        self._watch_timeout_s = watch_timeout_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._debounce_s = debounce_s
        self._log = log.bind(node=node_name, driver=driver)

        self.synced = threading.Event()
        """Set after the first successful reconcile."""
        self._wake = threading.Event()
        self._lock = threading.Lock()  # guards the fields below, shared with the watch thread
        self._reconcile_lock = threading.Lock()  # one reconcile at a time
        self._contents: list[SliceContent] | None = None
        self._sent: dict[str, SentRecord] = {}
        self._deleted: set[str] = set()
        self._watch_rv: str | None = None
        self._node_uid: str | None = None
        self._server_minor: int | None = None
        self._generation = 0  # the pool generation last written
        self._error: str | None = None
        self._dropped: dict[str, list[str]] = {}

    # -- state ------------------------------------------------------------------------------

    def set_devices(self, devices: list[DeviceSpec], counter_sets: list[dict[str, Any]] | None = None) -> None:
        """State the pool's devices (and counter sets) and trigger a reconcile. Thread safe.

        Raises ValueError (from ``split_pool``) for a pool that cannot be published.
        """
        contents = split_pool(devices, counter_sets)
        with self._lock:
            self._contents = contents
        self._log.info("slice_devices_set", devices=len(devices), counter_sets=len(counter_sets or []))
        self._wake.set()

    @property
    def last_error(self) -> str | None:
        """The latest problem: a failed reconcile, refused counters, or fields the server dropped."""
        with self._lock:
            if self._error:
                return self._error
            if self._dropped:
                name, fields = sorted(self._dropped.items())[0]
                return f"slice {name}: the API server dropped {', '.join(fields)} ({DROPPED_FIELDS_CAUSE})"
            return None

    # -- one pass ---------------------------------------------------------------------------

    def reconcile_once(self) -> ReconcileResult | None:
        """List, plan and write once. None when there is nothing to publish yet or it is refused.

        API errors propagate (as ``ApiError``) after being recorded in ``last_error``.
        """
        with self._reconcile_lock:
            try:
                result = self._reconcile()
            except Exception as exc:
                with self._lock:
                    self._error = f"{type(exc).__name__}: {exc}"
                if self._metrics is not None:
                    if isinstance(exc, ApiError) and exc.conflict:
                        self._metrics.write_conflict()
                    self._metrics.reconcile_failed()
                raise
            return result

    def _reconcile(self) -> ReconcileResult | None:
        with self._lock:
            contents = self._contents
        if contents is None:
            self._log.debug("slice_devices_unknown")
            return None
        if self._refused is not None or (any(c.shared_counters for c in contents) and not self._counters_supported()):
            self._withdraw()  # refused for good: never write again, not even for a moment
            return None

        existing, list_rv = self._api.list(self._driver, self._node)
        names = {str((s.get("metadata") or {}).get("name")) for s in existing}
        with self._lock:
            if self._watch_rv is None:
                self._watch_rv = list_rv
            self._sent = {n: r for n, r in self._sent.items() if n in names}
            sent = dict(self._sent)

        fresh_uid = self._node_uid is None
        uid = self._fetch_node_uid() if fresh_uid else self._node_uid
        plan = self._plan(existing, contents, uid, sent)
        if not plan.empty and not fresh_uid:
            # About to write: make sure the owner is still the same Node object.
            new_uid = self._fetch_node_uid()
            if new_uid != uid:
                self._log.warning("node_uid_changed", old_uid=uid, new_uid=new_uid)
                plan = self._plan(existing, contents, new_uid, sent)

        if not plan.empty:
            self._write(plan)
        if self._refused is not None:
            self._withdraw()
            return None
        with self._lock:
            self._error = None
        self.synced.set()
        return ReconcileResult(
            generation=plan.generation,
            created=len(plan.create),
            updated=len(plan.update),
            deleted=len(plan.delete),
            resource_version=list_rv,
        )

    def _plan(
        self, existing: list[dict[str, Any]], contents: list[SliceContent], uid: str | None, sent: dict[str, SentRecord]
    ) -> PoolPlan:
        return plan_pool(
            existing=existing,
            desired=contents,
            driver=self._driver,
            node_name=self._node,
            node_uid=uid,
            sent=sent,
            last_generation=self._generation,
        )

    def _counters_supported(self) -> bool:
        if self._server_minor is None:
            self._server_minor = self._api.server_minor_version()
        if self._server_minor >= MIN_COUNTERS_MINOR:
            return True
        self._refuse(
            f"not publishing this node's devices: dynamic MIG needs shared counters, which need Kubernetes "
            f">= 1.{MIN_COUNTERS_MINOR} (the API server is 1.{self._server_minor}); publish MIG statically "
            "(mig.strategy static) or not at all (none)"
        )
        return False

    def _refuse(self, message: str) -> None:
        """Record why the pool is not published (once: log, ``last_error``, ``on_refusal``)."""
        with self._lock:
            first = self._refused is None
            self._refused = message
            self._error = message
        if first:
            self._log.error("slice_pool_refused", error=message)
            if self._on_refusal is not None:
                self._on_refusal(message)

    def _withdraw(self) -> None:
        """Delete every slice of the pool: a refused pool must not stay half published."""
        existing, _ = self._api.list(self._driver, self._node)
        for s in existing:
            self._delete(str((s.get("metadata") or {}).get("name")))

    def _fetch_node_uid(self) -> str:
        uid = self._api.node_uid(self._node)
        self._node_uid = uid
        return uid

    def _write(self, plan: PoolPlan) -> None:
        self._log.info(
            "slice_pool_writing",
            generation=plan.generation,
            create=len(plan.create),
            update=len(plan.update),
            delete=len(plan.delete),
            reasons=list(plan.reasons),
        )
        replaced = set(plan.replaced)
        for name in plan.replaced:
            self._delete(name)
        for obj in plan.create:
            self._check_stored("created", obj, self._api.create(obj))
            self._count("create")
            if self._refused is not None:
                return
        for obj in plan.update:
            self._check_stored("updated", obj, self._api.update(obj))
            self._count("update")
            if self._refused is not None:
                return
        for name in plan.delete:
            if name not in replaced:
                self._delete(name)
        self._generation = plan.generation

    def _delete(self, name: str) -> None:
        with self._lock:
            self._deleted.add(name)
        self._api.delete(name)
        self._count("delete")
        with self._lock:
            self._sent.pop(name, None)
            self._dropped.pop(name, None)
        self._log.info("slice_deleted", slice=name)

    def _count(self, action: str) -> None:
        if self._metrics is not None:
            self._metrics.slice_written(action)

    def _check_stored(self, action: str, sent: dict[str, Any], stored: dict[str, Any]) -> None:
        """Remember what was sent for the stored version; report fields the server dropped."""
        name = str(sent["metadata"]["name"])
        rv = str((stored.get("metadata") or {}).get("resourceVersion") or "")
        dropped = dropped_fields(sent.get("spec"), stored.get("spec"))
        with self._lock:
            self._sent[name] = SentRecord(resource_version=rv, sent=sent)
            self._deleted.discard(name)  # a later DELETED event for this name is someone else's
            if dropped:
                self._dropped[name] = dropped
            else:
                self._dropped.pop(name, None)
        spec = sent.get("spec") or {}
        self._log.info(
            f"slice_{action}",
            slice=name,
            generation=(spec.get("pool") or {}).get("generation"),
            devices=len(spec.get("devices") or []),
            counter_sets=len(spec.get("sharedCounters") or []),
        )
        if dropped:
            self._log.error("slice_fields_dropped", slice=name, fields=dropped, likely_cause=DROPPED_FIELDS_CAUSE)
            if self._metrics is not None:
                self._metrics.fields_dropped(dropped)
            if self._on_dropped is not None:
                self._on_dropped(dropped)
            if refusal := refusal_for_dropped(name, dropped):
                self._refuse(refusal)

    # -- the loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Reconcile until ``stop`` is set: on watch events, every ``resync_s``, after errors.

        Never raises; returns within about a second of ``stop`` being set.
        """
        self._log.info("slice_publisher_started", resync_s=self._resync_s)
        watcher = threading.Thread(target=self._watch_loop, args=(stop,), name=f"slice-watch-{self._node}", daemon=True)
        watcher.start()
        backoff = Backoff(self._backoff_initial_s, self._backoff_max_s)
        try:
            while not stop.is_set():
                self._wake.clear()
                try:
                    self.reconcile_once()
                except Exception as exc:  # noqa: BLE001 - the loop must survive anything
                    delay = backoff.next()
                    self._log.error(
                        "slice_reconcile_failed",
                        error=str(exc),
                        error_type=type(exc).__name__,
                        status=exc.status if isinstance(exc, ApiError) else None,
                        retry_in_s=round(delay, 2),
                    )
                    stop.wait(delay)
                    continue
                backoff.reset()
                self._wait_for_work(stop)
        finally:
            self._api.interrupt_watches()
            watcher.join(timeout=1.0)
            self._log.info("slice_publisher_stopped")

    def _wait_for_work(self, stop: threading.Event) -> None:
        """Sleep until a wake-up (watch event, new devices), the resync period, or ``stop``."""
        deadline = time.monotonic() + self._resync_s
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if self._wake.wait(min(0.1, remaining)):
                stop.wait(self._debounce_s)  # let a burst of events (a kubelet wipe) settle
                return

    def _watch_loop(self, stop: threading.Event) -> None:
        """Watch the node's slices and wake the reconcile loop on changes made by others."""
        backoff = Backoff(self._backoff_initial_s, self._backoff_max_s)
        while not stop.is_set():
            with self._lock:
                rv = self._watch_rv
            if rv is None:  # wait for a reconcile to list and give a starting point
                stop.wait(0.1)
                continue
            try:
                for kind, obj in self._api.watch(self._driver, self._node, rv, self._watch_timeout_s):
                    if stop.is_set():
                        return
                    self._on_event(kind, obj)
                    backoff.reset()
            except Exception as exc:  # noqa: BLE001 - the watch must survive anything
                if stop.is_set():
                    return
                with self._lock:
                    self._watch_rv = None  # list again, then watch from there
                self._wake.set()
                if isinstance(exc, ApiError) and exc.gone:
                    self._log.info("slice_watch_expired")
                    continue
                delay = backoff.next()
                self._log.warning("slice_watch_failed", error=str(exc), error_type=type(exc).__name__, retry_in_s=round(delay, 2))
                stop.wait(delay)

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        rv = str(meta.get("resourceVersion") or "")
        with self._lock:
            if rv:
                self._watch_rv = rv
            if kind == "BOOKMARK":
                return
            if kind == "DELETED" and name in self._deleted:
                self._deleted.discard(name)
                return
            record = self._sent.get(name)
            if kind in ("ADDED", "MODIFIED") and record is not None and record.resource_version == rv:
                return  # our own write
        self._log.info("slice_changed", slice=name, watch_event=kind)
        self._wake.set()
