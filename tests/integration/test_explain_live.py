"""``dra-gpu explain NAME`` against a real kube-apiserver (``testkit.cluster.LocalCluster``).

The cluster holds what a node publishes (``dra-gpu inventory`` slices for two nodes, created as
the publisher would), a DeviceClass, a claim already allocated to the first GPU, and pods whose
claims come from templates and from a named claim. Explain reads all of it live and must give
the allocation the scheduler would make, a reason for the pod that cannot be satisfied, and the
CEL error of the selector that fails. Needs etcd and kube-apiserver from ``testkit/go/build.sh``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cli.main import inventory_slices
from testkit.cluster import LocalCluster

DRIVER = "explain.dra-gpu.dev"  # its own driver: other tests publish gpu.dra-gpu.dev for node-a
NS = "explain-live"
R = "/apis/resource.k8s.io/v1"
A = f'device.attributes["{DRIVER}"]'
REPO = Path(__file__).resolve().parents[2]


def template(name: str, selectors: list[str]) -> dict[str, Any]:
    exactly = {"deviceClassName": DRIVER, "selectors": [{"cel": {"expression": s}} for s in selectors]}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def pod(name: str, claim_ref: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "resourceClaims": [{"name": "gpu", **claim_ref}],
            "containers": [{"name": "c", "image": "registry.example/none", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }


@pytest.fixture(scope="module")
def cluster(apiserver: LocalCluster) -> LocalCluster:
    c = apiserver
    c.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    c.api(
        "POST",
        f"/api/v1/namespaces/{NS}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
    )
    for profile, node in (("h100x8", "explain-a"), ("l4x4", "explain-b")):
        c.add_node(node)
        for s in inventory_slices(fake_gpus=profile, node_name=node, driver=DRIVER):
            c.api("POST", f"{R}/resourceslices", s)
    selector = f"device.driver == '{DRIVER}'"
    c.api(
        "POST",
        f"{R}/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": selector}}]},
        },
    )
    # A claim already holding explain-a's gpu-0, as the scheduler would have written it.
    held = c.api(
        "POST",
        f"{R}/namespaces/{NS}/resourceclaims",
        {**template("held", [])["spec"], "metadata": {"name": "held", "namespace": NS}},
    )
    held["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "explain-a", "device": "gpu-0"}]},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["explain-a"]}]}]
            },
        }
    }
    c.api("PUT", f"{R}/namespaces/{NS}/resourceclaims/held/status", held)
    h100 = f'{A}.productName == "NVIDIA H100 80GB HBM3"'
    for name, sels in (
        ("h100", [h100]),
        ("b200", [f'{A}.productName == "NVIDIA B200"']),
        ("cooling", [f'{A}.coolingType == "liquid"']),
    ):
        c.api("POST", f"{R}/namespaces/{NS}/resourceclaimtemplates", template(name, sels))
        c.api("POST", f"/api/v1/namespaces/{NS}/pods", pod(f"pod-{name}", {"resourceClaimTemplateName": name}))
    l4 = {**template("l4", [f'{A}.productName.startsWith("NVIDIA L4")'])["spec"], "metadata": {"name": "l4", "namespace": NS}}
    c.api("POST", f"{R}/namespaces/{NS}/resourceclaims", l4)
    c.api("POST", f"/api/v1/namespaces/{NS}/pods", pod("pod-l4", {"resourceClaimName": "l4"}))
    return c


def explain(cluster: LocalCluster, target: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dra_driver.cli.main",
            "explain",
            target,
            "-n",
            NS,
            "--kubeconfig",
            str(cluster.kubeconfig),
            "-o",
            "json",
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    return out.returncode, json.loads(out.stdout) if out.stdout.strip() else {}, out.stderr


def test_a_pending_pod_gets_the_first_free_matching_gpu_on_the_first_node(cluster: LocalCluster) -> None:
    rc, doc, err = explain(cluster, "pod/pod-h100")
    assert rc == 0, err
    [req] = doc["requests"]
    # gpu-0 is held by the allocated claim read from the cluster, so the scheduler takes gpu-1.
    assert (req["claim"], req["request"], req["node"], req["devices"], req["reason"]) == (
        f"{NS}/pod-h100-gpu",
        "gpu",
        "explain-a",
        ["explain-a/gpu-1"],
        None,
    )
    verdicts = {(c["node"], c["device"]): (c["verdict"], c["detail"]) for c in req["candidates"]}
    assert verdicts[("explain-a", "explain-a/gpu-0")][0] == "unavailable"
    assert "held" in verdicts[("explain-a", "explain-a/gpu-0")][1]
    assert verdicts[("explain-b", "explain-b/gpu-0")][0] == "no-match"


def test_a_pod_no_node_can_satisfy_stays_pending_with_the_reason(cluster: LocalCluster) -> None:
    rc, doc, _ = explain(cluster, "pod-b200")
    assert rc == 1
    [req] = doc["requests"]
    assert req["node"] is None and req["devices"] == []
    assert req["reason"].startswith("0/") and "request gpu needs 1 device; at most 0 usable on one node" in req["reason"]


def test_a_failing_selector_aborts_with_the_schedulers_cel_error(cluster: LocalCluster) -> None:
    rc, doc, _ = explain(cluster, "pod/pod-cooling")
    assert rc == 1
    [req] = doc["requests"]
    assert "CEL runtime error: no such key: coolingType" in req["reason"]
    ours = {c["device"]: c["verdict"] for c in req["candidates"] if c["device"].startswith(("explain-a/", "explain-b/"))}
    assert ours.pop("explain-a/gpu-0") == "unavailable"  # held: not evaluated, as in the scheduler
    assert set(ours.values()) == {"error"} and len(ours) == 11


def test_named_claims_and_templates_are_explained_too(cluster: LocalCluster) -> None:
    rc, doc, err = explain(cluster, "resourceclaim/l4")
    assert rc == 0, err
    assert [(r["node"], r["devices"]) for r in doc["requests"]] == [("explain-b", ["explain-b/gpu-0"])]
    rc, doc, err = explain(cluster, "pod/pod-l4")
    assert rc == 0, err
    assert [r["claim"] for r in doc["requests"]] == [f"{NS}/l4"]
    rc, doc, err = explain(cluster, "resourceclaimtemplate/h100")
    assert rc == 0, err
    assert [r["devices"] for r in doc["requests"]] == [["explain-a/gpu-1"]]


def test_an_unknown_object_is_a_clear_error(cluster: LocalCluster) -> None:
    rc, _, err = explain(cluster, "pod/nope")
    assert rc == 2
    assert f"pod {NS}/nope not found" in err
