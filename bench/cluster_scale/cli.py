"""``python -m bench.cluster_scale``'s ``main``: the arguments, the scenarios in order, the exit codes.

Called by ``bench.cluster_scale.__main__``; each scenario is measured by
``bench.cluster_scale.run.run_scenario`` on a cluster of its own, one at a time (the machine
runs one control plane at once), and the table is printed by ``bench.cluster_scale.report``.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import structlog

import bench.cluster_scale
from bench.cluster_scale.cluster import SCHEDULER_PERF_QPS, ScaleCluster
from bench.cluster_scale.fleet import LAYOUTS
from bench.cluster_scale.report import Scenario, machine_facts, report
from bench.cluster_scale.run import log_dir_for, run_scenario, say
from bench.peer.guard import BenchTimeout, Guard
from testkit.cluster import ClusterError


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _layouts(text: str) -> list[str]:
    out = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in out if x not in LAYOUTS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown layout {bad[0]!r}; known: {', '.join(LAYOUTS)}")
    return out


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    doc = bench.cluster_scale.__doc__
    p = argparse.ArgumentParser(prog="python -m bench.cluster_scale", description=doc.split("\n")[0] if doc else None)
    p.add_argument("--nodes", type=_ints, default=[100, 500], help="node counts, comma separated (default 100,500)")
    p.add_argument("--pods", type=int, default=1000, help="pods per scenario (at most what the cluster holds)")
    p.add_argument(
        "--layouts",
        type=_layouts,
        default=["full", "mig-rec", "mig"],
        help="comma separated (default full,mig-rec,mig): full (MIG strategy none), mig (dynamic MIG, every profile), "
        "mig-rec (dynamic MIG, --mig-profiles 1g.10gb,3g.40gb,7g.80gb), mig-families (--mig-profiles 1g,3g,7g)",
    )
    p.add_argument("--deadline", type=int, default=5400, help="seconds for the whole run; then everything is stopped")
    p.add_argument("--bind-timeout", type=float, default=900.0, help="seconds one scenario waits for its pods to bind")
    p.add_argument("--publish-timeout", type=float, default=600.0, help="seconds one scenario waits for its pools")
    p.add_argument("--steady", type=float, default=30.0, help="seconds of the steady-state window")
    p.add_argument("--explain-runs", type=int, default=3, help="dra-gpu explain runs per scenario")
    p.add_argument("--explain-timeout", type=float, default=180.0, help="seconds one explain run may take")
    p.add_argument("--create-threads", type=int, default=16, help="threads creating pods")
    p.add_argument(
        "--qps",
        type=int,
        default=SCHEDULER_PERF_QPS,
        help=f"kube-api-qps and -burst of scheduler and controller manager (default {SCHEDULER_PERF_QPS}, as "
        "scheduler_perf; 0: the components' defaults)",
    )
    p.add_argument(
        "--pprof",
        type=int,
        default=25,
        metavar="N",
        help="record the scheduler's CPU profile while scheduling and print its top N functions, cumulative and flat "
        "(default 25; 0: none)",
    )
    p.add_argument(
        "--stock-gates",
        action="store_true",
        help="the release's default feature gates (alpha gates off) instead of every DRA gate on",
    )
    p.add_argument("--log-dir", type=Path, help="keep component and publisher logs here (default: dropped)")
    return p.parse_args(argv)


def _quiet_publishers(log_file: Path | None) -> None:
    """The publishers' structlog events: warnings and errors only, to ``log_file`` (or nowhere)."""
    sink = (log_file or Path(os.devnull)).open("a")  # kept open for the process's life
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(file=sink),
        cache_logger_on_first_use=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    _quiet_publishers(args.log_dir / "publishers.log" if args.log_dir else None)
    facts = machine_facts()
    qps = f"{args.qps}" if args.qps > 0 else "the components' defaults (scheduler 50, controller manager 20)"
    settings = [
        f"settings: {args.pods} pods per scenario from {args.create_threads} threads; scheduler and controller-manager "
        f"client QPS/burst {qps}; steady window {args.steady:.0f}s; {args.explain_runs} explain runs; feature gates: "
        + ("the release's defaults" if args.stock_gates else "every DRA gate on"),
    ]
    scenarios: list[Scenario] = []
    cluster: ScaleCluster | None = None

    def live() -> list[int]:
        return list(cluster.pids.values()) if cluster is not None else []

    code = 0
    with Guard(args.deadline, 60, live) as guard:
        try:
            for nodes in args.nodes:
                for layout in args.layouts:
                    s = Scenario(layout, nodes)
                    scenarios.append(s)
                    cluster = ScaleCluster(qps=args.qps, log_dir=log_dir_for(args.log_dir, s), stock=args.stock_gates)
                    try:
                        run_scenario(s, args, cluster)
                    except (ClusterError, TimeoutError, OSError) as err:
                        s.notes.append(f"stopped: {type(err).__name__}: {str(err)[:300]}")
                        say(f"{layout} x {nodes}: {err}")
                        code = 1
                    finally:
                        cluster.stop()
                        cluster = None
        except BenchTimeout:
            if scenarios:
                scenarios[-1].notes.append(f"cut short: the --deadline of {args.deadline}s passed")
            code = 2
        except KeyboardInterrupt:
            if scenarios:
                scenarios[-1].notes.append("interrupted")
            code = 130
        finally:
            guard.cleaning()
            if cluster is not None:
                cluster.stop()
    facts.append(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(report(scenarios, facts, settings))
    return code
