"""Per-GPU cordon end to end: ``dra-gpu cordon`` / ``uncordon`` against the real scheduler, kubelet and controller-manager.

Control plane and kubelet are the upstream v1.37 binaries (e2e/build.sh, fake container runtime);
the plugin is our daemon publishing 8 fake H100s on node-a. The CLI runs as a process, as an admin
runs it. (a) ``cordon node-a gpu-0`` (NoSchedule): a pod whose claim only gpu-0 fits stays
Pending (the scheduler says why), a plain pod gets another GPU although gpu-0 comes first.
(c) ``uncordon``: the pending pod gets gpu-0 and runs. (b) ``cordon --evict`` on the GPU of a
ReplicaSet's running pod: the controller-manager evicts it and the replacement runs on another
GPU. Timings go to stdout (``-s``). On a stock v1.36 server, which serves no DeviceTaintRule API,
``--evict`` gets a clear refusal naming the gate (exit 2) and no change; a plain cordon there is
local withholding (e2e/test_cordon_local.py). With dynamic MIG (slices as the plugin publishes them,
the real scheduler allocating), a GPU's cordon covers every MIG placement on it: a MIG claim that
first-fit would put on gpu-0 gets gpu-1.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dra_driver.cli.main import inventory_slices
from dra_driver.core.mig import MigStrategy, parse_mig_device_name
from e2e.test_kubelet_node import PODS, RESOURCE, harness, wait_until
from testkit.claimdata import DRIVER
from testkit.cluster import LocalCluster
from testkit.plugin_process import ROOT

RS = "/apis/apps/v1/namespaces/default/replicasets"
RULES = f"{RESOURCE}/devicetaintrules"


def dra_gpu(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``dra-gpu ARGS --kubeconfig KUBECONFIG`` as a process."""
    cmd = [sys.executable, "-m", "dra_driver.cli.main", *args, "--kubeconfig", str(kubeconfig)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False, timeout=60)


