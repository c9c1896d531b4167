"""Benchmark: what GPU monitoring costs prepare, and one /metrics scrape on a full node of MIG devices.

Part 1, overhead. Two plugin daemons in turn against one kube-apiserver, 8 fake H100s each: one
with everything off (``--health off --metrics-port -1``), one with everything on as the chart
installs it (health monitor checking every second, a kubelet-like client holding the health stream
open, /metrics scraped every 0.2 s by a background thread). Runs alternate (off, on, off, on, ...)
so the machine's drift hits both; each times ``--claims`` prepare + unprepare calls, one claim per
call. Prints p50/p99 per mode and the ratio on/off.

Part 2, scrape. One plugin with ``--mig dynamic`` and 56 prepared claims of a ``1g.10gb`` slice (7
per GPU: a full H100 node), then times ``--scrapes`` GETs of /metrics (the plugin's metrics, the
prepared claims' gauges, GPU health and the usage collector's 56 rows) and prints p50/p99 and the
body's size.
Not a test: it asserts nothing about speed. ``python -m bench.monitoring_overhead``.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from bench.prepare_latency import pct, timed
from testkit.claims import create_allocated_claim
from testkit.cluster import LocalCluster
from testkit.plugin_process import PluginProcess

OFF = ("--health", "off", "--metrics-port", "-1", "--gc-interval", "0")
# As the chart installs it, but health checked every second and usage sampled every second (busier).
ON = (
    "--health",
    "auto",
    "--health-check-interval",
    "1",
    "--metrics-port",
    "0",
    "--metrics-address",
    "127.0.0.1",
    "--gc-interval",
    "0",
    "--usage-interval",
    "1",
)


def metrics_port(plugin: PluginProcess) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for e in plugin.logs():
            if e.get("event") == "metrics_listening":
                return int(e["port"])
        time.sleep(0.05)
    raise RuntimeError("the plugin never logged metrics_listening")


class Load:
    """A health stream held open and /metrics scraped in the background, as a kubelet and Prometheus would."""

    def __init__(self, plugin: PluginProcess, port: int) -> None:
        self.stop = threading.Event()
        self.scrapes = 0
        self.updates = 0
        self._threads = [
            threading.Thread(target=self._scrape, args=(port,), daemon=True),
            threading.Thread(target=self._stream, args=(plugin,), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _scrape(self, port: int) -> None:
        while not self.stop.wait(0.2):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                r.read()
            self.scrapes += 1

    def _stream(self, plugin: PluginProcess) -> None:
        def more(_: object) -> bool:
            self.updates += 1
            return self.stop.is_set()

        with contextlib.suppress(Exception):  # ended by the plugin's stop
            plugin.health_updates("v1", until=more, timeout=3600)

    def close(self) -> None:
        self.stop.set()
        self._threads[0].join(5)


def overhead(cluster: LocalCluster, base: Path, claims: int, rounds: int) -> None:
    refs = [create_allocated_claim(cluster, name=f"ovh-{i}", devices=[f"gpu-{i % 8}"]) for i in range(claims)]
    out: dict[str, tuple[list[float], list[float]]] = {"off": ([], []), "on": ([], [])}
    for r in range(rounds):
        order = (("off", OFF), ("on", ON)) if r % 2 == 0 else (("on", ON), ("off", OFF))  # neither always first
        for mode, args in order:
            plugin = PluginProcess(base / f"{mode}-{r}", kubeconfig=cluster.kubeconfig, extra_args=args)
            plugin.start()
            load = Load(plugin, metrics_port(plugin)) if mode == "on" else None
            try:
                timed(plugin, refs[:2])  # warm the channel and the API client
                prep, unprep, _ = timed(plugin, refs)
                out[mode][0].extend(prep)
                out[mode][1].extend(unprep)
            finally:
                if load is not None:
                    load.close()
                    print(f"  round {r}: {load.scrapes} scrapes and {load.updates} health messages during the run")
                plugin.stop()
    print(f"overhead: {claims} claims x {rounds} rounds per mode, one claim per call")
    for label, i in (("prepare", 0), ("unprepare", 1)):
        off, on = out["off"][i], out["on"][i]
        print(
            f"{label:>10}: off p50 {pct(off, 50):6.2f} p99 {pct(off, 99):6.2f} ms | on p50 {pct(on, 50):6.2f} "
            f"p99 {pct(on, 99):6.2f} ms | on/off p50 {pct(on, 50) / pct(off, 50):.3f}x p99 {pct(on, 99) / pct(off, 99):.3f}x"
        )


def scrape(cluster: LocalCluster, base: Path, scrapes: int) -> None:
    args = ("--mig", "dynamic", "--fake-mig-latency", "zero", *ON)
    plugin = PluginProcess(base / "scrape", kubeconfig=cluster.kubeconfig, extra_args=args)
    plugin.start()
    try:
        port = metrics_port(plugin)
        starts = (6, 5, 4, 3, 2, 1, 0)  # the seven 1g.10gb placements of an H100
        refs = [
            create_allocated_claim(cluster, name=f"mig-{g}-{s}", devices=[f"gpu-{g}-mig-1g10gb-{s}"])
            for g in range(8)
            for s in starts
        ]
        for ref in refs:
            err = plugin.prepare([ref]).claims[ref[1]].error
            assert not err, err
        time.sleep(2.5)  # the usage sampler (every second here) has every prepared device in its rows
        times, size = [], 0
        for _ in range(scrapes):
            t0 = time.perf_counter()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                body = r.read()
            times.append((time.perf_counter() - t0) * 1000)
            size = len(body)
        print(f"scrape: {len(refs)} MIG devices prepared (8 GPUs x 7 1g.10gb), {scrapes} scrapes")
        print(f"    /metrics: p50 {pct(times, 50):6.2f} ms  p99 {pct(times, 99):6.2f} ms  body {size / 1024:.1f} KiB")
        for ref in refs:
            plugin.unprepare([ref])
    finally:
        plugin.stop()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--claims", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--scrapes", type=int, default=50)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp, LocalCluster() as cluster:
        cluster.add_node("node-a")
        overhead(cluster, Path(tmp), a.claims, a.rounds)
        scrape(cluster, Path(tmp), a.scrapes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
