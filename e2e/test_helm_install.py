"""The Helm chart (deploy/helm/dra-gpu) installed into a real API server.

The Helm CLI is built from source by ``testkit/go/helm/build.sh`` (version pinned in
``testkit/go/helm/go.mod``) and the control plane by ``testkit/go/build.sh``; ``make test`` runs both. This
module builds nothing: a missing binary fails with the script to run.

The install goes into a ``LocalCluster`` (etcd + kube-apiserver, no kubelet), so no pod of the
chart ever runs here: nothing on these machines runs containers. What the API server itself
does is real, and that is what these tests check: it accepts every object of the chart
(CEL selectors of the DeviceClasses and the admission policy are compiled on the way in), its
RBAC authorizer applies the ClusterRole, and its admission chain enforces the
ValidatingAdmissionPolicy against a genuine ServiceAccount token that is bound to a pod on a
node, exactly the credentials the kubelet plugin's pod gets. Finally the real plugin process,
started with the env the chart renders and that token, publishes and restores its node's
slices: the chart's permissions are enough, not just small. How the chart renders is in
``tests/chart/test_helm_render.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from proto.dra.v1 import api_pb2 as dra_v1
from proto.dra.v1 import api_pb2_grpc as dra_v1_grpc
from testkit.cluster import ApiError, LocalCluster
from testkit.helm_cli import CHART, DENIED, NAMESPACE, PLUGIN, POLICY, RELEASE, REPO, SLICES, Helm, by_kind, env_of

# -- Installed into a real API server ------------------------------------------------------------


@dataclass(frozen=True)
class Response:
    """An HTTP answer of the API server."""

    status: int
    body: dict[str, Any]

    @property
    def message(self) -> str:
        """The Status message of an error answer."""
        return str(self.body.get("message", ""))


def call(
    cluster: LocalCluster,
    token: str,
    method: str,
    path: str,
    body: Mapping[str, Any] | None = None,
    content_type: str = "application/json",
) -> Response:
    """One REST call with ``token`` as the bearer (not the admin); HTTP errors are returned, not raised."""
    req = urllib.request.Request(
        cluster.server + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": content_type, "Accept": "application/json"},
    )
    ctx = ssl.create_default_context(cafile=str(cluster.ca_file))
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return Response(resp.status, json.loads(resp.read() or b"{}"))
    except urllib.error.HTTPError as err:
        return Response(err.code, json.loads(err.read() or b"{}"))


def resource_slice(node: str, name: str | None = None) -> dict[str, Any]:
    """A minimal one-GPU ResourceSlice of this driver for ``node``."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-gpu"},
        "spec": {
            "driver": DEFAULT_DRIVER_NAME,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}}],
        },
    }


def plugin_token(cluster: LocalCluster, bound_pod: Mapping[str, Any] | None = None) -> str:
    """A token of the plugin's ServiceAccount, bound to ``bound_pod`` when given (then it names the pod's node)."""
    spec: dict[str, Any] = {"expirationSeconds": 600}
    if bound_pod is not None:
        meta = bound_pod["metadata"]
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    review = cluster.api(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{PLUGIN}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    return str(review["status"]["token"])


def wait_policy_enforced(cluster: LocalCluster, timeout_s: float = 30.0) -> float:
    """Seconds until the API server enforces the freshly installed policy.

    Admission loads policies and bindings from an informer, so for a moment after ``helm install``
    (about half a second here) nothing is enforced yet. Probe with a dry-run create that the
    policy must deny: the plugin's account with a token that names no node.
    """
    token = plugin_token(cluster)
    start = time.monotonic()
    while True:
        probe = call(cluster, token, "POST", f"{SLICES}?dryRun=All", resource_slice("probe"))
        if probe.status != 201:
            assert POLICY in probe.message, probe.body
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            pytest.fail(f"{POLICY} not enforced {timeout_s:.0f}s after helm install")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def installed(helm: Helm, cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The chart installed (fake GPUs) as release dra-gpu in namespace dra-gpu, policy in force.

    ``--wait=hookOnly`` is Helm 4's "do not wait for resources" (its default, spelled out): no pod
    of the chart can ever become ready here.
    """
    helm.run(
        "install", RELEASE, str(CHART), "--kubeconfig", str(cluster.kubeconfig), "--wait=hookOnly",
        "--namespace", NAMESPACE, "--create-namespace", "--set", "gpus.fake.profile=h100x8",
    )  # fmt: skip
    wait_policy_enforced(cluster)
    yield cluster
    helm.run("uninstall", RELEASE, "--kubeconfig", str(cluster.kubeconfig), "--namespace", NAMESPACE, check=False)


def pod_bound_token(cluster: LocalCluster, node: str) -> str:
    """A token of the plugin's account bound to a (never running) pod on ``node``, as its pod would get."""
    cluster.add_node(node)
    pod = cluster.api(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"plugin-on-{node}"},
            "spec": {
                "nodeName": node,
                "serviceAccountName": PLUGIN,
                "containers": [{"name": "plugin", "image": "dra-gpu:never-pulled"}],
            },
        },
    )
    return plugin_token(cluster, pod)


