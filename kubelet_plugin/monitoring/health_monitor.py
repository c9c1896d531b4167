"""The plugin's GPU health monitor: a thread folding a health source's events and checks into taints.

Started by ``kubelet_plugin.main``. ``load`` reads ``health.json`` (``dra_driver.files.health_store``)
before the first publication; the source (NVML's event set, or the fake GPUs' fault file) is made
on the monitor's own thread, so NVML's start-up never delays the sockets. Then it loops: wait up to
a second for events, run the periodic checks every ``check_interval_s``, expire ``hold``
conditions, apply repair requests (``dra-gpu health repair`` leaves ``<plugin dir>/health-repairs/<gpu>``
holding the time of the request), and after any change: persist the record, call ``on_change``
(the plugin republishes its devices with taints), wake the kubelet health streams
(``kubelet_plugin.monitoring.health_stream``), log each condition raised or cleared, and queue a Node Event
(sent by a thread of its own: a slow API server never holds the taints back).

Nothing read is lost to a failed pass: events stay pending until a pass has saved them. Repair
requests are not deleted: each is applied once per process (per request time), so both plugins of
a rolling update apply it, and applying one again after a restart changes nothing (a repair clears
only what was last seen before the request). It never touches the prepare path: prepare neither
waits for nor reads it. Its own failures are logged and retried; it never dies.
"""

from __future__ import annotations

import os
import queue
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from dra_driver.core.gpu import GpuInfo
from dra_driver.core.health import (
    Condition,
    HealthBook,
    HealthEvent,
    HealthSource,
    classify_xid,
    expire,
    health_message,
    is_unhealthy,
    next_expiry,
    record_check,
    record_event,
    repair,
)
from dra_driver.core.schema import gpu_device_name
from dra_driver.files.checkpoint_store import Notice
from dra_driver.files.health_store import REPAIRS_DIR, HealthStore

log = structlog.get_logger(__name__)

MAX_REPAIRS_PER_PASS = 64


@dataclass(frozen=True, slots=True)
class MonitorConfig:
    """How often the monitor checks, how long ``hold`` conditions last."""

    check_interval_s: float = 10.0
    hold_s: float = 600.0
    event_wait_s: float = 1.0


