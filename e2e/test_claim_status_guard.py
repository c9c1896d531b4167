"""Who may write a ResourceClaim's status with the kubelet plugin's credentials, on the real API server of every release.

The chart grants the plugin's ServiceAccount ``patch`` on ``resourceclaims/status`` in every
namespace (``deploy/helm/dra-gpu/templates/rbac.yaml``): the plugin server-side applies its
driver's ``status.devices`` entries after a prepare (``dra_driver.kube.claim_status_api``). Before
1.36 the API server checks nothing more, so the chart's ValidatingAdmissionPolicy
``<release>-resourceclaim-status`` (``templates/validatingadmissionpolicy.yaml``) limits such a
write to the plugin's own driver's entries, on claims allocated to the node its pod-bound token
names, and never ``status.allocation`` or ``status.reservedFor``. From 1.36 the API server
refuses the same writes itself (DRAResourceClaimGranularStatusAuthorization: the synthetic
``resourceclaims/driver`` and ``resourceclaims/binding`` subresources), in its validation, which
runs before admission: there its refusal is the one a caller sees.

For each release (``testkit/go/K8S_VERSION`` and ``testkit/go/K8S_MATRIX``): one stock control plane (etcd and
kube-apiserver as the release ships them; no scheduler, no kubelet), the chart installed by Helm
against it (so its RBAC and policies are what that server's version renders), two Nodes, a pod of
the plugin's ServiceAccount on each (never running), and tokens bound to those pods by the
TokenRequest API, as the kubelet mints them for the DaemonSet's pods. Claims in two tenant
namespaces are allocated by the admin as the scheduler would (one of this driver's GPUs and
another driver's NIC), and the tests write their status with the plugin's tokens: the plugin's own
write, through its own code, lands on every release; every other write is refused with the
release's exact message and changes nothing. The last test grants the plugin's account more than
the chart does (what an admin's extra ClusterRole might), so that from 1.36 the API server's own
check passes too and the policy alone is seen refusing, on every release.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from dra_driver.core.api_errors import ApiError
from dra_driver.core.device_status import DeviceStatus, apply_configuration, entries_of, ready_condition
from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from dra_driver.kube.claim_status_api import KubeClaimStatusApi
from dra_driver.kube.connection import ApiConnection, TokenSource
from e2e.test_helm_install import Response, call, plugin_token, pod_bound_token, wait_policy_enforced
from testkit.cluster import K8S_VERSION, LocalCluster, matrix_versions, minor_of, wait_for_matrix_build
from testkit.helm_cli import NAMESPACE, PLUGIN, Helm

VERSIONS = [K8S_VERSION, *matrix_versions()]
POLICY = "dra-gpu-resourceclaim-status"  # the policy and its binding, for release dra-gpu
USER = f"system:serviceaccount:{NAMESPACE}:{PLUGIN}"
NIC_DRIVER = "nic.example.com"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
WIDER = "claim-status-wider-grants"  # the test's extra ClusterRole(Binding) for the plugin's account


@dataclass(frozen=True)
class Claim:
    """A claim the admin allocated: this driver's ``gpu-1`` and the NIC driver's ``nic-0`` in ``node``'s pools."""

    namespace: str
    name: str
    uid: str
    node: str

    @property
    def path(self) -> str:
        return f"/apis/resource.k8s.io/v1/namespaces/{self.namespace}/resourceclaims/{self.name}"

    def gpu_entry(self, uuid: str = "GPU-00000000-0000-0000-0000-000000000001") -> DeviceStatus:
        """Our driver's entry for its GPU, as the plugin builds it after a prepare."""
        ready = ready_condition(node_name=self.node, now="2026-11-25T10:00:00Z")
        data = {"uuid": uuid, "requests": ["gpu"]}
        return DeviceStatus(
            driver=DEFAULT_DRIVER_NAME, pool=self.node, device="gpu-1", share_id=None, data=data, conditions=(ready,)
        )

    def body(self, *entries: DeviceStatus) -> dict[str, Any]:
        """The plugin's server-side apply body for these entries (none: remove its entries)."""
        return apply_configuration(namespace=self.namespace, name=self.name, uid=self.uid, statuses=entries)


