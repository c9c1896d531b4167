"""The checkpoint format: versioned JSON with a checksum, one entry per claim. Pure.

``dra_driver.files.checkpoint_store`` reads and writes it atomically; the kubelet plugin's
state keeps it in step with every prepare and unprepare.

Format (version 1)::

    {"apiVersion": "checkpoint.dra-gpu.dev/v1", "checksum": "sha256:<hex of canonical data>",
     "data": {"nodeBootID": "...", "claims": {"<uid>": {"state": "PrepareStarted|PrepareCompleted",
              "namespace": "...", "name": "...", "devices": [{"requestNames": [...],
              "poolName": "...", "deviceName": "...", "cdiDeviceIDs": [...], "shareID": null,
              "mig": {"parentUUID", "profileID", "profile", "placement": {"start", "size"},
                      "giID", "ciID", "migUUID", "carved"}}],
              "migIntents": [<mig records without ids, PrepareStarted only>]}}}}

``mig``, ``migIntents``, ``timeSlices``, ``mpsDaemons`` (see ``dra_driver.core.sharing``),
``adminAccess``, ``cdiSpec`` and ``recovered`` were added under the additive rule below and are written
only when set. A downgrade to a binary that predates one of them loses what it records
(an older binary would not destroy a MIG instance it does not know of): drain a node's GPU
claims before downgrading across such a change.

Upgrade rule (written here, enforced by the decoder):
  * Additive changes (a new optional field) keep the version. Readers ignore unknown fields,
    and the checksum covers ``data`` exactly as stored, so an older binary verifies a newer
    file and a newer binary verifies an older one (the bug NVIDIA's driver hit, #1080).
  * An incompatible change bumps the version; a reader refuses a version newer than it knows
    (fail closed) with a message telling the operator to roll forward, and upgrades older
    versions in memory, writing the new version on its next write.

How it is proven: ``tests/integration/test_checkpoint_compat.py`` (part of ``make test``) runs the
previous release (the commit in ``tests/integration/PREVIOUS_RELEASE``, bumped at each release)
and this code as real plugin processes on one node's files, previous → this → previous: this code
answers and unprepares the claims the previous release prepared, the previous release reads what
this code wrote with unknown fields added at every level, and both refuse a newer apiVersion
without touching the file, the CDI specs or the MIG instances. It fails in a clone without that
commit (``git fetch --unshallow``).
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dra_driver.core.sharing import MpsDaemon, TimeSlice

API_VERSION = "checkpoint.dra-gpu.dev/v1"
KNOWN_VERSIONS = (API_VERSION,)
MAX_CHECKPOINT_BYTES = 16 << 20
"""A node's checkpoint is a few KiB per claim (hundreds of claims: a few MiB); a larger file is
not one this binary wrote: it is refused unread, as corrupt."""


class CheckpointError(ValueError):
    """The checkpoint bytes are not a valid checkpoint (corrupt, tampered or too new)."""


class CheckpointTooNew(CheckpointError):
    """The checkpoint was written by a newer dra-gpu (a downgrade): refuse, never reset."""


class ClaimState(enum.StrEnum):
    """Where a claim is in prepare: started (side effects may be partial) or completed."""

    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"


@dataclass(frozen=True, slots=True)
class MigRecord:
    """A MIG instance of a claim: to be carved (PrepareStarted, ids None) or carved (with ids).

    PrepareStarted entries hold the intent, written before the first NVML call; completed
    devices hold the carved instance with its GI/CI ids and MIG UUID.
    """

    parent_uuid: str
    profile_id: int
    profile: str
    start: int
    size: int
    gi_id: int | None = None
    ci_id: int | None = None
    mig_uuid: str | None = None
    carved: bool = True
    """True when this driver carved the instance and so must destroy it; False for static MIG."""

    def to_json(self) -> dict[str, Any]:
        """Checkpoint JSON."""
        return {
            "carved": self.carved,
            "parentUUID": self.parent_uuid,
            "profileID": self.profile_id,
            "profile": self.profile,
            "placement": {"start": self.start, "size": self.size},
            "giID": self.gi_id,
            "ciID": self.ci_id,
            "migUUID": self.mig_uuid,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> MigRecord:
        """Decode leniently (see the upgrade rule)."""
        placement = raw.get("placement") or {}
        return cls(
            parent_uuid=str(raw["parentUUID"]),
            profile_id=int(raw["profileID"]),
            profile=str(raw.get("profile", "")),
            start=int(placement["start"]),
            size=int(placement["size"]),
            gi_id=None if raw.get("giID") is None else int(raw["giID"]),
            ci_id=None if raw.get("ciID") is None else int(raw["ciID"]),
            mig_uuid=raw.get("migUUID") or None,
            carved=bool(raw.get("carved", True)),
        )


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device of a prepared claim, exactly as answered to the kubelet."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None
    admin_access: bool = False
    """Prepared for admin access: does not hold the device exclusively (not sent to the kubelet)."""
    mig: MigRecord | None = None
    """The MIG instance carved for this device (dynamic MIG only)."""

    def to_json(self) -> dict[str, Any]:
        """Checkpoint JSON of this device (``adminAccess``, ``mig`` only when set: additive fields)."""
        out: dict[str, Any] = {
            "requestNames": list(self.request_names),
            "poolName": self.pool_name,
            "deviceName": self.device_name,
            "cdiDeviceIDs": list(self.cdi_device_ids),
            "shareID": self.share_id,
        }
        if self.admin_access:
            out["adminAccess"] = True
        if self.mig is not None:
            out["mig"] = self.mig.to_json()
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> PreparedDevice:
        """Decode leniently: unknown fields are ignored (see the upgrade rule)."""
        return cls(
            request_names=tuple(raw.get("requestNames") or ()),
            pool_name=str(raw["poolName"]),
            device_name=str(raw["deviceName"]),
            cdi_device_ids=tuple(raw.get("cdiDeviceIDs") or ()),
            share_id=raw.get("shareID") or None,
            admin_access=bool(raw.get("adminAccess", False)),
            mig=MigRecord.from_json(raw["mig"]) if raw.get("mig") else None,
        )


@dataclass(frozen=True, slots=True)
class ClaimEntry:
    """A claim's checkpointed state."""

    state: ClaimState
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...] = ()
    cdi_spec: Mapping[str, Any] | None = None
    """The CDI spec written for the claim, kept so a lost spec file can be re-created as it was."""
    mig_intents: tuple[MigRecord, ...] = ()
    """PrepareStarted only: the MIG instances this attempt is about to carve, written before the
    first NVML call, so a retry or a restart finds and destroys whatever part of it was made."""
    time_slices: tuple[TimeSlice, ...] = ()
    """Time slices this claim sets (started: about to; completed: did), reset at unprepare."""
    mps_daemons: tuple[MpsDaemon, ...] = ()
    """MPS daemons this claim starts or uses (a shared one stops with its last claim)."""
    recovered: bool = False
    """PrepareStarted only: rebuilt after the checkpoint was lost, so the kubelet may have been
    told the claim is prepared and a container may use what it holds (``migIntents`` are then
    the instances found for it). A retry adopts what exists instead of rolling it back; only the
    claim's unprepare (or the GC, once its ResourceClaim is gone) destroys it."""

    def to_json(self) -> dict[str, Any]:
        """Checkpoint JSON of this claim."""
        out: dict[str, Any] = {
            "state": self.state.value,
            "namespace": self.namespace,
            "name": self.name,
            "devices": [d.to_json() for d in self.devices],
        }
        if self.cdi_spec is not None:
            out["cdiSpec"] = self.cdi_spec
        if self.mig_intents:
            out["migIntents"] = [m.to_json() for m in self.mig_intents]
        if self.time_slices:
            out["timeSlices"] = [t.to_json() for t in self.time_slices]
        if self.mps_daemons:
            out["mpsDaemons"] = [d.to_json() for d in self.mps_daemons]
        if self.recovered:
            out["recovered"] = True
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ClaimEntry:
        """Decode leniently: unknown fields are ignored (see the upgrade rule)."""
        return cls(
            state=ClaimState(raw["state"]),
            namespace=str(raw.get("namespace", "")),
            name=str(raw.get("name", "")),
            devices=tuple(PreparedDevice.from_json(d) for d in raw.get("devices") or ()),
            cdi_spec=raw.get("cdiSpec"),
            mig_intents=tuple(MigRecord.from_json(m) for m in raw.get("migIntents") or ()),
            time_slices=tuple(TimeSlice.from_json(t) for t in raw.get("timeSlices") or ()),
            mps_daemons=tuple(MpsDaemon.from_json(d) for d in raw.get("mpsDaemons") or ()),
            recovered=raw.get("recovered") is True,
        )

    def mig_records(self) -> tuple[MigRecord, ...]:
        """Every MIG instance this claim carved (completed) or may have partly carved (started).

        Static MIG instances, which the claim uses but did not make, are not among them.
        """
        return self.mig_intents + tuple(d.mig for d in self.devices if d.mig is not None and d.mig.carved)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """All claims this node has prepared (or started to), and the boot they belong to."""

    node_boot_id: str
    claims: Mapping[str, ClaimEntry] = field(default_factory=dict)
    encoded: dict[str, tuple[ClaimEntry, bytes]] = field(default_factory=dict, compare=False, repr=False)
    """A cache, not state: each claim's entry and its canonical JSON (``"uid":{...}``) as ``encode`` made it, carried
    to copies, so a save re-encodes only the claims that changed (a node with hundreds of claims
    would otherwise encode all of them on every prepare). Used only for the very entry object it
    was made from, so a copy made any other way (``dataclasses.replace``) cannot read it stale."""

    def with_claim(self, uid: str, entry: ClaimEntry) -> Checkpoint:
        """A copy with ``uid`` set to ``entry``."""
        encoded = dict(self.encoded)  # a C-speed copy; this runs for every claim of a busy node
        encoded.pop(uid, None)
        return replace(self, claims={**self.claims, uid: entry}, encoded=encoded)

    def with_claims(self, entries: Mapping[str, ClaimEntry]) -> Checkpoint:
        """A copy with every ``uid`` of ``entries`` set (one copy for a whole batch)."""
        encoded = dict(self.encoded)
        for uid in entries:
            encoded.pop(uid, None)
        return replace(self, claims={**self.claims, **entries}, encoded=encoded)

    def without_claim(self, uid: str) -> Checkpoint:
        """A copy without ``uid``."""
        return self.without_claims((uid,))

    def without_claims(self, uids: Collection[str]) -> Checkpoint:
        """A copy without any of ``uids``."""
        claims, encoded = dict(self.claims), dict(self.encoded)
        for uid in uids:
            claims.pop(uid, None)
            encoded.pop(uid, None)
        return replace(self, claims=claims, encoded=encoded)

    def carved_by_others(self, uid: str = "") -> list[MigRecord]:
        """The MIG instances claims other than ``uid`` have carved or hold after recovery (records with GI ids).

        These are never destroyed on ``uid``'s behalf; with no ``uid``, every claim's.
        """
        return [
            r
            for other_uid, other in self.claims.items()
            if other_uid != uid and (other.state is ClaimState.PREPARE_COMPLETED or other.recovered)
            for r in other.mig_records()
            if r.gi_id is not None
        ]


