"""The persisted health record (``health.json``): a ``HealthBook`` as JSON, read back strictly, pure.

Written and read by ``dra_driver.files.health_store`` (the plugin's monitor keeps the book across
restarts; a lost record fails closed with ``unreadable_record_book``); read by ``dra-gpu health``
(``dra_driver.cli.health``). Upgrade rule: the record is versioned (``RECORD_VERSION``); a record
of another version is refused, naming it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from dra_driver.core.health import MAX_CONDITIONS_PER_GPU, MAX_MESSAGE, Condition, HealthBook, clip_message
from dra_driver.core.health_causes import KEY_HEALTH_RECORD, Clears, Severity

MAX_GPUS = 64
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")
RECORD_VERSION = 1


class HealthRecordError(ValueError):
    """The persisted health record cannot be read; the message says what is wrong."""


def to_json(book: HealthBook, boot_id: str, consumed: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The record ``health.json`` holds: the book, the boot it belongs to, and how far sources were read."""
    return {
        "version": RECORD_VERSION,
        "bootID": boot_id,
        "consumed": dict(sorted((consumed or {}).items())),
        "gpus": {uuid: [c.to_json() for c in conds] for uuid, conds in sorted(book.conditions.items())},
    }


def _condition(raw: Any, where: str) -> Condition:
    if not isinstance(raw, dict):
        raise HealthRecordError(f"{where}: not an object")
    try:
        key, value, message = raw["key"], raw["value"], raw["message"]
        since = raw["since"]
        severity, clears = Severity(raw["severity"]), Clears(raw["clears"])
    except (KeyError, ValueError, TypeError) as err:
        raise HealthRecordError(f"{where}: {type(err).__name__}: {err}") from None
    if not (isinstance(key, str) and re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", key)):
        raise HealthRecordError(f"{where}: key {key!r} is not a taint key name")
    if not (isinstance(value, str) and _LABEL_VALUE.match(value)):
        raise HealthRecordError(f"{where}: value {value!r} is not a label value")
    if not isinstance(message, str) or len(message) > MAX_MESSAGE:
        raise HealthRecordError(f"{where}: message is not a string of at most {MAX_MESSAGE} characters")
    times: list[float] = []
    for t in (since, raw.get("lastSeen", since)):
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < 1e11:
            raise HealthRecordError(f"{where}: {str(t)[:40]} is not a Unix time")
        times.append(float(t))
    return Condition(key, value, severity, clears, times[0], message, times[1])


def from_json(raw: Any) -> tuple[HealthBook, str, dict[str, int]]:
    """(book, boot id, consumed) from a record; raises HealthRecordError naming what is wrong."""
    if not isinstance(raw, dict):
        raise HealthRecordError("the record is not a JSON object")
    if raw.get("version") != RECORD_VERSION:
        raise HealthRecordError(f"unknown record version {raw.get('version')!r} (this driver writes {RECORD_VERSION})")
    boot_id, gpus, consumed = raw.get("bootID"), raw.get("gpus"), raw.get("consumed", {})
    if not isinstance(boot_id, str) or not isinstance(gpus, dict) or not isinstance(consumed, dict):
        raise HealthRecordError("bootID, gpus or consumed has the wrong type")
    if len(gpus) > MAX_GPUS or len(consumed) > 16:
        raise HealthRecordError(f"more than {MAX_GPUS} GPUs or 16 sources in the record")
    if not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in consumed.items()):
        raise HealthRecordError("consumed must map source names to integers")
    book = HealthBook()
    for uuid, conds in gpus.items():
        if not isinstance(uuid, str) or not isinstance(conds, list) or len(conds) > MAX_CONDITIONS_PER_GPU:
            raise HealthRecordError(f"GPU {str(uuid)[:80]!r}: conditions must be a list of at most {MAX_CONDITIONS_PER_GPU}")
        parsed = [_condition(c, f"GPU {uuid} condition {i}") for i, c in enumerate(conds)]
        if len({c.key for c in parsed}) != len(parsed):
            raise HealthRecordError(f"GPU {uuid}: two conditions with one key")
        book = book.with_conditions(uuid, parsed)
    return book, boot_id, dict(consumed)


def unreadable_record_book(gpu_uuids: Iterable[str], at: float, why: str) -> HealthBook:
    """Fail closed when the record is lost: every GPU degraded until repaired (a fatal cause may hide there)."""
    msg = clip_message(f"the health record could not be read ({why}): repair each GPU once checked (dra-gpu health repair)")
    cond = Condition(KEY_HEALTH_RECORD, "unreadable", Severity.DEGRADED, Clears.REPAIR, at, msg, at)
    return HealthBook({u: (cond,) for u in gpu_uuids})


def dumps(book: HealthBook, boot_id: str, consumed: Mapping[str, int] | None = None) -> bytes:
    """``to_json`` as the bytes written to disk."""
    return (json.dumps(to_json(book, boot_id, consumed), indent=1, sort_keys=True) + "\n").encode()
