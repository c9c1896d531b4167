"""NVML's fixed MIG rules as the simulator applies them: return codes, errors, latencies, capability minors, engines.

Used by ``dra_driver.mig_backends.sim.simulator.MigSimulator`` (which raises ``SimError`` with the
``NvmlCode`` real NVML returns, sleeps the operation's ``Latency`` and checks the engine budget),
by ``dra_driver.mig_backends.sim.nvml_handles`` and by the ``python -m dra_driver.mig_backends.sim``
CLI; re-exported by ``dra_driver.mig_backends.sim``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dra_driver.core.mig import MigProfile
from dra_driver.mig_backends.sim.catalog import ProductData

# Capability device minors: the driver numbers /dev/nvidia-caps/nvidia-cap<N> per (GPU, GI, CI) with
# room for every GI id and CI id (real minors step by 9 between consecutive GI ids: one GI + 8 CIs).
_CAP_BASE = 3
_CAP_PER_GI = 9
_CAP_GI_SLOTS = 15

OPS = ("set_mode", "create_gi", "create_ci", "destroy_ci", "destroy_gi")


class NvmlCode(enum.IntEnum):
    """NVML return codes (values as in nvml.h / pynvml's ``NVML_ERROR_*``)."""

    SUCCESS = 0
    UNINITIALIZED = 1
    INVALID_ARGUMENT = 2
    NOT_SUPPORTED = 3
    NO_PERMISSION = 4
    NOT_FOUND = 6
    INSUFFICIENT_SIZE = 7
    RESET_REQUIRED = 16
    IN_USE = 19
    INSUFFICIENT_RESOURCES = 23
    UNKNOWN = 999


class SimError(Exception):
    """A simulated MIG operation failed with an NVML return code."""

    def __init__(self, code: NvmlCode, detail: str) -> None:
        super().__init__(f"{detail} ({code.name})")
        self.code = code
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Latency:
    """Seconds each MIG operation takes (slept on success)."""

    set_mode: float = 0.0
    create_gi: float = 0.0
    create_ci: float = 0.0
    destroy_ci: float = 0.0
    destroy_gi: float = 0.0


ZERO_LATENCY = Latency()

# No systematic benchmark is published (performance-and-reliability-anchors §A3). destroy_gi: NVIDIA's
# DRA driver source calls GI destruction "O(1 s)". set_mode: ≈2 s between "Applying MIG mode change"
# and the next step in a GPU-operator log (gpu-operator #2376). create_gi/create_ci/destroy_ci: no
# figure found; estimates chosen well below the destroy time, since DCGM's 1-2 s staleness after a
# create (DCGM #230) is monitoring lag, not the call itself.
REALISTIC_LATENCY = Latency(set_mode=2.0, create_gi=0.5, create_ci=0.3, destroy_ci=0.2, destroy_gi=1.0)

_LATENCIES = {"zero": ZERO_LATENCY, "realistic": REALISTIC_LATENCY}


def latency_from_name(name: str) -> Latency:
    """``zero`` or ``realistic``; ValueError for anything else."""
    try:
        return _LATENCIES[name]
    except KeyError:
        raise ValueError(f"unknown MIG latency {name!r}; known: {', '.join(sorted(_LATENCIES))}") from None


def caps_minor(gpu_minor: int, gi_id: int, ci_id: int | None = None) -> int:
    """The nvidia-cap minor of a GI (``ci_id`` None) or a CI: unique per node."""
    if not 0 <= gi_id < _CAP_GI_SLOTS or (ci_id is not None and not 0 <= ci_id < _CAP_PER_GI - 1):
        raise ValueError(f"GI {gi_id} / CI {ci_id} out of the capability range")
    return _CAP_BASE + gpu_minor * _CAP_GI_SLOTS * _CAP_PER_GI + gi_id * _CAP_PER_GI + (0 if ci_id is None else 1 + ci_id)


def _engines(p: MigProfile) -> tuple[int, ...]:
    return (p.multiprocessors, p.copy_engines, p.decoders, p.encoders, p.jpeg_engines, p.ofa_engines)


def engine_budget_holds(product: ProductData, profiles: list[MigProfile]) -> bool:
    """True when GIs of ``profiles`` together need no more SMs or engines than the whole GPU has."""
    budget = _engines(product.full)
    used = [sum(col) for col in zip(*(_engines(p) for p in profiles), strict=True)] if profiles else [0] * len(budget)
    return all(u <= b for u, b in zip(used, budget, strict=True))
