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

_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_RESULTS = 1024
"""More allocation results than a claim can hold (32 requests x 32 devices each): refused unread."""


class ClaimError(ValueError):
    """The claim cannot be prepared on this node; the message says why."""


def validate_claim_uid(uid: str) -> str:
    """Return ``uid`` if it is a Kubernetes object UID (lower-case RFC 4122); raise ClaimError.

    Runs before a UID is used in any file name or path.
    """
    if not isinstance(uid, str) or not _UID.fullmatch(uid):
        raise ClaimError(f"claim UID {_short(uid)} is not a valid Kubernetes UID")
    return uid


def validate_claim_ref(namespace: str, name: str) -> None:
    """Raise ClaimError unless ``namespace`` is a DNS label and ``name`` a DNS subdomain.

    Runs before the name reaches the API server: an empty name would turn a GET into a LIST.
    """
    if not isinstance(namespace, str) or not _DNS_LABEL.fullmatch(namespace):
        raise ClaimError(f"claim namespace {_short(namespace)} is not a valid namespace name")
    if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise ClaimError(f"claim name {_short(name)} is not a valid object name")


def _short(value: object) -> str:
    if not isinstance(value, str | int | float | bool | None):
        return f"<{type(value).__name__}>"  # a container from outside input may be nested arbitrarily deep
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}...({len(text)} chars)"


def _map(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ClaimError(f"{what} is not an object")
    return value


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """The parts of an allocated claim this driver acts on."""

    namespace: str
    name: str
    uid: str
    results: tuple[AllocationResult, ...]
    config: tuple[Mapping[str, Any], ...]


def parse_claim(  # noqa: PLR0912 - one check per field of the API object, each with its own message
    claim: Mapping[str, Any],
    *,
    uid: str,
    driver: str,
    pool: str,
    known_devices: set[str],
    namespace: str | None = None,
    name: str | None = None,
) -> ClaimAllocation:
    """Extract this driver's allocation from a claim object, or raise ClaimError.

    ``namespace``/``name`` (as the kubelet named the claim) must be the object's own: the
    checkpoint records them and the GC looks the claim up by them.
    """
    if not isinstance(claim, Mapping):
        raise ClaimError(f"claim {uid} is not an object")
    meta = _map(claim.get("metadata"), f"claim {uid} metadata")
    ref = f"{_text(meta.get('namespace'))}/{_text(meta.get('name'))}"
    if meta.get("uid") != uid:
        raise ClaimError(f"claim {ref} has UID {_short(meta.get('uid'))}, expected {uid!r} (it was replaced)")
    if namespace is not None and name is not None and (meta.get("namespace"), meta.get("name")) != (namespace, name):
        raise ClaimError(f"claim {uid} is {ref}, not {namespace}/{name} as the request says")
    allocation = _map(_map(claim.get("status"), f"claim {ref} status").get("allocation"), f"claim {ref} allocation")
    if not allocation:
        raise ClaimError(f"claim {ref} is not allocated")
    devices = _map(allocation.get("devices"), f"claim {ref} allocation.devices")
    raw_results = devices.get("results") or []
    raw_config = devices.get("config") or []
    if not isinstance(raw_results, list) or not isinstance(raw_config, list):
        raise ClaimError(f"claim {ref} allocation.devices results and config must be lists")
    if len(raw_results) > MAX_RESULTS:
        raise ClaimError(f"claim {ref} has {len(raw_results)} allocation results, more than any claim can hold")
    results: list[AllocationResult] = []
    for index, r in enumerate(raw_results):
        if not isinstance(r, Mapping):
            raise ClaimError(f"claim {ref} result {index} is not an object")
        if r.get("driver") != driver:
            continue
        where = f"claim {ref} result {index} ({_text(r.get('request'))})"
        if r.get("pool") != pool:
            raise ClaimError(
                f"{where}: device {_short(r.get('device'))} is in pool {_short(r.get('pool'))}, not this node's pool {pool!r}"
            )
        if not isinstance(r.get("device"), str) or r["device"] not in known_devices:
            raise ClaimError(f"{where}: device {_short(r.get('device'))} does not exist on this node")
        if not isinstance(r.get("request", ""), str) or not isinstance(r.get("shareID") or "", str):
            raise ClaimError(f"{where}: request and shareID must be strings")
        consumed = _map(r.get("consumedCapacity"), f"{where} consumedCapacity")
        results.append(
            AllocationResult(
                request=str(r.get("request", "")),
                pool=str(r["pool"]),
                device=str(r["device"]),
                share_id=r.get("shareID") or None,
                admin_access=bool(r.get("adminAccess", False)),
                consumed_capacity=tuple(sorted((str(k), str(v)) for k, v in consumed.items())),
            )
        )
    if not results:
        raise ClaimError(f"claim {ref} has no allocation results for driver {driver}")
    return ClaimAllocation(
        namespace=_text(meta.get("namespace")),
        name=_text(meta.get("name")),
        uid=uid,
        results=tuple(results),
        config=tuple(raw_config),
    )


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
