"""Fake GPU faults: a health source for fake GPUs, and the CLI that makes them fail and recover.

The CLI (``python -m dra_driver.sources.fake_health``) is the fault-side twin of the MIG
simulator's (``python -m dra_driver.mig_backends.sim``): it appends events (an XID, a double-bit
ECC error, a lost GPU, a reset, or any other kind of ``dra_driver.core.health_causes.EVENT_CAUSES``:
the NVML event types) and sets what periodic checks see (lost, memory repair pending or failed, the
GPU recovery action, a failing check) in ``<fake GPU state dir>/gpu-faults.json``, under a flock,
atomically:

    python -m dra_driver.sources.fake_health --state-dir D --fake-gpus h100x8 --node-name n xid --gpu 0 --xid 79
    python -m dra_driver.sources.fake_health --state-dir D --fake-gpus h100x8 --node-name n event --gpu 2 --kind fatal-poison
    python -m dra_driver.sources.fake_health --state-dir D --fake-gpus h100x8 --node-name n recovery --gpu 3 --action gpu-reset
    python -m dra_driver.sources.fake_health --state-dir D --fake-gpus h100x8 --node-name n memory --gpu 1 --remap-pending
    python -m dra_driver.sources.fake_health --state-dir D --fake-gpus h100x8 --node-name n recover --gpu 0
    python -m dra_driver.sources.fake_health --state-dir D --fake-gpus h100x8 --node-name n list

``FakeHealthSource`` (the plugin's source with ``--fake-gpus``) only reads the file: events after
the position it resumed from, checks as they stand. Events carry a sequence number, so a restarted
plugin neither replays nor misses one. Used by tests, e2e scenarios and the demo.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog

from dra_driver.core.health import GpuCheck, HealthEvent, condition_for
from dra_driver.core.health_causes import EVENT_KINDS, MAX_XID, RECOVERY_ACTIONS
from dra_driver.files.atomic import write_atomic
from dra_driver.files.lock import file_lock
from dra_driver.sources.fake import FakeGpuSource

log = structlog.get_logger(__name__)

FAULTS_FILE = "gpu-faults.json"
FORMAT_VERSION = 1
MAX_EVENTS_KEPT = 1000
MAX_FILE_BYTES = 4 << 20
MAX_DETAIL = 256
POLL_S = 0.1
MAX_TIME = 1e11  # Unix seconds: year 5138


@dataclass(frozen=True, slots=True)
class FaultLog:
    """The file's content: events with sequence numbers, and what checks see per GPU UUID."""

    next_seq: int
    events: tuple[tuple[int, HealthEvent], ...]
    checks: dict[str, GpuCheck]


def _check_json(c: GpuCheck) -> dict[str, Any]:
    return {
        "lost": c.lost,
        "retirementPending": c.retirement_pending,
        "remapPending": c.remap_pending,
        "remapFailed": c.remap_failed,
        "error": c.error,
        "recoveryAction": c.recovery_action,
    }


def _encode(fl: FaultLog) -> bytes:
    doc = {
        "version": FORMAT_VERSION,
        "nextSeq": fl.next_seq,
        "events": [
            {"seq": s, "uuid": e.gpu_uuid, "kind": e.kind, "at": e.at, "xid": e.xid, "detail": e.detail, "action": e.action}
            for s, e in fl.events
        ],
        "checks": {u: _check_json(c) for u, c in sorted(fl.checks.items())},
    }
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


class FaultFileError(ValueError):
    """The fault file cannot be used; the message says what is wrong."""


