"""Kubernetes adapters: the only place in dra-gpu that talks to the API server or imports ``kubernetes``.

``client`` loads an ``ApiConnection`` (``connection``: a keep-alive pool of ``http.client`` connections with the credentials) from
the pod's service account or a kubeconfig, falling back to the ``kubernetes`` package's loader
only for kubeconfigs that need it (exec plugins, auth providers); ``rest`` is the one raw-JSON
transport. ``slices_api`` speaks to the ResourceSlice, Node and version endpoints, ``claims_api``
reads ResourceClaims and writes Node Events, ``claim_status_api`` server-side applies claims'
``status.devices``, ``explain_api`` reads what ``dra-gpu explain`` needs. Used by the apps
(``controller``, ``kubelet_plugin``, ``dra_driver.cli``); the pure core never imports this package.
"""
