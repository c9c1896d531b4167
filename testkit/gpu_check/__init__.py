"""The plugin on a real GPU, without a cluster: what ``scripts/gpu_check.py`` (``make gpu-check``) runs.

``apiserver`` is a stand-in Kubernetes API server (stdlib only, HTTPS), ``plugin`` runs the real
``dra-gpu-kubelet-plugin`` process against it, ``kubelet`` makes the kubelet's gRPC calls over
the plugin's sockets, ``workload`` runs a CUDA program under a claim's CDI spec, ``flow`` strings
them together into one report. Nothing here needs the ``kubernetes`` package, and nothing changes
a GPU's MIG mode, compute mode, clocks, power or time-slicing, resets it or starts MPS
(``tests/unit/gpu_check/test_gpu_check_safety.py`` scans this package for the calls that would).
"""
