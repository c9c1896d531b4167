"""``dra-gpu explain`` against the real kube-scheduler v1.37 where DeviceTaintRules taint devices.

The control plane (v1.37, DRADeviceTaintRules GA) with scheduler and controller-manager; node-a is a
Node object whose slices are our inventory's 8 fake H100s (no kubelet: scheduling needs none).
DeviceTaintRules of every selector shape the API has (driver+pool+device, device alone, pool
alone, another driver's, effect None) are created by hand, then one claim at a time: explain
(live, as a process) predicts its devices or that it cannot be allocated, then a pod using it
is created and the scheduler's answer (the claim's allocation, or the pod unschedulable) must be
the same. Tolerations in the claim count on both sides; a device a rule taints is reported
unavailable naming the rule.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from dra_driver.cli.main import inventory_slices
from e2e.test_cordon import _pod, dra_gpu
from e2e.test_kubelet_node import PODS, RESOURCE, wait_until
from testkit.claimdata import DRIVER
from testkit.cluster import LocalCluster

RULES = f"{RESOURCE}/devicetaintrules"
CLAIMS = f"{RESOURCE}/namespaces/default/resourceclaims"
KEY = "example.com/maintenance"

TAINT_RULES = [
    ("exact-gpu-0", {"driver": DRIVER, "pool": "node-a", "device": "gpu-0"}, "NoSchedule"),
    ("any-gpu-1", {"device": "gpu-1"}, "NoExecute"),
    ("info-gpu-2", {"pool": "node-a", "device": "gpu-2"}, "None"),  # informational: blocks nothing
    ("other-driver", {"driver": "other.example.com"}, "NoSchedule"),  # selects none of ours
    ("other-pool", {"pool": "node-b"}, "NoSchedule"),
]


def _claim(name: str, count: int = 1, tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    exact: dict[str, Any] = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": count}
    if tolerations:
        exact["tolerations"] = tolerations
    return {"metadata": {"name": name}, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exact}]}}}


CASES = [
    (_claim("plain"), ["gpu-2"]),  # gpu-0 and gpu-1 are tainted; gpu-2's taint is only informational
    (_claim("tolerates-gpu-0", tolerations=[{"key": KEY, "operator": "Exists", "effect": "NoSchedule"}]), ["gpu-0"]),
    (_claim("tolerates-all", count=8, tolerations=[{"key": KEY, "operator": "Exists"}]), [f"gpu-{i}" for i in range(8)]),
    (_claim("six", count=6), [f"gpu-{i}" for i in range(2, 8)]),
    (_claim("seven", count=7), None),  # only six devices are untainted
    # Tolerating NoSchedule only: gpu-0 is usable, gpu-1 (NoExecute) is not.
    (
        _claim("noschedule-only", count=7, tolerations=[{"key": KEY, "operator": "Exists", "effect": "NoSchedule"}]),
        ["gpu-0", *(f"gpu-{i}" for i in range(2, 8))],
    ),
]


def _scheduled(c: LocalCluster, name: str) -> list[str] | None:
    """The devices the scheduler gave the claim of pod ``name`` (sorted), or None when it says the pod is unschedulable."""

    def outcome() -> tuple[str, list[str] | None] | None:
        alloc = (c.api("GET", f"{CLAIMS}/{name}").get("status") or {}).get("allocation")
        if alloc:
            return ("allocated", sorted(r["device"] for r in alloc["devices"]["results"]))
        conds = c.api("GET", f"{PODS}/{name}").get("status", {}).get("conditions") or []
        if any(x["type"] == "PodScheduled" and x["status"] == "False" for x in conds):
            return ("unschedulable", None)
        return None

    got = wait_until(f"the scheduler's answer for {name}", outcome, lambda: f"(logs in {c.log_dir})", 60)
    return got[1]


def _gone(c: LocalCluster, path: str) -> bool:
    return not any(i["metadata"]["name"] for i in c.api("GET", path)["items"])


def test_explain_applies_device_taint_rules_as_the_real_scheduler_does(tmp_path: Path) -> None:
    with LocalCluster(with_scheduler=True, with_controller_manager=True, log_dir=tmp_path / "logs") as c:
        c.add_node("node-a")
        for s in inventory_slices(fake_gpus="h100x8", node_name="node-a", driver=DRIVER):
            c.api("POST", f"{RESOURCE}/resourceslices", s)
        selector = {"cel": {"expression": f'device.driver == "{DRIVER}"'}}
        c.api("POST", f"{RESOURCE}/deviceclasses", {"metadata": {"name": DRIVER}, "spec": {"selectors": [selector]}})
        for name, sel, effect in TAINT_RULES:
            rule = {
                "metadata": {"name": name},
                "spec": {"deviceSelector": sel, "taint": {"key": KEY, "value": name, "effect": effect}},
            }
            c.api("POST", RULES, rule)
        wait_until(
            "the default ServiceAccount",
            lambda: c.api("GET", "/api/v1/namespaces/default/serviceaccounts")["items"],
            lambda: f"(logs in {c.log_dir})",
        )
        time.sleep(1)  # the scheduler's informers see the rules

        agreed = []
        for claim, expected in CASES:
            name = claim["metadata"]["name"]
            c.api("POST", CLAIMS, claim)
            done = dra_gpu(c.kubeconfig, "explain", f"resourceclaim/{name}", "-o", "json")
            assert done.returncode in (0, 1), done
            assert f"{len(TAINT_RULES)} DeviceTaintRule(s) applied" in done.stderr, done.stderr
            (req,) = json.loads(done.stdout)["requests"]
            predicted = None if req["reason"] is not None else sorted(d.split("/", 1)[1] for d in req["devices"])
            if expected is None or "gpu-0" not in expected:
                cands = {x["device"]: x["detail"] for x in req["candidates"]}
                assert "DeviceTaintRule exact-gpu-0" in cands["node-a/gpu-0"], cands

            pod = _pod(name, "")
            pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": name}]
            c.api("POST", PODS, pod)
            scheduled = _scheduled(c, name)
            assert predicted == scheduled == expected, (name, predicted, scheduled, expected)
            agreed.append(name)
            c.api("DELETE", f"{PODS}/{name}?gracePeriodSeconds=0")
            wait_until(f"pod {name} gone", lambda: _gone(c, PODS), lambda: f"(logs in {c.log_dir})", 60)
            c.api("DELETE", f"{CLAIMS}/{name}")
            wait_until(f"claim {name} gone", lambda: _gone(c, CLAIMS), lambda: f"(logs in {c.log_dir})", 60)
        print(f"\nexplain and kube-scheduler v1.37 agree on {len(agreed)} claims under {len(TAINT_RULES)} DeviceTaintRules")
