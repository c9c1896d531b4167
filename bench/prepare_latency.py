"""Benchmark: NodePrepareResources + NodeUnprepareResources latency over the plugin's real sockets.

Starts etcd + kube-apiserver (built from source) and the plugin daemon with fake H100s, creates
allocated claims in the API server, then times each prepare and unprepare call the way the
kubelet makes them (one claim per call). Prints p50/p90/p99 and the daemon's peak RSS.
Not a test: it asserts nothing about speed. Run with ``make bench``
(``python -m bench.prepare_latency`` from the repository root).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from e2e.cluster import LocalCluster
from e2e.plugin_process import PluginProcess
from tests.integration.claims import create_allocated_claim


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--claims", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, LocalCluster() as cluster:
        cluster.add_node("node-a")
        plugin = PluginProcess(Path(tmp), kubeconfig=cluster.kubeconfig)
        plugin.start()
        try:
            refs = [create_allocated_claim(cluster, name=f"bench-{i}", devices=[f"gpu-{i % 8}"]) for i in range(args.claims)]
            plugin.prepare([refs[0]])  # warm the channel and the API client
            plugin.unprepare([refs[0]])
            prep, unprep, both = [], [], []
            for ref in refs:
                t0 = time.perf_counter()
                resp = plugin.prepare([ref])
                t1 = time.perf_counter()
                assert not resp.claims[ref[1]].error, resp.claims[ref[1]].error
                plugin.unprepare([ref])
                t2 = time.perf_counter()
                prep.append((t1 - t0) * 1000)
                unprep.append((t2 - t1) * 1000)
                both.append((t2 - t0) * 1000)
            assert plugin.proc is not None
            rss = peak_rss_mib(plugin.proc.pid)
        finally:
            plugin.stop()
    print(f"claims: {args.claims} (one per call, fake h100x8, real kube-apiserver GET per prepare)")
    for label, values in (("prepare", prep), ("unprepare", unprep), ("prepare+unprepare", both)):
        print(
            f"{label:>18}: p50 {pct(values, 50):6.2f} ms  p90 {pct(values, 90):6.2f} ms  "
            f"p99 {pct(values, 99):6.2f} ms  mean {statistics.mean(values):6.2f} ms"
        )
    print(f"plugin peak RSS: {rss:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
