"""``python -m bench.peer``'s ``main``: the arguments, finding or building the peer, the exit codes.

Called by ``bench.peer.__main__`` (``make bench``); the measuring is ``bench.peer.run.run_bench``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import bench.peer
from bench.peer.guard import BenchTimeout
from bench.peer.measure import Figures
from bench.peer.run import run_bench
from testkit.cluster import ApiError
from testkit.peer_process import PeerBinary, PeerUnavailable, peer_binary


def main(argv: Sequence[str] | None = None) -> int:
    doc = bench.peer.__doc__
    parser = argparse.ArgumentParser(prog="python -m bench.peer", description=doc.split("\n")[0] if doc else None)
    parser.add_argument("--claims", type=int, default=200, help="claims per driver for the latency figures")
    parser.add_argument("--runs", type=int, default=3, help="fresh starts of both drivers")
    parser.add_argument("--burst", type=int, default=200, help="claims prepared concurrently per driver")
    parser.add_argument("--threads", type=int, default=32, help="client threads of the burst")
    parser.add_argument("--no-peer", action="store_true", help="measure dra-gpu alone")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure here (read by python -m bench.plots)")
    parser.add_argument("--deadline", type=int, default=1800, help="seconds; then everything is stopped")
    parser.add_argument(
        "--plugin-python",
        type=Path,
        default=None,
        help="interpreter dra-gpu's plugin runs with (make bench: .venv-product, the product's dependencies only, "
        "as in the image); default: this one",
    )
    args = parser.parse_args(argv)

    binary: PeerBinary | None = None
    if args.no_peer:
        peer_note = "not run (--no-peer)"
    else:
        print("bench: building or finding the peer...", file=sys.stderr)
        try:
            binary = peer_binary()
            how = "cached" if binary.build_seconds is None else f"built in {binary.build_seconds:.1f}s"
            peer_note = f"kubernetes-sigs/dra-example-driver {binary.commit} kubelet plugin ({how}), 8 fake GPUs, QPS/burst 1000"
        except PeerUnavailable as err:
            peer_note = f"column empty: {err}"
            print(f"bench: {peer_note}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="dra-gpu-bench-peer-") as tmp:
        try:
            text, figs = run_bench(args, binary, peer_note, Path(tmp))
            print(text)
            if args.json is not None:
                write_figures(args.json, figs, peer_note)
        except BenchTimeout:
            print(f"bench: deadline of {args.deadline}s passed; every process was stopped", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("bench: interrupted; every process was stopped", file=sys.stderr)
            return 130
        except ApiError as err:
            print(f"bench: API server error: {err}", file=sys.stderr)
            return 1
    return 0


def write_figures(path: Path, figs: dict[str, Figures], peer_note: str) -> None:
    """Every driver's raw figures as JSON (``{"date", "peer", "drivers": {label: Figures}}``) for ``bench.plots``."""
    body = {
        "date": datetime.date.today().isoformat(),
        "peer": peer_note,
        "drivers": {label: dataclasses.asdict(f) for label, f in figs.items()},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, indent=1) + "\n")
