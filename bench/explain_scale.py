"""Benchmark: ``dra-gpu explain`` offline over N fake nodes of dynamic MIG (8 H100s, 208 devices per node).

Builds each node's ResourceSlices with the product's own code (``dra_driver.cli.main.inventory_slices``,
fake profile ``h100x8``, dynamic MIG: what ``dra-gpu inventory --fake-gpus h100x8 --mig dynamic``
prints, one pool per node with its own name) and writes them to a temporary JSON file (a
``kind: List``, compact, as the API server serves them), with the chart's two DeviceClasses
(``bench.cluster_scale.workload``) and a Pending pod with one claim from the demo's
``mig-1g`` template (one 1g.10gb MIG device). Then it runs the CLI as a user does, a fresh process
each time (``dra-gpu explain -f POD --slices FILE --classes FILE``, text output), and prints the
median wall seconds of ``--runs`` runs. A further run, in a child process with timing wrappers
around the CLI's own functions (the product's output unchanged), splits one run into phases:
``start`` (interpreter and imports), ``decode`` (reading and decoding the slices file), ``validate``
(checking every object, ``read_inputs``), ``simulate`` (the rest of ``explain``) and ``report``
(the text). Not a test: it asserts nothing about speed. ``make bench-explain`` runs it
(``python -m bench.explain_scale --nodes 100 500``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bench.cluster_scale.fleet import FAKE_PROFILE, node_name
from bench.cluster_scale.workload import _written_classes, claim_template, pod
from dra_driver.cli.main import inventory_slices
from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from dra_driver.core.mig import MigStrategy

CLI = Path(sys.executable).with_name("dra-gpu")
REPO = Path(__file__).resolve().parents[1]
_CHILD = "import runpy, sys; f = sys.argv[1]; sys.argv[:2] = [f, '--phases-child']; runpy.run_path(f, run_name='__main__')"
PHASES = ("start", "decode", "validate", "simulate", "report")


def write_inputs(nodes: int, where: Path) -> tuple[Path, Path, Path, int]:
    """The slices, classes and pod files for ``nodes`` nodes under ``where``; (slices, classes, pod, devices)."""
    items: list[dict[str, Any]] = []
    for i in range(nodes):
        items.extend(
            inventory_slices(fake_gpus=FAKE_PROFILE, node_name=node_name(i), driver=DEFAULT_DRIVER_NAME, mig=MigStrategy.DYNAMIC)
        )
    devices = sum(len(s["spec"].get("devices") or ()) for s in items)
    slices = where / f"slices-{nodes}.json"
    slices.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    classes = where / "classes.yaml"
    classes.write_text(yaml.safe_dump_all(_written_classes(), sort_keys=False))
    template = claim_template("mig")
    manifest = where / "pod.yaml"
    manifest.write_text(yaml.safe_dump_all([template, pod("explain-probe", str(template["metadata"]["name"]))], sort_keys=False))
    return slices, classes, manifest, devices


def argv(slices: Path, classes: Path, manifest: Path) -> list[str]:
    """The CLI's arguments (after the program)."""
    return ["explain", "-f", str(manifest), "--slices", str(slices), "--classes", str(classes)]


def _env(source: Path | None) -> tuple[dict[str, str] | None, str | None]:
    """(environment, working directory) that make ``source``'s ``dra_driver`` the one imported (None: this checkout's)."""
    if source is None:
        return None, None
    return {**os.environ, "PYTHONPATH": f"{source}{os.pathsep}{REPO}"}, tempfile.gettempdir()


def time_cli(args: list[str], runs: int, source: Path | None = None) -> tuple[list[float], int, list[str]]:
    """Wall seconds of each fresh-process run; the last exit code and output lines."""
    seconds: list[float] = []
    rc, lines = 0, []
    env, cwd = _env(source)
    cmd = [str(CLI)] if source is None else [sys.executable, "-m", "dra_driver.cli.main"]
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run([*cmd, *args], capture_output=True, text=True, check=False, env=env, cwd=cwd)
        seconds.append(time.perf_counter() - t0)
        rc, lines = proc.returncode, proc.stdout.splitlines()
        if rc not in (0, 1) or not lines:  # 1 is "something stays Pending", but always with a report
            raise SystemExit(f"dra-gpu explain failed ({rc}): {proc.stderr.strip()[-500:]}")
    return seconds, rc, lines


