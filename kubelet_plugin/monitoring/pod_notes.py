"""The pods of each prepared claim, noted from the ResourceClaims the kubelet plugin reads anyway.

Made by ``kubelet_plugin.main`` before the sockets serve (``PodNotes.watching`` wraps the claim
reader ``DeviceState`` uses); read by the usage sampler (``kubelet_plugin.monitoring.usage``) for the pod
labels of its metrics. The checkpoint names no pod: the names of each claim's
``status.reservedFor`` are kept in memory only, from the claims read at prepare and in each
garbage collection pass (a dictionary write per read, nothing more on the prepare path). After a
plugin restart a claim's pods are unknown (empty) until it is read again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubelet_plugin.prepare.requests import ClaimReader


class PodNotes:
    """The pods of each claim's ``status.reservedFor``, noted from the claims the plugin reads; in memory only."""

    RETAIN_S = 120.0
    """A claim noted this recently is kept though not prepared (yet): its prepare may be in flight."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._pods: dict[str, tuple[tuple[str, ...], float]] = {}
        self._mutex = threading.Lock()  # uncontended but for a sampler pass: nanoseconds on the lookup path
        self._clock = clock

    def watching(self, reader: ClaimReader) -> ClaimReader:
        """``reader``, noting the pods of every claim it returns (pass this to ``DeviceState`` as its claims)."""
        return _NotingReader(reader, self)

    def note(self, obj: Any) -> None:
        """Keep the pod names of one ResourceClaim (API JSON); anything malformed is ignored, never raised."""
        if not isinstance(obj, dict):
            return
        meta, status = obj.get("metadata"), obj.get("status")
        uid = meta.get("uid") if isinstance(meta, dict) else None
        if not isinstance(uid, str) or not uid:
            return
        reserved = status.get("reservedFor") if isinstance(status, dict) else None
        names: list[str] = []
        for ref in reserved if isinstance(reserved, list) else ():
            if isinstance(ref, dict) and ref.get("resource") == "pods" and not ref.get("apiGroup"):
                name = ref.get("name")
                if isinstance(name, str) and name:
                    names.append(name)
        with self._mutex:
            self._pods[uid] = (tuple(sorted(set(names))), self._clock())

    def pods(self, claim_uid: str) -> tuple[str, ...]:
        """The claim's pods as last read; empty when unknown."""
        with self._mutex:
            got = self._pods.get(claim_uid)
        return () if got is None else got[0]

    def retain(self, claim_uids: set[str]) -> None:
        """Forget claims no longer prepared (not those noted in the last ``RETAIN_S``: about to be)."""
        cutoff = self._clock() - self.RETAIN_S
        with self._mutex:
            for uid in [u for u, (_, at) in self._pods.items() if u not in claim_uids and at < cutoff]:
                del self._pods[uid]


@dataclass(frozen=True, slots=True)
class _NotingReader:
    inner: ClaimReader
    notes: PodNotes

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        obj = self.inner.get_claim(namespace, name)
        self.notes.note(obj)
        return obj
