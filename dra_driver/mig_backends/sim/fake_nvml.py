"""``SimulatedNvml``: the pynvml subset the NVML MIG backend uses, answered by the MIG simulator.

Same names, call signatures, return shapes and errors as nvidia-ml-py 13.x's ``pynvml``: ``NVMLError``
with ``.value`` (and a subclass per code), the ``NVML_*`` constants, ctypes structures with pynvml's
field names (``nvml_api``; only the NVML adapters import pynvml), handles that are ctypes pointers
(``nvml_handles``), and the C-style calls that fill a caller's ctypes array and a ``byref(c_uint)``
count (``nvml_devices``, ``nvml_instances``). Every call before ``nvmlInit`` fails with
``NVML_ERROR_UNINITIALIZED``.

Passed as ``nvml=`` to ``dra_driver.mig_backends.nvml.NvmlMigBackend`` by tests and by fake-GPU
nodes; the state behind it is a ``MigSimulator`` (``dra_driver.mig_backends.sim.simulator``).
"""

# pynvml's names (camelCase functions and ctypes types) are the interface being reproduced.
# ruff: noqa: N802, N815

from __future__ import annotations

from typing import Any

from dra_driver.mig_backends.sim import nvml_api
from dra_driver.mig_backends.sim.nvml_api import (
    NVMLError,
    c_nvmlComputeInstance_t,
    c_nvmlComputeInstanceInfo_t,
    c_nvmlComputeInstancePlacement_t,
    c_nvmlComputeInstanceProfileInfo_t,
    c_nvmlComputeInstanceProfileInfo_v2_t,
    c_nvmlDevice_t,
    c_nvmlGpuInstance_t,
    c_nvmlGpuInstanceInfo_t,
    c_nvmlGpuInstancePlacement_t,
    c_nvmlGpuInstanceProfileInfo_t,
    c_nvmlGpuInstanceProfileInfo_v2_t,
    nvmlErrorString,
)
from dra_driver.mig_backends.sim.nvml_devices import DeviceCalls
from dra_driver.mig_backends.sim.nvml_instances import InstanceCalls


class SimulatedNvml(DeviceCalls, InstanceCalls):
    """An object answering like the ``pynvml`` module for the GPUs of a ``MigSimulator``."""

    NVMLError = NVMLError
    c_nvmlDevice_t = c_nvmlDevice_t
    c_nvmlGpuInstance_t = c_nvmlGpuInstance_t
    c_nvmlComputeInstance_t = c_nvmlComputeInstance_t
    c_nvmlGpuInstancePlacement_t = c_nvmlGpuInstancePlacement_t
    c_nvmlGpuInstanceProfileInfo_t = c_nvmlGpuInstanceProfileInfo_t
    c_nvmlGpuInstanceProfileInfo_v2_t = c_nvmlGpuInstanceProfileInfo_v2_t
    c_nvmlGpuInstanceInfo_t = c_nvmlGpuInstanceInfo_t
    c_nvmlComputeInstancePlacement_t = c_nvmlComputeInstancePlacement_t
    c_nvmlComputeInstanceProfileInfo_t = c_nvmlComputeInstanceProfileInfo_t
    c_nvmlComputeInstanceProfileInfo_v2_t = c_nvmlComputeInstanceProfileInfo_v2_t
    c_nvmlComputeInstanceInfo_t = c_nvmlComputeInstanceInfo_t

    def __getattr__(self, name: str) -> Any:
        # The NVML_* constants of ``nvml_api``, like pynvml's module attributes.
        if name.startswith(("NVML_", "nvmlGpuInstanceProfileInfo_v", "nvmlComputeInstanceProfileInfo_v")):
            value = vars(nvml_api).get(name)
            if value is not None:
                return value
        if name.startswith("NVMLError_"):
            for cls in NVMLError._by_code.values():
                if cls.__name__ == name:
                    return cls
        raise AttributeError(name)

    def nvmlErrorString(self, result: int) -> str:
        """The text NVML gives for a return code."""
        return nvmlErrorString(result)


__all__ = ["NVMLError", "SimulatedNvml"]