@dataclass
class Guarded:
    """One release's control plane with the chart installed, its claims and the plugin's tokens."""

    version: str
    c: LocalCluster
    train: Claim  # team-a, node-a, reserved for a pod
    infer: Claim  # team-b, node-b, reserved for a pod
    idle: Claim  # team-b, node-b, allocated, not reserved
    spread: Claim  # team-a, allocated by node label: no single node
    token_a: str  # bound to the plugin's pod on node-a
    token_b: str  # bound to the plugin's pod on node-b

    @property
    def api_server_checks(self) -> bool:
        """The release authorizes status.devices, allocation and reservedFor itself (1.36+, gate on by default)."""
        return minor_of(self.version) >= 36

    def writer(self, token: str) -> KubeClaimStatusApi:
        """The plugin's claim status client (``dra_driver.kube``), authenticated by ``token``."""
        ctx = ssl.create_default_context(cafile=str(self.c.ca_file))
        conn = ApiConnection(self.c.server, ssl_context=ctx, token=TokenSource(token=token), honour_proxy_env=False)
        return KubeClaimStatusApi(conn, field_manager=DEFAULT_DRIVER_NAME)

    def status(self, claim: Claim) -> dict[str, Any]:
        return dict(self.c.api("GET", claim.path).get("status") or {})


def allocate(c: LocalCluster, namespace: str, name: str, node: str, *, reserved: bool, by_label: bool = False) -> Claim:
    """Create a claim and allocate it as the scheduler would (as admin), with the NIC driver's entry written by that driver."""
    claims = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
    requests = [
        {"name": "gpu", "exactly": {"deviceClassName": DEFAULT_DRIVER_NAME}},
        {"name": "nic", "exactly": {"deviceClassName": NIC_DRIVER}},
    ]
    spec = {"devices": {"requests": requests}}
    claim = c.api(
        "POST", claims, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": spec}
    )
    results = [
        {"request": "gpu", "driver": DEFAULT_DRIVER_NAME, "pool": node, "device": "gpu-1"},
        {"request": "nic", "driver": NIC_DRIVER, "pool": node, "device": "nic-0"},
    ]
    term = (
        {"matchExpressions": [{"key": "example.com/rack", "operator": "In", "values": ["r1"]}]}
        if by_label
        else {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    )
    status: dict[str, Any] = {"allocation": {"devices": {"results": results}, "nodeSelector": {"nodeSelectorTerms": [term]}}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": f"{name}-pod", "uid": "0f0f0f0f-0000-4000-8000-000000000001"}]
    claim["status"] = status
    c.api("PUT", f"{claims}/{name}/status", claim)
    nic = {"driver": NIC_DRIVER, "pool": node, "device": "nic-0", "data": {"mac": "02:00:00:00:00:01"}}
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}, "status": {"devices": [nic]}}
    c.api("PATCH", f"{claims}/{name}/status?fieldManager={NIC_DRIVER}", body, APPLY)
    return Claim(namespace, name, claim["metadata"]["uid"], node)


def wait_claim_guard(g: Guarded, timeout_s: float = 30.0) -> None:
    """Until a write of the plugin's account that names no node is refused (the policy is in force; from 1.36 at once)."""
    nodeless = plugin_token(g.c)
    body = g.train.body(g.train.gpu_entry())
    deadline = time.monotonic() + timeout_s
    while (
        call(g.c, nodeless, "PATCH", f"{g.train.path}/status?fieldManager={DEFAULT_DRIVER_NAME}&dryRun=All", body, APPLY).status
        == 200
    ):
        assert time.monotonic() < deadline, f"{POLICY} not enforced {timeout_s:.0f}s after helm install"
        time.sleep(0.1)


