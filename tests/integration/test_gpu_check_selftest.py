"""``make gpu-check`` proven before it meets a GPU: its self-test on fake GPUs, its failures, and its "did not run".

``scripts/gpu_check.py --fake-gpus h100x8`` runs the same flow as on a GPU machine
(``testkit.gpu_check.flow``): the real plugin process against the stand-in API server over HTTPS,
the kubelet's gRPC calls over the plugin's sockets, the claim's CDI spec, ``/metrics`` read for
the claim's utilization and idle clock, unprepare, shutdown. Only the read-only NVML scripts and
the CUDA workload are skipped, by design (the fake GPUs' usage script gives the load). The report
must say so step by step. A plugin that cannot start fails the run and the steps after it are
reported not run. Without a GPU (forced here by pointing the script at a device node that does
not exist, or at a stand-in NVML that does not start) it prints that it did not run, exits 0 and
leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from dra_driver.core.cdi import cdi_device_id, env_prefix
from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from testkit.gpu_check.flow import NAMESPACE, STEPS
from testkit.gpu_check.workload import can_namespace

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_check.py"


def gpu_check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_self_test_runs_every_step_on_fake_gpus_and_reports_it(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = gpu_check("--fake-gpus", "h100x8", "--latency-claims", "5", env={"DRA_GPU_CHECK_OUT": str(out)})
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    assert done.stdout == (out / "summary.txt").read_text()
    assert done.stdout.startswith("dra-gpu gpu-check: PASSED (fake-gpus:h100x8")
    assert (report["result"], report["mode"], report["failed_steps"]) == ("passed", "fake-gpus:h100x8", [])

    steps = {s["name"]: s for s in report["steps"]}
    assert [s["name"] for s in report["steps"]] == [name for name, _, _ in STEPS]
    by_design = {"readonly-check", "nvml-health-check", "workload"}
    assert {n for n, s in steps.items() if s["status"] == "skipped-by-design"} == by_design
    probe = "passed" if can_namespace() is None else "skipped"  # a private mount namespace needs root
    assert steps["dev-probe"]["status"] == probe
    assert all(s["status"] == "passed" for n, s in steps.items() if n not in {*by_design, "dev-probe"})

    uuid, claim_uid = report["claim_gpu_uuid"], report["claim"]["uid"]
    start = steps["plugin-start"]
    assert start["source"] == "fake:h100x8" and len(start["gpus"]) == 8 and uuid == start["gpus"][0]
    assert steps["registration"]["plugin_name"] == DEFAULT_DRIVER_NAME
    assert steps["slices"]["gpus"] == 8
    assert steps["slices"]["claim_device_attributes"]["uuid"] == {"string": uuid}

    prep = steps["prepare"]
    assert prep["devices"] == [
        {
            "pool": report["node"],
            "device": "gpu-0",
            "cdi_device_ids": [cdi_device_id(DEFAULT_DRIVER_NAME, claim_uid, "gpu-0")],
        }
    ]
    [device] = prep["spec"]["devices"]
    assert f"{env_prefix('gpu-0')}_UUID={uuid}" in device["containerEdits"]["env"]
    assert "/dev/nvidia0" in [n["path"] for n in prep["device_nodes"]]
    assert all(n["exists"] for n in prep["device_nodes"])
    entry = steps["device-status"]["entry"]
    assert (entry["driver"], entry["pool"], entry["device"]) == (DEFAULT_DRIVER_NAME, report["node"], "gpu-0")
    if probe == "passed":
        spec_nodes = sorted(Path(n["path"]).relative_to("/dev").parts[0] for n in prep["device_nodes"])
        assert [n for n in steps["dev-probe"]["dev"] if n.startswith("nvidia")] == spec_nodes  # the spec's nodes, no other

    assert steps["metrics-busy"]["max_utilization"] == 0.8
    assert steps["metrics-idle"]["idle_s"] > 0
    assert steps["unprepare"]["spec_removed"] and steps["unprepare"]["metrics_row_removed"]
    latency = steps["prepare-latency"]
    assert latency["prepare"]["claims"] == latency["unprepare"]["claims"] == 5
    assert 0 < latency["prepare"]["p50_ms"] <= latency["prepare"]["max_ms"]
    assert (steps["plugin-stop"]["exit_code"], steps["plugin-stop"]["sockets_left"], steps["plugin-stop"]["cdi_left"]) == (
        0,
        [],
        [],
    )

    calls = steps["api-calls"]
    assert (calls["unauthorized"], calls["errors"]) == (0, [])
    for call in (
        "GET /version",
        "GET /api/v1/nodes/*",
        "POST /apis/resource.k8s.io/v1/resourceslices",
        "GET /apis/resource.k8s.io/v1/namespaces/*/resourceclaims/*",
        "PATCH /apis/resource.k8s.io/v1/namespaces/*/resourceclaims/*/status",
    ):
        assert call in calls["calls"], f"{call} not in {calls['calls']}"
    assert report["claim"]["namespace"] == NAMESPACE
    assert (out / "run" / "plugin.log").is_file()


def test_a_plugin_that_cannot_start_fails_the_run_and_the_rest_is_not_run(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = gpu_check("--fake-gpus", "h100x8", "--out", str(out), "--plugin-arg=--no-such-flag")
    assert done.returncode == 1
    report = json.loads((out / "report.json").read_text())
    statuses = {s["name"]: s["status"] for s in report["steps"]}
    assert (report["result"], report["failed_steps"]) == ("failed", ["plugin-start"])
    assert "no-such-flag" in next(s["error"] for s in report["steps"] if s["name"] == "plugin-start")
    after = [name for name, _, _ in STEPS][[name for name, _, _ in STEPS].index("plugin-start") + 1 :]
    assert {statuses[n] for n in after} == {"not-run"}
    assert done.stdout.startswith("dra-gpu gpu-check: FAILED")


# Loads scripts/gpu_check.py, points it at another GPU device node, runs it, and tells what it loaded.
RUN_WITH_NODE = """
import importlib.util, json, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("gpu_check", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
m.GPU_NODE = Path(sys.argv[2])
rc = m.main([])
loaded = sorted(n for n in sys.modules if n.startswith(("testkit.gpu_check.", "kubelet_plugin", "grpc")))
print(json.dumps({"rc": rc, "loaded": loaded}), file=sys.stderr)
"""

NVML_DOES_NOT_START = """
class NVMLError(Exception):
    pass

def nvmlInit():
    raise NVMLError("Driver Not Loaded")
"""

NVML_SEES_NO_GPU = """
class NVMLError(Exception):
    pass

def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return 0
"""


def _did_not_run(tmp_path: Path, node: Path, pynvml: str | None) -> tuple[str, dict[str, Any]]:
    out = tmp_path / "report"
    path = [str(REPO)]
    if pynvml is not None:
        (tmp_path / "standin").mkdir()
        (tmp_path / "standin" / "pynvml.py").write_text(pynvml)
        path.insert(0, str(tmp_path / "standin"))
    env = {**os.environ, "DRA_GPU_CHECK_OUT": str(out), "PYTHONPATH": os.pathsep.join(path)}
    done = subprocess.run(
        [sys.executable, "-c", RUN_WITH_NODE, str(SCRIPT), str(node)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    told: dict[str, Any] = json.loads(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0 and told["rc"] == 0, done.stderr
    assert not out.exists(), "a run that did not happen left a report folder"
    assert told["loaded"] == [], f"a run that did not happen loaded {told['loaded']}"
    assert len(done.stdout.splitlines()) == 1
    return done.stdout, told


def test_without_a_gpu_device_node_it_says_it_did_not_run_and_does_nothing_else(tmp_path: Path) -> None:
    stdout, _ = _did_not_run(tmp_path, tmp_path / "nvidia0", None)
    assert stdout == f"gpu-check did not run: no {tmp_path / 'nvidia0'}: no NVIDIA GPU or driver on this machine\n"


def test_when_nvml_does_not_start_it_says_why_and_does_nothing_else(tmp_path: Path) -> None:
    stdout, _ = _did_not_run(tmp_path, Path("/dev/null"), NVML_DOES_NOT_START)
    assert stdout == "gpu-check did not run: NVML does not start: Driver Not Loaded\n"


def test_when_nvml_sees_no_gpu_it_says_so_and_does_nothing_else(tmp_path: Path) -> None:
    stdout, _ = _did_not_run(tmp_path, Path("/dev/null"), NVML_SEES_NO_GPU)
    assert stdout == "gpu-check did not run: NVML sees no GPU\n"
