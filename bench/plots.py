"""Charts for the performance pages, drawn from the benches' JSON (``make bench``, ``make bench-explain``).

``python -m bench.plots --peer FILE --explain FILE --out DIR`` reads what ``python -m bench.peer --json``
and ``python -m bench.explain_scale --json`` wrote and draws, with matplotlib, into ``DIR``:

* ``peer-latency.svg``: prepare and unprepare latency of dra-gpu and the Go reference driver as
  cumulative distributions (every call of every run, one run of the bench: the ratio is what carries
  over, not the absolute times);
* ``explain-vs-nodes.svg``: ``dra-gpu explain``'s median wall time against the number of fake nodes,
  with its phases (decode, validate, simulate) beside it.

The SVGs are deterministic for the same input (no date, fixed ids), so a regenerated chart shows as a
change only when a figure changed. The perf pages under ``docs/perf/`` embed them. Not a test.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # after matplotlib.use: the backend is chosen before pyplot loads
from matplotlib import ticker

matplotlib.rcParams["svg.hashsalt"] = "dra-gpu"
matplotlib.rcParams["svg.fonttype"] = "none"

PHASES = ("decode", "validate", "simulate")
"""The phases of one explain run that ``bench.explain_scale`` times and the chart stacks."""


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)
    return path


def _ecdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    xs = sorted(values)
    n = len(xs)
    return xs, [(i + 1) / n for i in range(n)]


def peer_latency(body: dict[str, Any], out: Path) -> Path:
    """Prepare and unprepare latency per driver as cumulative distributions, side by side."""
    drivers: dict[str, dict[str, Any]] = body["drivers"]
    if not drivers:
        raise ValueError("the peer bench's JSON names no driver")
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for ax, key, title in ((axes[0], "prepare_ms", "NodePrepareResources"), (axes[1], "unprepare_ms", "NodeUnprepareResources")):
        for label, figs in drivers.items():
            values = figs.get(key) or []
            if not values:
                raise ValueError(f"{label} has no {key} in the peer bench's JSON")
            xs, ys = _ecdf(values)
            ax.step(xs, ys, where="post", label=f"{label} ({len(values)} calls)")
        ax.set_title(title)
        ax.set_xlabel("latency per call (ms)")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())  # 2x10^0, 3x10^0, ... overlapped
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("fraction of calls")
    axes[1].legend(loc="lower right", fontsize="small")
    fig.suptitle(f"One claim per call, one run of python -m bench.peer ({body.get('date', '?')})", fontsize="medium", y=1.04)
    return _save(fig, out / "peer-latency.svg")


def explain_vs_nodes(body: dict[str, Any], out: Path) -> Path:
    """``dra-gpu explain``'s median wall time against cluster size, and one run's phases."""
    results = sorted(body["results"], key=lambda r: r["nodes"])
    if not results:
        raise ValueError("the explain bench's JSON has no result")
    nodes = [r["nodes"] for r in results]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    left.plot(nodes, [r["median_s"] for r in results], marker="o")
    left.set_xlabel("fake nodes (8 H100s each, dynamic MIG: 208 devices per node)")
    left.set_ylabel("median wall time (s)")
    left.set_ylim(bottom=0)
    left.grid(True, alpha=0.3)
    left.set_title("dra-gpu explain, a fresh process per run")
    bottom = [0.0] * len(results)
    positions = range(len(results))
    for phase in PHASES:
        heights = [float(r.get(phase, 0.0)) for r in results]
        right.bar(positions, heights, bottom=bottom, label=phase)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    right.set_xticks(list(positions), [str(n) for n in nodes])
    right.set_xlabel("fake nodes")
    right.set_ylabel("seconds in one run")
    right.set_title("where one run goes")
    right.legend(fontsize="small")
    fig.suptitle(f"python -m bench.explain_scale ({body.get('date', '?')})", fontsize="medium", y=1.04)
    return _save(fig, out / "explain-vs-nodes.svg")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.plots", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--peer", type=Path, help="JSON written by python -m bench.peer --json")
    ap.add_argument("--explain", type=Path, help="JSON written by python -m bench.explain_scale --json")
    ap.add_argument("--out", type=Path, default=Path("docs/perf/img"), help="folder for the SVGs (default docs/perf/img)")
    args = ap.parse_args(argv)
    if args.peer is None and args.explain is None:
        ap.error("name at least one of --peer, --explain")
    for source, draw in ((args.peer, peer_latency), (args.explain, explain_vs_nodes)):
        if source is None:
            continue
        if not source.exists():
            print(f"bench.plots: {source} does not exist: run its bench with --json first")
            return 1
        try:
            print(f"bench.plots: wrote {draw(json.loads(source.read_text()), args.out)}")
        except (ValueError, KeyError) as err:  # a bench's JSON without what the chart needs
            print(f"bench.plots: {source}: {err}")
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