def _event(raw: Any) -> tuple[int, HealthEvent]:
    if not isinstance(raw, dict):
        raise FaultFileError("an event is not an object")
    seq, uuid, kind, at, xid, detail = (raw.get(k) for k in ("seq", "uuid", "kind", "at", "xid", "detail"))
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise FaultFileError(f"event seq {seq!r} is not a non-negative integer")
    if not isinstance(uuid, str) or not isinstance(kind, str) or kind not in EVENT_KINDS:
        raise FaultFileError(f"event {seq}: uuid or kind {kind!r} is not valid")
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not 0 <= at < MAX_TIME:
        raise FaultFileError(f"event {seq}: at {str(at)[:40]} is not a Unix time")
    if xid is not None and (isinstance(xid, bool) or not isinstance(xid, int) or not 0 <= xid < MAX_XID):
        raise FaultFileError(f"event {seq}: xid {xid!r} is not an XID")
    if not isinstance(detail, str) or len(detail) > MAX_DETAIL:
        raise FaultFileError(f"event {seq}: detail is not a short string")
    action = raw.get("action", "")
    if not isinstance(action, str) or (action and action not in RECOVERY_ACTIONS):
        raise FaultFileError(f"event {seq}: action {str(action)[:40]!r} is not a recovery action")
    event = HealthEvent(gpu_uuid=uuid, kind=kind, at=float(at), xid=xid, detail=detail, action=action)
    try:
        condition_for(event)
    except ValueError as err:  # an XID event without its number, a recovery action event without its action
        raise FaultFileError(f"event {seq}: {err}") from None
    return seq, event


def _check(raw: Any) -> GpuCheck:
    if not isinstance(raw, dict):
        raise FaultFileError("a check is not an object")
    flags = [raw.get(k, False) for k in ("lost", "retirementPending", "remapPending", "remapFailed")]
    error, action = raw.get("error", ""), raw.get("recoveryAction", "")
    if not all(isinstance(f, bool) for f in flags) or not isinstance(error, str) or len(error) > MAX_DETAIL:
        raise FaultFileError("a check has flags that are not booleans, or a long error")
    if not isinstance(action, str) or (action and action not in RECOVERY_ACTIONS):
        raise FaultFileError(f"a check's recoveryAction {str(action)[:40]!r} is not a recovery action")
    lost, retirement, remap, failed = flags
    return GpuCheck(
        lost=lost, retirement_pending=retirement, remap_pending=remap, remap_failed=failed, error=error, recovery_action=action
    )


def decode(data: bytes) -> FaultLog:
    """Parse the fault file; raises FaultFileError naming what is wrong (bounded work)."""
    if len(data) > MAX_FILE_BYTES:
        raise FaultFileError(f"the fault file is larger than {MAX_FILE_BYTES} bytes")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as err:
        raise FaultFileError(f"the fault file is not JSON: {err}") from None
    if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
        raise FaultFileError(f"unknown fault file version (this driver reads {FORMAT_VERSION})")
    events, checks, next_seq = doc.get("events", []), doc.get("checks", {}), doc.get("nextSeq", 0)
    if not isinstance(events, list) or not isinstance(checks, dict) or not isinstance(next_seq, int):
        raise FaultFileError("events, checks or nextSeq has the wrong type")
    if len(events) > MAX_EVENTS_KEPT or len(checks) > 64:
        raise FaultFileError("too many events or checks in the fault file")
    return FaultLog(next_seq, tuple(_event(e) for e in events), {str(u): _check(c) for u, c in checks.items()})


