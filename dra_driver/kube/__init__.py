"""Kubernetes adapters: the only place in dra-gpu that imports the ``kubernetes`` client.

``client`` builds an ``ApiClient`` (in-cluster or from a kubeconfig); ``slices_api`` speaks raw
JSON to the ResourceSlice, Node and version endpoints, ``claims_api`` reads ResourceClaims and
writes Node Events, ``claim_status_api`` server-side applies claims' ``status.devices``. Used by the apps (``controller``,
``kubelet_plugin``); the pure core never imports this package.
"""