@pytest.fixture(scope="module", params=VERSIONS)
def guarded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guarded]:
    version: str = request.param
    if version != K8S_VERSION:
        wait_for_matrix_build()  # make test builds the matrix releases in the background
    tmp = tmp_path_factory.mktemp(f"claim-guard-{version}")
    with LocalCluster(stock=True, version=version, log_dir=tmp / "logs") as c:
        Helm.built(tmp / "helm-home").install(c, "gpus.fake.profile=h100x8")
        wait_policy_enforced(c)
        for ns in ("team-a", "team-b"):
            c.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        g = Guarded(
            version=version,
            c=c,
            train=allocate(c, "team-a", "train", "node-a", reserved=True),
            infer=allocate(c, "team-b", "infer", "node-b", reserved=True),
            idle=allocate(c, "team-b", "idle", "node-b", reserved=False),
            spread=allocate(c, "team-a", "spread", "node-a", reserved=False, by_label=True),
            token_a=pod_bound_token(c, "node-a"),
            token_b=pod_bound_token(c, "node-b"),
        )
        wait_claim_guard(g)
        yield g


# -- What each refusal says -------------------------------------------------------------------------


def policy_says(claim: Claim, detail: str) -> str:
    """The chart's policy refusing a write to ``claim``."""
    return (
        f'resourceclaims.resource.k8s.io "{claim.name}" is forbidden: '
        f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: {detail}"
    )


def binding_refused(claim: Claim, what: str) -> str:
    """The policy: status.allocation or status.reservedFor changed (``what`` names which)."""
    return policy_says(
        claim,
        "the dra-gpu kubelet plugin may not change status.allocation or status.reservedFor of a ResourceClaim; "
        f"denied: a change of {what} of ResourceClaim {claim.namespace}/{claim.name}",
    )


def node_refused(claim: Claim, token_node: str | None, claim_node: str | None) -> str:
    """The policy: status.devices of a claim not allocated to the token's node (None: no node)."""
    where = f" is allocated to node {claim_node}" if claim_node else " is not allocated to one node"
    return policy_says(
        claim,
        "the dra-gpu kubelet plugin may only change status.devices of ResourceClaims allocated to its own node "
        f"({token_node or 'its credentials name no node'}); denied: ResourceClaim {claim.namespace}/{claim.name}{where}",
    )


def driver_refused(claim: Claim, driver: str) -> str:
    """The policy: another driver's status.devices entries."""
    return policy_says(
        claim,
        f"the dra-gpu kubelet plugin may only change status.devices entries of driver {DEFAULT_DRIVER_NAME}; "
        f"denied: a change of the entries of driver {driver} in ResourceClaim {claim.namespace}/{claim.name}",
    )


def api_server_devices_refused(claim: Claim, driver: str, *, same_node: bool) -> str:
    """1.36+: the API server's per-driver check of status.devices. A ServiceAccount whose token names the claim's
    node is checked for associated-node:patch, then arbitrary-node:patch; any other caller for the latter only.
    The message names the verbs tried and the first one's refusal."""
    verbs = ["associated-node:patch", "arbitrary-node:patch"] if same_node else ["arbitrary-node:patch"]
    return (
        f'ResourceClaim.resource.k8s.io "{claim.name}" is invalid: status.devices: Forbidden: changing status.devices '
        f'requires resource="resourceclaims/driver", verb="[{" ".join(verbs)}]" permission: '
        f'resourceclaims.resource.k8s.io "{driver}" is forbidden: User "{USER}" cannot {verbs[0]} '
        f'resource "resourceclaims/driver" in API group "resource.k8s.io" in the namespace "{claim.namespace}"'
    )


