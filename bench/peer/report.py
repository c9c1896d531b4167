"""The printed result: the metric | dra-gpu | Go peer | ratio table, per-run figures, and the machine facts.

Called by ``bench.peer.run.run_bench`` (``machine_facts`` before the run, ``report`` after it).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc

from bench.peer.measure import Figures
from testkit.cluster import K8S_VERSION
from testkit.peer_process import PeerBinary


def pct(values: Sequence[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def med(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def fs_of(path: Path) -> str:
    """Filesystem type of the mount holding ``path`` (from /proc/mounts)."""
    best, kind = "", "?"
    try:
        target = str(path.resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            mnt, fstype = parts[1], parts[2]
            if (target == mnt or target.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, fstype
    except OSError:
        pass
    return kind


def table(rows: list[tuple[str, float, float | None, str]]) -> str:
    """metric | dra-gpu | Go peer | ratio; ``fmt`` is the number format of both figures."""
    out = [f"{'metric':<44} {'dra-gpu':>10} {'Go peer':>10} {'ratio':>8}", "-" * 75]
    for metric, ours, peer, fmt in rows:
        peer_s = "—" if peer is None else format(peer, fmt)
        ratio = "" if peer is None or peer == 0 or ours != ours or peer != peer else f"{ours / peer:.2f}x"
        out.append(f"{metric:<44} {format(ours, fmt):>10} {peer_s:>10} {ratio:>8}")
    return "\n".join(out)


def report(figs: dict[str, Figures], args: argparse.Namespace, facts: list[str], peer_note: str) -> str:
    o = figs["dra-gpu"]
    p = figs.get("Go peer")

    def row(metric: str, get: Callable[[Figures], float], fmt: str) -> tuple[str, float, float | None, str]:
        return metric, get(o), None if p is None else get(p), fmt

    peak = "peak RSS during burst (VmHWM), MiB"
    if o.peak_is_lifetime or (p is not None and p.peak_is_lifetime):
        peak = "peak RSS since start (VmHWM), MiB"
    rows = [
        row("prepare p50, ms", lambda f: pct(f.prepare_ms, 50), ".2f"),
        row("prepare p99, ms", lambda f: pct(f.prepare_ms, 99), ".2f"),
        row("unprepare p50, ms", lambda f: pct(f.unprepare_ms, 50), ".2f"),
        row("unprepare p99, ms", lambda f: pct(f.unprepare_ms, 99), ".2f"),
        row("sequential call errors", lambda f: f.call_errors, ".0f"),
        row("start -> DRA socket answers, s", lambda f: med(f.socket_s), ".3f"),
        row("start -> first claim prepared, s", lambda f: med(f.claim_s), ".3f"),
        row("start -> all ResourceSlices in API server, s", lambda f: med(f.slices_s), ".3f"),
        row("idle RSS after start (VmRSS), MiB", lambda f: med(f.idle_rss_mib), ".1f"),
        row("  of it private (RssAnon), MiB", lambda f: med(f.idle_anon_mib), ".1f"),
        row("  of it mapped files (RssFile; page-cache dependent), MiB", lambda f: med(f.idle_file_mib), ".1f"),
        row(peak, lambda f: med(f.peak_rss_mib), ".1f"),
        row(f"burst prepare ({args.burst} claims), claims/s", lambda f: med(f.burst_prepare_cps), ".1f"),
        row(f"burst unprepare ({args.burst} claims), claims/s", lambda f: med(f.burst_unprepare_cps), ".1f"),
        row("burst prepare: driver CPU per claim, ms", lambda f: med(f.burst_prepare_cpu_ms), ".2f"),
        row("burst unprepare: driver CPU per claim, ms", lambda f: med(f.burst_unprepare_cpu_ms), ".2f"),
        row("burst prepare: API server + etcd CPU per claim, ms", lambda f: med(f.burst_prepare_server_cpu_ms), ".2f"),
        row("burst prepare: client (bench) CPU per claim, ms", lambda f: med(f.burst_prepare_client_cpu_ms), ".2f"),
        row("burst errors", lambda f: f.burst_errors, ".0f"),
    ]
    lines = [
        f"dra-gpu kubelet plugin vs Go peer: {args.claims} claims x {args.runs} runs "
        f"(latency: one claim per call, alternating drivers; burst: {args.burst} claims from {args.threads} threads)",
        "",
        table(rows),
        "",
        "ratio = dra-gpu / peer (for claims/s, < 1 means dra-gpu is slower). Latency percentiles pool all runs;",
        "start, RSS and burst figures are medians over runs.",
    ]
    lines += ["", *goals(o, p, args.burst)]
    for label, f in figs.items():
        lines.append(
            f"{label} per run: socket {' '.join(f'{x:.3f}' for x in f.socket_s)} s; "
            f"first claim {' '.join(f'{x:.3f}' for x in f.claim_s)} s; "
            f"slices {' '.join(f'{x:.3f}' for x in f.slices_s)} s"
        )
        if f.first_error:
            lines.append(f"{label} first error: {f.first_error}")
    lines += ["", "peer: " + peer_note, *facts]
    return "\n".join(lines)


def _mark(ok: bool) -> str:
    return "met" if ok else "NOT met"


def goals(o: Figures, p: Figures | None, burst: int) -> list[str]:
    """The tracker's performance goals (issue 14) against this run's figures, one line each.

    Also the burst's CPU ceiling on this machine: the cores divided by the CPU every party (driver,
    API server and etcd, client) spent per claim; no driver reaches more claims/s here than that.
    """
    out = ["goals (issue 14):"]
    if p is not None:
        for name, ours, peer in (
            ("prepare p50 <= peer's", pct(o.prepare_ms, 50), pct(p.prepare_ms, 50)),
            ("unprepare p50 <= peer's", pct(o.unprepare_ms, 50), pct(p.unprepare_ms, 50)),
            ("start -> all slices <= peer's", med(o.slices_s), med(p.slices_s)),
            ("idle RSS <= peer's", med(o.idle_rss_mib), med(p.idle_rss_mib)),
        ):
            out.append(f"  {name}: {ours:.3g} vs {peer:.3g}: {_mark(ours <= peer)}")
    for name, value, limit in (
        ("prepare p99 <= 10 ms", pct(o.prepare_ms, 99), 10.0),
        ("start -> DRA socket <= 0.3 s", med(o.socket_s), 0.3),
        ("idle RSS <= 45 MiB", med(o.idle_rss_mib), 45.0),
        ("peak RSS in the burst <= 60 MiB", med(o.peak_rss_mib), 60.0),
        (f"burst of {burst}: 0 errors", float(o.burst_errors), 0.0),
    ):
        out.append(f"  {name}: {value:.3g}: {_mark(value <= limit)}")
    cps = med(o.burst_prepare_cps)
    out.append(f"  burst of {burst}: >= 500 claims/s prepared: {cps:.3g}: {_mark(cps >= 500.0)}")
    per_claim = med(o.burst_prepare_cpu_ms) + med(o.burst_prepare_server_cpu_ms) + med(o.burst_prepare_client_cpu_ms)
    cores = len(os.sched_getaffinity(0))
    if per_claim > 0:
        out.append(
            f"  burst CPU ceiling here: {cores} cores / {per_claim:.2f} ms per claim (driver + API server and etcd + client)"
            f" = {cores * 1000 / per_claim:.0f} claims/s at most"
        )
    return out + floor_goals(o, p)


def floor_goals(o: Figures, p: Figures | None) -> list[str]:
    """Issue 32's plugin floor: idle RSS within 1.1x the peer's in this run, DRA socket in 0.25 s (median of the starts).

    The start goal is for a quiet machine: the load average printed with the machine facts says whether this one was.
    The socket answers (an empty call, the liveness probe's) and the kubelet can register the plugin before it has
    recovered its state; calls with claims wait for that, so the first claim prepared is printed beside it.
    """
    socket_s = med(o.socket_s)
    out = [
        f"plugin floor (issue 32, {len(o.socket_s)} starts):",
        f"  start -> DRA socket <= 0.25 s (median, quiet machine): {socket_s:.3g}: {_mark(socket_s <= 0.25)}",
    ]
    if o.claim_s:
        peer_claim = f"; the peer's {med(p.claim_s):.3g} s" if p is not None and p.claim_s else ""
        first = med(o.claim_s)
        out.append(
            f"  (start -> first claim prepared, the calls with claims having waited for recovery: {first:.3g} s{peer_claim})"
        )
    if p is not None:
        ours, peer = med(o.idle_rss_mib), med(p.idle_rss_mib)
        out.append(f"  idle RSS <= 1.1x the peer's: {ours:.3g} vs {peer:.3g} ({ours / peer:.2f}x): {_mark(ours <= 1.1 * peer)}")
        anon, peer_anon = med(o.idle_anon_mib), med(p.idle_anon_mib)
        if anon == anon and peer_anon == peer_anon:  # both read (NaN otherwise)
            out.append(
                f"  (private part, RssAnon, which no page cache changes: {anon:.3g} vs {peer_anon:.3g},"
                f" {anon / peer_anon:.2f}x; RSS counts mapped file pages, more of them when the files are cached)"
            )
    return out


def machine_facts(state_root: Path, binary: PeerBinary | None) -> list[str]:
    cores = os.cpu_count()
    usable = len(os.sched_getaffinity(0))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    kind = fs_of(state_root)
    medium = "tmpfs (memory)" if kind in ("tmpfs", "ramfs") else f"{kind} (disk)"
    facts = [
        f"machine: {cores} cores ({usable} usable), load average {load} at start, {platform.machine()} {platform.release()}",
        f"state dirs: {state_root} on {medium}",
        f"python {platform.python_version()}, grpcio {grpc.__version__}, Kubernetes {K8S_VERSION} API server (local etcd)",
    ]
    if binary is not None:
        try:
            gover = subprocess.run(["go", "version", str(binary.path)], capture_output=True, text=True, timeout=10, check=False)
            built = gover.stdout.strip().rsplit(": ", 1)[-1] or "go ?"
        except (OSError, subprocess.TimeoutExpired):
            built = "go ?"
        facts.append(f"peer binary: {binary.path} ({built})")
    return facts