def test_install_creates_the_cluster_objects(installed: LocalCluster) -> None:
    """``helm install`` against the real API server: every object is accepted and stored."""
    c = installed
    classes = {d["metadata"]["name"]: d for d in c.api("GET", "/apis/resource.k8s.io/v1/deviceclasses")["items"]}
    assert {DEFAULT_DRIVER_NAME, f"mig.{DEFAULT_DRIVER_NAME}"} <= set(classes)
    assert f"shared.{DEFAULT_DRIVER_NAME}" not in classes  # only with sharing.consumable
    selector = classes[DEFAULT_DRIVER_NAME]["spec"]["selectors"][0]["cel"]["expression"]
    assert selector == f"device.driver == '{DEFAULT_DRIVER_NAME}' && device.attributes['{DEFAULT_DRIVER_NAME}'].type == 'gpu'"

    role = c.api("GET", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{PLUGIN}")
    assert {r for rule in role["rules"] for r in rule["resources"]} == {
        "resourceclaims",
        "resourceclaims/status",  # device status (deviceStatus.enabled, the default)
        "resourceclaims/driver",
        "resourceslices",
        "nodes",
        "events",
        "pods",  # list, and patch one annotation (kubeletPlugin.retryWaitingPods, the default; e2e/test_pod_retry_guard.py)
    }
    binding = c.api("GET", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{PLUGIN}")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": PLUGIN, "namespace": NAMESPACE}]

    policy = c.api("GET", f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{POLICY}")
    assert policy["spec"]["failurePolicy"] == "Fail"
    pb = c.api("GET", f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{POLICY}")
    assert pb["spec"] == {"policyName": POLICY, "validationActions": ["Deny"]}

    c.api("GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{PLUGIN}")
    ds = c.api("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{PLUGIN}")
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] == 1
    # No kubelet, no container runtime: the DaemonSet exists but no pod of it will ever run here.


def test_policy_pins_the_plugin_to_its_own_node(installed: LocalCluster) -> None:
    """The API server enforces the VAP on the plugin's real, pod-bound token for node-a."""
    c = installed
    token = pod_bound_token(c, "node-a")

    # The token really carries the node (ServiceAccountTokenPodNodeInfo) and is the plugin's account.
    me = call(c, token, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", {"kind": "SelfSubjectReview"})
    assert me.status == 201, me.body
    user = me.body["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{NAMESPACE}:{PLUGIN}"
    assert user["extra"]["authentication.kubernetes.io/node-name"] == ["node-a"]

    # Another node's slice: RBAC allows creating slices, the policy denies this one.
    denied = call(c, token, "POST", SLICES, resource_slice("node-b"))
    assert denied.status == 403, denied.body  # reason Forbidden
    assert DENIED in denied.message, denied.message
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in denied.message
    assert "(node-a); denied: CREATE of a ResourceSlice with spec.nodeName node-b" in denied.message

    # Its own node's slice: created, updated and deleted.
    created = call(c, token, "POST", SLICES, resource_slice("node-a"))
    assert created.status == 201, created.body
    obj = created.body
    obj["spec"]["pool"]["generation"] = 2
    updated = call(c, token, "PUT", f"{SLICES}/node-a-gpu", obj)
    assert updated.status == 200, updated.body
    # (Moving a slice to another node is not a case to test: spec.nodeName is immutable, so the
    # API server's own validation rejects that update before admission runs.)

    # Slices of another node that someone else (here the admin) published: no update, no delete
    # (DELETE is judged by the stored object).
    c.api("POST", SLICES, resource_slice("node-b", name="node-b-by-admin"))
    other = c.api("GET", f"{SLICES}/node-b-by-admin")
    other["spec"]["pool"]["generation"] = 2
    for method, body in (("PUT", other), ("DELETE", None)):
        resp = call(c, token, method, f"{SLICES}/node-b-by-admin", body)
        assert resp.status == 403, (method, resp.body)
        assert f"denied: {method.replace('PUT', 'UPDATE')} of a ResourceSlice with spec.nodeName node-b" in resp.message
    assert c.api("GET", f"{SLICES}/node-b-by-admin")["spec"]["pool"]["generation"] == 1

    deleted = call(c, token, "DELETE", f"{SLICES}/node-a-gpu")
    assert deleted.status == 200, deleted.body
    c.api("DELETE", f"{SLICES}/node-b-by-admin")


def test_policy_pins_the_plugin_to_its_own_driver(installed: LocalCluster) -> None:
    """Its own node, another driver's slice: denied on create, and the admin's such slice cannot be touched."""
    c = installed
    token = pod_bound_token(c, "node-e")
    other = resource_slice("node-e", name="node-e-other-driver")
    other["spec"]["driver"] = "gpu.nvidia.com"
    denied = call(c, token, "POST", SLICES, other)
    assert denied.status == 403, denied.body
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in denied.message
    assert (
        f"ResourceSlices of driver {DEFAULT_DRIVER_NAME}; denied: CREATE of a ResourceSlice with spec.driver gpu.nvidia.com"
        in denied.message
    ), denied.message
    assert "spec.nodeName" not in denied.message  # the node check passed: the message names the one that failed
    c.api("POST", SLICES, other)  # the admin may
    stored = c.api("GET", f"{SLICES}/node-e-other-driver")
    stored["spec"]["pool"]["generation"] = 2
    for method, body in (("PUT", stored), ("DELETE", None)):
        resp = call(c, token, method, f"{SLICES}/node-e-other-driver", body)
        assert resp.status == 403, (method, resp.body)
        assert f"denied: {method.replace('PUT', 'UPDATE')} of a ResourceSlice with spec.driver gpu.nvidia.com" in (
            resp.message
        ), resp.message
    assert c.api("GET", f"{SLICES}/node-e-other-driver")["spec"]["pool"]["generation"] == 1
    # Its own driver on its own node passes both checks.
    mine = call(c, token, "POST", f"{SLICES}?dryRun=All", resource_slice("node-e"))
    assert mine.status == 201, mine.body
    c.api("DELETE", f"{SLICES}/node-e-other-driver")


def test_token_without_node_writes_no_slice(installed: LocalCluster) -> None:
    """A token of the plugin's account that is not bound to a pod names no node: every slice write is denied."""
    c = installed
    resp = call(c, plugin_token(c), "POST", SLICES, resource_slice("node-c"))
    assert resp.status == 403, resp.body
    assert "its credentials name no node" in resp.message, resp.message


def test_rbac_denies_what_the_plugin_does_not_need(installed: LocalCluster) -> None:
    """RBAC (not the policy) stops the plugin's account outside its ClusterRole."""
    c = installed
    token = pod_bound_token(c, "node-d")
    for method, path in (
        ("DELETE", f"/apis/resource.k8s.io/v1/deviceclasses/{DEFAULT_DRIVER_NAME}"),
        ("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets"),
        ("PATCH", "/api/v1/nodes/node-d"),
        ("DELETE", f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{POLICY}"),
    ):
        resp = call(c, token, method, path, {} if method == "PATCH" else None)
        assert resp.status == 403, (method, path, resp.body)
        assert f"system:serviceaccount:{NAMESPACE}:{PLUGIN}" in resp.message, resp.message
        assert "cannot" in resp.message, resp.message
    # Its node, yes; a slice by name, no: the publisher only lists and watches (test below).
    assert call(c, token, "GET", "/api/v1/nodes/node-d").status == 200
    c.api("POST", SLICES, resource_slice("node-d"))
    resp = call(c, token, "GET", f"{SLICES}/node-d-gpu")
    assert resp.status == 403, resp.body
    assert 'cannot get resource "resourceslices"' in resp.message, resp.message
    c.api("DELETE", f"{SLICES}/node-d-gpu")
    # The admin is not matched by the policy: it may write any node's slices.
    c.api("POST", SLICES, resource_slice("node-z"))
    c.api("DELETE", f"{SLICES}/node-z-gpu")


def test_plugin_reads_claims_one_by_one_and_only_creates_events(installed: LocalCluster) -> None:
    """RBAC on the real API server: a claim in any namespace by name, yes; listing or watching claims, cluster-wide
    or in a namespace, no. Creating a Node Event, yes; patching, updating or deleting one, no."""
    c = installed
    token = pod_bound_token(c, "node-f")
    user = f'User "system:serviceaccount:{NAMESPACE}:{PLUGIN}"'
    claims = "/apis/resource.k8s.io/v1/resourceclaims"
    for path, verb, scope in (
        (claims, "list", "at the cluster scope"),
        (f"{claims}?watch=true&timeoutSeconds=1", "watch", "at the cluster scope"),
        ("/apis/resource.k8s.io/v1/namespaces/default/resourceclaims", "list", 'in the namespace "default"'),
        (
            "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims?watch=true&timeoutSeconds=1",
            "watch",
            'in the namespace "default"',
        ),
    ):
        resp = call(c, token, "GET", path)
        assert resp.status == 403, (path, resp.body)
        assert f'{user} cannot {verb} resource "resourceclaims" in API group "resource.k8s.io" {scope}' in resp.message, (
            resp.message
        )

    # GET by name is allowed in any namespace: a real claim in a namespace of its own, and an absent one.
    c.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-f"}})
    claim = c.api(
        "POST",
        "/apis/resource.k8s.io/v1/namespaces/team-f/resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "one-gpu"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DEFAULT_DRIVER_NAME}}]}},
        },
    )
    got = call(c, token, "GET", "/apis/resource.k8s.io/v1/namespaces/team-f/resourceclaims/one-gpu")
    assert got.status == 200, got.body
    assert got.body["metadata"]["uid"] == claim["metadata"]["uid"]
    assert call(c, token, "GET", "/apis/resource.k8s.io/v1/namespaces/kube-system/resourceclaims/absent").status == 404

    # Events: the Node Event the plugin writes (claims_api.node_event's shape) is created; nothing else.
    node_uid = c.api("GET", "/api/v1/nodes/node-f")["metadata"]["uid"]
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "node-f.dra-gpu.", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": "node-f", "uid": node_uid},
        "reason": "CheckpointRecovered",
        "message": "test",
        "type": "Normal",
        "source": {"component": "dra-gpu-kubelet-plugin", "host": "node-f"},
        "count": 1,
    }
    created = call(c, token, "POST", "/api/v1/namespaces/default/events", event)
    assert created.status == 201, created.body
    path = f"/api/v1/namespaces/default/events/{created.body['metadata']['name']}"
    for method, verb, body in (
        ("PATCH", "patch", {"count": 2}),
        ("PUT", "update", {**created.body, "count": 2}),
        ("DELETE", "delete", None),
    ):
        resp = call(c, token, method, path, body)
        assert resp.status == 403, (method, resp.body)
        assert f'{user} cannot {verb} resource "events"' in resp.message, resp.message
    assert c.api("GET", path)["count"] == 1
    c.api("DELETE", "/api/v1/namespaces/team-f")


def test_second_release_with_everything_on_then_uninstall(helm: Helm, installed: LocalCluster) -> None:
    """A second driver beside the first: controller, device status and consumable sharing on, its policy enforced,
    uninstall removes it all."""
    c, kubeconfig = installed, str(installed.kubeconfig)
    release, namespace, driver = "other", "dra-gpu-other", "gpu.other.example"
    helm.run(
        "install", release, str(CHART), "--kubeconfig", kubeconfig, "--wait=hookOnly",
        "--namespace", namespace, "--create-namespace",
        "--set", f"driverName={driver}", "--set", "gpus.fake.profile=l4x4", "--set", "deviceStatus.enabled=true",
        "--set", "controller.enabled=true", "--set", "controller.nodeName=node-ctl", "--set", "sharing.consumable=true",
    )  # fmt: skip
    prefix = "other-dra-gpu"
    # The API server compiled the shared class's selector: allowMultipleAllocations is in its CEL environment
    # (DRAConsumableCapacity); a field it does not know would have failed the install.
    shared = c.api("GET", f"/apis/resource.k8s.io/v1/deviceclasses/shared.{driver}")
    expression = shared["spec"]["selectors"][0]["cel"]["expression"]
    assert expression == f"device.driver == '{driver}' && device.allowMultipleAllocations == true"
    c.api("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{prefix}-controller")
    role = c.api("GET", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{prefix}-kubelet-plugin")
    (driver_rule,) = [r for r in role["rules"] if r["resources"] == ["resourceclaims/driver"]]
    assert driver_rule["resourceNames"] == [driver]

    # The controller's account may write only its configured node's slices, whatever its token.
    review = c.api(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{prefix}-controller/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}},
    )
    token = str(review["status"]["token"])
    deadline = time.monotonic() + 30
    while (resp := call(c, token, "POST", f"{SLICES}?dryRun=All", resource_slice("elsewhere"))).status == 201:
        assert time.monotonic() < deadline, "controller policy never enforced"
        time.sleep(0.1)
    assert resp.status == 403, resp.body
    assert "the dra-gpu controller may only create" in resp.message, resp.message
    own = resource_slice("node-ctl")
    own["spec"]["driver"] = driver
    assert call(c, token, "POST", f"{SLICES}?dryRun=All", own).status == 201
    # and the policy pins its driver: the default release's driver name is not its own
    resp = call(c, token, "POST", f"{SLICES}?dryRun=All", resource_slice("node-ctl"))
    assert resp.status == 403, resp.body
    assert (
        f"the dra-gpu controller may only create, update and delete ResourceSlices of driver {driver}; "
        f"denied: CREATE of a ResourceSlice with spec.driver {DEFAULT_DRIVER_NAME}" in resp.message
    ), resp.message

    helm.run("uninstall", release, "--kubeconfig", kubeconfig, "--namespace", namespace)
    gone = [
        f"/apis/resource.k8s.io/v1/deviceclasses/{driver}",
        f"/apis/resource.k8s.io/v1/deviceclasses/shared.{driver}",
        f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{prefix}-kubelet-plugin",
        f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{prefix}-controller",
        f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{prefix}-resourceslices",
        f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{prefix}-controller-resourceslices",
    ]
    for path in gone:
        with pytest.raises(ApiError) as err:
            c.api("GET", path)
        assert err.value.status == 404, path
    # The first release is untouched.
    c.api("GET", f"/apis/resource.k8s.io/v1/deviceclasses/{DEFAULT_DRIVER_NAME}")


CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
APPLY = "application/apply-patch+yaml"
NIC_DRIVER = "nic.example.com"


def claim_on(c: LocalCluster, node: str, gpu: str) -> dict[str, Any]:
    """A claim allocated (by the admin, as the scheduler would) ``gpu`` of ``node`` and a NIC of another driver."""
    claim = c.api(
        "POST",
        CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"status-{node}"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": DEFAULT_DRIVER_NAME}},
                        {"name": "nic", "exactly": {"deviceClassName": NIC_DRIVER}},
                    ]
                }
            },
        },
    )
    results = [
        {"request": "gpu", "driver": DEFAULT_DRIVER_NAME, "pool": node, "device": gpu},
        {"request": "nic", "driver": NIC_DRIVER, "pool": node, "device": "nic-0"},
    ]
    selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    claim["status"] = {"allocation": {"devices": {"results": results}, "nodeSelector": selector}}
    return c.api("PUT", f"{CLAIMS}/{claim['metadata']['name']}/status", claim)