def api_server_binding_refused(claim: Claim) -> str:
    """1.36+: the API server's check of status.allocation and status.reservedFor."""
    return (
        f'ResourceClaim.resource.k8s.io "{claim.name}" is invalid: status.allocation: Forbidden: changing '
        'status.allocation or status.reservedFor requires resource="resourceclaims/binding", verb="patch" permission: '
        f'resourceclaims.resource.k8s.io is forbidden: User "{USER}" cannot patch resource "resourceclaims/binding" '
        'in API group "resource.k8s.io" at the cluster scope'
    )


def assert_refused(g: Guarded, resp: Response | ApiError, policy: str, api_server: str) -> None:
    """Refused with the release's exact message: the policy's before 1.36 (403), the API server's from 1.36 (422)."""
    expected = (422, api_server) if g.api_server_checks else (403, policy)
    assert (resp.status, resp.message) == expected, f"{g.version}: {resp.status} {resp.message}"


def merge_patch(g: Guarded, token: str, claim: Claim, status: dict[str, Any]) -> Response:
    return call(g.c, token, "PATCH", f"{claim.path}/status", {"status": status}, MERGE)


def apply_as(g: Guarded, token: str, claim: Claim, manager: str, entries: list[dict[str, Any]]) -> Response:
    """Server-side apply of ``status.devices`` entries with any field manager (what a stolen token could send)."""
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": claim.name},
        "status": {"devices": entries},
    }
    return call(g.c, token, "PATCH", f"{claim.path}/status?fieldManager={manager}", body, APPLY)


# -- The plugin's credentials -------------------------------------------------------------------------


def test_a_token_bound_to_the_plugins_pod_names_the_pods_node(guarded: Guarded) -> None:
    """The node every check relies on comes from the TokenRequest API: bound to a pod that exists, it names its node."""
    g = guarded
    assert g.c.api("GET", "/version")["gitVersion"] == g.version
    me = call(g.c, g.token_a, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", {"kind": "SelfSubjectReview"})
    assert me.status == 201, me.body
    user = me.body["status"]["userInfo"]
    assert user["username"] == USER
    assert user["extra"]["authentication.kubernetes.io/node-name"] == ["node-a"]
    # No token is bound to a pod that does not exist: a node cannot be claimed by naming a pod.
    ghost = {"apiVersion": "v1", "kind": "Pod", "name": "ghost", "uid": "0f0f0f0f-0000-4000-8000-00000000dead"}
    resp = call(
        g.c,
        g.c.token,
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{PLUGIN}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"boundObjectRef": ghost}},
    )
    assert (resp.status, resp.message) == (404, 'pods "ghost" not found'), resp.body


# -- The plugin's own write ---------------------------------------------------------------------------


def test_the_plugins_own_entries_land_on_its_nodes_claim_and_are_removed(guarded: Guarded) -> None:
    """The plugin's server-side apply (its code, its pod-bound token) writes and removes its entry; nothing else moves."""
    g = guarded
    before = g.status(g.train)
    writer = g.writer(g.token_a)
    stored = writer.apply_status(g.train.namespace, g.train.name, g.train.body(g.train.gpu_entry()))
    assert entries_of(stored, DEFAULT_DRIVER_NAME) == [g.train.gpu_entry().to_json()]
    # The same entry again (a repeated prepare) and a changed one (a re-prepare after a restart) land too.
    writer.apply_status(g.train.namespace, g.train.name, g.train.body(g.train.gpu_entry()))
    changed = g.train.gpu_entry(uuid="GPU-00000000-0000-0000-0000-000000000002")
    stored = writer.apply_status(g.train.namespace, g.train.name, g.train.body(changed))
    assert entries_of(stored, DEFAULT_DRIVER_NAME) == [changed.to_json()]
    # Unprepare removes its entries; removing none (already removed) is no write and passes.
    for _ in range(2):
        stored = writer.apply_status(g.train.namespace, g.train.name, g.train.body())
        assert entries_of(stored, DEFAULT_DRIVER_NAME) == []
    after = g.status(g.train)
    assert after == before, "the allocation, reservedFor and the NIC driver's entry are untouched"


