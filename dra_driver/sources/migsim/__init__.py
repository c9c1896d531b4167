"""The MIG simulator: real products' MIG profile data, NVML's MIG rules, and a pynvml stand-in.

``MigSimulator`` holds the MIG state of a node's (fake) GPUs; ``SimulatedNvml`` answers pynvml calls
from it, so ``dra_driver.sources.nvml_mig.NvmlMigBackend`` runs unchanged against it; ``load_instances``
and ``load_modes`` read a state file for tests and e2e checks. ``python -m dra_driver.sources.migsim``
is the command-line stand-in for mig-parted. Used by tests, e2e scenarios and fake-GPU nodes.
"""

from dra_driver.sources.migsim.catalog import ProductData, product_data, products
from dra_driver.sources.migsim.fake_nvml import NVMLError, SimulatedNvml
from dra_driver.sources.migsim.simulator import (
    REALISTIC_LATENCY,
    ZERO_LATENCY,
    Latency,
    MigSimulator,
    NvmlCode,
    SimError,
    latency_from_name,
)
from dra_driver.sources.migsim.state import load_instances, load_modes

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
