"""GPU sources (adapters): NVML through pynvml, and fake GPUs from named profiles."""
