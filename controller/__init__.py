"""The standalone ResourceSlice controller app: ``publisher`` keeps a node's slices, ``main`` runs it.

Apps wire adapters (``dra_driver.kube``, ``dra_driver.sources``) to the pure core; the kubelet
plugin reuses ``controller.publisher`` for its own node.
"""
