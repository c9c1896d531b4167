"""Sharing backends (adapters): how time slices and MPS daemons are applied to a node's GPUs.

``nvidia`` runs ``nvidia-smi`` and ``nvidia-cuda-mps-control`` on real GPUs; ``sim`` records the same
in a state file on fake GPUs. ``select.make_sharing_backend`` picks one from the kubelet plugin's
settings; the plugin's prepare logic then uses it through ``dra_driver.core.sharing.SharingBackend``.
"""
