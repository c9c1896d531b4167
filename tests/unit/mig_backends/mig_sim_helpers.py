"""Helpers the MIG simulator's unit tests share (``test_mig_sim_rules``, ``test_mig_sim_state``)."""

from __future__ import annotations

import pytest

from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import MigProfile
from dra_driver.mig_backends.sim import MigSimulator, NvmlCode, SimError, product_data
from dra_driver.sources.fake import FakeGpuSource


def gpus(profile: str = "h100x8", node: str = "node-a") -> list[GpuInfo]:
    return FakeGpuSource(profile, node).gpus()


def sim_on(profile: str = "h100x8", **kwargs: object) -> tuple[MigSimulator, GpuInfo]:
    gs = gpus(profile)
    # kwargs pass the simulator's keyword options (latency, boot_id, proc_root), each of its own type
    sim = MigSimulator(gs, state_file=kwargs.pop("state_file", None), **kwargs)  # type: ignore[arg-type]
    return sim, gs[0]


def mig_on(sim: MigSimulator, gpu: GpuInfo) -> None:
    sim.set_initial_mode(gpu.uuid, True)


def code_of(excinfo: pytest.ExceptionInfo[SimError]) -> NvmlCode:
    return excinfo.value.code


def profile(gpu: GpuInfo, name: str) -> MigProfile:
    data = product_data(gpu.product_name)
    assert data is not None
    p = data.gi_by_name(name)
    assert p is not None
    return p


def full_ci(sim: MigSimulator, gpu: GpuInfo, gi_id: int) -> int:
    gi_profile, offered = sim.ci_profiles(gpu.uuid, gi_id)
    return next(c.profile_id for c in offered if c.slices == gi_profile.slices and c.creatable)
