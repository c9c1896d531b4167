"""``dra-gpu explain`` timed as a user runs it, against the whole scenario's cluster.

Used by ``bench.cluster_scale.run`` after the steady-state window. One more pod of the same
kind as the measured ones is created with a scheduler name no scheduler serves, so it stays
Pending with its claim created (by the resourceclaim controller) but never allocated: explain
then simulates it against every node's pool and every allocated claim, the most it ever reads.
The CLI (``.venv/bin/dra-gpu explain pod/NAME -n NS --kubeconfig FILE``, text output) runs as a
fresh process each time, interpreter start and imports included.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.cluster_scale.api import Api
from bench.cluster_scale.workload import NS, PODS, pod

PROBE = "explain-probe"
NO_SCHEDULER = "nobody"  # no scheduler serves this name: the pod stays Pending
CLI = Path(sys.executable).with_name("dra-gpu")


@dataclass
class ExplainTiming:
    """Wall seconds of each CLI run, its exit code, and the first line of its answer."""

    seconds: list[float] = field(default_factory=list)
    exit_codes: list[int] = field(default_factory=list)
    verdict: str = ""
    lines: int = 0
    error: str = ""


def probe_pod(api: Api, template: str, timeout_s: float = 60.0) -> None:
    """Create the Pending probe pod and wait until its claim exists."""
    api.call("POST", PODS, pod(PROBE, template, scheduler=NO_SCHEDULER))
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        status = api.call("GET", f"{PODS}/{PROBE}").get("status") or {}
        if any(s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []):
            return
        time.sleep(0.2)
    raise TimeoutError(f"the probe pod's claim was not created within {timeout_s:.0f}s")


def time_explain(kubeconfig: Path, runs: int, timeout_s: float) -> ExplainTiming:
    """Run the CLI ``runs`` times; wall seconds per run (stdout read and dropped, as a terminal would show it)."""
    out = ExplainTiming()
    argv = [str(CLI), "explain", f"pod/{PROBE}", "-n", NS, "--kubeconfig", str(kubeconfig)]
    for _ in range(runs):
        t0 = time.monotonic()
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            out.seconds.append(time.monotonic() - t0)
            out.exit_codes.append(-1)
            out.error = f"no answer within {timeout_s:.0f}s"
            break
        out.seconds.append(time.monotonic() - t0)
        out.exit_codes.append(proc.returncode)
        lines = proc.stdout.splitlines()
        out.lines = len(lines)
        if proc.returncode not in (0, 1):  # 1: the pod would not fit (a valid answer)
            out.error = (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
            break
        out.verdict = lines[1].strip()[:160] if len(lines) > 1 else ""
    return out