def _pod(name: str, template: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    container = {"name": "cuda", "image": "registry.example/cuda:12", "resources": {"claims": [{"name": "gpu"}]}}
    spec = {"containers": [container], "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}]}
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def test_cordon_keeps_new_claims_off_a_gpu_evicts_with_evict_and_uncordon_restores_it(tmp_path: Path) -> None:
    with harness(tmp_path, "node-a") as h:
        h.start_plugin(h.nodes["node-a"])
        h.create_class_and_template()
        kc = h.c.kubeconfig

        def device_of(pod: dict[str, Any]) -> str:
            (status,) = pod["status"]["resourceClaimStatuses"]
            claim = h.c.api("GET", f"{RESOURCE}/namespaces/default/resourceclaims/{status['resourceClaimName']}")
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            return str(result["device"])

        slices = h.c.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName=node-a")["items"]
        uuids = {d["name"]: d["attributes"]["uuid"]["string"] for s in slices for d in s["spec"].get("devices") or []}
        only_gpu0 = {"cel": {"expression": f'device.attributes["{DRIVER}"].uuid == "{uuids["gpu-0"]}"'}}
        request = {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "selectors": [only_gpu0]}}
        template = {"metadata": {"name": "gpu-0-only"}, "spec": {"spec": {"devices": {"requests": [request]}}}}
        h.c.api("POST", f"{RESOURCE}/namespaces/default/resourceclaimtemplates", template)

        # Bad input and the unserved cases change nothing and say what is wrong.
        for args, says in (
            (("cordon", "node-x", "gpu-0"), "node 'node-x' not found"),
            (("cordon", "node-a", "gpu-9"), "device 'gpu-9' is not published"),
            (("cordon", "node-a", "gpu-0", "--reason", "x" * 300), "at most 256"),
        ):
            done = dra_gpu(kc, *args)
            assert done.returncode == 2 and says in done.stderr, (args, done.returncode, done.stderr)
        assert not h.c.api("GET", RULES)["items"]
        done = dra_gpu(kc, "uncordon", "node-a", "gpu-0")
        assert done.returncode == 0 and "is not cordoned" in done.stdout, done

        # (a) Cordon gpu-0: no new claim gets it.
        t0 = time.monotonic()
        done = dra_gpu(kc, "cordon", "node-a", "gpu-0", "--reason", "fan failure")
        t_cli = time.monotonic() - t0
        assert done.returncode == 0 and "created devicetaintrule/" in done.stdout, done
        again = dra_gpu(kc, "cordon", "node-a", "gpu-0", "--reason", "fan failure")
        assert again.returncode == 0 and "unchanged devicetaintrule/" in again.stdout, again  # idempotent
        (rule,) = h.c.api("GET", RULES)["items"]
        assert rule["spec"]["deviceSelector"] == {"driver": DRIVER, "pool": "node-a", "device": "gpu-0"}
        assert rule["spec"]["taint"]["effect"] == "NoSchedule" and rule["spec"]["taint"]["value"] == "fan-failure"

        from dra_driver.cli.cordon import cordon_lines  # what dra-gpu top shows
        from dra_driver.kube.taint_rules_api import connect

        (shown,) = cordon_lines(connect(str(kc)))
        assert (shown.pool, shown.device, shown.effect, shown.reason) == ("node-a", "gpu-0", "NoSchedule", "fan failure")

        h.c.api("POST", PODS, _pod("pinned", "gpu-0-only"))

        def unschedulable() -> str | None:
            conds = h.c.api("GET", f"{PODS}/pinned").get("status", {}).get("conditions") or []
            return next((c.get("message", "?") for c in conds if c["type"] == "PodScheduled" and c["status"] == "False"), None)

        why = wait_until("the gpu-0-only pod to be refused by the scheduler", unschedulable, h.diagnostics)
        t_refused = time.monotonic() - t0
        h.create_gpu_pod("plain")
        plain = h.wait_running("plain")
        assert device_of(plain) != "gpu-0", "a new claim got the cordoned gpu-0"
        assert h.c.api("GET", f"{PODS}/pinned")["status"].get("phase") == "Pending"

        # (c) Uncordon: gpu-0 is allocatable again; the waiting pod gets it.
        t1 = time.monotonic()
        done = dra_gpu(kc, "uncordon", "node-a", "gpu-0")
        assert done.returncode == 0 and "deleted devicetaintrule/" in done.stdout, done
        pinned = h.wait_running("pinned", timeout=90)
        t_uncordon = time.monotonic() - t1
        assert device_of(pinned) == "gpu-0"
        assert not h.c.api("GET", RULES)["items"]

        # (b) --evict on the GPU of a ReplicaSet's pod: evicted, replaced on another GPU.
        labels = {"app": "trainer"}
        pod_template = _pod("", "one-gpu", labels)
        del pod_template["metadata"]["name"]
        rs_spec = {"replicas": 1, "selector": {"matchLabels": labels}, "template": pod_template}
        h.c.api("POST", RS, {"metadata": {"name": "trainer"}, "spec": rs_spec})

        def running_trainers() -> list[dict[str, Any]]:
            pods = h.c.api("GET", f"{PODS}?labelSelector=app=trainer")["items"]
            return [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]

        (first,) = wait_until("the trainer pod to run", running_trainers, h.diagnostics)
        victim = device_of(first)
        t2 = time.monotonic()
        done = dra_gpu(kc, "cordon", "node-a", victim, "--evict", "--reason", "ECC errors")
        assert done.returncode == 0 and "NoExecute" in done.stdout, done

        def replacement() -> dict[str, Any] | None:
            return next((p for p in running_trainers() if p["metadata"]["name"] != first["metadata"]["name"]), None)

        new = wait_until("the trainer pod to be evicted and replaced", replacement, h.diagnostics, timeout=120)
        t_evict = time.monotonic() - t2
        assert device_of(new) not in (victim, "gpu-0"), f"the replacement got {device_of(new)}"
        done = dra_gpu(kc, "uncordon", "node-a", victim)
        assert done.returncode == 0, done

        print(
            f"\ncordon timings (v1.37.2, 8 fake H100s): cordon CLI {t_cli:.2f}s; cordon -> scheduler refuses gpu-0 "
            f"{t_refused:.2f}s ({why[:80]}); uncordon -> waiting pod Running on gpu-0 {t_uncordon:.2f}s; "
            f"cordon --evict -> replacement Running on {device_of(new)} {t_evict:.2f}s"
        )


def test_a_server_without_device_taint_rules_refuses_evict_naming_the_gate(tmp_path: Path) -> None:
    with LocalCluster(stock=True, version="v1.36.3", log_dir=tmp_path / "logs") as c:
        done = dra_gpu(c.kubeconfig, "cordon", "node-a", "gpu-0", "--evict")
        assert done.returncode == 2, done
        assert "DRADeviceTaintRules" in done.stderr and "1.37" in done.stderr and "v1.36.3" in done.stderr, done.stderr
        assert "Nothing was changed" in done.stderr
        # Without --evict it falls back to local withholding (e2e/test_cordon_local.py), which needs the node.
        done = dra_gpu(c.kubeconfig, "cordon", "node-a", "gpu-0")
        assert done.returncode == 2 and "node 'node-a' not found" in done.stderr, done
        done = dra_gpu(c.kubeconfig, "uncordon", "node-a", "gpu-0")
        assert done.returncode == 2 and "node 'node-a' not found" in done.stderr, done


def test_a_gpus_cordon_covers_its_mig_devices_on_the_real_scheduler(tmp_path: Path) -> None:
    with LocalCluster(with_scheduler=True, with_controller_manager=True, log_dir=tmp_path / "logs") as c:
        c.add_node("node-m")
        for s in inventory_slices(fake_gpus="h100x8", node_name="node-m", driver=DRIVER, mig=MigStrategy.DYNAMIC):
            c.api("POST", f"{RESOURCE}/resourceslices", s)
        mig_class = {"cel": {"expression": f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "mig"'}}
        c.api("POST", f"{RESOURCE}/deviceclasses", {"metadata": {"name": "mig"}, "spec": {"selectors": [mig_class]}})
        on_gpu0 = [
            d["name"]
            for s in c.api("GET", f"{RESOURCE}/resourceslices")["items"]
            for d in s["spec"].get("devices") or []
            if (m := parse_mig_device_name(d["name"])) is not None and m.minor == 0
        ]
        assert on_gpu0, "no MIG placements published on gpu-0"

        done = dra_gpu(c.kubeconfig, "cordon", "node-m", "gpu-0", "--reason", "fan failure")
        assert done.returncode == 0, done
        selected = sorted(r["spec"]["deviceSelector"]["device"] for r in c.api("GET", RULES)["items"])
        assert selected == sorted(["gpu-0", *on_gpu0]), done.stdout

        request = {"name": "mig", "exactly": {"deviceClassName": "mig"}}
        claim = {"metadata": {"name": "one-slice"}, "spec": {"devices": {"requests": [request]}}}
        c.api("POST", f"{RESOURCE}/namespaces/default/resourceclaims", claim)
        wait_until(
            "the default ServiceAccount",
            lambda: c.api("GET", "/api/v1/namespaces/default/serviceaccounts")["items"],
            lambda: f"(logs in {c.log_dir})",
        )
        pod = _pod("slice-user", "")
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "one-slice"}]
        c.api("POST", PODS, pod)

        def allocated() -> str | None:
            got = c.api("GET", f"{RESOURCE}/namespaces/default/resourceclaims/one-slice").get("status", {})
            results = (got.get("allocation") or {}).get("devices", {}).get("results") or []
            return str(results[0]["device"]) if results else None

        device = wait_until("the MIG claim to be allocated", allocated, lambda: f"(logs in {c.log_dir})")
        parsed = parse_mig_device_name(device)
        assert parsed is not None and parsed.minor != 0, f"the MIG claim got {device}, on the cordoned gpu-0"
        print(f"\ncordon of gpu-0 with dynamic MIG: {len(on_gpu0) + 1} DeviceTaintRules; the MIG claim got {device}")

        done = dra_gpu(c.kubeconfig, "uncordon", "node-m", "gpu-0")
        assert done.returncode == 0 and done.stdout.count("deleted devicetaintrule/") == len(on_gpu0) + 1, done
        assert not c.api("GET", RULES)["items"]
