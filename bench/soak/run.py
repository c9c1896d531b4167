"""Runs the soak: the control plane, the plugin, the threads, the hard deadline; ``python -m bench.soak``'s ``main``."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType

import bench.soak
from bench.soak.chaos import Chaos
from bench.soak.model import KUBELET_DEADLINE_S, NODE, PROFILE, Options
from bench.soak.traffic import Traffic
from testkit.cluster import ClusterError, LocalCluster
from testkit.plugin_process import PluginProcess


class Soak(Traffic, Chaos):
    """Callers, chaos and checks against one plugin and one API server."""

    # -- run ------------------------------------------------------------------------------------

    def run(self) -> None:
        opts = self.opts
        print(f"starting etcd + kube-apiserver (work dir {self.workdir})", flush=True)
        with LocalCluster(log_dir=self.workdir / "k8s-logs") as cluster:
            self.cluster = cluster
            cluster.add_node(NODE)
            self.plugin = PluginProcess(
                self.workdir / "node",
                kubeconfig=cluster.kubeconfig,
                node=NODE,
                profile=PROFILE,
                extra_args=("--mig", "dynamic", "--fake-mig-latency", opts.mig_latency, "--gc-interval", str(opts.gc_interval)),
            )
            try:
                self.start_plugin()
                self.stats.t0 = time.monotonic()
                self.t_stop = self.stats.t0 + opts.duration
                self.t_hard = self.t_stop + opts.drain
                print(
                    f"soak: {opts.duration:.0f}s, {opts.concurrency} callers, seed {opts.seed}, "
                    f"{len(self.book.full)} GPUs + {len(self.book.mig)} MIG placements",
                    flush=True,
                )
                callers = [
                    threading.Thread(target=self.caller, args=(i,), name=f"kubelet-{i}", daemon=True)
                    for i in range(opts.concurrency)
                ]
                chaos = threading.Thread(target=self.chaos, name="chaos", daemon=True)
                for t in [*callers, chaos]:
                    t.start()
                while time.monotonic() < self.t_stop and not self.stop.is_set() and any(t.is_alive() for t in callers):
                    time.sleep(0.5)
                self.stop.set()
                chaos.join(120)
                for t in callers:
                    t.join(max(1.0, self.t_hard + 2 * KUBELET_DEADLINE_S - time.monotonic()))
                self.stats.counts["duration (s)"] = int(time.monotonic() - self.stats.t0)
                if chaos.is_alive() or any(t.is_alive() for t in callers):
                    self.stats.violation("soak bug", "threads", "threads still running after the drain deadline")
                else:
                    self.check_plugin_alive()
                    self.final_check()
            finally:
                self.stop.set()
                self.resume_api()
                self.plugin.stop()


def parse(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=(bench.soak.__doc__ or "").splitlines()[0])
    p.add_argument("--duration", type=float, default=180.0, help="seconds of traffic and chaos (default 180)")
    p.add_argument("--claims", type=int, default=20000, help="at most this many claims (0: no limit; default 20000)")
    p.add_argument("--concurrency", type=int, default=16, help="concurrent kubelet callers (default 16)")
    p.add_argument("--seed", type=int, default=1, help="seed of every thread's choices (default 1)")
    p.add_argument("--chaos-interval", type=float, default=4.0, help="mean seconds between chaos actions (default 4)")
    p.add_argument("--corrupt-prob", type=float, default=0.5, help="chance a kill also corrupts the checkpoint (default 0.5)")
    p.add_argument("--prepare-retry", type=float, default=60.0, help="seconds a caller retries one prepare (default 60)")
    p.add_argument("--hold-max", type=float, default=0.5, help="longest a claim stays prepared, seconds (default 0.5)")
    p.add_argument("--drain", type=float, default=60.0, help="seconds after --duration for unprepares to succeed (default 60)")
    p.add_argument("--mig-latency", choices=["zero", "realistic"], default="zero", help="MIG simulator latency (default zero)")
    p.add_argument(
        "--gc-interval",
        type=float,
        default=0.0,
        help="the plugin's pass over claims whose ResourceClaim is gone, seconds (default 0: off, so leaks stay visible)",
    )
    p.add_argument("--keep", action="store_true", help="keep the work dir even when nothing failed")
    a = p.parse_args(argv)
    return Options(
        a.duration,
        a.claims,
        a.concurrency,
        a.seed,
        a.chaos_interval,
        a.corrupt_prob,
        a.prepare_retry,
        a.hold_max,
        a.drain,
        a.mig_latency,
        a.gc_interval,
        a.keep,
    )


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    workdir = Path(tempfile.mkdtemp(prefix="dra-gpu-soak-"))
    soak = Soak(opts, workdir)
    hard_s = 120 + opts.duration + opts.drain + 3 * KUBELET_DEADLINE_S  # start-up, run, drain, last calls

    def watchdog() -> None:
        time.sleep(hard_s)
        print(f"soak: hard deadline ({hard_s:.0f}s) passed: killing everything", file=sys.stderr, flush=True)
        soak.emergency_kill()
        soak.report()
        print(f"work dir kept: {workdir}", file=sys.stderr, flush=True)
        os._exit(3)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    threading.Thread(target=watchdog, name="watchdog", daemon=True).start()
    rc = 2
    try:
        soak.run()
        rc = soak.report()
    except (KeyboardInterrupt, ClusterError, RuntimeError) as err:
        print(f"soak aborted: {type(err).__name__}: {err}", file=sys.stderr)
        soak.report()
    finally:
        soak.emergency_kill()  # no-op when everything stopped cleanly
    if rc == 0 and not opts.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"work dir kept (plugin logs plugin-*.log, node/, k8s-logs/): {workdir}")
    return rc