def read_faults(path: Path) -> FaultLog:
    """The file's content; an absent file is an empty log."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return FaultLog(0, (), {})
    return decode(data)


class FakeHealthSource:
    """The ``HealthSource`` of fake GPUs: reads ``gpu-faults.json``, never writes it."""

    name = "fake"

    def __init__(
        self, state_dir: Path, *, sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._path = state_dir / FAULTS_FILE
        self._position = 0
        self._sleep = sleep
        self._clock = clock
        self._stamp: tuple[int, int, int] | None = None
        self._warned = ""

    def resume(self, position: int) -> None:
        """Events up to ``position`` were consumed before a restart."""
        self._position = max(0, position)

    def position(self) -> int:
        """The next sequence number to read."""
        return self._position

    def _load(self) -> FaultLog | None:
        try:
            return read_faults(self._path)
        except (FaultFileError, OSError) as err:
            if str(err) != self._warned:  # once per distinct problem, not every poll
                self._warned = str(err)
                log.error("fake_faults_unreadable", path=str(self._path), error=str(err))
            return None

    def _changed(self) -> bool:
        try:
            st = self._path.stat()
        except FileNotFoundError:
            return False
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        return True

    def events(self, timeout_s: float) -> list[HealthEvent]:
        """Events appended since the position, waiting (polling the file) up to ``timeout_s``."""
        deadline = self._clock() + timeout_s
        while True:
            if self._changed() or self._stamp is None:
                fl = self._load()
                if fl is not None:
                    new = [(s, e) for s, e in fl.events if s >= self._position]
                    if fl.next_seq < self._position:  # the file was reset: start over
                        new = list(fl.events)
                    self._position = fl.next_seq
                    if new:
                        return [e for _, e in new]
            remaining = deadline - self._clock()
            if remaining <= 0:
                return []
            self._sleep(min(POLL_S, remaining))

    def check(self, gpu_uuids: Sequence[str]) -> dict[str, GpuCheck]:
        """What the file says checks see (an unreadable file: every GPU's check failed)."""
        fl = self._load()
        if fl is None:
            return {u: GpuCheck(error=f"fault file unreadable: {self._warned}") for u in gpu_uuids}
        return {u: fl.checks.get(u, GpuCheck()) for u in gpu_uuids}

    def close(self) -> None:
        """Nothing to release."""


# -- the CLI ----------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dra_driver.sources.fake_health", description=__doc__.splitlines()[0])
    p.add_argument("--state-dir", type=Path, required=True, help="the plugin's fake GPU state dir (--fake-gpu-state-dir)")
    p.add_argument("--fake-gpus", required=True, help="fake GPU profile (h100x8, ...)")
    p.add_argument("--node-name", required=True, help="node name (fake GPU UUIDs derive from it)")
    sub = p.add_subparsers(dest="command", required=True)
    x = sub.add_parser("xid", help="an XID event")
    x.add_argument("--gpu", type=int, required=True)
    x.add_argument("--xid", type=int, required=True)
    x.add_argument("--detail", default="")
    for name, what in (("ecc", "a double-bit ECC event"), ("lose", "the GPU falls off the bus (event, and checks see it lost)")):
        s = sub.add_parser(name, help=what)
        s.add_argument("--gpu", type=int, required=True)
    e = sub.add_parser("event", help="an event of any kind (the NVML event types: single-bit-ecc-storm, fatal-poison, ...)")
    e.add_argument("--gpu", type=int, required=True)
    e.add_argument("--kind", required=True, choices=[k for k in EVENT_KINDS if k not in ("xid", "gpu-recovery-action")])
    e.add_argument("--detail", default="")
    a = sub.add_parser("recovery", help="NVML asks for a recovery action: the event, and checks read it until recovered")
    a.add_argument("--gpu", type=int, required=True)
    a.add_argument("--action", required=True, choices=list(RECOVERY_ACTIONS))
    r = sub.add_parser("recover", help="the GPU was reset: checks see it healthy, a reset event clears what it raised")
    r.add_argument("--gpu", type=int, required=True)
    m = sub.add_parser("memory", help="what checks see about memory repair")
    m.add_argument("--gpu", type=int, required=True)
    g = m.add_mutually_exclusive_group(required=True)
    for flag in ("--retirement-pending", "--remap-pending", "--remap-failed", "--clear"):
        g.add_argument(flag, action="store_true")
    b = sub.add_parser("break-checks", help="checks of the GPU fail with this error ('' clears)")
    b.add_argument("--gpu", type=int, required=True)
    b.add_argument("--error", required=True)
    sub.add_parser("list", help="print the fault file as JSON")
    return p


def _change(path: Path, edit: Callable[[FaultLog], FaultLog]) -> FaultLog:
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.parent / (FAULTS_FILE + ".lock")):
        fl = edit(read_faults(path))
        write_atomic(path, _encode(fl), mode=0o644)
    return fl


