"""Building a Kubernetes ``ApiClient``: in-cluster service account, or a kubeconfig file.

Called once at start-up by the apps (the standalone controller, the kubelet plugin) and by the
integration tests; the resulting client is handed to adapters such as ``KubeSliceApi``.
"""

from __future__ import annotations

from kubernetes import client, config


def load_api_client(kubeconfig: str | None) -> client.ApiClient:
    """Return an ApiClient for ``kubeconfig`` (a file path), or for the pod's service account when None.

    The kubeconfig is never written back (token refreshes stay in memory). Raises
    ``kubernetes.config.ConfigException`` when the configuration cannot be loaded.
    """
    # The config loaders are untyped in the client package; their results are typed here.
    if kubeconfig:
        api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, persist_config=False
        )
        return api
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)
