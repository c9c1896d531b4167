"""Runs the bench: the API server, both drivers for ``--runs`` fresh starts, every measurement, then the report
(and the figures, which ``--json`` writes for ``bench.plots``).

``run_bench`` is called by ``bench.peer.cli.main``; it stops every process it started, under ``Guard``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.peer.burst import burst
from bench.peer.client import DraClient
from bench.peer.drivers import NODE, Driver, GoPeer, OurDriver, compile_bytecode
from bench.peer.guard import Guard
from bench.peer.measure import ADMIN_NS, Figures, claim_specs, create_claims, latency, measure_start, proc_status_kib
from bench.peer.report import machine_facts, report
from testkit.cluster import LocalCluster
from testkit.peer_process import PeerBinary


def run_bench(
    args: argparse.Namespace, binary: PeerBinary | None, peer_note: str, state_root: Path
) -> tuple[str, dict[str, Figures]]:
    facts = machine_facts(state_root, binary)
    facts.append(
        f"dra-gpu plugin: {args.plugin_python or sys.executable} -m kubelet_plugin.main, defaults as installed "
        "(claim device status on, JSON logs at info; its modules compiled to bytecode first, as installed)"
    )
    compile_bytecode(args.plugin_python)
    drivers: list[Driver] = []
    cluster = LocalCluster()
    clients: list[DraClient] = []

    def live() -> list[int]:
        pids = [d.pid for d in drivers if d.pid is not None]
        return [*pids, *cluster.pids.values()]

    with Guard(args.deadline, 60, live) as guard:
        try:
            cluster.start()
            cluster.add_node(NODE)
            cluster.api(
                "POST",
                "/api/v1/namespaces",
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": ADMIN_NS, "labels": {"resource.kubernetes.io/admin-access": "true"}},
                },
            )
            drivers.append(OurDriver(cluster.kubeconfig, args.plugin_python))
            if binary is not None:
                drivers.append(GoPeer(binary.path, cluster.kubeconfig))
            figs = {d.label: Figures() for d in drivers}
            t0 = time.monotonic()
            seq = {d.label: create_claims(cluster, claim_specs(d, "seq", args.claims + 1, admin=False)) for d in drivers}
            bursts = {d.label: create_claims(cluster, claim_specs(d, "burst", args.burst, admin=True)) for d in drivers}
            print(
                f"bench: {sum(map(len, [*seq.values(), *bursts.values()]))} claims created in {time.monotonic() - t0:.1f}s",
                file=sys.stderr,
            )
            for run in range(args.runs):
                order = drivers if run % 2 == 0 else drivers[::-1]
                for d in order:
                    s = measure_start(cluster, d, state_root / f"run{run}" / d.label.replace(" ", "-"), seq[d.label][-1])
                    figs[d.label].socket_s.append(s.socket_s)
                    figs[d.label].claim_s.append(s.claim_s)
                    figs[d.label].slices_s.append(s.slices_s)
                time.sleep(1.0)
                for d in drivers:
                    assert d.pid is not None
                    figs[d.label].idle_rss_mib.append(proc_status_kib(d.pid, "VmRSS") / 1024)
                    figs[d.label].idle_anon_mib.append(proc_status_kib(d.pid, "RssAnon") / 1024)
                    figs[d.label].idle_file_mib.append(proc_status_kib(d.pid, "RssFile") / 1024)
                clients = [DraClient(d.dra_socket) for d in drivers]
                for d, c in zip(drivers, clients, strict=True):  # warm the channel and the API clients
                    warm = seq[d.label][-1]
                    for err in (c.prepare(warm), c.unprepare(warm)):
                        if err:
                            figs[d.label].error(f"warm-up: {err}")
                latency([(d, c, seq[d.label], figs[d.label]) for d, c in _ordered(drivers, clients, run)], args.claims)
                for d, c in _ordered(drivers, clients, run):
                    burst(d, c, bursts[d.label], args.threads, figs[d.label], list(cluster.pids.values()))
                print(
                    f"bench: run {run + 1}/{args.runs} done "
                    + "; ".join(
                        f"{d.label} socket {figs[d.label].socket_s[-1]:.3f}s first claim {figs[d.label].claim_s[-1]:.3f}s "
                        f"slices {figs[d.label].slices_s[-1]:.3f}s"
                        for d in drivers
                    ),
                    file=sys.stderr,
                )
                for c in clients:
                    c.close()
                clients = []
                for d in drivers:
                    d.stop()
        finally:
            guard.cleaning()
            for c in clients:
                c.close()
            for d in drivers:
                d.stop()
            cluster.stop()
    return report(figs, args, facts, peer_note), figs


def _ordered(drivers: list[Driver], clients: list[DraClient], run: int) -> list[tuple[Driver, DraClient]]:
    pairs = list(zip(drivers, clients, strict=True))
    return pairs if run % 2 == 0 else pairs[::-1]
