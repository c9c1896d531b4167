"""Scenario: users' CEL selectors, evaluated by the real kube-scheduler against our slices.

Node A publishes fake 8x H100 and node B fake 4x L4 through the real plugin processes; the
demo/ manifests are applied as users would apply them; the real scheduler allocates (or
explains why not). No kubelet is needed for scheduling, so these nodes are Node objects only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.cluster import LocalCluster
from testkit.helm_cli import Helm
from testkit.manifests import apply_file
from testkit.plugin_process import PluginProcess

DEMO = Path(__file__).resolve().parents[1] / "demo"
DRIVER = "gpu.dra-gpu.dev"
NS = "dra-demo"


@pytest.fixture(scope="module")
def sched_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Control plane with scheduler and controller-manager; node-a (H100) and node-b (L4) publishing."""
    with LocalCluster(with_scheduler=True, with_controller_manager=True, log_dir=tmp_path_factory.mktemp("sched-logs")) as c:
        plugins = []
        for node, profile in (("node-a", "h100x8"), ("node-b", "l4x4")):
            c.add_node(node)
            p = PluginProcess(tmp_path_factory.mktemp(node), kubeconfig=c.kubeconfig, node=node, profile=profile, publish=True)
            p.start()
            plugins.append(p)
        try:
            install_chart(c, tmp_path_factory.mktemp("helm-home"))
            wait_for(lambda: len(slices(c)) == 2, "both nodes' slices published")
            apply_file(c, DEMO / "namespace.yaml")
            yield c
        finally:
            for p in plugins:
                p.stop()


def install_chart(c: LocalCluster, home: Path) -> None:
    """The chart's cluster objects (DeviceClasses, RBAC, policy); the plugins run as local processes."""
    Helm.built(home).install(c, "kubeletPlugin.enabled=false")


def slices(c: LocalCluster) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = c.api("GET", f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver={DRIVER}")[
        "items"
    ]
    return items


def wait_for(cond: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for: {what}")


def pod(c: LocalCluster, name: str) -> dict[str, Any]:
    return c.api("GET", f"/api/v1/namespaces/{NS}/pods/{name}")


def allocation(c: LocalCluster, pod_name: str) -> tuple[str, list[tuple[str, str]]]:
    """Wait until the pod is bound; return (node, [(pool, device)]) of its claim."""
    p = wait_for(lambda: (q := pod(c, pod_name))["spec"].get("nodeName") and q, f"pod {pod_name} scheduled")
    claim_name = p["status"]["resourceClaimStatuses"][0]["resourceClaimName"] if "resourceClaimStatuses" in p["status"] else None
    claim_name = claim_name or p["spec"]["resourceClaims"][0]["resourceClaimName"]
    claim = c.api("GET", f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/{claim_name}")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert all(r["driver"] == DRIVER for r in results)
    return p["spec"]["nodeName"], [(r["pool"], r["device"]) for r in results]


def scheduled_condition(c: LocalCluster, pod_name: str) -> dict[str, Any]:
    def cond() -> dict[str, Any] | None:
        for cnd in pod(c, pod_name)["status"].get("conditions", []):
            if cnd["type"] == "PodScheduled" and cnd["status"] == "False" and cnd.get("message"):
                return dict(cnd)
        return None

    return dict(wait_for(cond, f"pod {pod_name} reported unschedulable"))


@pytest.mark.parametrize(
    ("manifest", "pod_name", "node"),
    [
        ("gpu-h100.yaml", "gpu-h100", "node-a"),
        ("gpu-40gi.yaml", "gpu-40gi", "node-a"),
        ("gpu-no-mig.yaml", "gpu-no-mig", "node-b"),
    ],
)
def test_selector_places_pod_on_the_matching_node(sched_cluster: LocalCluster, manifest: str, pod_name: str, node: str) -> None:
    """Product name, memory quantity and migCapable selectors pick the right node's GPU."""
    apply_file(sched_cluster, DEMO / manifest)
    got_node, devices = allocation(sched_cluster, pod_name)
    assert node == got_node
    assert 1 == len(devices)
    assert node == devices[0][0]


def test_semver_selector_matches_any_node(sched_cluster: LocalCluster) -> None:
    """Every fake GPU runs driver 580.95.05, so a driver >= 570 selector is satisfiable anywhere."""
    apply_file(sched_cluster, DEMO / "gpu-driver-570.yaml")
    got_node, devices = allocation(sched_cluster, "gpu-driver-570")
    assert got_node in ("node-a", "node-b")
    assert [got_node] == [p for p, _ in devices]


def test_two_gpus_are_distinct_devices_of_one_node(sched_cluster: LocalCluster) -> None:
    """count: 2 gets two different H100s."""
    apply_file(sched_cluster, DEMO / "two-gpus.yaml")
    got_node, devices = allocation(sched_cluster, "two-gpus")
    assert "node-a" == got_node
    assert 2 == len(set(devices))


def test_shared_claim_puts_both_pods_on_one_device(sched_cluster: LocalCluster) -> None:
    """Two pods referencing one claim share its single device and land on the same node."""
    apply_file(sched_cluster, DEMO / "shared-claim.yaml")
    a = allocation(sched_cluster, "shared-1")
    b = allocation(sched_cluster, "shared-2")
    assert a == b
    assert 1 == len(a[1])


def test_unsatisfiable_selector_leaves_pod_pending_with_the_schedulers_reason(sched_cluster: LocalCluster) -> None:
    """No B200 anywhere: the pod stays Pending, unschedulable because claims cannot be allocated."""
    apply_file(sched_cluster, DEMO / "unsatisfiable.yaml")
    cond = scheduled_condition(sched_cluster, "unsatisfiable")
    assert "Unschedulable" == cond["reason"]
    assert "cannot allocate all claims" in cond["message"]
    assert not pod(sched_cluster, "unsatisfiable")["spec"].get("nodeName")


def test_selector_reading_a_missing_attribute_shows_the_cel_error(sched_cluster: LocalCluster) -> None:
    """A missing attribute is a runtime error that aborts scheduling, reported with the CEL message."""
    apply_file(sched_cluster, DEMO / "missing-attribute.yaml")
    cond = scheduled_condition(sched_cluster, "missing-attribute")
    assert "no such key: coolingType" in cond["message"], cond
    assert not pod(sched_cluster, "missing-attribute")["spec"].get("nodeName")


def test_deleted_slices_of_both_nodes_come_back(sched_cluster: LocalCluster) -> None:
    """The kubelet wipes a node's slices at start; the plugins restore theirs within seconds."""
    before = {s["spec"]["nodeName"]: len(s["spec"]["devices"]) for s in slices(sched_cluster)}
    assert {"node-a": 8, "node-b": 4} == before
    for s in slices(sched_cluster):
        sched_cluster.api("DELETE", f"/apis/resource.k8s.io/v1/resourceslices/{s['metadata']['name']}")

    def back() -> list[dict[str, Any]] | None:
        got = slices(sched_cluster)
        return got if len(got) == 2 and all(s["spec"]["pool"]["generation"] >= 2 for s in got) else None

    restored = wait_for(
        back,
        "slices restored at a new generation",
        timeout=20,
    )
    assert before == {s["spec"]["nodeName"]: len(s["spec"]["devices"]) for s in restored}
