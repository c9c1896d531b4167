"""A CUDA workload under a claim's CDI spec, for ``make gpu-check``, without a container runtime.

Called by ``testkit.gpu_check.flow`` with the spec the plugin wrote for a prepared claim. The
workload is a torch matmul loop (``WORKLOAD``) that prints, as one JSON line, the GPUs CUDA shows
it (count and UUIDs) and how many matmuls it ran. How the spec is applied, by mode:

* ``namespace`` (root, with ``unshare`` and ``mount``): in a private mount namespace
  (``testkit.gpu_check.sandbox``) ``/dev`` is replaced by a tmpfs holding only the basic character
  devices and the spec's ``deviceNodes``, the spec's ``mounts`` are bound read-only where their
  container path exists on the host (the others are reported, never created), and the spec's
  ``env`` is the workload's. ``CUDA_VISIBLE_DEVICES`` is not set: the device nodes alone must
  show CUDA exactly the claim's GPU, as in a container. The host's file system (its driver
  libraries included) stays visible, so this does not prove that the spec brings the driver.
* ``process`` (otherwise): the workload runs as a plain process with the spec's ``env`` and
  ``CUDA_VISIBLE_DEVICES`` set to the claim's device UUIDs; every device node stays visible and
  no mount is applied.

Nothing here changes a GPU's settings; the workload only allocates memory and runs kernels.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_driver.core.prepare import spec_device_uuids

REPO = Path(__file__).resolve().parents[2]

WORKLOAD = r"""
import json, sys, time
seconds = float(sys.argv[1])
out = {"ok": False}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda_available"] = torch.cuda.is_available()
    out["device_count"] = torch.cuda.device_count()
    out["uuids"] = []
    for i in range(out["device_count"]):
        p = torch.cuda.get_device_properties(i)
        out["uuids"].append(str(getattr(p, "uuid", "")))
        out.setdefault("names", []).append(p.name)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()
        n += 20
    spent = time.perf_counter() - t0
    out.update(ok=True, matmuls=n, seconds=round(spent, 3), tflops=round(n * 2 * 8192**3 / spent / 1e12, 1))
except Exception as err:
    out["error"] = f"{type(err).__name__}: {err}"
print(json.dumps(out), flush=True)
sys.exit(0 if out["ok"] else 1)
"""


@dataclass(frozen=True, slots=True)
class SpecEdits:
    """What a claim's CDI spec gives a container: env, device nodes (path, host path), mounts (host, container)."""

    env: dict[str, str]
    device_nodes: tuple[tuple[str, str], ...]
    mounts: tuple[tuple[str, str], ...]
    uuids: frozenset[str]


def spec_edits(spec: Mapping[str, Any]) -> SpecEdits:
    """The container edits of every device of ``spec`` (and the spec's own), merged in order."""
    env: dict[str, str] = {}
    nodes: list[tuple[str, str]] = []
    mounts: list[tuple[str, str]] = []
    edits = [spec.get("containerEdits") or {}, *((d.get("containerEdits") or {}) for d in spec.get("devices") or [])]
    for e in edits:
        for item in e.get("env") or []:
            key, _, value = str(item).partition("=")
            env[key] = value
        for n in e.get("deviceNodes") or []:
            path = str(n.get("path"))
            if path not in (p for p, _ in nodes):
                nodes.append((path, str(n.get("hostPath") or path)))
        for m in e.get("mounts") or []:
            mounts.append((str(m.get("hostPath")), str(m.get("containerPath"))))
    return SpecEdits(env, tuple(nodes), tuple(mounts), frozenset(spec_device_uuids(spec)))


def same_gpu(a: str, b: str) -> bool:
    """Whether two spellings of a GPU UUID (``GPU-<uuid>`` from NVML, ``<uuid>`` from torch) are one GPU."""

    def norm(u: str) -> str:
        return u.strip().lower().removeprefix("gpu-")

    return bool(a) and norm(a) == norm(b)