def _append(fl: FaultLog, event: HealthEvent) -> FaultLog:
    events = (*fl.events, (fl.next_seq, event))[-MAX_EVENTS_KEPT:]
    return FaultLog(fl.next_seq + 1, events, fl.checks)


def _with_check(fl: FaultLog, uuid: str, check: GpuCheck) -> FaultLog:
    return FaultLog(fl.next_seq, fl.events, {**fl.checks, uuid: check})


Edit = Callable[[FaultLog], FaultLog]


def _xid(a: argparse.Namespace, uuid: str, now: float) -> Edit | str:
    if not 0 <= a.xid < MAX_XID or len(a.detail) > MAX_DETAIL:
        return f"--xid must be in [0, {MAX_XID}) and --detail at most {MAX_DETAIL} characters"
    return lambda fl: _append(fl, HealthEvent(uuid, "xid", now, a.xid, a.detail))


def _event_of_kind(a: argparse.Namespace, uuid: str, now: float) -> Edit | str:
    if len(a.detail) > MAX_DETAIL:
        return f"--detail must be at most {MAX_DETAIL} characters"
    return lambda fl: _append(fl, HealthEvent(uuid, a.kind, now, detail=a.detail))


def _recovery(a: argparse.Namespace, uuid: str, now: float) -> Edit | str:
    """Like NVML: the event, and the field reads the action until the GPU is recovered."""
    event = HealthEvent(uuid, "gpu-recovery-action", now, action=a.action)
    return lambda fl: _with_check(_append(fl, event), uuid, replace(fl.checks.get(uuid, GpuCheck()), recovery_action=a.action))


def _memory(a: argparse.Namespace, uuid: str, now: float) -> Edit | str:
    check = GpuCheck(retirement_pending=a.retirement_pending, remap_pending=a.remap_pending, remap_failed=a.remap_failed)
    return lambda fl: _with_check(fl, uuid, check)


def _break_checks(a: argparse.Namespace, uuid: str, now: float) -> Edit | str:
    if len(a.error) > MAX_DETAIL:
        return f"--error must be at most {MAX_DETAIL} characters"
    return lambda fl: _with_check(fl, uuid, GpuCheck(error=a.error))


_EDITS: dict[str, Callable[[argparse.Namespace, str, float], Edit | str]] = {
    "xid": _xid,
    "ecc": lambda a, uuid, now: lambda fl: _append(fl, HealthEvent(uuid, "double-bit-ecc", now)),
    "lose": lambda a, uuid, now: (
        lambda fl: _with_check(_append(fl, HealthEvent(uuid, "gpu-lost", now)), uuid, GpuCheck(lost=True))
    ),
    "event": _event_of_kind,
    "recovery": _recovery,
    "recover": lambda a, uuid, now: (
        lambda fl: _with_check(_append(fl, HealthEvent(uuid, "gpu-reset", now)), uuid, GpuCheck(recovery_action="none"))
    ),
    "memory": _memory,
    "break-checks": _break_checks,
}
"""Per command, the change it makes to the fault log, or what is wrong with its arguments."""


def main(argv: list[str] | None = None) -> int:
    """Run one command; 0 on success, 2 on a bad argument (named on stderr)."""
    a = _parser().parse_args(argv)
    try:
        gpus = {g.minor: g.uuid for g in FakeGpuSource(a.fake_gpus, a.node_name).gpus()}
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    path = a.state_dir / FAULTS_FILE
    if a.command == "list":
        print(_encode(read_faults(path)).decode(), end="")
        return 0
    if a.gpu not in gpus:
        print(f"error: no GPU with minor {a.gpu} in profile {a.fake_gpus}", file=sys.stderr)
        return 2
    edit = _EDITS[a.command](a, gpus[a.gpu], time.time())
    if isinstance(edit, str):
        print(f"error: {edit}", file=sys.stderr)
        return 2
    fl = _change(path, edit)
    print(json.dumps({"gpu": a.gpu, "uuid": gpus[a.gpu], "command": a.command, "nextSeq": fl.next_seq}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