def _canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def encode(cp: Checkpoint) -> bytes:
    """Serialize with a checksum over the canonical form of ``data``.

    The document is compact JSON with sorted keys, ``data`` written exactly as checksummed: it is
    encoded once, by the C encoder (an indented dump takes Python's pure-Python encoder, which made
    encoding most of a busy plugin's CPU time), claim by claim, each claim's bytes kept in
    ``cp.encoded`` (with its key) for the next save. The claims are joined in sorted order, byte for
    byte what ``_canonical`` makes of the whole ``data``. Readers accept any JSON layout.
    """
    parts = []
    encoded = cp.encoded
    for uid in sorted(cp.claims):
        entry = cp.claims[uid]
        cached = encoded.get(uid)
        if cached is None or cached[0] is not entry:
            cached = encoded[uid] = (entry, _canonical(uid) + b":" + _canonical(entry.to_json()))
        parts.append(cached[1])
    canonical = b'{"claims":{' + b",".join(parts) + b'},"nodeBootID":' + _canonical(cp.node_boot_id) + b"}"
    head = {"apiVersion": API_VERSION, "checksum": "sha256:" + hashlib.sha256(canonical).hexdigest()}
    return json.dumps(head, sort_keys=True, separators=(",", ":")).encode()[:-1] + b',"data":' + canonical + b"}\n"


