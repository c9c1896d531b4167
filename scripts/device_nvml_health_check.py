"""Read-only check of the NVML health source on a machine with real NVIDIA GPUs (H100/H200).

Run from the repository root: ``python scripts/device_nvml_health_check.py`` (no arguments; exit
status 0 once it printed its report, non-zero with a traceback when NVML cannot start). It builds an
``NvmlHealthSource`` for every GPU, which registers every event type the GPU supports one type at
a time, waits once for events (2 s), checks each GPU once (lost, memory repair, recovery action),
prints the results as one JSON object on stdout (the source's log lines go to stderr) and closes
the source:

* ``gpus``: the GPU UUIDs;
* ``registrations``: per GPU, ``supported``/``registered`` (NVML's masks), ``supported_types``,
  ``registered_types`` (accepted), ``refused_types`` (type: NVML's error) and
  ``unsupported_types`` by NVML name (``XidCriticalError``, ``MigConfigChange``, ...),
  ``watched_kinds`` (the driver's kinds), and ``error`` (why the GPU is unmonitored, '' if not);
* ``events`` and ``event_counts``: what arrived in the wait (routine P-state or clock changes
  included), per GPU and kind;
* ``checks``: per GPU, the periodic check (``recovery_action`` '' when NVML has no such field);
* ``guarded``: how many pynvml functions were replaced by refusals.

Nothing here changes a GPU: only queries and this process's own event set. Every other pynvml
function whose name says it sets, creates, destroys, resets, clears or (un)registers something is
replaced by one that raises before the source starts, so a bug that tried would fail loudly.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pynvml

from dra_driver.core.health_causes import EVENT_CAUSES, NVML_EVENT_KINDS
from dra_driver.obs.logs import configure_logging
from dra_driver.sources.nvml_health import NvmlHealthSource

_MUTATING = re.compile(r"^nvml\w*(Set|Create|Destroy|Reset|Clear|Enable|Disable|Register|Unregister|Modify)", re.ASCII)
_ALLOWED = {"nvmlEventSetCreate", "nvmlDeviceRegisterEvents", "nvmlEventSetFree", "nvmlEventSetWait_v2"}
"""An event set is the process's own subscription: it changes nothing on the GPU."""


def _guard() -> int:
    refused = 0
    for name in dir(pynvml):
        if _MUTATING.match(name) and name not in _ALLOWED and callable(getattr(pynvml, name)):

            def refuse(*_a: Any, _n: str = name, **_k: Any) -> Any:
                raise RuntimeError(f"read-only check: {_n} refused")

            setattr(pynvml, name, refuse)
            refused += 1
    return refused


def _type_name(kind: str) -> str:
    return EVENT_CAUSES[kind].nvml.removeprefix("nvmlEventType").removeprefix("nvmlEvent")


def _types(mask: int | None) -> list[str] | None:
    """The NVML names of the event types in a mask (every type NVML defines that this pynvml names)."""
    if mask is None:
        return None
    return [
        _type_name(k)
        for k in NVML_EVENT_KINDS
        if hasattr(pynvml, EVENT_CAUSES[k].nvml) and mask & int(getattr(pynvml, EVENT_CAUSES[k].nvml))
    ]


_ALL = (1 << 64) - 1


def main() -> int:
    """Print what the source registers, sees and checks on this machine's GPUs."""
    configure_logging("info")  # log lines (which types each GPU watches) on stderr: stdout is the report
    guarded = _guard()
    pynvml.nvmlInit()  # only to list the GPUs; the source holds its own init
    try:
        count = pynvml.nvmlDeviceGetCount()
        uuids = [str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
    finally:
        pynvml.nvmlShutdown()
    source = NvmlHealthSource(uuids)
    try:
        regs = [
            {
                **asdict(r),
                "supported_types": _types(r.supported),
                "registered_types": _types(r.registered),
                "refused_types": {_type_name(kind): error for kind, error in r.refused},
                "unsupported_types": [t for t in _types(_ALL) or [] if t not in (_types(r.supported) or [])],
                "watched_kinds": source.kinds(r.registered),
            }
            for r in source.registrations
        ]
        events = [asdict(e) for e in source.events(2.0)]
        counts = source.event_counts()
        checks = {u: asdict(c) for u, c in source.check(uuids).items()}
    finally:
        source.close()
    report = {
        "gpus": uuids,
        "registrations": regs,
        "events": events,
        "event_counts": counts,
        "checks": checks,
        "guarded": guarded,
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
