"""The MIG simulator: real products' MIG profile data, NVML's MIG rules, and a pynvml stand-in.

``MigSimulator`` holds the MIG state of a node's (fake) GPUs; ``SimulatedNvml`` answers pynvml calls
from it, so ``dra_driver.mig_backends.nvml.NvmlMigBackend`` runs unchanged against it; ``load_instances``
and ``load_modes`` read a state file for tests and e2e checks. ``python -m dra_driver.mig_backends.sim``
is the command-line stand-in for mig-parted. Used by tests, e2e scenarios and fake-GPU nodes.
"""

from dra_driver.mig_backends.sim.catalog import ProductData, product_data, products
from dra_driver.mig_backends.sim.fake_nvml import NVMLError, SimulatedNvml
from dra_driver.mig_backends.sim.rules import (
    REALISTIC_LATENCY,
    ZERO_LATENCY,
    Latency,
    NvmlCode,
    SimError,
    latency_from_name,
)
from dra_driver.mig_backends.sim.simulator import MigSimulator
from dra_driver.mig_backends.sim.state import load_instances, load_modes

__all__ = [
    "REALISTIC_LATENCY",
    "ZERO_LATENCY",
    "Latency",
    "MigSimulator",
    "NVMLError",
    "NvmlCode",
    "ProductData",
    "SimError",
    "SimulatedNvml",
    "latency_from_name",
    "load_instances",
    "load_modes",
    "product_data",
    "products",
]