def test_removing_its_entries_after_the_claim_was_deallocated_passes(guarded: Guarded) -> None:
    """Unprepare racing deallocation: the API server dropped the plugin's entries with the allocation, so its removal
    changes nothing and passes (no node to check on an unallocated claim), on every release."""
    g = guarded
    done = allocate(g.c, "team-a", "done", "node-a", reserved=False)
    writer = g.writer(g.token_a)
    writer.apply_status(done.namespace, done.name, done.body(done.gpu_entry()))
    g.c.api("PATCH", f"{done.path}/status", {"status": {"allocation": None}}, MERGE)  # as the controller does
    assert g.status(done).get("devices") is None, "deallocation drops every entry"
    stored = writer.apply_status(done.namespace, done.name, done.body())
    assert "allocation" not in (stored.get("status") or {}) and entries_of(stored, DEFAULT_DRIVER_NAME) == []
    g.c.api("DELETE", done.path)


# -- Everything else is refused -------------------------------------------------------------------------


def test_another_drivers_entry_is_refused(guarded: Guarded) -> None:
    """Its own node's claim, the NIC driver's entry: refused."""
    g = guarded
    before = g.status(g.train)
    forged = {"driver": NIC_DRIVER, "pool": "node-a", "device": "nic-0", "data": {"mac": "02:00:00:00:00:ff"}}
    resp = apply_as(g, g.token_a, g.train, NIC_DRIVER, [forged])
    api_server = api_server_devices_refused(g.train, NIC_DRIVER, same_node=True)
    assert_refused(g, resp, driver_refused(g.train, NIC_DRIVER), api_server)
    assert g.status(g.train) == before


def test_clearing_reserved_for_is_refused(guarded: Guarded) -> None:
    """Its own node's claim: reservedFor cleared (the pod would lose its claim while it runs): refused."""
    g = guarded
    before = g.status(g.train)
    resp = merge_patch(g, g.token_a, g.train, {"reservedFor": None})
    assert_refused(g, resp, binding_refused(g.train, "status.reservedFor"), api_server_binding_refused(g.train))
    assert g.status(g.train) == before


def test_deallocating_another_namespaces_claim_on_another_node_is_refused(guarded: Guarded) -> None:
    """A claim of another namespace on another node: deallocated (its devices free for a second pod): refused,
    alone or with its reservedFor cleared in the same request."""
    g = guarded
    for claim, status, what in (
        (g.idle, {"allocation": None}, "status.allocation"),
        (g.infer, {"allocation": None, "reservedFor": None}, "status.allocation and status.reservedFor"),
    ):
        before = g.status(claim)
        resp = merge_patch(g, g.token_a, claim, status)
        assert_refused(g, resp, binding_refused(claim, what), api_server_binding_refused(claim))
        assert g.status(claim) == before


def test_its_own_drivers_entry_on_another_nodes_claim_is_refused(guarded: Guarded) -> None:
    """The plugin's own write (its code, its driver) on a claim allocated to node-b, with node-a's token: refused."""
    g = guarded
    before = g.status(g.infer)
    with pytest.raises(ApiError) as err:
        g.writer(g.token_a).apply_status(g.infer.namespace, g.infer.name, g.infer.body(g.infer.gpu_entry()))
    policy = node_refused(g.infer, "node-a", "node-b")
    assert_refused(g, err.value, policy, api_server_devices_refused(g.infer, DEFAULT_DRIVER_NAME, same_node=False))
    assert g.status(g.infer) == before