def decode(raw: bytes) -> Checkpoint:
    """Parse and verify a checkpoint; raise CheckpointError saying what is wrong."""
    if len(raw) > MAX_CHECKPOINT_BYTES:
        raise CheckpointError(f"{len(raw)} bytes is larger than any checkpoint this binary writes ({MAX_CHECKPOINT_BYTES})")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:  # ValueError: JSONDecodeError, digit limit
        raise CheckpointError(f"not valid JSON: {str(err)[:200]}") from None
    if not isinstance(doc, dict):
        raise CheckpointError("top level is not an object")
    version = doc.get("apiVersion")
    if version not in KNOWN_VERSIONS:
        if isinstance(version, str) and version.startswith(API_VERSION.rsplit("/", 1)[0] + "/"):
            raise CheckpointTooNew(
                f"apiVersion {version!r} is not one this binary reads ({', '.join(KNOWN_VERSIONS)}); "
                "it was written by a newer dra-gpu: roll forward (prepared claims are kept as they are)"
            )
        raise CheckpointError(
            f"apiVersion {version!r} is not one this binary reads ({', '.join(KNOWN_VERSIONS)}); "
            "it may have been written by a newer dra-gpu: roll forward"
        )
    data = doc.get("data")
    try:
        expected = "sha256:" + hashlib.sha256(_canonical(data)).hexdigest()
    except (ValueError, RecursionError, TypeError) as err:
        raise CheckpointError(f"data cannot be verified: {str(err)[:200]}") from None
    if doc.get("checksum") != expected:
        raise CheckpointError("checksum mismatch: the file was corrupted or edited")
    if not isinstance(data, dict) or not isinstance(data.get("claims"), dict):
        raise CheckpointError("data.claims is missing")
    try:
        claims = {str(u): ClaimEntry.from_json(e) for u, e in data["claims"].items()}
    except (KeyError, ValueError, TypeError, AttributeError, RecursionError, OverflowError) as err:
        raise CheckpointError(f"a claim entry is malformed: {str(err)[:200]!r}") from None
    return Checkpoint(node_boot_id=str(data.get("nodeBootID", "")), claims=claims)