def can_namespace() -> str | None:
    """Why the namespace mode cannot run here (None: it can)."""
    if os.geteuid() != 0:
        return "not root (bind mounts in a private mount namespace need CAP_SYS_ADMIN)"
    missing = [t for t in ("unshare", "mount", "umount") if shutil.which(t) is None]
    if missing:
        return f"missing {', '.join(missing)}"
    cmd = ["unshare", "--mount", "--propagation", "private", "true"]
    probe = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=30)
    if probe.returncode != 0:  # root in a container without CAP_SYS_ADMIN, or a seccomp profile refusing unshare
        return f"unshare --mount fails here: {probe.stderr.strip()[:300]}"
    return None


@dataclass(slots=True)
class WorkloadRun:
    """A started workload; ``finish`` waits for it and reads what it printed."""

    mode: str
    proc: subprocess.Popen[str]
    started: float
    env_applied: dict[str, str]
    cuda_visible_devices: str | None
    applied: Path | None
    details: dict[str, Any] = field(default_factory=dict)

    def running(self) -> bool:
        """Still running."""
        return self.proc.poll() is None

    def finish(self, timeout_s: float) -> dict[str, Any]:
        """Wait for the workload; its JSON line, exit code, stderr tail, and what the sandbox applied."""
        try:
            out, err = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        result: dict[str, Any] = {}
        for line in reversed(out.splitlines()):
            try:
                result = json.loads(line)
                break
            except ValueError:
                continue
        applied: Any = None
        if self.applied is not None and self.applied.exists():
            applied = json.loads(self.applied.read_text())
        return {
            "mode": self.mode,
            "exit_code": self.proc.returncode,
            "seconds": round(time.monotonic() - self.started, 3),
            "result": result,
            "stderr_tail": err[-3000:],
            "cuda_visible_devices": self.cuda_visible_devices,
            "spec_env": self.env_applied,
            "sandbox": applied,
            **self.details,
        }


def torch_argv(python: str, seconds: float, work_dir: Path) -> list[str]:
    """The torch matmul loop (``WORKLOAD``) for ``seconds``, written under ``work_dir``, run by ``python``."""
    work_dir.mkdir(parents=True, exist_ok=True)
    script = work_dir / "workload.py"
    script.write_text(WORKLOAD)
    return [python, str(script), str(seconds)]


DEV_PROBE = "import json, os; print(json.dumps({'ok': True, 'dev': sorted(os.listdir('/dev'))}))"
"""A workload that only lists ``/dev`` (what the namespace shows; fake GPUs, and before the CUDA run)."""


def start(spec: Mapping[str, Any], *, argv: list[str], work_dir: Path, mode: str | None = None) -> WorkloadRun:
    """Start ``argv`` under ``spec`` in ``mode`` (None: ``namespace`` where it can run, else ``process``)."""
    edits = spec_edits(spec)
    work_dir.mkdir(parents=True, exist_ok=True)
    why_not = can_namespace()
    chosen = mode or ("namespace" if why_not is None else "process")
    env = {**os.environ, **edits.env}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update({k: v for k, v in edits.env.items() if k == "CUDA_VISIBLE_DEVICES"})  # the spec's own, if it sets one
    details: dict[str, Any] = {"namespace_unavailable": why_not} if why_not else {}
    applied: Path | None = None
    if chosen == "process":
        if "CUDA_VISIBLE_DEVICES" not in edits.env:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(sorted(edits.uuids))
        cmd = argv
    else:
        applied = work_dir / "sandbox-applied.json"
        plan = work_dir / "sandbox-plan.json"
        body = {"device_nodes": edits.device_nodes, "mounts": edits.mounts, "env": env, "argv": argv, "applied": str(applied)}
        plan.write_text(json.dumps(body, indent=1))
        launcher = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        cmd = ["unshare", "--mount", "--propagation", "private", sys.executable, "-m", "testkit.gpu_check.sandbox", str(plan)]
        env = launcher
    proc = subprocess.Popen(cmd, env=env, cwd=work_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return WorkloadRun(
        mode=chosen,
        proc=proc,
        started=time.monotonic(),
        env_applied=edits.env,
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES") if chosen == "process" else None,
        applied=applied,
        details=details,
    )
