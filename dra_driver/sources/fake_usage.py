"""Usage of fake GPUs: a scripted workload per claim (or per device) drives the numbers.

Implements ``dra_driver.core.usage.UsageSource`` for ``--fake-gpus``. The script is a small JSON
file in the fake GPU state dir (the plugin's ``--fake-gpu-state-dir``), ``usage-script.json``::

    {"claims":  {"<claim uid>": <schedule>, ...},
     "devices": {"<device name>": <schedule>, ...}}

    <schedule> = {"since": <epoch seconds>,
                  "steps": [[<seconds after since>, <utilization 0..1 or null>, <memory bytes or null>], ...],
                  "processes": [[<pid>, <utilization or null>, <memory bytes or null>], ...]}

The step in force is the last one whose offset has passed (before the first: the first); a
constant workload is one step at 0, ``null`` utilization reads as "the source cannot tell" (as
NVML on a MIG device). A device's own entry wins over its claim's. A device with neither is
**idle** (utilization 0, no memory used), so an untouched claim in the demo is flagged idle.
A script that cannot be read or decoded makes every device unknown (logged once), never idle.

Read by the kubelet plugin's usage sampler (``kubelet_plugin.monitoring.usage``) on every pass (the file is
decoded again only when it changes); written by tests and the demo with the command below
(under an flock, atomically, like the MIG and sharing simulators' state)::

    python -m dra_driver.sources.fake_usage --state-dir D set --claim UID --utilization 0.8 --memory 10Gi
    python -m dra_driver.sources.fake_usage --state-dir D set --device gpu-3 --utilization 0.5
    python -m dra_driver.sources.fake_usage --state-dir D steps --claim UID --step 0:0.9:10Gi --step 600:0:10Gi
    python -m dra_driver.sources.fake_usage --state-dir D idle --claim UID
    python -m dra_driver.sources.fake_usage --state-dir D clear --claim UID
    python -m dra_driver.sources.fake_usage --state-dir D list
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from dra_driver.core.quantity import QuantityError, parse_quantity
from dra_driver.core.usage import DeviceKey, ProcessUsage, UsageSample, UsageTarget
from dra_driver.files.atomic import write_atomic
from dra_driver.files.lock import file_lock

log = structlog.get_logger(__name__)

SCRIPT_FILE = "usage-script.json"
MAX_SCRIPT_BYTES = 4 << 20
"""A script is a few hundred bytes per claim; a larger file is refused unread."""


class ScriptError(ValueError):
    """The usage script (or a command's argument) is not valid; the message says where."""


@dataclass(frozen=True, slots=True)
class Step:
    """From ``offset_s`` after the schedule's start on: this utilization and memory."""

    offset_s: float
    utilization: float | None
    memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A scripted workload: steps from ``since`` on, and the processes it shows."""

    since: float
    steps: tuple[Step, ...]
    processes: tuple[ProcessUsage, ...] = ()

    def at(self, now: float) -> Step:
        """The step in force at ``now`` (before the first offset: the first step)."""
        current = self.steps[0]
        for step in self.steps:
            if now - self.since >= step.offset_s:
                current = step
        return current

    def to_json(self) -> dict[str, Any]:
        """Script JSON."""
        out: dict[str, Any] = {"since": self.since, "steps": [[s.offset_s, s.utilization, s.memory_bytes] for s in self.steps]}
        if self.processes:
            out["processes"] = [[p.pid, p.utilization, p.memory_bytes] for p in self.processes]
        return out


IDLE = Step(0.0, 0.0, 0)


@dataclass(frozen=True, slots=True)
class Script:
    """The decoded script file."""

    claims: Mapping[str, Schedule]
    devices: Mapping[str, Schedule]

    def to_json(self) -> dict[str, Any]:
        """Script file JSON."""
        return {
            "claims": {k: v.to_json() for k, v in sorted(self.claims.items())},
            "devices": {k: v.to_json() for k, v in sorted(self.devices.items())},
        }


MAX_NUMBER = 1e15
"""Larger magnitudes are refused (an int beyond a float's range would overflow, not be an error)."""


def _number(raw: Any, where: str, *, lo: float | None = None, hi: float | None = None) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise ScriptError(f"{where}: {str(raw)[:40]} is not a number")
    if (isinstance(raw, int) and abs(raw) > MAX_NUMBER) or not math.isfinite(raw) or abs(raw) > MAX_NUMBER:
        raise ScriptError(f"{where}: not a finite number of at most {MAX_NUMBER:g}")
    if (lo is not None and raw < lo) or (hi is not None and raw > hi):
        raise ScriptError(f"{where}: {raw} is not in [{lo}, {hi}]")
    return float(raw)


def _utilization(raw: Any, where: str) -> float | None:
    return None if raw is None else _number(raw, where, lo=0.0, hi=1.0)


def _memory(raw: Any, where: str) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= MAX_NUMBER:
        raise ScriptError(f"{where}: not a byte count of at most {MAX_NUMBER:g}")
    return raw


def _triple(raw: Any, where: str) -> tuple[Any, Any, Any]:
    if not isinstance(raw, list) or len(raw) != 3:
        raise ScriptError(f"{where}: expected [a, b, c], got {raw!r}")
    return raw[0], raw[1], raw[2]


def decode_schedule(raw: Any, where: str) -> Schedule:
    """One schedule from script JSON; ScriptError naming ``where``."""
    if not isinstance(raw, dict):
        raise ScriptError(f"{where}: not an object")
    steps_raw = raw.get("steps")
    if not isinstance(steps_raw, list) or not steps_raw:
        raise ScriptError(f"{where}.steps: a non-empty list is required")
    steps = []
    for i, s in enumerate(steps_raw):
        offset, util, mem = _triple(s, f"{where}.steps[{i}]")
        steps.append(
            Step(
                _number(offset, f"{where}.steps[{i}][0]", lo=0.0),
                _utilization(util, f"{where}.steps[{i}][1]"),
                _memory(mem, f"{where}.steps[{i}][2]"),
            )
        )
    procs = []
    procs_raw = raw.get("processes", [])
    if not isinstance(procs_raw, list):
        raise ScriptError(f"{where}.processes: not a list")
    for i, p in enumerate(procs_raw):
        pid, util, mem = _triple(p, f"{where}.processes[{i}]")
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise ScriptError(f"{where}.processes[{i}][0]: {pid!r} is not a pid")
        procs.append(
            ProcessUsage(pid, _utilization(util, f"{where}.processes[{i}][1]"), _memory(mem, f"{where}.processes[{i}][2]"))
        )
    return Schedule(
        _number(raw.get("since", 0.0), f"{where}.since", lo=0.0),
        tuple(sorted(steps, key=lambda s: s.offset_s)),
        tuple(procs),
    )


def decode_script(raw: bytes) -> Script:
    """The script file's content; ScriptError saying what is wrong."""
    if len(raw) > MAX_SCRIPT_BYTES:
        raise ScriptError(f"{len(raw)} bytes is larger than a usage script may be ({MAX_SCRIPT_BYTES})")
    try:
        doc = json.loads(raw) if raw.strip() else {}
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ScriptError(f"not valid JSON: {str(err)[:200]}") from None
    if not isinstance(doc, dict):
        raise ScriptError("top level is not an object")
    out: dict[str, dict[str, Schedule]] = {"claims": {}, "devices": {}}
    for section, into in out.items():
        entries = doc.get(section)
        if entries is None:
            continue
        if not isinstance(entries, dict):
            raise ScriptError(f"{section}: not an object")
        for key, sched in entries.items():
            into[str(key)] = decode_schedule(sched, f"{section}[{key!r}]")
    return Script(out["claims"], out["devices"])


def read_script(path: Path) -> Script:
    """The script at ``path``; empty when missing; ScriptError when unreadable or invalid."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SCRIPT_BYTES + 1)
    except FileNotFoundError:
        return Script({}, {})
    except OSError as err:
        raise ScriptError(f"unreadable: {err.strerror or err}") from None
    return decode_script(raw)


class FakeUsageSource:
    """A ``UsageSource`` over the usage script in a fake GPU state dir."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / SCRIPT_FILE
        self._known: tuple[tuple[int, ...] | None, Script | None] | None = None
        self._told: str | None = None

    def describe(self) -> str:
        """``fake-usage:<script path>``."""
        return f"fake-usage:{self.path}"

    def close(self) -> None:
        """Nothing to release."""

    def _identity(self) -> tuple[int, ...] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def script(self) -> Script | None:
        """The script now (decoded again only when the file changed); None when it is invalid."""
        ident = self._identity()
        if self._known is not None and self._known[0] == ident:
            return self._known[1]
        try:
            script: Script | None = read_script(self.path)
            self._told = None
        except ScriptError as err:
            script = None
            if self._told != str(err):  # once per distinct error, not every pass
                log.warning("usage_script_invalid", path=str(self.path), error=str(err), effect="every device unknown")
                self._told = str(err)
        self._known = (ident, script)
        return script

    def sample(self, targets: Sequence[UsageTarget], now: float) -> dict[DeviceKey, UsageSample]:
        """Each target's scripted numbers at ``now`` (idle when unscripted); nothing when the script is invalid."""
        script = self.script()
        if script is None:
            return {}
        out: dict[DeviceKey, UsageSample] = {}
        for t in targets:
            sched = script.devices.get(t.device) or script.claims.get(t.claim_uid)
            step = IDLE if sched is None else sched.at(now)
            out[t.key] = UsageSample(
                device=t.device,
                gpu_uuid=t.gpu_uuid,
                mig_uuid=t.mig_uuid,
                utilization=step.utilization,
                memory_used_bytes=step.memory_bytes,
                at=now,
                processes=() if sched is None else sched.processes,
            )
        return out


# -- the command ---------------------------------------------------------------------------------


@contextmanager
def editing(state_dir: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """The script as JSON for a read-modify-write under the script's flock; written atomically if changed."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / SCRIPT_FILE
    with file_lock(state_dir / (SCRIPT_FILE + ".lock"), 30.0):
        doc = read_script(path).to_json()
        before = json.dumps(doc, sort_keys=True)
        yield doc
        after = json.dumps(doc, sort_keys=True)
        if after != before:
            decode_script(after.encode())  # never write a script the reader would refuse
            write_atomic(path, json.dumps(doc, sort_keys=True, indent=1).encode() + b"\n", mode=0o644)


def parse_bytes(text: str) -> int:
    """``10Gi``, ``512Mi``, ``1000000`` → bytes; ScriptError otherwise."""
    try:
        value = parse_quantity(text).as_int64()
    except QuantityError as err:
        raise ScriptError(f"memory {text!r}: {err}") from None
    if value is None or value < 0:
        raise ScriptError(f"memory {text!r} is not a byte count")
    return value


def _util_arg(text: str) -> float | None:
    if text in ("unknown", "null", "none"):
        return None
    try:
        return _utilization(float(text), f"utilization {text!r}")
    except ValueError:
        raise ScriptError(f"utilization {text!r} is not a number in [0, 1] or 'unknown'") from None


def parse_step(text: str) -> list[Any]:
    """``SECONDS:UTILIZATION[:MEMORY]`` → a script step."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ScriptError(f"step {text!r}: expected SECONDS:UTILIZATION[:MEMORY]")
    try:
        offset = _number(float(parts[0]), f"step {text!r}", lo=0.0)
    except ValueError:
        raise ScriptError(f"step {text!r}: {parts[0]!r} is not a number of seconds") from None
    mem = parse_bytes(parts[2]) if len(parts) == 3 and parts[2] else 0
    return [offset, _util_arg(parts[1]), mem]


def parse_process(text: str) -> list[Any]:
    """``PID:UTILIZATION[:MEMORY]`` → a script process."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0].isdigit() or int(parts[0]) <= 0:
        raise ScriptError(f"process {text!r}: expected PID:UTILIZATION[:MEMORY]")
    mem = parse_bytes(parts[2]) if len(parts) == 3 and parts[2] else None
    return [int(parts[0]), _util_arg(parts[1]), mem]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dra_driver.sources.fake_usage", description=__doc__.splitlines()[0])
    p.add_argument("--state-dir", type=Path, required=True, help="the plugin's fake GPU state dir (--fake-gpu-state-dir)")
    sub = p.add_subparsers(dest="command", required=True)

    def target(sp: argparse.ArgumentParser) -> None:
        g = sp.add_mutually_exclusive_group(required=True)
        g.add_argument("--claim", help="claim UID")
        g.add_argument("--device", help="device name (gpu-3, gpu-0-mig-1g10gb-6); wins over its claim's entry")

    s = sub.add_parser("set", help="a constant workload")
    target(s)
    s.add_argument("--utilization", required=True, help="0..1, or 'unknown'")
    s.add_argument("--memory", default="0", help="memory used, a quantity (10Gi)")
    s.add_argument("--process", action="append", default=[], help="PID:UTILIZATION[:MEMORY], repeatable")
    st = sub.add_parser("steps", help="a workload that changes over time (from now)")
    target(st)
    st.add_argument("--step", action="append", required=True, help="SECONDS:UTILIZATION[:MEMORY] after now, repeatable")
    st.add_argument("--process", action="append", default=[], help="PID:UTILIZATION[:MEMORY], repeatable")
    target(sub.add_parser("idle", help="utilization 0, no memory (what an unscripted claim reads)"))
    target(sub.add_parser("clear", help="forget the entry (back to the default: idle)"))
    sub.add_parser("list", help="print the script as JSON")
    return p


def run_command(args: argparse.Namespace, clock: Callable[[], float] = time.time) -> dict[str, Any]:
    """Apply one parsed command; the script afterwards (as JSON)."""
    if args.command == "list":
        return read_script(args.state_dir / SCRIPT_FILE).to_json()
    section, key = ("claims", args.claim) if args.claim else ("devices", args.device)
    with editing(args.state_dir) as doc:
        entries = doc.setdefault(section, {})
        if args.command == "clear":
            entries.pop(key, None)
        else:
            if args.command == "set":
                steps = [[0.0, _util_arg(args.utilization), parse_bytes(args.memory)]]
            elif args.command == "steps":
                steps = [parse_step(s) for s in args.step]
            else:
                steps = [[0.0, 0.0, 0]]
            sched: dict[str, Any] = {"since": clock(), "steps": steps}
            procs = [parse_process(p) for p in getattr(args, "process", [])]
            if procs:
                sched["processes"] = procs
            entries[key] = sched
        return dict(doc)


def main(argv: list[str] | None = None) -> int:
    """Run one command; 0 on success, 2 with a message when an argument or the script is invalid."""
    args = _parser().parse_args(argv)
    try:
        print(json.dumps(run_command(args), sort_keys=True, indent=1))
    except ScriptError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
