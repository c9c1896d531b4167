"""MIG backends (adapters): ``dra_driver.core.mig.MigBackend`` over NVML, and the MIG simulator.

``nvml`` implements the backend over pynvml calls: the real library on GPU nodes, or the simulator's
pynvml stand-in (``sim.SimulatedNvml``) on fake-GPU nodes and in tests. ``sim`` is the MIG simulator
(``python -m dra_driver.mig_backends.sim`` is its mig-parted). ``select.make_mig_backend`` picks one
from the apps' settings; the kubelet plugin, the controller and the CLI call it, then use the
backend through ``MigBackend``.
"""