class HealthMonitor:
    """See the module docstring. ``book`` and ``wait_for_change`` are safe from any thread."""

    def __init__(
        self,
        *,
        source: Callable[[], HealthSource],
        gpus: Sequence[GpuInfo],
        store: HealthStore,
        plugin_dir: Path,
        on_change: Callable[[HealthBook], None] | None = None,
        notify: Callable[[Notice], None] | None = None,
        config: MonitorConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._make_source = source  # called on the monitor's thread: NVML's start-up must not delay the sockets
        self._source: HealthSource | None = None
        self._gpus = {g.uuid: g for g in gpus}
        self._store = store
        self._repairs = plugin_dir / REPAIRS_DIR
        self._on_change = on_change
        self._notify = notify
        self._config = config or MonitorConfig()
        self._clock = clock
        self._cond = threading.Condition()
        self._book = HealthBook()
        self._version = 0
        self._alive_at = clock()
        self._consumed: dict[str, int] = {}
        self._next_check = 0.0
        self._pending: list[HealthEvent] = []  # read from the source, not yet saved
        self._applied: dict[str, float] = {}  # repair request -> the request time applied
        self._bad_requests: set[str] = set()
        self._notices: queue.SimpleQueue[Notice | None] = queue.SimpleQueue()

    # -- read side ------------------------------------------------------------------------

    @property
    def book(self) -> HealthBook:
        """The current conditions."""
        with self._cond:
            return self._book

    def snapshot(self) -> tuple[int, HealthBook, float]:
        """(version, book, time of the monitor's last pass): what a health stream sends."""
        with self._cond:
            return self._version, self._book, self._alive_at

    def wait_for_change(self, version: int, timeout_s: float, until: Callable[[], bool] = lambda: False) -> int:
        """Block until the version moves past ``version``, ``until()`` holds (checked at every wake-up), or ``timeout_s``.

        Returns the version now.
        """
        with self._cond:
            self._cond.wait_for(lambda: self._version != version or until(), timeout=timeout_s)
            return self._version

    def set_on_change(self, on_change: Callable[[HealthBook], None]) -> None:
        """Who hears of each change (set before ``run``)."""
        self._on_change = on_change

    def wake_streams(self) -> None:
        """Wake waiting streams (shutdown, or a stream asked to end)."""
        with self._cond:
            self._cond.notify_all()

    # -- life cycle -----------------------------------------------------------------------

    def load(self) -> HealthBook:
        """Read the record (before the first publication, so persisted taints are in it)."""
        loaded = self._store.load(self._gpus, self._clock())
        for problem in loaded.problems:
            log.error("health_record_unreadable", error=problem, effect="every GPU degraded until repaired")
            self._tell(Notice("GpuHealthRecordUnreadable", f"{problem}: every GPU is tainted NoSchedule until repaired"))
        if loaded.rebooted:
            log.info("health_record_from_previous_boot", effect="conditions dropped; the checks see what persists")
        self._consumed = dict(loaded.consumed)
        with self._cond:
            self._book = loaded.book
            self._version += 1
        for uuid, conds in loaded.book.conditions.items():
            for c in conds:
                log.warning("gpu_condition_restored", device=self._name(uuid), gpu_uuid=uuid, key=c.key, value=c.value)
        return loaded.book

    def run(self, stop: threading.Event) -> None:
        """Loop until ``stop``; never raises."""
        notices = threading.Thread(target=self._send_notices, name="gpu-health-events", daemon=True)
        notices.start()
        log.info("health_monitor_started", gpus=len(self._gpus))
        while not stop.is_set():
            try:
                self.step()
            except Exception:
                log.exception("health_monitor_pass_failed")
                stop.wait(self._config.event_wait_s)
        if self._source is not None:
            try:
                self._source.close()
            except Exception:
                log.exception("health_source_close_failed")
        self._notices.put(None)
        self.wake_streams()
        log.info("health_monitor_stopped")

    def _opened_source(self) -> HealthSource:
        """The source, made (on this thread) and resumed from the record's position the first time."""
        if self._source is not None:
            return self._source
        source = self._make_source()
        source.resume(self._consumed.get(source.name, 0))
        self._source = source
        log.info("health_source_opened", source=source.name)
        return source

    def _send_notices(self) -> None:
        while (notice := self._notices.get()) is not None:
            self._send(notice)

    def drain_notices(self) -> None:
        """Send the Events queued so far, on this thread (tests; ``run`` sends them on its own)."""
        while True:
            try:
                notice = self._notices.get_nowait()
            except queue.Empty:
                return
            if notice is not None:
                self._send(notice)

    def _send(self, notice: Notice) -> None:
        try:
            if self._notify is not None:
                self._notify(notice)
        except Exception:  # an Event is best effort
            log.exception("health_notice_failed", reason=notice.reason)

    def step(self) -> None:
        """One pass: events (waiting up to ``event_wait_s``), checks when due, expiry, repairs."""
        source = self._opened_source()
        book = before = self.book
        now = self._clock()
        wait = max(0.0, min(self._config.event_wait_s, self._next_check - now))
        expiry = next_expiry(book, self._config.hold_s)
        if expiry is not None:
            wait = max(0.0, min(wait, expiry - now))
        self._pending.extend(source.events(wait))
        for event in self._pending:
            book = self._event(book, event)
        now = self._clock()
        if now >= self._next_check:
            self._next_check = now + self._config.check_interval_s
            checks = source.check(list(self._gpus))
            for uuid, check in checks.items():
                if uuid in self._gpus:
                    book = record_check(book, uuid, check, now)
        book = expire(book, now, self._config.hold_s)
        book = self._apply_repairs(book)
        position = source.position()
        moved = position != self._consumed.get(source.name, 0)
        changed = book != before
        if changed or moved:
            self._store.save(book, {**self._consumed, source.name: position})  # raises: the events stay pending
        self._consumed[source.name] = position
        self._pending = []
        with self._cond:
            self._alive_at = now
            if changed:
                self._book = book
                self._version += 1
            self._cond.notify_all()
        if changed:
            if self._on_change is not None:
                self._on_change(book)  # the taints first; the logs and Events after
            self._report(before, book)

    # -- helpers ---------------------------------------------------------------------------

    def _name(self, uuid: str) -> str:
        gpu = self._gpus.get(uuid)
        return gpu_device_name(gpu.minor) if gpu is not None else uuid

    def _event(self, book: HealthBook, event: HealthEvent) -> HealthBook:
        if event.gpu_uuid not in self._gpus:
            log.warning("health_event_for_unknown_gpu", gpu_uuid=event.gpu_uuid, kind=event.kind)
            return book
        if event.kind == "xid" and event.xid is not None and not classify_xid(event.xid)[2]:
            log.warning("xid_unknown", device=self._name(event.gpu_uuid), xid=event.xid, treated_as="degraded")
        try:
            return record_event(book, event)
        except ValueError as err:
            log.error("health_event_invalid", device=self._name(event.gpu_uuid), error=str(err))
            return book

    def _request_time(self, name: str) -> float | None:
        """The time a repair request holds (a regular file, read without blocking, 64 bytes at most)."""
        try:
            fd = os.open(self._repairs / name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError as err:
            self._bad_request(name, f"cannot open it: {err}")
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                self._bad_request(name, "not a regular file")
                return None
            raw = os.read(fd, 64)
        except OSError as err:
            self._bad_request(name, f"cannot read it: {err}")
            return None
        finally:
            os.close(fd)
        try:
            at = float(raw.decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            self._bad_request(name, f"holds {raw[:20]!r}, not a time")
            return None
        if not 0 <= at < 1e11:
            self._bad_request(name, f"holds {at}, not a Unix time")
            return None
        return at

    def _bad_request(self, name: str, why: str) -> None:
        if name not in self._bad_requests:  # once per request, not every pass
            self._bad_requests.add(name)
            log.error("health_repair_request_unusable", request=name[:80], error=why[:200])

    def _apply_repairs(self, book: HealthBook) -> HealthBook:
        try:
            names = sorted(p.name for p in self._repairs.iterdir() if not p.name.startswith("."))[:MAX_REPAIRS_PER_PASS]
        except FileNotFoundError:
            return book
        except OSError as err:
            self._bad_request("", f"the requests directory {self._repairs}: {err}")
            return book
        by_name = {gpu_device_name(g.minor): g.uuid for g in self._gpus.values()}
        for name in names:
            uuids = list(by_name.values()) if name == "all" else [by_name[name]] if name in by_name else []
            if not uuids:
                self._bad_request(name, "names no GPU of this node (gpu-<minor> or all)")
                continue
            at = self._request_time(name)
            if at is None or self._applied.get(name) == at:
                continue
            self._applied[name] = at
            self._bad_requests.discard(name)
            for uuid in uuids:
                book, cleared = repair(book, uuid, at)
                if cleared:
                    log.info("gpu_repaired", device=self._name(uuid), gpu_uuid=uuid, cleared=[c.key for c in cleared])
        return book

    def _report(self, before: HealthBook, after: HealthBook) -> None:
        for uuid in sorted(set(before.conditions) | set(after.conditions)):
            old: Mapping[str, Condition] = {c.key: c for c in before.of(uuid)}
            new: Mapping[str, Condition] = {c.key: c for c in after.of(uuid)}
            device = self._name(uuid)
            for key, c in new.items():
                if old.get(key) != c and (old.get(key) is None or old[key].value != c.value or old[key].severity != c.severity):
                    log.warning(
                        "gpu_condition_raised",
                        device=device,
                        gpu_uuid=uuid,
                        key=key,
                        value=c.value,
                        severity=c.severity.value,
                        message=c.message,
                    )
            for key, c in old.items():
                if key not in new:
                    log.info("gpu_condition_cleared", device=device, gpu_uuid=uuid, key=key, value=c.value)
            was, now = is_unhealthy(before.of(uuid)), is_unhealthy(after.of(uuid))
            if now and not was:
                self._tell(Notice("GpuUnhealthy", f"{device} ({uuid}): {health_message(after.of(uuid))}"))
            elif was and not now:
                self._tell(Notice("GpuHealthy", f"{device} ({uuid}) is healthy again", warning=False))

    def _tell(self, notice: Notice) -> None:
        self._notices.put(notice)  # sent by the events thread ``run`` starts: never waited for here
