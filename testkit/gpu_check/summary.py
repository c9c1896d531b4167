"""The gpu-check report as a person reads it: one line per step, then what was measured.

Called by ``scripts/gpu_check.py`` for ``summary.txt`` (and its stdout) from the report that
``testkit.gpu_check.flow.run_flow`` and the script put together.
"""

from __future__ import annotations

from typing import Any


def _figures(steps: dict[str, dict[str, Any]], report: dict[str, Any]) -> list[str]:
    out: list[str] = []
    start, prep, work = steps.get("plugin-start", {}), steps.get("prepare", {}), steps.get("workload", {})
    if start.get("started_in_s") is not None:
        out.append(f"plugin started in {start['started_in_s']} s; GPUs {start.get('gpus')} ({start.get('source')})")
    if prep.get("call_ms") is not None:
        claim = report["claim"]
        out.append(f"claim {prep.get('claim')}: {claim['device']} = {report['claim_gpu_uuid']}, prepared in {prep['call_ms']} ms")
        nodes = prep.get("device_nodes") or []
        present = all(n["exists"] for n in nodes)
        out.append(f"CDI spec: {len(nodes)} device nodes (all on this host: {present}), mounts {prep.get('mounts')}")
    if work.get("gpus_seen") is not None:
        out.append(f"workload ({work.get('mode')}): the claim named {work.get('claim_gpu')}, CUDA saw {work.get('gpus_seen')}")
        r = work.get("result") or {}
        if r.get("tflops") is not None:
            out.append(f"  {r.get('matmuls')} fp16 8192^3 matmuls in {r.get('seconds')} s, {r.get('tflops')} TFLOPS")
    elif work.get("reason") and str(work.get("status", "")).startswith("skipped"):
        out.append(f"workload: {work['reason']}")
    busy, idle = steps.get("metrics-busy", {}), steps.get("metrics-idle", {})
    if busy.get("max_utilization") is not None:
        out.append(f"/metrics: the claim's utilization reached {busy['max_utilization']} ({busy.get('samples')} scrapes)")
    if idle.get("idle_started_after_s") is not None:
        pods = f" (pods {idle['pods']})" if idle.get("pods") else ""
        out.append(f"/metrics: its idle clock started {idle['idle_started_after_s']} s after the load{pods}")
    lat = steps.get("prepare-latency", {})
    for what in ("prepare", "unprepare"):
        if what in lat:
            f = lat[what]
            out.append(
                f"{what}: {f['claims']} claims one by one, p50 {f['p50_ms']} ms, p99 {f['p99_ms']} ms, max {f['max_ms']} ms"
            )
    calls = (steps.get("api-calls") or {}).get("calls")
    if calls:
        out.append("API calls the plugin made: " + ", ".join(f"{k} x{v}" for k, v in calls.items()))
    return out


def summary(report: dict[str, Any]) -> str:
    """``summary.txt``: the result, the GPUs, every step's status and reason, the figures, where the report is."""
    host = report["host"]["hostname"]
    lines = [f"dra-gpu gpu-check: {report['result'].upper()} ({report['mode']} on {host}, {report['seconds']:.0f} s)"]
    lines += [f"  GPU {g['index']}: {g['name']} {g['uuid']} (driver {g['driver']})" for g in report.get("gpus") or []]
    lines.append("")
    for s in report["steps"]:
        why = s.get("error") or s.get("reason") or ""
        lines.append(f"  {s['status']:<17} {s['name']:<17} {s['seconds']:>7.2f} s  {why}".rstrip())
    lines.append("")
    steps = {s["name"]: s for s in report["steps"]}
    lines += [f"  {line}" for line in _figures(steps, report)]
    lines.append(f"  report: {report['out']}/report.json")
    return "\n".join(lines) + "\n"
