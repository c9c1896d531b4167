"""What the plugin reports in a ResourceClaim's ``status.devices`` (KEP-4817) after a prepare. Pure.

``kubelet_plugin.monitoring.device_status`` calls ``device_statuses`` with a prepared claim's devices (the
kubelet's answer) and its CDI spec, then writes ``apply_configuration``'s body with server-side
apply (``dra_driver.kube.claim_status_api``); at unprepare it applies ``apply_configuration``
with no entries, which removes exactly the entries this driver's field manager owns.

One entry per prepared device, keyed as the API keys them (driver, pool, device, shareID):

* ``data`` (a JSON object) holds only what is true for that device: ``uuid`` (what its
  containers see: the GPU's UUID, or the MIG device's for a MIG device; the value of the
  ``GPU_DEVICE_<device>_UUID`` env of the CDI spec), for MIG devices ``parentUUID``,
  ``profile`` and ``placement``, ``sharing`` when the claim's config or a consumable-capacity
  share sets any, ``adminAccess`` when true, the ``requests`` it serves and its
  ``cdiDeviceIDs``. Everything but the placement is read back from the CDI spec the
  containers get, so the status says what the containers were given.
* ``conditions``: one, ``Ready`` True with reason ``Prepared``.

The API's limits (``k8s.io/api/resource/v1``: ``AllocatedDeviceStatusMaxConditions`` 8,
``AllocatedDeviceStatusDataMaxLength`` 10 KiB) are checked here; an entry beyond them raises
``DeviceStatusError`` instead of being sent to be refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.core.cdi import cdi_device_name, env_prefix
from dra_driver.core.checkpoint import PreparedDevice

API_VERSION = "resource.k8s.io/v1"
DATA_MAX_BYTES = 10 * 1024
"""``AllocatedDeviceStatusDataMaxLength``: the raw JSON of ``data``."""
MAX_CONDITIONS = 8
"""``AllocatedDeviceStatusMaxConditions``."""
CONDITION_READY = "Ready"
REASON_PREPARED = "Prepared"
CONDITION_MESSAGE_MAX = 32768
"""``metav1.Condition`` message limit."""

# CDI env suffixes (``dra_driver.core.prepare.device_env`` and ``_share_edits``) → data keys.
_SHARING_ENV = (("_SHARING_STRATEGY", "strategy"), ("_TIMESLICE_INTERVAL", "interval"))
_SHARE_ENV = (("_MEMORY_LIMIT", "memoryBytes"), ("_COMPUTE_SHARE", "computeShare"))


class DeviceStatusError(ValueError):
    """An entry would break the API's limits; the message names the device and the limit."""


