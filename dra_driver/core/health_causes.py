"""What each health event means, pure: the one table from NVML's event types to causes and their taints.

Read by ``dra_driver.core.health`` (which turns events into conditions and conditions into taints),
by the NVML health source (``dra_driver.sources.nvml_health``: which NVML event types to register,
and the kind of each event it waits for; it resolves the pynvml names given here), by the fake GPUs'
fault tool (``dra_driver.sources.fake_health``: which kinds it can inject) and by the device check
script. Nothing here imports pynvml: NVML's constants are named, as strings, and resolved by the
NVML adapter.

Three tables, each the only place its fact lives:

* ``EVENT_CAUSES``: per event kind, the NVML event type behind it, the taint key and value, the
  severity and how the condition clears. A kind with no key is recorded only (the source logs it;
  nothing is tainted): P-state, clock, power-source and MIG-configuration changes are the GPU
  working normally (the dynamic MIG backend changes MIG configuration itself).
* ``XID_CLASSES``: the severity of each XID (the ``xid`` kind's value is its number).
* ``RECOVERY_ACTIONS``: the severity of each GPU recovery action NVML can ask for (the
  ``gpu-recovery-action`` kind's value, also read by the periodic check).

Severity decides the taint effect (``dra_driver.core.health.taint_effect``): fatal is NoExecute
with eviction on, else NoSchedule; degraded is NoSchedule; application and informational are the
``None`` effect where the cluster has it (1.35+; no scheduling effect), else no taint.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    """How bad a condition is; see ``dra_driver.core.health``."""

    FATAL = "fatal"
    DEGRADED = "degraded"
    APPLICATION = "application"
    INFORMATIONAL = "informational"


class Clears(StrEnum):
    """What ends a condition; see ``dra_driver.core.health``."""

    REPAIR = "repair"
    CHECK = "check"
    HOLD = "hold"


# Taint keys (``<driver>/<key>``).
KEY_XID = "xid"
KEY_ECC = "ecc"
KEY_GPU_LOST = "gpu-lost"
KEY_MEMORY_REPAIR = "memory-repair"
KEY_DRAM_RETIREMENT = "dram-retirement"
KEY_POISON = "poison"
KEY_RECOVERY_ACTION = "recovery-action"
KEY_UNMONITORED = "unmonitored"
KEY_HEALTH_RECORD = "health-record"

_APP = Severity.APPLICATION
_FATAL = Severity.FATAL
_DEGRADED = Severity.DEGRADED
_INFO = Severity.INFORMATIONAL

# NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors), by its immediate-action bucket:
# RESTART_APP -> application; RESET_GPU / RESTART_BM / drain workflows -> fatal; IGNORE -> informational.
XID_CLASSES: dict[int, tuple[Severity, str]] = {
    8: (_APP, "GPU stopped processing (channel idle timeout)"),
    13: (_APP, "graphics engine exception"),
    31: (_APP, "GPU memory page fault"),
    32: (_APP, "invalid or corrupted push buffer stream"),
    43: (_APP, "GPU stopped processing"),
    45: (_APP, "preemptive cleanup after previous errors"),
    68: (_APP, "video decoder exception"),
    69: (_APP, "graphics engine class error"),
    94: (_APP, "contained ECC error (the application was stopped)"),
    109: (_APP, "context switch timeout"),
    63: (_INFO, "ECC page retirement or row remapping recorded"),
    92: (_INFO, "high single-bit ECC error rate"),
    48: (_FATAL, "double-bit ECC error"),
    61: (_FATAL, "internal micro-controller breakpoint"),
    62: (_FATAL, "internal micro-controller halt"),
    64: (_FATAL, "ECC page retirement or row remapping failed"),
    74: (_FATAL, "NVLink error"),
    79: (_FATAL, "GPU has fallen off the bus"),
    95: (_FATAL, "uncontained ECC error"),
    119: (_FATAL, "GSP RPC timeout"),
    120: (_FATAL, "GSP error"),
    140: (_FATAL, "unrecovered ECC error"),
    143: (_FATAL, "GPU initialization failure"),
    144: (_FATAL, "NVLink SAW error"),
    145: (_FATAL, "NVLink RLW error"),
    146: (_FATAL, "NVLink TLW error"),
    147: (_FATAL, "NVLink TREX error"),
    148: (_FATAL, "NVLink NVLPW_CTRL error"),
    149: (_FATAL, "NVLink NETIR error"),
    150: (_FATAL, "NVLink MSE error"),
    154: (_DEGRADED, "GPU recovery action changed (the driver asks for a reset or drain)"),
}
MAX_XID = 1 << 16
"""XIDs are small numbers; anything larger is refused as input (a source bug or a bad fault request)."""


@dataclass(frozen=True, slots=True)
class RecoveryAction:
    """One value of NVML's GPU recovery action (``nvmlDeviceGpuRecoveryAction_t``)."""

    nvml: str
    """The pynvml constant of the value ('' for ``unknown``, which is no NVML value)."""
    severity: Severity | None
    """None: nothing to do, no condition."""
    what: str


