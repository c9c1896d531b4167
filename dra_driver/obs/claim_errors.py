"""A claim's error message reduced to one word of a small, fixed vocabulary: the ``reason`` metric label.

Called by ``dra_driver.obs.metrics.PluginMetrics`` for each claim a DRA call failed (the servicer
passes the answers' error strings; nothing is classified on success). The messages are the
kubelet plugin's (``kubelet_plugin.prepare.state``, ``kubelet_plugin.prepare.requests``), which wrap the core's
``ClaimError``, ``ConfigError`` and ``MigError`` and the file helpers' errors; the unit tests
pin every reason to messages the real code produces, so a reworded message that would fall to
``other`` fails a test. No I/O and no prometheus_client: the servicer may import it cheaply.

A label must stay bounded: whatever the message, the answer is one of ``CLAIM_ERROR_REASONS``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

CLAIM_ERROR_REASONS = (
    "request",
    "claim_lookup",
    "config",
    "allocation",
    "mig",
    "sharing",
    "cdi",
    "checkpoint",
    "lock",
    "refused",
    "internal",
    "other",
)
"""Every value ``claim_error_reason`` returns:

* ``request``: the kubelet's request itself (a malformed UID or name, a UID twice);
* ``claim_lookup``: the ResourceClaim could not be read from the API server in time;
* ``config``: the claim's opaque config is invalid;
* ``allocation``: the allocation cannot be prepared here (not allocated, another node's pool,
  an unknown device, a device another claim holds);
* ``mig``: a MIG operation failed (carve, destroy, MIG mode);
* ``sharing``: time-slicing or MPS could not be set up or undone;
* ``cdi``: the claim's CDI spec could not be written or removed;
* ``checkpoint``: the checkpoint could not be read or saved;
* ``lock``: the node-wide prepare lock was not had in time (another plugin pod held it);
* ``refused``: the plugin refuses every call (a checkpoint written by a newer dra-gpu);
* ``internal``: a bug (an unexpected exception);
* ``other``: none of the above."""

_WRAPPERS = re.compile(r"^(?:preparing claim |unpreparing claim |rolling back an earlier attempt of claim )\S+?: ")
"""What ``kubelet_plugin.prepare.state`` puts before the error of one claim's side effects."""
_BATCH = re.compile(r"^(?:preparing|unpreparing): ")
"""What it puts before an error of a whole call's batch (the lock, the checkpoint's load or save)."""
_MIG_CODE = re.compile(
    r"\((?:InsufficientResources|NotFound|InUse|NotSupported|ResetRequired|InvalidArgument|NoPermission|Unknown)\)\Z"
)
"""How a ``MigError`` ends: ``<op>: <detail> (<MigErrorCode>)``."""
_REQUEST = re.compile(r"^claim (?:UID|namespace|name) .*(?:is not a valid|times in one request)")
_SHARING_WORDS = ("sharing", "mps", "nvidia-smi", "time slic", "timeslic")


_RULES: tuple[tuple[str, Callable[[str, str], bool]], ...] = (
    # (reason, test of the message and its lower-case form), first match wins
    ("config", lambda m, _: m.startswith("allocation.devices.config") or ".opaque.parameters" in m),  # ConfigError
    ("refused", lambda m, _: "newer dra-gpu" in m),  # CheckpointTooNew
    ("lock", lambda m, _: m.startswith("timed out after") and "waiting for" in m),  # LockTimeout
    ("checkpoint", lambda _, lower: "checkpoint" in lower),
    ("mig", lambda m, _: bool(_MIG_CODE.search(m)) or "MIG" in m),  # MigError
    ("sharing", lambda _, lower: any(word in lower for word in _SHARING_WORDS)),
    ("cdi", lambda _, lower: "cdi" in lower),
)


def claim_error_reason(message: str) -> str:
    """The reason (one of ``CLAIM_ERROR_REASONS``) for a claim's error message."""
    if message.startswith("this node's checkpoint cannot be used"):
        return "refused"
    if message.startswith("internal error"):
        return "internal"
    if message.startswith("reading claim "):
        return "claim_lookup"
    if _REQUEST.match(message):
        return "request"
    batch = _BATCH.match(message)
    inner = message[batch.end() :] if batch else _WRAPPERS.sub("", message, count=1)
    return _inner_reason(inner, batch=batch is not None)


def _inner_reason(inner: str, *, batch: bool) -> str:
    if inner.startswith(("claim ", "device ")):  # a ClaimError; it names the claim, so no word search on it
        return "config" if "config does not apply" in inner else "allocation"
    lower = inner.lower()
    for reason, matches in _RULES:
        if matches(inner, lower):
            return reason
    return "checkpoint" if batch else "other"  # the batch's other failures are I/O on the checkpoint, under the lock
