"""Garbage collection of prepared claims whose ResourceClaim is gone: who is gone, and who goes now.

Called by ``kubelet_plugin.prepare.state.DeviceState.collect_garbage`` (a periodic pass, ``--gc-interval``):
``gone_claims`` asks the API server outside the node-wide lock, ``due`` decides under it which
claims to unprepare in this pass; the state does the unprepare.

A PrepareStarted claim is rolled back as soon as its claim is gone: no pod can be using it. A
PrepareCompleted (or recovered) one only when it was found gone by the previous pass as well, so
a claim the kubelet is about to unprepare itself is left to it. A claim adopted from a CDI spec
after a lost checkpoint has no name to look up: only the kubelet's unprepare removes it. A
failed lookup decides nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from dra_driver.core.checkpoint import Checkpoint, ClaimEntry, ClaimState
from kubelet_plugin.prepare.requests import ClaimReader

log = structlog.get_logger(__name__)


def gone_claims(entries: Mapping[str, ClaimEntry], reader: ClaimReader) -> set[str]:
    """UIDs of the entries whose ResourceClaim is deleted, or replaced by one with another UID."""
    gone: set[str] = set()
    for uid, seen in entries.items():
        if not seen.name:  # adopted from a CDI spec: only the kubelet's unprepare (which names it) removes it
            continue
        try:
            obj = reader.get_claim(seen.namespace, seen.name)
        except Exception as err:  # noqa: BLE001 - only a definite "not found" counts
            if getattr(err, "not_found", False):
                gone.add(uid)
            else:
                log.info("gc_lookup_failed", claim_uid=uid, error=str(err))
            continue
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict) or meta.get("uid") != uid:
            gone.add(uid)
    return gone


def due(cp: Checkpoint, gone: set[str], gone_before: set[str]) -> list[tuple[str, ClaimEntry]]:
    """The gone claims to unprepare in this pass, in UID order, with their entries."""
    out: list[tuple[str, ClaimEntry]] = []
    for uid in sorted(gone):
        current = cp.claims.get(uid)
        if current is None:
            continue
        if (current.state is ClaimState.PREPARE_COMPLETED or current.recovered) and uid not in gone_before:
            continue
        out.append((uid, current))
    return out