# NVIDIA's memory error management guide ("Error Recovery and Response Flags"): the action NVML
# reports (field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) after an uncorrectable error.
RECOVERY_ACTIONS: dict[str, RecoveryAction] = {
    "none": RecoveryAction("NVML_GPU_RECOVERY_ACTION_NONE", None, "no recovery action needed"),
    "gpu-reset": RecoveryAction(
        "NVML_GPU_RECOVERY_ACTION_GPU_RESET", _FATAL, "the GPU needs a reset (stop its processes, then reset it)"
    ),
    "node-reboot": RecoveryAction("NVML_GPU_RECOVERY_ACTION_NODE_REBOOT", _FATAL, "the node needs a reboot"),
    "drain-p2p": RecoveryAction(
        "NVML_GPU_RECOVERY_ACTION_DRAIN_P2P", _DEGRADED, "peer-to-peer traffic must be drained (stop processes using it)"
    ),
    "drain-and-reset": RecoveryAction(
        "NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET", _FATAL, "drain peer-to-peer traffic, then reset the GPU"
    ),
    "recover-imex-domain": RecoveryAction(
        "NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN", _DEGRADED, "the GPU's IMEX domain needs recovery"
    ),
    "bus-reset": RecoveryAction("NVML_GPU_RECOVERY_ACTION_BUS_RESET", _FATAL, "the GPU's PCIe bus needs a reset"),
    "system-reboot": RecoveryAction("NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT", _FATAL, "the system needs a reboot"),
    "unknown": RecoveryAction("", _DEGRADED, "NVML asked for a recovery action this driver does not know or could not read"),
}
"""By the taint value (kebab-case of NVML's name). An unknown or unreadable action is degraded, never ignored."""


@dataclass(frozen=True, slots=True)
class EventCause:
    """What one kind of health event means."""

    nvml: str
    """The pynvml constant of the NVML event type that raises it ('' : no NVML event type does)."""
    key: str
    """The taint key ('' : recorded only, no condition)."""
    value: str
    """The taint value ('' where it comes from the event: the XID number, the recovery action)."""
    severity: Severity | None
    """None where it comes from the event (``XID_CLASSES``, ``RECOVERY_ACTIONS``) or for recorded-only kinds."""
    clears: Clears
    what: str


_ROUTINE = "the GPU working normally: recorded, nothing tainted"

EVENT_CAUSES: dict[str, EventCause] = {
    "xid": EventCause("nvmlEventTypeXidCriticalError", KEY_XID, "", None, Clears.REPAIR, "XID: severity by XID_CLASSES"),
    "double-bit-ecc": EventCause(
        "nvmlEventTypeDoubleBitEccError", KEY_ECC, "double-bit", _FATAL, Clears.REPAIR, "double-bit ECC error"
    ),
    "single-bit-ecc-storm": EventCause(
        "nvmlEventTypeSingleBitEccErrorStorm",
        KEY_ECC,
        "single-bit-storm",
        _DEGRADED,
        Clears.REPAIR,
        "single-bit ECC error storm (memory failing)",
    ),
    "single-bit-ecc": EventCause(
        "nvmlEventTypeSingleBitEccError", KEY_ECC, "single-bit", _INFO, Clears.HOLD, "single-bit ECC error (corrected)"
    ),
    "dram-retirement-failure": EventCause(
        "nvmlEventTypeDramRetirementFailure",
        KEY_DRAM_RETIREMENT,
        "failed",
        _DEGRADED,
        Clears.REPAIR,
        "DRAM retirement failed: the memory could not be repaired",
    ),
    "dram-retirement": EventCause(
        "nvmlEventTypeDramRetirementEvent",
        KEY_DRAM_RETIREMENT,
        "retired",
        _INFO,
        Clears.HOLD,
        "DRAM retirement recorded (takes effect at the next GPU reset)",
    ),
    "fatal-poison": EventCause(
        "nvmlEventTypeFatalPoisonError", KEY_POISON, "fatal", _FATAL, Clears.REPAIR, "fatal poison error (corrupted data used)"
    ),
    "non-fatal-poison": EventCause(
        "nvmlEventTypeNonFatalPoisonError", KEY_POISON, "non-fatal", _INFO, Clears.HOLD, "non-fatal poison error (contained)"
    ),
    "gpu-unavailable": EventCause(
        "nvmlEventTypeGpuUnavailableError", KEY_GPU_LOST, "unavailable", _FATAL, Clears.REPAIR, "GPU unavailable"
    ),
    "gpu-recovery-action": EventCause(
        "nvmlEventTypeGpuRecoveryAction",
        KEY_RECOVERY_ACTION,
        "",
        None,
        Clears.CHECK,
        "GPU recovery action: severity by RECOVERY_ACTIONS, lasts while NVML asks for it",
    ),
    "pstate": EventCause("nvmlEventTypePState", "", "", None, Clears.HOLD, f"P-state change: {_ROUTINE}"),
    "clock": EventCause("nvmlEventTypeClock", "", "", None, Clears.HOLD, f"clock change: {_ROUTINE}"),
    "power-source": EventCause("nvmlEventTypePowerSourceChange", "", "", None, Clears.HOLD, f"power source change: {_ROUTINE}"),
    "mig-config": EventCause("nvmlEventMigConfigChange", "", "", None, Clears.HOLD, f"MIG configuration change: {_ROUTINE}"),
    "gpu-lost": EventCause("", KEY_GPU_LOST, "lost", _FATAL, Clears.REPAIR, "GPU lost"),
    "gpu-reset": EventCause("", "", "", None, Clears.HOLD, "GPU reset: clears what events raised"),
}
"""By ``HealthEvent.kind``. NVML has no reset or lost event: those come from the fake GPUs (and checks)."""

EVENT_KINDS: tuple[str, ...] = tuple(EVENT_CAUSES)
NVML_EVENT_KINDS: tuple[str, ...] = tuple(k for k, c in EVENT_CAUSES.items() if c.nvml)
"""The kinds an NVML event type raises, in the order the source registers and matches them."""