def apply_status(c: LocalCluster, token: str, claim: str, manager: str, entries: list[dict[str, Any]]) -> Response:
    """Server-side apply of ``status.devices`` entries with ``token``, as the plugin writes them."""
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": claim},
        "status": {"devices": entries},
    }
    return call(c, token, "PATCH", f"{CLAIMS}/{claim}/status?fieldManager={manager}", body, APPLY)


def dra_call(socket: Path, method: str, claim: Mapping[str, Any]) -> Any:
    """NodePrepareResources / NodeUnprepareResources (v1) for one claim over the plugin's DRA socket, as the kubelet calls."""
    meta = claim["metadata"]
    ref = dra_v1.Claim(namespace=meta["namespace"], uid=meta["uid"], name=meta["name"])
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = dra_v1_grpc.DRAPluginStub(channel)
        if method == "prepare":
            return stub.NodePrepareResources(dra_v1.NodePrepareResourcesRequest(claims=[ref]), timeout=45).claims[meta["uid"]]
        return stub.NodeUnprepareResources(dra_v1.NodeUnprepareResourcesRequest(claims=[ref]), timeout=45).claims[meta["uid"]]


def our_entries(c: LocalCluster, claim: str, driver: str = DEFAULT_DRIVER_NAME) -> list[dict[str, Any]]:
    return [d for d in c.api("GET", f"{CLAIMS}/{claim}").get("status", {}).get("devices", []) if d["driver"] == driver]