@dataclass(frozen=True, slots=True)
class DeviceStatus:
    """One ``status.devices[]`` entry of this driver."""

    driver: str
    pool: str
    device: str
    share_id: str | None
    data: Mapping[str, Any]
    conditions: tuple[Mapping[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        """The entry as API JSON (``shareID`` only when set: it is part of the key)."""
        out: dict[str, Any] = {"driver": self.driver, "pool": self.pool, "device": self.device}
        if self.share_id is not None:
            out["shareID"] = self.share_id
        out["conditions"] = [dict(c) for c in self.conditions]
        out["data"] = dict(self.data)
        return out


def data_size(data: Mapping[str, Any]) -> int:
    """Bytes of ``data`` as JSON, measured the roomy way (``json.dumps`` defaults, with spaces).

    The API server measures the raw bytes it was sent; ours are never larger than this.
    """
    return len(json.dumps(data, sort_keys=True).encode())


def check_limits(status: DeviceStatus) -> None:
    """Raise DeviceStatusError when an entry breaks the API's limits on ``data`` or ``conditions``."""
    where = f"device {status.device}" + (f" share {status.share_id}" if status.share_id else "")
    if len(status.conditions) > MAX_CONDITIONS:
        raise DeviceStatusError(f"{where}: {len(status.conditions)} conditions, the API allows {MAX_CONDITIONS}")
    size = data_size(status.data)
    if size > DATA_MAX_BYTES:
        raise DeviceStatusError(f"{where}: data is {size} bytes of JSON, the API allows {DATA_MAX_BYTES}")
    for c in status.conditions:
        if len(str(c.get("message", ""))) > CONDITION_MESSAGE_MAX:
            raise DeviceStatusError(f"{where}: condition {c.get('type')} message is longer than {CONDITION_MESSAGE_MAX}")


def _spec_env(cdi_spec: Mapping[str, Any] | None, cdi_name: str) -> dict[str, str]:
    """The env of one device of a claim's CDI spec, as a dict; empty when absent (any shape tolerated)."""
    if not isinstance(cdi_spec, Mapping):
        return {}
    devices = cdi_spec.get("devices")
    for d in devices if isinstance(devices, list) else []:
        if isinstance(d, Mapping) and d.get("name") == cdi_name:
            edits = d.get("containerEdits")
            env = edits.get("env") if isinstance(edits, Mapping) else None
            pairs = (str(item).partition("=") for item in (env if isinstance(env, list) else []))
            return {k: v for k, _, v in pairs}
    return {}


def device_data(claim_uid: str, device: PreparedDevice, cdi_spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``data`` object of one prepared device (see the module docstring)."""
    env = _spec_env(cdi_spec, cdi_device_name(claim_uid, device.device_name, device.share_id))
    p = env_prefix(device.device_name if not device.share_id else f"{device.device_name}-{device.share_id}")
    data: dict[str, Any] = {}
    mig = device.mig
    uuid = env.get(f"{p}_UUID") or (mig.mig_uuid if mig is not None else None)
    if uuid:
        data["uuid"] = uuid
    parent = env.get(f"{p}_PARENT_UUID") or (mig.parent_uuid if mig is not None else None)
    if parent:
        data["parentUUID"] = parent
    profile = env.get(f"{p}_MIG_PROFILE") or (mig.profile if mig is not None else None)
    if profile:
        data["profile"] = profile
    if mig is not None:
        data["placement"] = {"start": mig.start, "size": mig.size}
    sharing: dict[str, Any] = {key: env[p + suffix] for suffix, key in _SHARING_ENV if env.get(p + suffix)}
    for suffix, key in _SHARE_ENV:
        value = env.get(p + suffix) or ""
        if value.isascii() and value.isdigit() and len(value) <= 20:  # bytes or percent; anything else is not ours
            sharing[key] = int(value)
    if sharing:
        data["sharing"] = sharing
    if device.admin_access:
        data["adminAccess"] = True
    if device.request_names:
        data["requests"] = list(device.request_names)
    data["cdiDeviceIDs"] = list(device.cdi_device_ids)
    return data


def ready_condition(*, node_name: str, now: str) -> dict[str, Any]:
    """``Ready`` True, reason ``Prepared`` (``now``: RFC 3339 seconds, e.g. ``2026-11-25T10:00:00Z``)."""
    return {
        "type": CONDITION_READY,
        "status": "True",
        "reason": REASON_PREPARED,
        "message": f"prepared on node {node_name}",
        "lastTransitionTime": now,
    }


def device_statuses(
    *,
    driver: str,
    claim_uid: str,
    devices: Sequence[PreparedDevice],
    cdi_spec: Mapping[str, Any] | None,
    node_name: str,
    now: str,
) -> tuple[DeviceStatus, ...]:
    """One entry per prepared device (a device answered twice, for two requests, is one entry).

    Raises DeviceStatusError when an entry breaks the API's limits.
    """
    out: dict[tuple[str, str, str | None], DeviceStatus] = {}
    for d in devices:
        key = (d.pool_name, d.device_name, d.share_id)
        if key in out:
            continue
        status = DeviceStatus(
            driver=driver,
            pool=d.pool_name,
            device=d.device_name,
            share_id=d.share_id,
            data=device_data(claim_uid, d, cdi_spec),
            conditions=(ready_condition(node_name=node_name, now=now),),
        )
        check_limits(status)
        out[key] = status
    return tuple(out.values())


def apply_configuration(*, namespace: str, name: str, uid: str, statuses: Sequence[DeviceStatus]) -> dict[str, Any]:
    """The server-side apply body for a claim's ``/status``: exactly this driver's entries.

    Applied with this driver's field manager, entries it applied before and no longer lists are
    removed; other writers' entries (other drivers, the scheduler's allocation) are untouched.
    ``metadata.uid`` makes the write fail rather than land on a claim re-created under the same name.
    """
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "status": {"devices": [s.to_json() for s in statuses]} if statuses else {},
    }


def entries_of(claim: Mapping[str, Any], driver: str) -> list[dict[str, Any]]:
    """The ``status.devices`` entries of ``driver`` in a claim as the API returns it (any shape tolerated)."""
    status = claim.get("status")
    devices = status.get("devices") if isinstance(status, Mapping) else None
    return [dict(d) for d in devices if isinstance(d, Mapping) and d.get("driver") == driver] if isinstance(devices, list) else []
