"""Scenario: a GPU and another driver's NIC on one NUMA node or PCIe root, allocated by the real kube-scheduler.

node-a publishes what dra-gpu publishes for 8 fake H100s (``dra-gpu inventory``'s slices, as the
publisher writes them: gpu-0..3 on NUMA node 0, gpu-4..7 on NUMA node 1, one PCIe root each) and,
beside it, a second driver, ``nic.example.com``, whose ResourceSlice the test writes itself:
three NICs, all on NUMA node 1, each behind the PCIe root of one GPU there (gpu-5, gpu-6, gpu-7).
Claims ask for one GPU and one NIC with ``matchAttribute`` on ``resource.kubernetes.io/numaNode``
(``demo/gpu-with-nic-same-numa.yaml``, applied unchanged) or ``resource.kubernetes.io/pcieRoot``.
The scheduler's allocation must pair them, a claim no free pair can satisfy must leave its pod
Pending with the scheduler's reason, and ``dra-gpu explain`` must give the same answer each time.
The DeviceClasses come from the chart (``helm install``, no plugin pods) plus one for the NICs.
No kubelet: scheduling needs none. Each test starts from a node with nothing allocated.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cli.main import inventory_slices
from dra_driver.core.schema import ATTR_NUMA_NODE, ATTR_PCIE_ROOT
from e2e.test_scheduling_selectors import wait_for
from testkit.cluster import ApiError, LocalCluster
from testkit.explain_cli import explain_json
from testkit.helm_cli import Helm
from testkit.manifests import apply, apply_file, load

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "demo"
R = "/apis/resource.k8s.io/v1"
GPU = "gpu.dra-gpu.dev"
NIC = "nic.example.com"
NODE = "node-a"
NS = "dra-demo"  # the demo manifests' namespace
# The NICs: NUMA node 1 only, each behind the root complex of one GPU there (gpu-5 pci0000:a0, gpu-6 b0, gpu-7 d0).
NICS = {"nic-0": "pci0000:a0", "nic-1": "pci0000:b0", "nic-2": "pci0000:d0"}


def nic_slice() -> dict[str, Any]:
    """The NIC driver's pool on node-a, as such a driver would publish it."""
    devices = [
        {
            "name": name,
            "attributes": {ATTR_NUMA_NODE: {"int": 1}, ATTR_PCIE_ROOT: {"string": root}, "model": {"string": "ConnectX-7"}},
        }
        for name, root in NICS.items()
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{NODE}-{NIC}"},
        "spec": {
            "driver": NIC,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


@pytest.fixture(scope="module")
def topo(tmp_path_factory: pytest.TempPathFactory, helm: Helm) -> Iterator[LocalCluster]:
    """Control plane with scheduler and controller-manager; node-a with 8 GPUs and 3 NICs; the chart's classes."""
    with LocalCluster(with_scheduler=True, with_controller_manager=True, log_dir=tmp_path_factory.mktemp("topo-logs")) as c:
        c.add_node(NODE)
        for s in inventory_slices(fake_gpus="h100x8", node_name=NODE, driver=GPU):
            c.api("POST", f"{R}/resourceslices", s)
        c.api("POST", f"{R}/resourceslices", nic_slice())
        helm.install(c, "kubeletPlugin.enabled=false")
        c.api(
            "POST",
            f"{R}/deviceclasses",
            {"metadata": {"name": NIC}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{NIC}"'}}]}},
        )
        apply_file(c, DEMO / "namespace.yaml")
        yield c


@pytest.fixture
def cluster(topo: LocalCluster) -> Iterator[LocalCluster]:
    """The cluster; afterwards every pod and claim of the test is gone, so the next test finds node-a empty."""
    yield topo
    for path in (
        f"/api/v1/namespaces/{NS}/pods",
        f"{R}/namespaces/{NS}/resourceclaims",
        f"{R}/namespaces/{NS}/resourceclaimtemplates",
    ):
        for o in topo.api("GET", path)["items"]:
            try:  # pods at once (no kubelet to wait for); claims made from templates may go away meanwhile
                topo.api("DELETE", f"{path}/{o['metadata']['name']}", {"gracePeriodSeconds": 0})
            except ApiError as err:
                if err.status != 404:
                    raise
    wait_for(lambda: not topo.api("GET", f"{R}/namespaces/{NS}/resourceclaims")["items"], "every claim deleted")


def attributes(c: LocalCluster) -> dict[tuple[str, str], dict[str, Any]]:
    """(driver, device) -> its attributes, from the slices stored in the API server."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for s in c.api("GET", f"{R}/resourceslices")["items"]:
        for d in s["spec"].get("devices") or []:
            out[(s["spec"]["driver"], d["name"])] = d.get("attributes", {})
    return out


def claim_template(name: str, attribute: str, gpu_selector: str | None = None) -> dict[str, Any]:
    """One GPU and one NIC that must agree on ``attribute``; ``gpu_selector`` narrows the GPU."""
    gpu: dict[str, Any] = {"deviceClassName": GPU}
    if gpu_selector:
        gpu["selectors"] = [{"cel": {"expression": gpu_selector}}]
    devices = {
        "requests": [{"name": "gpu", "exactly": gpu}, {"name": "nic", "exactly": {"deviceClassName": NIC}}],
        "constraints": [{"requests": ["gpu", "nic"], "matchAttribute": attribute}],
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"spec": {"devices": devices}},
    }


def gpus_template(name: str, count: int, selector: str) -> dict[str, Any]:
    exactly = {"deviceClassName": GPU, "count": count, "selectors": [{"cel": {"expression": selector}}]}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def pod(name: str, template: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "containers": [{"name": "c", "image": "registry.example/none", "resources": {"claims": [{"name": "devices"}]}}],
            "resourceClaims": [{"name": "devices", "resourceClaimTemplateName": template}],
        },
    }


def allocation(c: LocalCluster, pod_name: str) -> list[tuple[str, str, str, str]]:
    """Wait until the pod is bound; its claim's results as (request, driver, pool, device), in order."""
    p = wait_for(lambda: (q := c.api("GET", f"/api/v1/namespaces/{NS}/pods/{pod_name}"))["spec"].get("nodeName") and q, pod_name)
    claim_name = p["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = c.api("GET", f"{R}/namespaces/{NS}/resourceclaims/{claim_name}")
    return [(r["request"], r["driver"], r["pool"], r["device"]) for r in claim["status"]["allocation"]["devices"]["results"]]


def unschedulable(c: LocalCluster, pod_name: str) -> dict[str, Any]:
    """The pod's PodScheduled=False condition, once the scheduler has given its reason."""

    def cond() -> dict[str, Any] | None:
        p = c.api("GET", f"/api/v1/namespaces/{NS}/pods/{pod_name}")
        assert not p["spec"].get("nodeName"), f"{pod_name} was scheduled: {p['spec']['nodeName']}"
        for cnd in p["status"].get("conditions", []):
            if cnd["type"] == "PodScheduled" and cnd["status"] == "False" and cnd.get("message"):
                return dict(cnd)
        return None

    return dict(wait_for(cond, f"pod {pod_name} reported unschedulable"))


def explain(c: LocalCluster, pod_name: str) -> tuple[int, dict[str, tuple[str | None, list[str], str | None]]]:
    """``dra-gpu explain pod/NAME`` against the cluster: exit code, request -> (node, devices, reason)."""
    code, doc = explain_json(c.kubeconfig, f"pod/{pod_name}", NS)
    return code, {r["request"]: (r["node"], r["devices"], r["reason"]) for r in doc["requests"]}


def assert_explain_blames_the_numa_constraint(ex: dict[str, tuple[str | None, list[str], str | None]]) -> None:
    """Both requests unallocated, and the reason says the claim would fit on node-a but for its numaNode constraint."""
    blame = f"would fit on node {NODE} without the claim's constraints: no free devices satisfy matchAttribute {ATTR_NUMA_NODE}"
    assert sorted(ex) == ["gpu", "nic"]
    for node, devices, reason in ex.values():
        assert (node, devices) == (None, [])
        assert reason is not None and blame in reason, reason


def test_demo_claim_pairs_the_gpu_with_a_nic_on_its_numa_node(cluster: LocalCluster) -> None:
    """demo/gpu-with-nic-same-numa.yaml: the NICs are all on NUMA node 1, so the GPU is gpu-4 (first fit would give gpu-0)."""
    apply_file(cluster, DEMO / "gpu-with-nic-same-numa.yaml")
    assert allocation(cluster, "gpu-with-nic") == [("gpu", GPU, NODE, "gpu-4"), ("nic", NIC, NODE, "nic-0")]
    attrs = attributes(cluster)
    assert attrs[GPU, "gpu-4"][ATTR_NUMA_NODE] == attrs[NIC, "nic-0"][ATTR_NUMA_NODE] == {"int": 1}
    assert attrs[GPU, "gpu-0"][ATTR_NUMA_NODE] == {"int": 0}  # what first fit would have taken without the constraint
    rc, ex = explain(cluster, "gpu-with-nic")
    assert (rc, ex) == (0, {"gpu": (NODE, [f"{NODE}/gpu-4"], None), "nic": (NODE, [f"{NODE}/nic-0"], None)})


def test_pcie_root_constraint_pairs_the_gpu_behind_the_nics_root(cluster: LocalCluster) -> None:
    """matchAttribute pcieRoot: nic-0 shares a root with gpu-5 only; with gpu-5 taken, the next pair is gpu-6 and nic-1."""
    apply(cluster, [claim_template("same-root", ATTR_PCIE_ROOT), pod("root-1", "same-root")])
    assert allocation(cluster, "root-1") == [("gpu", GPU, NODE, "gpu-5"), ("nic", NIC, NODE, "nic-0")]
    apply(cluster, [pod("root-2", "same-root")])
    assert allocation(cluster, "root-2") == [("gpu", GPU, NODE, "gpu-6"), ("nic", NIC, NODE, "nic-1")]
    attrs = attributes(cluster)
    assert attrs[GPU, "gpu-6"][ATTR_PCIE_ROOT] == attrs[NIC, "nic-1"][ATTR_PCIE_ROOT] == {"string": "pci0000:b0"}
    rc, ex = explain(cluster, "root-2")
    assert (rc, ex) == (0, {"gpu": (NODE, [f"{NODE}/gpu-6"], None), "nic": (NODE, [f"{NODE}/nic-1"], None)})


def test_no_free_gpu_on_the_nics_numa_node_leaves_the_pod_pending(cluster: LocalCluster) -> None:
    """All four NUMA-1 GPUs taken (by a claim selecting on numaNode): GPUs and NICs are free, but no pair; Pending."""
    numa_1 = 'device.attributes["resource.kubernetes.io"].numaNode == 1'
    apply(cluster, [gpus_template("numa-1", 4, numa_1), pod("numa-1-gpus", "numa-1")])
    assert allocation(cluster, "numa-1-gpus") == [("gpu", GPU, NODE, f"gpu-{i}") for i in (4, 5, 6, 7)]
    apply(cluster, [claim_template("same-numa", ATTR_NUMA_NODE), pod("no-pair", "same-numa")])
    cond = unschedulable(cluster, "no-pair")
    assert cond["reason"] == "Unschedulable"
    assert "cannot allocate all claims" in cond["message"], cond
    rc, ex = explain(cluster, "no-pair")
    assert rc == 1
    assert_explain_blames_the_numa_constraint(ex)
    assert not cluster.api("GET", f"/api/v1/namespaces/{NS}/pods/no-pair")["spec"].get("nodeName")  # still Pending


def test_a_selector_that_rules_out_every_pair_leaves_the_pod_pending(cluster: LocalCluster) -> None:
    """A GPU on NUMA node 0 with a NIC on the same node: every device is free, but the NICs are all on node 1."""
    numa_0 = 'device.attributes["resource.kubernetes.io"].numaNode == 0'
    apply(cluster, [claim_template("numa-0", ATTR_NUMA_NODE, numa_0), pod("forced", "numa-0")])
    cond = unschedulable(cluster, "forced")
    assert cond["reason"] == "Unschedulable"
    assert "cannot allocate all claims" in cond["message"], cond
    rc, ex = explain(cluster, "forced")
    assert rc == 1
    assert_explain_blames_the_numa_constraint(ex)
    assert not cluster.api("GET", f"/api/v1/namespaces/{NS}/pods/forced")["spec"].get("nodeName")  # still Pending
    # The same claim without the constraint is satisfiable: the constraint is what keeps the pod Pending.
    free = claim_template("numa-0-free", ATTR_NUMA_NODE, numa_0)
    free["spec"]["spec"]["devices"].pop("constraints")
    apply(cluster, [free, pod("unconstrained", "numa-0-free")])
    assert allocation(cluster, "unconstrained") == [("gpu", GPU, NODE, "gpu-0"), ("nic", NIC, NODE, "nic-0")]


def test_demo_manifest_is_the_documented_constraint() -> None:
    """The demo's template asks for a GPU and a NIC matched on the standard numaNode attribute, for its pod."""
    template, p = load(DEMO / "gpu-with-nic-same-numa.yaml")
    devices = template["spec"]["spec"]["devices"]
    assert [r["exactly"]["deviceClassName"] for r in devices["requests"]] == [GPU, NIC]
    assert devices["constraints"] == [{"requests": ["gpu", "nic"], "matchAttribute": ATTR_NUMA_NODE}]
    assert p["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == template["metadata"]["name"]