def test_plugin_publishes_and_reports_device_status_with_only_the_charts_permissions(
    helm: Helm, installed: LocalCluster, tmp_path: Path
) -> None:
    """The real plugin, run with the chart's env and its pod-bound token, publishes its node's slices and writes
    the device status of a claim it prepares.

    Proves the ClusterRole is enough for what the plugin actually calls (list/watch with field
    selectors, create, update, delete, the Node lookup, the server-side apply of claim status with
    the API server's per-driver, per-node check of resourceclaims/driver) and that the policy lets it
    through: nothing here runs as admin; and that the role grants no more: not another driver's
    entries, not from another node's pod, not a PUT. (Host paths are swapped for temp dirs; the
    test calls the DRA socket as the kubelet would.)
    """
    c = installed
    token = pod_bound_token(c, "node-p")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": c.server, "certificate-authority": str(c.ca_file)}}],
                "users": [{"name": "plugin", "user": {"token": token}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "plugin"}}],
                "current-context": "c",
            }
        )
    )
    (container,) = by_kind(helm.template("gpus.fake.profile=l4x4"), "DaemonSet")[PLUGIN]["spec"]["template"]["spec"]["containers"]
    env = {k: v for k, v in env_of(container).items() if isinstance(v, str)}
    # Short host dirs: a unix socket path must stay under 108 bytes, pytest's tmp_path is long.
    host = Path(tempfile.mkdtemp(prefix="dra-helm-"))
    for name, short in (("CDI_ROOT", "cdi"), ("REGISTRAR_DIR", "reg"), ("PLUGIN_DIR", "plug")):
        env[name] = str(host / short)
    env |= {
        "NODE_NAME": "node-p",
        "POD_UID": "5b0c1f1e-0000-4000-8000-000000000001",
        "HEALTHCHECK_PORT": "-1",
        "METRICS_PORT": "-1",  # the chart's 9420 is the pod's; this process runs on the host
        "KUBECONFIG": str(kubeconfig),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "BOOT_ID_FILE": "/proc/sys/kernel/random/boot_id",
    }
    log = tmp_path / "plugin.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kubelet_plugin.main"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 30
        selector = f"?fieldSelector=spec.nodeName=node-p,spec.driver={DEFAULT_DRIVER_NAME}"
        while not (items := c.api("GET", SLICES + selector)["items"]):
            assert proc.poll() is None, f"plugin exited {proc.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"no slices after 30 s:\n{log.read_text()}"
            time.sleep(0.2)
        assert sum(len(s["spec"]["devices"]) for s in items) == 4  # l4x4
        # Its watch (list + watch rights, the policy on re-create) notices a deleted slice and restores it.
        (first,) = items
        c.api("DELETE", f"{SLICES}/{first['metadata']['name']}")
        while not (items := c.api("GET", SLICES + selector)["items"]) or items[0]["metadata"]["uid"] == first["metadata"]["uid"]:
            assert proc.poll() is None, f"plugin exited {proc.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"deleted slice not restored:\n{log.read_text()}"
            time.sleep(0.2)
        # An obsolete slice in its pool (the admin's here, as one left by an older plugin would be): the plugin
        # deletes it and rewrites its own slice in place (PUT) with a higher pool generation.
        (restored,) = items
        generation = restored["spec"]["pool"]["generation"]
        stale = resource_slice("node-p", name="node-p-stale")
        stale["spec"]["pool"]["generation"] = generation
        c.api("POST", SLICES, stale)
        deadline = time.monotonic() + 30
        while True:
            items = c.api("GET", SLICES + selector)["items"]
            names = [i["metadata"]["name"] for i in items]
            if names == [restored["metadata"]["name"]] and items[0]["spec"]["pool"]["generation"] > generation:
                break
            assert proc.poll() is None, f"plugin exited {proc.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"obsolete slice not deleted:\n{log.read_text()}"
            time.sleep(0.2)
        assert items[0]["metadata"]["uid"] == restored["metadata"]["uid"]  # updated, not re-created

        # Device status. A claim allocated on node-p (a GPU and another driver's NIC), prepared over the DRA
        # socket: the plugin applies its entry with its pod-bound token (associated-node:patch, its driver).
        claim = claim_on(c, "node-p", "gpu-1")
        cname, socket = claim["metadata"]["name"], host / "plug" / f"dra-{env['POD_UID']}.sock"
        answer = dra_call(socket, "prepare", claim)
        assert answer.error == "", answer.error
        deadline = time.monotonic() + 30
        while not (entries := our_entries(c, cname)):
            assert time.monotonic() < deadline, f"no status.devices entry after 30 s:\n{log.read_text()}"
            time.sleep(0.2)
        (entry,) = entries
        assert (entry["pool"], entry["device"], entry["data"]["cdiDeviceIDs"]) == (
            "node-p",
            "gpu-1",
            list(answer.devices[0].cdi_device_ids),
        )
        assert entry["data"]["uuid"].startswith("GPU-"), entry
        # The same token may not write another driver's entries of that claim (resourceNames: its driver) ...
        nic = {"driver": NIC_DRIVER, "pool": "node-p", "device": "nic-0", "data": {"mac": "02:00:00:00:00:01"}}
        denied = apply_status(c, token, cname, NIC_DRIVER, [nic])
        assert denied.status == 422, denied.body
        assert 'requires resource="resourceclaims/driver", verb="[associated-node:patch arbitrary-node:patch]"' in (
            denied.message
        ), denied.message
        # ... the plugin's account on another node may not write this claim's entries of its driver (only
        # associated-node is granted) ...
        forged = {"driver": DEFAULT_DRIVER_NAME, "pool": "node-p", "device": "gpu-1", "data": {"uuid": "GPU-forged"}}
        denied = apply_status(c, pod_bound_token(c, "node-q"), cname, DEFAULT_DRIVER_NAME, [forged])
        assert denied.status == 422, denied.body
        assert 'requires resource="resourceclaims/driver", verb="[arbitrary-node:patch]"' in denied.message, denied.message
        # ... and nobody with the role may replace the status (PUT: update is not granted).
        replaced = call(c, token, "PUT", f"{CLAIMS}/{cname}/status", c.api("GET", f"{CLAIMS}/{cname}"))
        assert replaced.status == 403, replaced.body
        assert 'cannot update resource "resourceclaims/status"' in replaced.message, replaced.message
        assert our_entries(c, cname) == [entry]
        # The admin writes the NIC's entry; the plugin's unprepare removes its own entry only.
        assert apply_status(c, installed.token, cname, NIC_DRIVER, [nic]).status == 200
        assert dra_call(socket, "unprepare", claim).error == ""
        deadline = time.monotonic() + 30
        while our_entries(c, cname):
            assert time.monotonic() < deadline, f"status.devices entry not removed:\n{log.read_text()}"
            time.sleep(0.2)
        assert [e["data"] for e in our_entries(c, cname, NIC_DRIVER)] == [nic["data"]]
        c.api("DELETE", f"{CLAIMS}/{cname}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(host, ignore_errors=True)
    text = log.read_text()
    assert proc.returncode == 0, text
    assert "Forbidden" not in text, text
    assert "slice_watch_failed" not in text, text
    status_events = [json.loads(line)["event"] for line in text.splitlines() if '"device_status_' in line]
    assert status_events == ["device_status_written", "device_status_removed"], text
