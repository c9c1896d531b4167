"""Per-claim utilization, idle time and GPU health from the real plugin process, and ``dra-gpu top`` reading them.

The plugin runs with 8 fake H100s against a real kube-apiserver; claims are allocated there (with
the pods that reserve them), prepared over the DRA socket, driven by the fake GPUs' usage script
(``python -m dra_driver.sources.fake_usage``) and faults (``python -m dra_driver.sources.fake_health``),
and read back from /metrics and with ``dra-gpu top --url``. The series name the claim's namespace and
pods only with ``--metrics-tenant-labels true``; by default they carry its UID, and top names the
claim from the API server (``--kubeconfig``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from testkit.claimdata import allocated_claim
from testkit.cluster import LocalCluster
from testkit.plugin_process import ROOT, PluginProcess
from tests.integration.test_plugin_health import wait_for
from tests.integration.test_plugin_metrics import Series, scrape

ARGS = ("--usage-interval", "0.2", "--health-check-interval", "0.3", "--gc-interval", "0")
TENANT = (*ARGS, "--metrics-tenant-labels", "true")


def claim_with_pods(c: LocalCluster, name: str, device: str, pods: list[str]) -> tuple[str, str, str]:
    obj = allocated_claim(name=name, devices=[device])
    status = obj.pop("status")
    obj["metadata"].pop("uid")
    created = c.api("POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims", obj)
    status["reservedFor"] = [{"resource": "pods", "name": p, "uid": str(uuid.uuid4())} for p in pods]
    created["status"] = status
    path = f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{name}/status"
    stored = c.api("PUT", path, created)
    return "default", stored["metadata"]["uid"], name


def value(series: Series, name: str, **labels: str) -> float | None:
    for (n, lb), v in series.items():
        if n == name and all((k, v2) in lb for k, v2 in labels.items()):
            return v
    return None


def top(plugin: PluginProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dra_driver.cli.main", "top", "--url", plugin.metrics_url(), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def test_busy_and_idle_claims_are_told_apart_by_their_metrics_and_dra_gpu_top(tmp_path: Path, apiserver: LocalCluster) -> None:
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=TENANT)
    p.start()
    try:
        suffix = uuid.uuid4().hex[:6]
        busy = claim_with_pods(apiserver, f"train-{suffix}", "gpu-0", ["trainer-0"])
        idle = claim_with_pods(apiserver, f"notebook-{suffix}", "gpu-1", ["notebook-0", "notebook-1"])
        for ref in (busy, idle):
            assert not p.prepare([ref]).claims[ref[1]].error
        subprocess.run(
            [sys.executable, "-m", "dra_driver.sources.fake_usage", "--state-dir", str(p.plugin_dir / "fake-gpus"),
             "set", "--claim", busy[1], "--utilization", "0.8", "--memory", "10Gi"],
            check=True, cwd=ROOT, capture_output=True,
        )  # fmt: skip

        def sampled() -> Series | None:
            s = scrape(p)
            u = value(s, "dra_gpu_claim_gpu_utilization_ratio", claim=busy[2])
            i = value(s, "dra_gpu_claim_idle_seconds", claim=idle[2])
            return s if u == 0.8 and i is not None and i >= 1.0 else None

        s = wait_for("the samples", sampled)
        assert 10 << 30 == value(s, "dra_gpu_claim_memory_used_bytes", claim=busy[2], device="gpu-0", pod="trainer-0")
        assert 0 == value(s, "dra_gpu_claim_idle_seconds", claim=busy[2])
        assert 0 == value(s, "dra_gpu_claim_gpu_utilization_ratio", claim=idle[2], pod="notebook-0,notebook-1")

        out = top(p, "--idle-after", "1")
        assert 0 == out.returncode, out.stderr
        lines = {line.split()[1]: line for line in out.stdout.splitlines() if "default/" in line}
        assert "80%" in lines[f"default/{busy[2]}"] and "10.0Gi" in lines[f"default/{busy[2]}"]
        assert "trainer-0" in lines[f"default/{busy[2]}"] and not lines[f"default/{busy[2]}"].rstrip().endswith("!")
        assert lines[f"default/{idle[2]}"].rstrip().endswith("!")  # idle past --idle-after
        assert "2 device(s) in 2 claim(s); 1 idle" in out.stdout

        p.fault("xid", "--gpu", "2", "--xid", "79")
        wait_for("gpu-2 unhealthy", lambda: value(scrape(p), "dra_gpu_gpu_healthy", gpu="gpu-2") == 0)
        assert 1 == value(scrape(p), "dra_gpu_gpu_health_conditions", gpu="gpu-2", cause="xid", value="79", severity="fatal")
        doc = json.loads(top(p, "-o", "json").stdout)
        assert [{"node": p.metrics_url(), "gpu": "gpu-2", "causes": ["xid=79 (fatal)"]}] == doc["unhealthy"]

        for ref in (busy, idle):
            assert not p.unprepare([ref]).claims[ref[1]].error
        wait_for("the rows to go", lambda: value(scrape(p), "dra_gpu_claim_idle_seconds") is None)
    finally:
        p.stop()


def test_by_default_the_series_name_claims_by_uid_and_top_names_them_from_the_api_server(
    tmp_path: Path, apiserver: LocalCluster
) -> None:
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=ARGS)
    p.start()
    try:
        ref = claim_with_pods(apiserver, f"private-{uuid.uuid4().hex[:6]}", "gpu-3", ["secret-pod-0"])
        assert not p.prepare([ref]).claims[ref[1]].error

        def sampled() -> Series | None:
            s = scrape(p)
            return (
                s if value(s, "dra_gpu_claim_idle_seconds", claim_uid=ref[1], node=p.node, device="gpu-3") is not None else None
            )

        s = wait_for("the sample", sampled)
        text = "\n".join(f"{n}{sorted(lb)}" for n, lb in s)
        for tenant in (ref[2], "secret-pod-0", "namespace", "'pod'"):
            assert tenant not in text, tenant

        anonymous = top(p, "--idle-after", "1")
        assert 0 == anonymous.returncode, anonymous.stderr
        assert f"uid:{ref[1]}" in anonymous.stdout and ref[2] not in anonymous.stdout
        named = top(p, "--idle-after", "1", "--kubeconfig", str(apiserver.kubeconfig))
        assert 0 == named.returncode, named.stderr
        [line] = [line for line in named.stdout.splitlines() if "gpu-3" in line]
        assert f"default/{ref[2]}" in line and "secret-pod-0" in line
        assert 1 == len(json.loads(top(p, "-o", "json", "--kubeconfig", str(apiserver.kubeconfig)).stdout)["devices"])
        assert not p.unprepare([ref]).claims[ref[1]].error
    finally:
        p.stop()


def test_top_reports_a_plugin_it_cannot_read_and_exits_1(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "dra_driver.cli.main", "top", "--url", "http://127.0.0.1:9/metrics"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert 1 == out.returncode
    assert "could not read http://127.0.0.1:9/metrics" in out.stderr


def test_after_a_restart_the_claims_already_prepared_get_their_pods_back(tmp_path: Path, apiserver: LocalCluster) -> None:
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=TENANT)
    p.start()
    try:
        ref = claim_with_pods(apiserver, f"kept-{uuid.uuid4().hex[:6]}", "gpu-4", ["worker-0"])
        assert not p.prepare([ref]).claims[ref[1]].error
        assert 0 == p.stop()
        p.start()  # no prepare after this: the plugin reads the claim once on its own
        wait_for(
            "the pod label", lambda: value(scrape(p), "dra_gpu_claim_idle_seconds", claim=ref[2], pod="worker-0") is not None
        )
        assert not p.unprepare([ref]).claims[ref[1]].error
    finally:
        p.stop()
