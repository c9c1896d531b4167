"""The plugin's GPU health monitor: a thread folding a health source's events and checks into taints.

Started by ``kubelet_plugin.main``. Loads ``health.json`` (``dra_driver.files.health_store``), then
loops: wait up to a second for events (NVML event sets, or the fake GPUs' fault file), run the
periodic checks every ``check_interval_s``, expire ``hold`` conditions, apply repair requests
(``dra-gpu health repair`` drops a file in ``<plugin dir>/health-repairs/``), and after any change:
persist the record, call ``on_change`` (the plugin republishes its devices with taints), wake the
kubelet health streams (``kubelet_plugin.health_stream``), log each condition raised or cleared,
and send a Node Event. It never touches the prepare path: prepare neither waits for nor reads it.
Its own failures are logged and retried; it never dies.
"""

from __future__ import annotations

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
        source: HealthSource,
        gpus: Sequence[GpuInfo],
        store: HealthStore,
        plugin_dir: Path,
        on_change: Callable[[HealthBook], None] | None = None,
        notify: Callable[[Notice], None] | None = None,
        config: MonitorConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._source = source
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

    def wait_for_change(self, version: int, timeout_s: float) -> int:
        """Block until the version moves past ``version`` or ``timeout_s``; return the version now."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != version, timeout=timeout_s)
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
        self._source.resume(self._consumed.get(self._source.name, 0))
        with self._cond:
            self._book = loaded.book
            self._version += 1
        for uuid, conds in loaded.book.conditions.items():
            for c in conds:
                log.warning("gpu_condition_restored", device=self._name(uuid), gpu_uuid=uuid, key=c.key, value=c.value)
        return loaded.book

    def run(self, stop: threading.Event) -> None:
        """Loop until ``stop``; never raises."""
        log.info("health_monitor_started", source=self._source.name, gpus=len(self._gpus))
        while not stop.is_set():
            try:
                self.step()
            except Exception:
                log.exception("health_monitor_pass_failed")
                stop.wait(self._config.event_wait_s)
        self._source.close()
        self.wake_streams()
        log.info("health_monitor_stopped")

    def step(self) -> None:
        """One pass: events (waiting up to ``event_wait_s``), checks when due, expiry, repairs."""
        book = before = self.book
        now = self._clock()
        wait = max(0.0, min(self._config.event_wait_s, self._next_check - now))
        expiry = next_expiry(book, self._config.hold_s)
        if expiry is not None:
            wait = max(0.0, min(wait, expiry - now))
        for event in self._source.events(wait):
            book = self._event(book, event)
        now = self._clock()
        if now >= self._next_check:
            self._next_check = now + self._config.check_interval_s
            checks = self._source.check(list(self._gpus))
            for uuid, check in checks.items():
                if uuid in self._gpus:
                    book = record_check(book, uuid, check, now)
        book = expire(book, now, self._config.hold_s)
        book = self._apply_repairs(book)
        position = self._source.position()
        moved = position != self._consumed.get(self._source.name, 0)
        self._consumed[self._source.name] = position
        changed = book != before
        if changed or moved:
            self._store.save(book, self._consumed)
        with self._cond:
            self._alive_at = now
            if changed:
                self._book = book
                self._version += 1
            self._cond.notify_all()
        if changed:
            self._report(before, book)
            if self._on_change is not None:
                self._on_change(book)

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

    def _apply_repairs(self, book: HealthBook) -> HealthBook:
        try:
            names = sorted(p.name for p in self._repairs.iterdir())[:MAX_REPAIRS_PER_PASS]
        except FileNotFoundError:
            return book
        by_name = {gpu_device_name(g.minor): g.uuid for g in self._gpus.values()}
        for name in names:
            path = self._repairs / name
            if name.startswith("."):
                continue
            try:
                raw = path.read_text()[:64]
                at = float(raw.strip())
            except (OSError, ValueError):
                at = self._clock()
            path.unlink(missing_ok=True)
            uuids = list(by_name.values()) if name == "all" else [by_name[name]] if name in by_name else []
            if not uuids:
                log.error("health_repair_unknown_gpu", request=name[:80], known=sorted(by_name))
                continue
            for uuid in uuids:
                book, cleared = repair(book, uuid, at)
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
        if self._notify is not None:
            try:
                self._notify(notice)
            except Exception:
                log.exception("health_notice_failed", reason=notice.reason)
