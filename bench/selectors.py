"""Benchmark: 10 realistic device selectors over a 40,000-GPU fleet, in dra-gpu (Python) and in the
scheduler's Go code (k8s.io/dynamic-resource-allocation/cel through testkit/go/cmd/celdiff), in one run.

The fleet is 5,000 nodes of 8 GPUs built from the fake profiles (H100, H200, B200, A100 40/80GB),
with three driver versions, unique UUIDs and PCI addresses. Python compiles each selector once
and evaluates it once per distinct projection of a device onto what the selector reads (see
``dra_driver/schedsim/cel/projection.py``); Go does what the scheduler does, ``DeviceMatches`` for
every (selector, device). Both must find the same matches. Prints both times and their ratio.
Not a test: it asserts nothing about speed. Run with ``make bench`` (``python -m bench.selectors``).
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from typing import Any

from dra_driver.cli.main import inventory_slices
from dra_driver.schedsim.cel import CelRuntimeError, DeviceView, compile_selector
from testkit.oracle.oracle import Celdiff

DRIVER = "gpu.dra-gpu.dev"
PROFILES = ("h100x8", "h200x8", "b200x8", "a100x8", "a100-80x8")
DRIVER_VERSIONS = (("550.127.8", "12.4.0"), ("570.86.15", "12.8.0"), ("580.95.5", "13.0.0"))
A = f'device.attributes["{DRIVER}"]'
C = f'device.capacity["{DRIVER}"]'
SELECTORS = (
    f"device.driver == '{DRIVER}' && {A}.type == 'gpu'",  # the chart's DeviceClass
    f'{A}.productName == "NVIDIA H100 80GB HBM3"',
    f'{C}.memory.compareTo(quantity("40Gi")) >= 0',
    f'{A}.driverVersion.compareTo(semver("570.0.0")) >= 0',
    f"!{A}.migCapable",
    f'{A}.architecture in ["Hopper", "Blackwell"]',
    f"{A}.cudaComputeCapability.major() >= 9",
    'device.attributes["resource.kubernetes.io"].pcieRoot.startsWith("pci0000:1")',
    f'cel.bind(gpu, {A}, gpu.productName.contains("H200") || '
    f'(gpu.architecture == "Ampere" && {C}.memory.isGreaterThan(quantity("64Gi"))))',
    f'{A}.?coolingType.orValue("air") == "air" && {A}.cudaDriverVersion.major() >= 12',
)


def fleet(nodes: int) -> list[dict[str, Any]]:
    """``nodes`` x 8 devices, as the nodes would publish them."""
    templates = {p: inventory_slices(fake_gpus=p, node_name="template", driver=DRIVER)[0]["spec"]["devices"] for p in PROFILES}
    out = []
    for n in range(nodes):
        profile = PROFILES[n % len(PROFILES)]
        driver_version, cuda = DRIVER_VERSIONS[(n // len(PROFILES)) % len(DRIVER_VERSIONS)]
        for k, t in enumerate(templates[profile]):
            d = copy.deepcopy(t)
            d["attributes"]["uuid"] = {"string": f"GPU-{n:05d}-{k}"}
            d["attributes"]["driverVersion"] = {"version": driver_version}
            d["attributes"]["cudaDriverVersion"] = {"version": cuda}
            d["attributes"]["resource.kubernetes.io/pciBusID"] = {"string": f"0000:{(n % 250):02x}:{k:02x}.0"}
            out.append(d)
    return out


def python_run(devices: list[dict[str, Any]]) -> tuple[float, float, list[int], list[int]]:
    """(compile seconds, evaluation seconds incl. device conversion, matches, errors) per selector."""
    start = time.perf_counter()
    compiled = [compile_selector(e) for e in SELECTORS]
    compile_s = time.perf_counter() - start
    matches = [0] * len(compiled)
    errors = [0] * len(compiled)
    start = time.perf_counter()
    views = [DeviceView.of(d, DRIVER) for d in devices]
    for i, sel in enumerate(compiled):
        for v in views:
            try:
                if sel.matches_view(v):
                    matches[i] += 1
            except CelRuntimeError:
                errors[i] += 1
    return compile_s, time.perf_counter() - start, matches, errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000, help="nodes of 8 GPUs (default 5000: 40,000 devices)")
    args = ap.parse_args()
    devices = fleet(args.nodes)
    print(f"{len(SELECTORS)} selectors x {len(devices)} devices ({args.nodes} nodes x 8 GPUs)")

    py_compile, py_eval, py_matches, py_errors = python_run(devices)
    distinct = sum(len(compile_selector(e).answers) for e in SELECTORS)

    oracle = Celdiff()
    case = {"kind": "bench", "driver": DRIVER, "devices": devices, "expressions": list(SELECTORS)}
    start = time.perf_counter()
    go = oracle.ask(case)
    go_wall = time.perf_counter() - start
    oracle.close()

    print(
        f"python: compile {py_compile * 1000:8.1f} ms   evaluate {py_eval * 1000:8.1f} ms   "
        f"({distinct} distinct projections evaluated)"
    )
    print(
        f"go:     compile {go['compileSeconds'] * 1000:8.1f} ms   evaluate {go['evalSeconds'] * 1000:8.1f} ms   "
        f"({go['evaluations']} DeviceMatches calls; {go_wall:.1f} s with JSON transfer)"
    )
    py_total = py_compile + py_eval
    go_total = go["compileSeconds"] + go["evalSeconds"]
    print(f"ratio python/go (compile + evaluate): {py_total / go_total:.2f}")
    print(f"matches per selector: {py_matches}")
    if (py_matches, py_errors) != (go["matches"], go["errors"]):
        print(f"DISAGREEMENT: go matches {go['matches']} errors {go['errors']}, python errors {py_errors}")
        return 1
    print(
        json.dumps(
            {"python_seconds": round(py_total, 4), "go_seconds": round(go_total, 4), "ratio": round(py_total / go_total, 3)}
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
