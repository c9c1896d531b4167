"""Every real-GPU check of dra-gpu in one command (``make gpu-check``), with one report.

On a machine with an NVIDIA GPU it runs the read-only NVML checks (``scripts/gpu_readonly_check.py``,
``scripts/device_nvml_health_check.py``, as processes) and the plugin on the real GPU:
the real ``dra-gpu-kubelet-plugin`` process with NVML, a stand-in API server (HTTPS, in this
process), the kubelet's gRPC calls over the plugin's unix sockets, a torch workload under the
claim's CDI spec, and ``/metrics`` read for the claim's utilization and idle clock
(``testkit.gpu_check.flow`` says each step). The report goes to ``--out``, else
``$DRA_GPU_CHECK_OUT``, else a new folder under the temp dir: ``report.json`` (everything) and
``summary.txt`` (what a person reads first, also printed).

Without a GPU (no ``/dev/nvidia0``, no NVML binding, NVML does not start or sees no GPU) it prints
that it did not run and why, and exits 0, having done nothing else: no folder, no process.
``--fake-gpus h100x8`` is the self-test: the same plugin run against fake GPUs anywhere (the
read-only checks and the CUDA workload are skipped by design).

Nothing it runs changes a GPU's MIG mode, compute mode, clocks, power or time-slicing, resets a
GPU or starts MPS (``tests/unit/gpu_check/test_gpu_check_safety.py`` scans it). Exit: 0 passed or did not
run, 1 a step failed, 2 a usage error or a GPU machine missing what the run needs.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

OUT_ENV = "DRA_GPU_CHECK_OUT"
GPU_NODE = Path("/dev/nvidia0")
NOT_AT_RUN_TIME = {
    # pyproject.toml's dependencies the plugin and this run do not import: what each is for
    "kubernetes": "kubeconfigs whose user runs an exec plugin or auth provider (the stand-in's does not)",
}  # (dra-gpu explain's dependencies are the `explain` extra, not read here)
"""Every other dependency in pyproject.toml must be installed (fake GPUs: all but nvidia-ml-py)."""


def _requirements() -> dict[str, str]:
    """pyproject.toml's dependencies: distribution name to its version pin (e.g. ``==1.85.1``)."""
    import re
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    out = {}
    for dep in deps:
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(.*)", dep)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def dependencies(*, fake: bool) -> tuple[dict[str, dict[str, str | None]], list[str]]:
    """Each run-time dependency's pin and installed version, and the ones missing (``name==pin``)."""
    table: dict[str, dict[str, str | None]] = {}
    missing = []
    for dist, pin in _requirements().items():
        if dist in NOT_AT_RUN_TIME or (fake and dist == "nvidia-ml-py"):
            continue
        have = _version(dist)
        if have is None:
            missing.append(f"{dist}{pin}")
        table[dist] = {"wanted": pin, "installed": have}
    return table, missing


def why_no_gpu() -> str | None:
    """Why this machine has no GPU to check (None: it has one). Reads only: NVML is started and shut down."""
    if not GPU_NODE.exists():
        return f"no {GPU_NODE}: no NVIDIA GPU or driver on this machine"
    if importlib.util.find_spec("pynvml") is None:
        return None  # a GPU without the binding: reported as a missing dependency, not as no GPU
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return f"NVML does not start: {err}"
    try:
        if pynvml.nvmlDeviceGetCount() < 1:
            return "NVML sees no GPU"
    finally:
        pynvml.nvmlShutdown()
    return None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        return None
    got = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return got.stdout.strip() or None


def _gpus() -> list[dict[str, Any]]:
    """Name, UUID and driver of each GPU (queries only)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            out.append({"index": i, "name": pynvml.nvmlDeviceGetName(h), "uuid": pynvml.nvmlDeviceGetUUID(h), "driver": driver})
        plain: list[dict[str, Any]] = json.loads(
            json.dumps(out, default=lambda v: v.decode() if isinstance(v, bytes) else str(v))
        )
        return plain
    finally:
        pynvml.nvmlShutdown()


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The flags."""
    p = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help=f"report folder (default ${OUT_ENV}, else a new folder under the temp dir)")
    p.add_argument("--fake-gpus", metavar="PROFILE", help="self-test on fake GPUs (e.g. h100x8): no GPU needed, no CUDA workload")
    p.add_argument("--workload-seconds", type=float, default=10.0, help="how long the CUDA workload runs (10)")
    p.add_argument("--workload-python", help="interpreter with torch (default: this one if it has torch, else python3)")
    p.add_argument("--workload-mode", choices=["namespace", "process"], help="default: namespace where root can, else process")
    p.add_argument("--latency-claims", type=int, default=20, help="claims prepared and unprepared one by one for latency (20)")
    p.add_argument("--plugin-arg", action="append", default=[], help="one more flag for the plugin (repeatable)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the checks (or say why not); the exit code."""
    args = parse(argv)
    fake = args.fake_gpus is not None
    if not fake:
        why = why_no_gpu()
        if why is not None:
            print(f"gpu-check did not run: {why}")
            return 0
    deps, missing = dependencies(fake=fake)
    if missing:
        print(f"gpu-check cannot run: this Python ({sys.executable}) lacks {', '.join(missing)}", file=sys.stderr)
        return 2
    workload_python = args.workload_python or (
        sys.executable if importlib.util.find_spec("torch") is not None else shutil.which("python3") or sys.executable
    )
    out = Path(args.out or os.environ.get(OUT_ENV) or tempfile.mkdtemp(prefix="dra-gpu-check-")).absolute()
    out.mkdir(parents=True, exist_ok=True)

    from testkit.gpu_check.flow import Options, run_flow
    from testkit.gpu_check.summary import summary

    t0 = time.monotonic()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    report: dict[str, Any] = {
        "tool": "dra-gpu gpu-check",
        "commit": _git_commit(),
        "started": started,
        "host": {
            "hostname": socket.gethostname(),
            "kernel": platform.release(),
            "python": sys.version.split()[0],
            "executable": sys.executable,
            "workload_python": workload_python,
            "root": os.geteuid() == 0,
        },
        "dependencies": {**deps, "torch": {"wanted": "any (the workload)", "installed": _version("torch")}},
        "gpus": [] if fake else _gpus(),
    }
    opts = Options(
        out=out,
        fake_gpus=args.fake_gpus,
        plugin_python=sys.executable,
        workload_python=workload_python,
        workload_seconds=args.workload_seconds,
        latency_claims=args.latency_claims,
        plugin_args=tuple(args.plugin_arg),
        workload_mode=args.workload_mode,
    )
    report.update(run_flow(opts))
    report.update(
        finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), seconds=round(time.monotonic() - t0, 1), out=str(out)
    )
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    text = summary(report)
    (out / "summary.txt").write_text(text)
    print(text, end="")
    return 0 if report["result"] == "passed" else 1


if __name__ == "__main__":
    raise SystemExit(main())
