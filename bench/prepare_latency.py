"""Benchmark: NodePrepareResources + NodeUnprepareResources latency over the plugin's real sockets.

Starts etcd + kube-apiserver (built from source) and the plugin daemon with fake H100s, creates
allocated claims in the API server, then times each prepare and unprepare call the way the
kubelet makes them (one claim per call). Prints p50/p90/p99 and the daemon's peak RSS.
Not a test: it asserts nothing about speed. Run with ``make bench``
(``python -m bench.prepare_latency`` from the repository root).

``--mig zero|realistic`` runs the plugin with dynamic MIG on the simulator at that latency and
times claims for a ``1g.10gb`` slice: "warm" GPUs already hold another slice (MIG mode stays
on), "cold" GPUs hold nothing, so prepare turns MIG mode on and unprepare turns it off again.
``--metrics off`` runs the plugin without its Prometheus metrics (on by default, as installed).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from testkit.claims import create_allocated_claim
from testkit.cluster import LocalCluster
from testkit.plugin_process import PluginProcess


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


Ref = tuple[str, str, str]


def timed(plugin: PluginProcess, refs: list[Ref]) -> tuple[list[float], list[float], list[float]]:
    """Prepare then unprepare each claim, one per call; milliseconds per call."""
    prep, unprep, both = [], [], []
    for ref in refs:
        t0 = time.perf_counter()
        resp = plugin.prepare([ref])
        t1 = time.perf_counter()
        assert not resp.claims[ref[1]].error, resp.claims[ref[1]].error
        err = plugin.unprepare([ref]).claims[ref[1]].error
        t2 = time.perf_counter()
        assert not err, err
        prep.append((t1 - t0) * 1000)
        unprep.append((t2 - t1) * 1000)
        both.append((t2 - t0) * 1000)
    return prep, unprep, both


def report(title: str, prep: list[float], unprep: list[float], both: list[float]) -> None:
    print(title)
    for label, values in (("prepare", prep), ("unprepare", unprep), ("prepare+unprepare", both)):
        print(
            f"{label:>18}: p50 {pct(values, 50):8.2f} ms  p90 {pct(values, 90):8.2f} ms  "
            f"p99 {pct(values, 99):8.2f} ms  mean {statistics.mean(values):8.2f} ms"
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--mig", choices=["zero", "realistic"], help="dynamic MIG on the simulator at this latency")
    parser.add_argument("--metrics", choices=["on", "off"], default="on", help="the plugin's Prometheus metrics")
    args = parser.parse_args()
    extra: tuple[str, ...] = ("--mig", "dynamic", "--fake-mig-latency", args.mig, "--gc-interval", "0") if args.mig else ()
    if args.metrics == "off":
        extra += ("--metrics-port", "-1")
    with tempfile.TemporaryDirectory() as tmp, LocalCluster() as cluster:
        cluster.add_node("node-a")
        plugin = PluginProcess(Path(tmp), kubeconfig=cluster.kubeconfig, extra_args=extra)
        plugin.start()
        try:
            if not args.mig:
                refs = [create_allocated_claim(cluster, name=f"bench-{i}", devices=[f"gpu-{i % 8}"]) for i in range(args.claims)]
                timed(plugin, refs[:1])  # warm the channel and the API client
                results = {"full GPUs (fake h100x8)": timed(plugin, refs)}
            else:
                # Warm: GPUs 0-3 hold a slice at placement 0; claims cycle over their placement 6.
                holders = [create_allocated_claim(cluster, name=f"hold-{g}", devices=[f"gpu-{g}-mig-1g10gb-0"]) for g in range(4)]
                for h in holders:
                    assert not plugin.prepare([h]).claims[h[1]].error
                warm = [
                    create_allocated_claim(cluster, name=f"warm-{i}", devices=[f"gpu-{i % 4}-mig-1g10gb-6"])
                    for i in range(args.claims)
                ]
                cold_n = max(4, args.claims // 10)
                cold = [
                    create_allocated_claim(cluster, name=f"cold-{i}", devices=[f"gpu-{4 + i % 4}-mig-1g10gb-6"])
                    for i in range(cold_n)
                ]
                timed(plugin, warm[:1])
                results = {
                    f"MIG 1g.10gb, GPU already in MIG mode ({args.mig} simulator latency)": timed(plugin, warm),
                    f"MIG 1g.10gb, MIG mode switched on and off ({args.mig} simulator latency)": timed(plugin, cold),
                }
            assert plugin.proc is not None
            rss = peak_rss_mib(plugin.proc.pid)
        finally:
            plugin.stop()
    print(f"claims: {args.claims} (one per call, real kube-apiserver GET per prepare), metrics {args.metrics}")
    for title, (prep, unprep, both) in results.items():
        report(title, prep, unprep, both)
    print(f"plugin peak RSS: {rss:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
