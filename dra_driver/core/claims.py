"""Reading a ResourceClaim (API JSON) into what prepare needs, with clear per-claim errors.

Pure. Called by the kubelet plugin for each claim of a NodePrepareResources call: checks the
UID, the allocation, and that the results for this driver name devices of this node's pool.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.core.config import AllocationResult

_UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class ClaimError(ValueError):
    """The claim cannot be prepared on this node; the message says why."""


def validate_claim_uid(uid: str) -> str:
    """Return ``uid`` if it is a Kubernetes object UID (lower-case RFC 4122); raise ClaimError.

    Runs before a UID is used in any file name or path.
    """
    if not isinstance(uid, str) or not _UID.match(uid):
        raise ClaimError(f"claim UID {uid!r} is not a valid Kubernetes UID")
    return uid


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """The parts of an allocated claim this driver acts on."""

    namespace: str
    name: str
    uid: str
    results: tuple[AllocationResult, ...]
    config: tuple[Mapping[str, Any], ...]


def parse_claim(claim: Mapping[str, Any], *, uid: str, driver: str, pool: str, known_devices: set[str]) -> ClaimAllocation:
    """Extract this driver's allocation from a claim object, or raise ClaimError."""
    meta = claim.get("metadata") or {}
    ref = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    if meta.get("uid") != uid:
        raise ClaimError(f"claim {ref} has UID {meta.get('uid')!r}, expected {uid!r} (it was replaced)")
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise ClaimError(f"claim {ref} is not allocated")
    devices = allocation.get("devices") or {}
    results: list[AllocationResult] = []
    for index, r in enumerate(devices.get("results") or []):
        if r.get("driver") != driver:
            continue
        where = f"claim {ref} result {index} ({r.get('request')})"
        if r.get("pool") != pool:
            raise ClaimError(f"{where}: device {r.get('device')!r} is in pool {r.get('pool')!r}, not this node's pool {pool!r}")
        if r.get("device") not in known_devices:
            raise ClaimError(f"{where}: device {r.get('device')!r} does not exist on this node")
        results.append(
            AllocationResult(
                request=str(r.get("request", "")),
                pool=str(r["pool"]),
                device=str(r["device"]),
                share_id=r.get("shareID") or None,
                admin_access=bool(r.get("adminAccess", False)),
                consumed_capacity=tuple(sorted((str(k), str(v)) for k, v in (r.get("consumedCapacity") or {}).items())),
            )
        )
    if not results:
        raise ClaimError(f"claim {ref} has no allocation results for driver {driver}")
    return ClaimAllocation(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=uid,
        results=tuple(results),
        config=tuple(devices.get("config") or ()),
    )
