"""GPU health, pure: what an NVML event or check means, and which taints and kubelet statuses follow.

The health sources (``dra_driver.sources.nvml_health`` on GPU nodes, ``dra_driver.sources.fake_health``
with fake GPUs) turn NVML's events and periodic checks into ``HealthEvent`` and ``GpuCheck``; the
plugin's monitor (``kubelet_plugin.monitoring.health_monitor``) folds them into a ``HealthBook`` with the
functions here, persists it (``dra_driver.core.health_record``), publishes ``tainted_devices`` and streams
``device_health`` to the kubelet. MIG devices and shares inherit their GPU's conditions: every
published device names its GPU (``DeviceTarget.gpu``). What each event kind means (its taint
key, value, severity and how it clears) is the table in ``dra_driver.core.health_causes``.

Severity decides the taint effect and the kubelet status:

* ``fatal``: the GPU cannot be trusted until it is reset or repaired (double-bit ECC, fallen off
  the bus, GSP errors, ...). ``NoExecute`` when eviction is on (the chart's ``health.evict``), else
  ``NoSchedule``; the kubelet sees the device Unhealthy.
* ``degraded``: running pods may go on, nothing new should land (a memory repair pending a reset, an
  XID nobody classified). ``NoSchedule``; Unhealthy.
* ``application`` / ``informational``: the application caused it, or it is only worth knowing (a
  user's page fault, a high single-bit ECC rate). Effect ``None`` (Kubernetes >= 1.35; left out on
  older servers); Healthy, with the cause in the message.

How a condition clears (``Clears``): ``repair`` conditions stay until the GPU is reset (the fake
GPUs' ``recover``), an administrator says it is repaired (``dra-gpu health repair``), or the node
reboots; ``check`` conditions clear when the periodic check no longer sees them; ``hold``
conditions clear after ``hold_s`` without a recurrence. An XID nobody classified is ``degraded``
(logged by the monitor): never ignored, never a reason to evict. The GPU recovery action is NVML's
state, not a one-off: its condition (raised by the event or by the check) is a ``check`` one, kept
while a check cannot read the action and cleared when a check reads ``none``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from dra_driver.core.health_causes import (
    EVENT_CAUSES,
    EVENT_KINDS,
    KEY_GPU_LOST,
    KEY_MEMORY_REPAIR,
    KEY_RECOVERY_ACTION,
    KEY_UNMONITORED,
    KEY_XID,
    MAX_XID,
    RECOVERY_ACTIONS,
    XID_CLASSES,
    Clears,
    Severity,
)
from dra_driver.core.mig_publish import DeviceTarget
from dra_driver.core.schema import DeviceSpec

_RANK = {Severity.INFORMATIONAL: 0, Severity.APPLICATION: 1, Severity.DEGRADED: 2, Severity.FATAL: 3}
UNHEALTHY = frozenset({Severity.FATAL, Severity.DEGRADED})

MAX_MESSAGE = 1024  # the kubelet truncates a health message beyond this
MAX_CONDITIONS_PER_GPU = 16  # the API's limit of taints per device (since 1.35)


@dataclass(frozen=True, slots=True)
class HealthEvent:
    """One thing that happened to a GPU, as a health source saw it."""

    gpu_uuid: str
    kind: str
    """One of ``EVENT_KINDS``."""
    at: float
    """Unix seconds."""
    xid: int | None = None
    detail: str = ""
    """Free text from the source (NVML's words, the MIG instance), kept in the message."""
    action: str = ""
    """The recovery action NVML asks for (``gpu-recovery-action`` events): a key of ``RECOVERY_ACTIONS``."""


@dataclass(frozen=True, slots=True)
class GpuCheck:
    """What one periodic check saw on one GPU."""

    lost: bool = False
    """NVML answers GPU_IS_LOST (or the device is gone)."""
    retirement_pending: bool = False
    """Retired pages wait for a reset to take effect."""
    remap_pending: bool = False
    """Remapped rows wait for a reset to take effect."""
    remap_failed: bool = False
    """Row remapping failed: the memory cannot be repaired."""
    error: str = ""
    """The check itself failed (NVML error): the GPU is not monitored."""
    recovery_action: str = ""
    """The recovery action NVML asks for (a key of ``RECOVERY_ACTIONS``, ``none`` included); '' when not read."""


@dataclass(frozen=True, slots=True)
class Condition:
    """One reason a GPU is not (fully) healthy: a taint ``<driver>/<key>=<value>`` while it lasts."""

    key: str
    value: str
    severity: Severity
    clears: Clears
    since: float
    """When it was first seen."""
    message: str
    last_seen: float = 0.0
    """When it was last seen (a recurrence); ``seen`` is the later of the two."""

    @property
    def seen(self) -> float:
        """When it was last seen: what a repair and the hold are measured against."""
        return max(self.since, self.last_seen)

    def to_json(self) -> dict[str, Any]:
        """The persisted form."""
        return {
            "key": self.key,
            "value": self.value,
            "severity": self.severity.value,
            "clears": self.clears.value,
            "since": self.since,
            "lastSeen": self.seen,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class HealthBook:
    """Every GPU's conditions, by GPU UUID. Immutable: each change returns a new book."""

    conditions: Mapping[str, tuple[Condition, ...]] = field(default_factory=dict)

    def of(self, gpu_uuid: str) -> tuple[Condition, ...]:
        """The GPU's conditions (none: healthy)."""
        return self.conditions.get(gpu_uuid, ())

    def with_conditions(self, gpu_uuid: str, conds: Iterable[Condition]) -> HealthBook:
        """The book with ``gpu_uuid``'s conditions replaced (sorted by key; none removes the GPU)."""
        out = dict(self.conditions)
        kept = tuple(sorted(conds, key=lambda c: c.key))
        if kept:
            out[gpu_uuid] = kept
        else:
            out.pop(gpu_uuid, None)
        return HealthBook(out)


@dataclass(frozen=True, slots=True)
class TaintPolicy:
    """What the cluster allows.

    Eviction of pods on fatal causes, the ``None`` effect (1.35+), how many taints a device may
    carry (16; 4 before 1.35), and whether taints reach the scheduler at all.
    """

    evict_fatal: bool = False
    effect_none: bool = True
    max_taints: int = 16
    withhold_unhealthy: bool = False
    """The server drops taints (``DRADeviceTaints`` off): leave the devices of an unhealthy GPU out instead."""


def classify_xid(xid: int) -> tuple[Severity, str, bool]:
    """(severity, description, known) of an XID; an unknown one is degraded, never ignored."""
    known = XID_CLASSES.get(xid)
    if known is not None:
        return known[0], known[1], True
    return Severity.DEGRADED, "XID not in the catalog this driver knows: treated as degraded until repaired", False


def clip_message(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` cut to ``limit`` characters (ending in ``...`` when cut): what the kubelet keeps of a message."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def condition_for(event: HealthEvent) -> Condition | None:
    """The condition an event raises (``EVENT_CAUSES``); None for a recorded-only kind, a reset or no action.

    Raises ValueError for an event a source should never produce (unknown kind, missing or absurd
    XID, unknown recovery action).
    """
    cause = EVENT_CAUSES.get(event.kind)
    if cause is None:
        raise ValueError(f"health event on {event.gpu_uuid}: unknown kind {event.kind[:40]!r}; known: {', '.join(EVENT_KINDS)}")
    detail = f" ({event.detail})" if event.detail else ""
    if event.kind == "xid":
        if event.xid is None or not 0 <= event.xid < MAX_XID:
            raise ValueError(f"XID event on {event.gpu_uuid} without a valid XID number: {event.xid!r}")
        severity, what, _ = classify_xid(event.xid)
        clears = Clears.HOLD if severity in (Severity.APPLICATION, Severity.INFORMATIONAL) else Clears.REPAIR
        return Condition(
            KEY_XID, str(event.xid), severity, clears, event.at, clip_message(f"XID {event.xid}: {what}{detail}"), event.at
        )
    if event.kind == "gpu-recovery-action":
        return _recovery_condition(event.action, event.at, detail, where=f"recovery action event on {event.gpu_uuid}")
    if not cause.key or cause.severity is None:
        return None
    msg = clip_message(f"{cause.what}{detail}")
    return Condition(cause.key, cause.value, cause.severity, cause.clears, event.at, msg, event.at)


def _recovery_condition(action: str, at: float, detail: str, *, where: str) -> Condition | None:
    """The condition of a recovery action NVML asks for (None for ``none``).

    A known action lasts while the checks read it (``check``); ``unknown`` (unreadable, or a value this
    driver does not know) stays until repaired: no check will say it is over.
    """
    known = RECOVERY_ACTIONS.get(action)
    if known is None:
        raise ValueError(f"{where}: unknown recovery action {action[:40]!r}; known: {', '.join(RECOVERY_ACTIONS)}")
    if known.severity is None:
        return None
    clears = Clears.REPAIR if action == "unknown" else Clears.CHECK
    msg = clip_message(f"GPU recovery action: {known.what}{detail}")
    return Condition(KEY_RECOVERY_ACTION, action, known.severity, clears, at, msg, at)


def _merge(old: Condition | None, new: Condition) -> Condition:
    """One condition per key: the more severe wins; at equal severity the newer (its first time kept).

    A milder recurrence still counts as a sighting of the kept one (``last_seen``): a repair asked for
    before it, or the hold, must not clear what is still happening.
    """
    if old is None:
        return new
    if _RANK[new.severity] > _RANK[old.severity]:
        return new
    if _RANK[new.severity] < _RANK[old.severity]:
        return replace(old, last_seen=max(old.seen, new.seen))
    stricter = old.clears if old.clears is Clears.REPAIR else new.clears
    since = min(old.since, new.since) if new.value == old.value else new.since
    return replace(new, clears=stricter, since=since, last_seen=max(old.seen, new.seen))


def record_event(book: HealthBook, event: HealthEvent) -> HealthBook:
    """Fold one event in. A reset clears everything but what the checks see (they decide on those).

    A recorded-only kind (``EVENT_CAUSES`` without a key) changes nothing.
    """
    current = {c.key: c for c in book.of(event.gpu_uuid)}
    cond = condition_for(event)
    if event.kind == "gpu-reset":
        return book.with_conditions(event.gpu_uuid, [c for c in current.values() if c.clears is Clears.CHECK])
    if cond is None:
        return book
    current[cond.key] = _merge(current.get(cond.key), cond)
    if len(current) > MAX_CONDITIONS_PER_GPU:  # cannot happen with the fixed keys; bounded anyway
        return book
    return book.with_conditions(event.gpu_uuid, current.values())


def check_conditions(check: GpuCheck, at: float) -> list[Condition]:
    """The conditions one check sees on a GPU (the ``check`` kind: they clear when no longer seen)."""
    out: list[Condition] = []
    if check.lost:
        out.append(Condition(KEY_GPU_LOST, "lost", Severity.FATAL, Clears.CHECK, at, "GPU lost: NVML cannot reach it", at))
    if check.remap_failed:
        msg = "row remapping failed: the GPU's memory cannot be repaired"
        out.append(Condition(KEY_MEMORY_REPAIR, "remap-failed", Severity.FATAL, Clears.CHECK, at, msg, at))
    elif check.remap_pending or check.retirement_pending:
        value = "remap-pending" if check.remap_pending else "retirement-pending"
        msg = "memory repair recorded, waiting for a GPU reset (drain the GPU, then reset it)"
        out.append(Condition(KEY_MEMORY_REPAIR, value, Severity.DEGRADED, Clears.CHECK, at, msg, at))
    if check.recovery_action:
        cond = _recovery_condition(check.recovery_action, at, "", where="check")
        if cond is not None:
            out.append(cond)
    if check.error:
        msg = clip_message(f"health check failed, the GPU is not monitored: {check.error}")
        out.append(Condition(KEY_UNMONITORED, "check-failed", Severity.INFORMATIONAL, Clears.CHECK, at, msg, at))
    return out


def record_check(book: HealthBook, gpu_uuid: str, check: GpuCheck, at: float) -> HealthBook:
    """Replace the GPU's ``check`` conditions with what this check saw (keeping their first time).

    A recovery action the check did not read (``recovery_action`` empty) is not seen gone: its
    condition stays until a check reads another action or ``none``.
    """
    current = book.of(gpu_uuid)
    previous = {c.key: c for c in current if c.clears is Clears.CHECK}
    seen = []
    for c in check_conditions(check, at):
        old = previous.get(c.key)
        # Seen again: its times stay (a check condition is neither repaired nor held), so a pass that
        # sees the same as the last one changes nothing: no write, no republication.
        seen.append(replace(c, since=old.since, last_seen=old.last_seen) if old is not None and old.value == c.value else c)
    seen_keys = {c.key for c in seen}
    unread = {KEY_RECOVERY_ACTION} if not check.recovery_action else set()
    others = [
        c
        for c in current
        if (c.clears is not Clears.CHECK or c.key in unread) and not (c.key in seen_keys and _outranked(c, seen))
    ]
    merged = {c.key: c for c in others}
    for c in seen:
        merged[c.key] = _merge(merged.get(c.key), c) if c.key in merged else c
    return book.with_conditions(gpu_uuid, merged.values())


def _outranked(c: Condition, seen: Sequence[Condition]) -> bool:
    return any(s.key == c.key and _RANK[s.severity] > _RANK[c.severity] for s in seen)


def repair(book: HealthBook, gpu_uuid: str, at: float) -> tuple[HealthBook, list[Condition]]:
    """An administrator says the GPU is repaired as of ``at``: clear what was raised until then.

    ``check`` conditions stay (a repair cannot make a lost GPU answer; the next check decides).
    Returns the new book and the conditions cleared.
    """
    cleared = [c for c in book.of(gpu_uuid) if c.clears is not Clears.CHECK and c.seen <= at]
    kept = [c for c in book.of(gpu_uuid) if c not in cleared]
    return book.with_conditions(gpu_uuid, kept), cleared


def expire(book: HealthBook, now: float, hold_s: float) -> HealthBook:
    """Drop ``hold`` conditions older than ``hold_s``."""
    out = book
    for uuid, conds in book.conditions.items():
        kept = [c for c in conds if not (c.clears is Clears.HOLD and now - c.seen >= hold_s)]
        if len(kept) != len(conds):
            out = out.with_conditions(uuid, kept)
    return out


def next_expiry(book: HealthBook, hold_s: float) -> float | None:
    """When the next ``hold`` condition expires (None: none will)."""
    times = [c.seen + hold_s for conds in book.conditions.values() for c in conds if c.clears is Clears.HOLD]
    return min(times) if times else None


def taint_effect(severity: Severity, policy: TaintPolicy) -> str | None:
    """The taint effect of a severity under ``policy`` (None: no taint)."""
    if severity is Severity.FATAL:
        return "NoExecute" if policy.evict_fatal else "NoSchedule"
    if severity is Severity.DEGRADED:
        return "NoSchedule"
    return "None" if policy.effect_none else None


def taints_for(conds: Sequence[Condition], driver: str, policy: TaintPolicy) -> list[dict[str, str]]:
    """The device taints of a GPU's conditions, sorted by key (one per key).

    The most severe are kept when there are more than the server allows per device.
    """
    out: list[dict[str, str]] = []
    for c in sorted(conds, key=lambda c: (-_RANK[c.severity], c.key)):
        effect = taint_effect(c.severity, policy)
        if effect is not None and len(out) < policy.max_taints:
            out.append({"key": f"{driver}/{c.key}", "value": c.value, "effect": effect})
    return sorted(out, key=lambda t: t["key"])


def tainted_devices(
    devices: Sequence[DeviceSpec],
    targets: Mapping[str, DeviceTarget],
    book: HealthBook,
    driver: str,
    policy: TaintPolicy,
) -> list[DeviceSpec]:
    """The node's devices with their GPU's taints: the GPU, each MIG placement and share on it.

    With ``policy.withhold_unhealthy`` the devices of an unhealthy GPU are left out instead (their
    taints would be dropped by the server, and the scheduler would hand them out).
    """
    out = []
    for dev in devices:
        target = targets.get(dev.name)
        conds = book.of(target.gpu.uuid) if target is not None else ()
        if conds and policy.withhold_unhealthy and is_unhealthy(conds):
            continue
        taints = taints_for(conds, driver, policy) if conds else []
        out.append(replace(dev, extra={**dev.extra, "taints": taints}) if taints else dev)
    return out


def is_unhealthy(conds: Sequence[Condition]) -> bool:
    """True when any condition makes the device Unhealthy for the kubelet."""
    return any(c.severity in UNHEALTHY for c in conds)


def health_message(conds: Sequence[Condition]) -> str:
    """The conditions in words, most severe first (empty when healthy), at most 1024 characters."""
    ordered = sorted(conds, key=lambda c: (-_RANK[c.severity], c.key))
    return clip_message("; ".join(f"{c.severity.value}: {c.message}" for c in ordered))


class HealthSource(Protocol):
    """Where health comes from (``dra_driver.sources.nvml_health``, ``dra_driver.sources.fake_health``).

    Read-only towards the GPUs. Called from the plugin's health monitor thread only.
    """

    name: str
    """Short and stable (``nvml``, ``fake``): the key of this source's position in the record."""

    def resume(self, position: int) -> None:
        """Skip what was consumed before a restart (``position`` as ``position()`` returned it)."""
        ...

    def position(self) -> int:
        """How far events were consumed (a source without a replayable log returns 0)."""
        ...

    def events(self, timeout_s: float) -> list[HealthEvent]:
        """Wait up to ``timeout_s`` for events; return the new ones (possibly none).

        Never raises for one bad event: it is logged and skipped.
        """
        ...

    def check(self, gpu_uuids: Sequence[str]) -> dict[str, GpuCheck]:
        """A periodic check of each GPU (a GPU left out was not checked this time)."""
        ...

    def close(self) -> None:
        """Release NVML event sets, files."""
        ...
