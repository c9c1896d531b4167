"""The standalone ResourceSlice controller app: ``main`` runs one node's publisher.

Apps wire adapters (``dra_driver.kube``, ``dra_driver.sources``, ``dra_driver.mig_backends``) to the
pure core; the publisher itself (``dra_driver.appkit.publisher``) is shared with the kubelet plugin, which
publishes its own node's slices the same way. No app imports another.
"""
