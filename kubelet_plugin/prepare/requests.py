"""A DRA call's claims before the lock: names checked, ResourceClaims read under one deadline.

Called by ``kubelet_plugin.prepare.state`` at the start of NodePrepareResources and
NodeUnprepareResources. Outside input is bounded and isolated here: the request's UIDs and
names are checked before anything is looked up (a UID twice in one request is an error for
that UID), and claims are read concurrently under one deadline (``LOOKUP_BUDGET_S``, below the
kubelet's 45 s) with a clear error for each claim not read in time, so a hung API server still
yields one answer per claim.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from dra_driver.core.checkpoint import PreparedDevice
from dra_driver.core.claims import ClaimError, validate_claim_ref, validate_claim_uid

LOOKUP_BUDGET_S = 25.0
"""All claim lookups of one call share this deadline: with the lock wait (10 s) it stays below
the kubelet's 45 s, so every claim gets an answer of its own."""
LOOKUP_WORKERS = 16
"""Concurrent claim lookups per plugin (bounded: a hung API server cannot pile up threads)."""


class ClaimReader(Protocol):
    """Reads a ResourceClaim as API JSON; raises an exception whose text explains a failure.

    When the claim does not exist, the exception has a true ``not_found`` attribute (the
    garbage collection pass relies on it to tell "gone" from "could not ask").
    """

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The claim object."""
        ...


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A claim as the kubelet names it."""

    namespace: str
    uid: str
    name: str


@dataclass(frozen=True, slots=True)
class Outcome:
    """One claim's answer: devices, or an error (never both)."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""
    cdi_spec: Mapping[str, Any] | None = field(default=None, compare=False)
    """The claim's CDI spec when prepared (what its device status reports; not sent to the kubelet)."""


T = TypeVar("T")


def check_refs(refs: list[ClaimRef], out: dict[str, T], error: Callable[[str], T], *, names: bool = True) -> list[ClaimRef]:
    """The refs that may proceed; the others get ``error(message)`` in ``out``.

    A UID that appears twice is refused for every entry (which name is the claim's cannot be
    told, and the checkpoint must record the right one). ``names``: check namespace and name
    too (prepare reads the claim by them; unprepare acts by UID alone).
    """
    seen: dict[str, int] = {}
    for ref in refs:
        seen[ref.uid] = seen.get(ref.uid, 0) + 1
    valid: list[ClaimRef] = []
    for ref in refs:
        if seen[ref.uid] > 1:
            out[ref.uid] = error(f"claim UID {ref.uid!r} appears {seen[ref.uid]} times in one request; refusing all of them")
            continue
        try:
            validate_claim_uid(ref.uid)
            if names:
                validate_claim_ref(ref.namespace, ref.name)
        except ClaimError as err:
            out[ref.uid] = error(str(err))
            continue
        valid.append(ref)
    return valid


class ClaimLookups:
    """Reads claims through a bounded pool of threads, every call under one deadline."""

    def __init__(self, reader: ClaimReader) -> None:
        self._reader = reader
        self._pool = ThreadPoolExecutor(max_workers=LOOKUP_WORKERS, thread_name_prefix="claim-lookup")

    def fetch(self, refs: list[ClaimRef], out: dict[str, Outcome], budget_s: float) -> dict[str, dict[str, Any]]:
        """Read the claims concurrently within ``budget_s``; each failure is that claim's error in ``out``."""
        futures: dict[str, Future[dict[str, Any]]] = {
            ref.uid: self._pool.submit(self._reader.get_claim, ref.namespace, ref.name) for ref in refs
        }
        wait_futures(futures.values(), timeout=budget_s)
        fetched: dict[str, dict[str, Any]] = {}
        for ref in refs:
            fut = futures[ref.uid]
            what = f"reading claim {ref.namespace}/{ref.name}"
            if not fut.done():
                fut.cancel()
                out[ref.uid] = Outcome(error=f"{what}: no answer from the API server within {budget_s:.0f}s")
                continue
            try:
                fetched[ref.uid] = fut.result()
            except Exception as err:  # noqa: BLE001 - any lookup failure is this claim's error
                out[ref.uid] = Outcome(error=f"{what}: {err}")
        return fetched