def phases(args: list[str], source: Path | None = None) -> dict[str, float]:
    """One run split into phases, in a child process (see :func:`_phases_child`)."""
    env, cwd = _env(source)
    t0 = time.perf_counter()
    proc = subprocess.run(
        # By file (the checkout timed may have a bench package without this module).
        [sys.executable, "-c", _CHILD, __file__, *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=cwd,
    )
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"phase run failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    try:
        got: dict[str, float] = json.loads(proc.stderr.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise SystemExit(f"phase run ({proc.returncode}) printed no timings: {proc.stderr.strip()[-800:]}") from None
    got["start"] = wall - sum(got.values())
    return got


def _timed(fn: Callable[..., Any], key: str, into: dict[str, float]) -> Callable[..., Any]:
    def wrapper(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            into[key] = into.get(key, 0.0) + time.perf_counter() - t0

    return wrapper


def _phases_child(args: list[str]) -> int:
    """Run the CLI in this process with timers around its phases; print them (JSON) on stderr last."""
    import importlib
    import io

    from dra_driver.cli import explain as cli_explain
    from dra_driver.cli.main import main

    # (the package re-exports a function of this name)
    allocator_explain = importlib.import_module("dra_driver.schedsim.allocator.explain")

    spent: dict[str, float] = {}
    slices_file = args[args.index("--slices") + 1]
    load = cli_explain.load_objects

    def load_timed(path: str) -> Any:
        return _timed(load, "decode", spent)(path) if path == slices_file else load(path)

    # The module globals the CLI calls them by, wrapped (the functions themselves run unchanged).
    vars(allocator_explain)["read_inputs"] = _timed(allocator_explain.read_inputs, "validate", spent)
    vars(cli_explain).update(
        load_objects=load_timed,
        explain=_timed(vars(cli_explain)["explain"], "explain", spent),
        render_text=_timed(cli_explain.render_text, "report", spent),
    )
    out, sys.stdout = sys.stdout, io.StringIO()
    try:
        t0 = time.perf_counter()
        rc = main(args)
        total = time.perf_counter() - t0
    finally:
        sys.stdout = out
    spent["simulate"] = spent.pop("explain") - spent.get("validate", 0.0)
    spent["other"] = total - sum(spent.values())  # argument parsing, the pod and class files, exit code
    print(json.dumps(spent), file=sys.stderr)
    return rc


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--phases-child":
        return _phases_child(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[100, 500], help="cluster sizes (default: 100 500)")
    ap.add_argument("--runs", type=int, default=3, help="timed CLI runs per size (default 3)")
    ap.add_argument("--keep", type=Path, help="write the inputs to this directory and keep them")
    ap.add_argument("--json", type=Path, help="also write the results here (read by python -m bench.plots)")
    ap.add_argument(
        "--source",
        type=Path,
        action="append",
        help="time the dra_driver of this checkout instead (e.g. a git worktree of the last commit, for before/after "
        "in one sitting; repeatable, each timed in turn)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dra-gpu-explain-bench-") as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        results = []
        for n in args.nodes:
            t0 = time.perf_counter()
            slices, classes, manifest, devices = write_inputs(n, where)
            built = time.perf_counter() - t0
            cli_args = argv(slices, classes, manifest)
            mb = slices.stat().st_size / 1e6
            print(f"{n} nodes, {devices} devices, slices file {mb:.1f} MB (built in {built:.1f} s)")
            for source in args.source or [None]:
                seconds, rc, lines = time_cli(cli_args, args.runs, source)
                split = phases(cli_args, source)
                median = statistics.median(seconds)
                label = f" [{source}]" if source is not None else ""
                print(
                    f"  dra-gpu explain{label}: median {median:.2f} s of {args.runs} ({', '.join(f'{s:.2f}' for s in seconds)})"
                )
                print("  one run by phase: " + ", ".join(f"{k} {split.get(k, 0.0):.2f} s" for k in (*PHASES, "other")))
                print(f"  exit {rc}, {len(lines)} lines; {lines[1].strip()[:150] if len(lines) > 1 else ''}")
                figures = {k: round(v, 3) for k, v in split.items()}
                results.append({"nodes": n, "source": str(source or REPO), "median_s": round(median, 3), **figures})
        print(json.dumps(results))
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
