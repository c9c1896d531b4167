"""GPU inventory sources (adapters): a node's GPUs from NVML through pynvml, or fake GPUs from named profiles.

``select.make_source`` picks one from the ``--fake-gpus`` setting; the apps (kubelet plugin,
controller, CLI) call it and read the GPUs through ``dra_driver.core.gpu.GpuSource``.
"""
