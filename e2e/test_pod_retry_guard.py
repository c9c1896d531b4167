"""Which pod writes the kubelet plugin's credentials may make, on the real API server, with the chart installed.

With ``kubeletPlugin.retryWaitingPods`` (the default) the chart grants the plugin's ServiceAccount
``list`` and ``patch`` on pods in every namespace: after each registration the plugin annotates its
node's waiting pods so the kubelet retries their prepare at once (``kubelet_plugin.waiting_pods``).
The chart's ValidatingAdmissionPolicy ``<release>-pod-prepare-retry`` limits such a write to pods
bound to the node the plugin's pod-bound token names, and to the one annotation
``<driver>/prepare-retry``. For each release (``testkit/go/K8S_VERSION`` and
``testkit/go/K8S_MATRIX``): one stock control plane (etcd and kube-apiserver; no kubelet), the chart
installed by Helm, pods bound to two Nodes (never running), and a token bound to the plugin's pod on
one of them, as the kubelet mints it: the plugin's own client lists and annotates its node's pod;
every other write is refused with the policy's message and changes nothing; RBAC refuses the rest.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from dra_driver.kube.connection import ApiConnection, TokenSource
from dra_driver.kube.pods_api import KubePodApi
from e2e.test_helm_install import call, plugin_token, pod_bound_token, wait_policy_enforced
from testkit.cluster import K8S_VERSION, LocalCluster, matrix_versions, wait_for_matrix_build
from testkit.helm_cli import NAMESPACE, PLUGIN, Helm

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
KEY = f"{DEFAULT_DRIVER_NAME}/prepare-retry"
MERGE = "application/merge-patch+json"
POLICY = "dra-gpu-pod-prepare-retry"
VERSIONS = [K8S_VERSION, *matrix_versions()]


@dataclass(frozen=True)
class Installed:
    """The cluster with the chart installed and a token bound to the plugin's pod on node-p."""

    c: LocalCluster
    token: str


@pytest.fixture(scope="module", params=VERSIONS)
def installed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """Per release: the chart installed (fake GPUs) as release dra-gpu, policies in force; pods ``mine`` on node-p,
    ``theirs`` on node-q."""
    version: str = request.param
    if version != K8S_VERSION:
        wait_for_matrix_build()  # make test builds the matrix releases in the background
    tmp = tmp_path_factory.mktemp(f"pod-guard-{version}")
    with LocalCluster(stock=True, version=version, log_dir=tmp / "logs") as cluster:
        Helm.built(tmp / "helm-home").install(cluster, "gpus.fake.profile=h100x8")
        wait_policy_enforced(cluster)
        token = pod_bound_token(cluster, "node-p")  # registers node-p
        cluster.add_node("node-q")
        for name, node in (("mine", "node-p"), ("theirs", "node-q")):
            meta = {"name": name, "labels": {"app": "train"}, "annotations": {"keep": "1"}}
            spec = {"nodeName": node, "serviceAccountName": PLUGIN, "containers": [{"name": "c", "image": "registry.example/x"}]}
            cluster.api("POST", PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
        yield Installed(cluster, token)


def annotations_of(c: LocalCluster, name: str) -> dict[str, Any]:
    return dict(c.api("GET", f"{PODS}/{name}")["metadata"].get("annotations") or {})


def test_the_plugins_own_client_lists_and_annotates_its_nodes_pod(installed: Installed) -> None:
    c, token = installed.c, installed.token
    conn = ApiConnection(
        c.server,
        ssl_context=ssl.create_default_context(cafile=str(c.ca_file)),
        token=TokenSource(token=token),
        honour_proxy_env=False,
    )
    api = KubePodApi(conn, lambda namespace, name: {})
    assert "mine" in {p["metadata"]["name"] for p in api.pending_pods("node-p")}
    api.annotate(NAMESPACE, "mine", KEY, "2026-11-27T00:00:00Z")
    assert annotations_of(c, "mine") == {"keep": "1", KEY: "2026-11-27T00:00:00Z"}


@pytest.mark.parametrize(
    ("pod", "body", "refusal"),
    [
        ("theirs", {"metadata": {"annotations": {KEY: "T"}}}, "may only annotate pods bound to its own node (node-p)"),
        ("mine", {"metadata": {"annotations": {"other": "x"}}}, f"may only change the annotation {KEY} of a pod"),
        ("mine", {"metadata": {"annotations": {"keep": None}}}, f"may only change the annotation {KEY} of a pod"),
        ("mine", {"metadata": {"labels": {"app": "other"}}}, f"may only change the annotation {KEY} of a pod"),
        ("mine", {"metadata": {"finalizers": ["example.com/hold"]}}, f"may only change the annotation {KEY} of a pod"),
    ],
)
def test_the_policy_refuses_any_other_pod_write(installed: Installed, pod: str, body: dict[str, Any], refusal: str) -> None:
    c = installed.c
    before = c.api("GET", f"{PODS}/{pod}")["metadata"]
    resp = call(c, installed.token, "PATCH", f"{PODS}/{pod}", body, MERGE)
    assert resp.status == 403, resp.body
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in resp.message and refusal in resp.message, resp.message
    after = c.api("GET", f"{PODS}/{pod}")["metadata"]
    assert (before["resourceVersion"], before.get("labels")) == (after["resourceVersion"], after.get("labels"))


def test_a_token_naming_no_node_annotates_nothing_and_rbac_refuses_the_rest(installed: Installed) -> None:
    c, token = installed.c, installed.token
    resp = call(c, plugin_token(c), "PATCH", f"{PODS}/mine", {"metadata": {"annotations": {KEY: "T"}}}, MERGE)
    assert resp.status == 403 and "its credentials name no node" in resp.message, resp.message
    for method, path in (("GET", f"{PODS}/mine"), ("DELETE", f"{PODS}/mine"), ("GET", f"{PODS}/mine/log")):
        resp = call(c, token, method, path)
        assert resp.status == 403 and "cannot" in resp.message, (method, path, resp.body)