def test_a_write_whose_node_cannot_be_established_is_refused(guarded: Guarded) -> None:
    """Fail closed: the plugin's account with a token that names no node, or a claim whose allocation names no
    single node (a node selector by label): its own driver's entry is refused."""
    g = guarded
    for token, claim, token_node, claim_node in (
        (plugin_token(g.c), g.train, None, "node-a"),
        (g.token_a, g.spread, "node-a", None),
    ):
        before = g.status(claim)
        with pytest.raises(ApiError) as err:
            g.writer(token).apply_status(claim.namespace, claim.name, claim.body(claim.gpu_entry()))
        policy = node_refused(claim, token_node, claim_node)
        assert_refused(g, err.value, policy, api_server_devices_refused(claim, DEFAULT_DRIVER_NAME, same_node=False))
        assert g.status(claim) == before


# -- The policy alone ---------------------------------------------------------------------------------


def test_the_policy_refuses_them_all_even_where_rbac_grants_more(guarded: Guarded) -> None:
    """An admin's extra ClusterRole gives the plugin's account every driver's entries on any node and the binding
    fields (what from 1.36 the API server checks, so its own check now passes): the chart's policy still refuses
    each write above with its own message, on every release, and still lets the plugin's own write through.

    Last in the module: it widens the account's RBAC.
    """
    g = guarded
    claims = (g.train, g.infer, g.idle, g.spread)
    befores = {c.name: g.status(c) for c in claims}
    rules = [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/driver"], "verbs": ["arbitrary-node:patch"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/binding"], "verbs": ["patch"]},
    ]
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    g.c.api(
        "POST",
        f"{rbac}/clusterroles",
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": WIDER}, "rules": rules},
    )
    g.c.api(
        "POST",
        f"{rbac}/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": WIDER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": WIDER},
            "subjects": [{"kind": "ServiceAccount", "name": PLUGIN, "namespace": NAMESPACE}],
        },
    )
    # The authorizer sees the new grant through an informer: until then the API server's own refusal comes first.
    forged = {"driver": NIC_DRIVER, "pool": "node-a", "device": "nic-0", "data": {"mac": "02:00:00:00:00:ff"}}
    deadline = time.monotonic() + 30
    while (resp := apply_as(g, g.token_a, g.train, NIC_DRIVER, [forged])).status == 422:
        assert time.monotonic() < deadline, f"the wider grant never took effect: {resp.message}"
        time.sleep(0.1)

    cases: list[tuple[Response | ApiError, str]] = [(resp, driver_refused(g.train, NIC_DRIVER))]
    cases.append((merge_patch(g, g.token_a, g.train, {"reservedFor": None}), binding_refused(g.train, "status.reservedFor")))
    cases.append((merge_patch(g, g.token_a, g.idle, {"allocation": None}), binding_refused(g.idle, "status.allocation")))
    both = merge_patch(g, g.token_a, g.infer, {"allocation": None, "reservedFor": None})
    cases.append((both, binding_refused(g.infer, "status.allocation and status.reservedFor")))
    for token, claim, token_node, claim_node in (
        (g.token_a, g.infer, "node-a", "node-b"),
        (plugin_token(g.c), g.train, None, "node-a"),
        (g.token_a, g.spread, "node-a", None),
    ):
        with pytest.raises(ApiError) as err:
            g.writer(token).apply_status(claim.namespace, claim.name, claim.body(claim.gpu_entry()))
        cases.append((err.value, node_refused(claim, token_node, claim_node)))
    for answer, message in cases:
        assert (answer.status, answer.message) == (403, message), f"{g.version}: {answer.status} {answer.message}"
    assert {c.name: g.status(c) for c in claims} == befores

    # Its own write on its own node passes the policy too (node-b's pod, node-b's claim).
    stored = g.writer(g.token_b).apply_status(g.idle.namespace, g.idle.name, g.idle.body(g.idle.gpu_entry()))
    assert entries_of(stored, DEFAULT_DRIVER_NAME) == [g.idle.gpu_entry().to_json()]
    stored = g.writer(g.token_b).apply_status(g.idle.namespace, g.idle.name, g.idle.body())
    assert entries_of(stored, DEFAULT_DRIVER_NAME) == []
