"""Read-only check of the NVML health source on a machine with real NVIDIA GPUs (H100/H200).

Run from the repository root: ``python scripts/device_nvml_health_check.py``. It builds an
``NvmlHealthSource`` for every GPU, prints the event types each supports and registered, waits
once for events (2 s), checks each GPU once, prints the results as JSON and closes the source.
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

from dra_driver.sources.nvml_health import NvmlHealthSource

_MUTATING = re.compile(r"^nvml\w*(Set|Create|Destroy|Reset|Clear|Enable|Disable|Register|Unregister|Modify)", re.ASCII)
_ALLOWED = {"nvmlEventSetCreate", "nvmlDeviceRegisterEvents", "nvmlEventSetFree", "nvmlEventSetWait_v2"}
"""An event set is the process's own subscription: it changes nothing on the GPU."""


def _guard() -> None:
    for name in dir(pynvml):
        if _MUTATING.match(name) and name not in _ALLOWED and callable(getattr(pynvml, name)):

            def refuse(*_a: Any, _n: str = name, **_k: Any) -> Any:
                raise RuntimeError(f"read-only check: {_n} refused")

            setattr(pynvml, name, refuse)


def _types(mask: int | None) -> list[str] | None:
    if mask is None:
        return None
    names = [n for n in dir(pynvml) if n.startswith("nvmlEventType") and n not in ("nvmlEventTypeAll", "nvmlEventTypeNone")]
    return sorted(n.removeprefix("nvmlEventType") for n in names if mask & int(getattr(pynvml, n)))


def main() -> int:
    """Print what the source registers, sees and checks on this machine's GPUs."""
    _guard()
    pynvml.nvmlInit()  # only to list the GPUs; the source holds its own init
    try:
        count = pynvml.nvmlDeviceGetCount()
        uuids = [str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
    finally:
        pynvml.nvmlShutdown()
    source = NvmlHealthSource(uuids)
    try:
        regs = [
            {**asdict(r), "supported_types": _types(r.supported), "registered_types": _types(r.registered)}
            for r in source.registrations
        ]
        events = [asdict(e) for e in source.events(2.0)]
        checks = {u: asdict(c) for u, c in source.check(uuids).items()}
    finally:
        source.close()
    print(json.dumps({"gpus": uuids, "registrations": regs, "events": events, "checks": checks}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
