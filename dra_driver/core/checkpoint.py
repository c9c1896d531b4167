"""The checkpoint format: versioned JSON with a checksum, one entry per claim. Pure.

``dra_driver.files.checkpoint_store`` reads and writes it atomically; the kubelet plugin's
state keeps it in step with every prepare and unprepare.

Format (version 1)::

    {"apiVersion": "checkpoint.dra-gpu.dev/v1", "checksum": "sha256:<hex of canonical data>",
     "data": {"nodeBootID": "...", "claims": {"<uid>": {"state": "PrepareStarted|PrepareCompleted",
              "namespace": "...", "name": "...", "devices": [{"requestNames": [...],
              "poolName": "...", "deviceName": "...", "cdiDeviceIDs": [...], "shareID": null}]}}}}

Upgrade rule (written here, enforced by the decoder):
  * Additive changes (a new optional field) keep the version. Readers ignore unknown fields,
    and the checksum covers ``data`` exactly as stored, so an older binary verifies a newer
    file and a newer binary verifies an older one (the bug NVIDIA's driver hit, #1080).
  * An incompatible change bumps the version; a reader refuses a version newer than it knows
    (fail closed) with a message telling the operator to roll forward, and upgrades older
    versions in memory, writing the new version on its next write.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

API_VERSION = "checkpoint.dra-gpu.dev/v1"
KNOWN_VERSIONS = (API_VERSION,)


class CheckpointError(ValueError):
    """The checkpoint bytes are not a valid checkpoint (corrupt, tampered or too new)."""


class ClaimState(enum.StrEnum):
    """Where a claim is in prepare: started (side effects may be partial) or completed."""

    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"


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

    def to_json(self) -> dict[str, Any]:
        """Checkpoint JSON of this device (``adminAccess`` only when true: an additive field)."""
        out: dict[str, Any] = {
            "requestNames": list(self.request_names),
            "poolName": self.pool_name,
            "deviceName": self.device_name,
            "cdiDeviceIDs": list(self.cdi_device_ids),
            "shareID": self.share_id,
        }
        if self.admin_access:
            out["adminAccess"] = True
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
        )


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """All claims this node has prepared (or started to), and the boot they belong to."""

    node_boot_id: str
    claims: Mapping[str, ClaimEntry] = field(default_factory=dict)

    def with_claim(self, uid: str, entry: ClaimEntry) -> Checkpoint:
        """A copy with ``uid`` set to ``entry``."""
        return replace(self, claims={**self.claims, uid: entry})

    def without_claim(self, uid: str) -> Checkpoint:
        """A copy without ``uid``."""
        return replace(self, claims={k: v for k, v in self.claims.items() if k != uid})


def _canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def encode(cp: Checkpoint) -> bytes:
    """Serialize with a checksum over the canonical form of ``data``."""
    data = {"nodeBootID": cp.node_boot_id, "claims": {u: e.to_json() for u, e in sorted(cp.claims.items())}}
    doc = {"apiVersion": API_VERSION, "checksum": "sha256:" + hashlib.sha256(_canonical(data)).hexdigest(), "data": data}
    return json.dumps(doc, sort_keys=True, indent=1).encode() + b"\n"


def decode(raw: bytes) -> Checkpoint:
    """Parse and verify a checkpoint; raise CheckpointError saying what is wrong."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"not valid JSON: {err}") from None
    if not isinstance(doc, dict):
        raise CheckpointError("top level is not an object")
    version = doc.get("apiVersion")
    if version not in KNOWN_VERSIONS:
        raise CheckpointError(
            f"apiVersion {version!r} is not one this binary reads ({', '.join(KNOWN_VERSIONS)}); "
            "it may have been written by a newer dra-gpu: roll forward"
        )
    data = doc.get("data")
    expected = "sha256:" + hashlib.sha256(_canonical(data)).hexdigest()
    if doc.get("checksum") != expected:
        raise CheckpointError("checksum mismatch: the file was corrupted or edited")
    if not isinstance(data, dict) or not isinstance(data.get("claims"), dict):
        raise CheckpointError("data.claims is missing")
    try:
        claims = {str(u): ClaimEntry.from_json(e) for u, e in data["claims"].items()}
    except (KeyError, ValueError, TypeError, AttributeError) as err:
        raise CheckpointError(f"a claim entry is malformed: {err!r}") from None
    return Checkpoint(node_boot_id=str(data.get("nodeBootID", "")), claims=claims)
