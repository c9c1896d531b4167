"""Every ``dra-gpu`` command's stdout is only its output, in the format asked for; log lines go to stderr.

The commands are enumerated from the CLI's own argument parser (``build_parser``), down to the
leaves (``health show``, ``health repair``): a command added later fails
``test_every_command_has_a_scenario`` until it is given a scenario here. Each scenario runs the
command as a real process (``python -m dra_driver.cli.main``) once per machine-readable format it
offers (``-o json``, ``-o yaml``; once with its default output when it offers none), in a
situation that makes the code under it log where one exists: ``inventory --nvml`` on GPUs whose
NUMA node sysfs does not know (a stand-in ``pynvml`` module, so ``numa_node_omitted`` is logged),
``explain``, ``cordon``, ``uncordon`` and ``top`` live against a stand-in API server (``testkit.gpu_check.apiserver``), ``top``
with one plugin it cannot read. The whole stdout must parse as the format (``json.loads``, YAML's
loader over every document), hold no log line, and the expected log events must be on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli.main import build_parser, inventory_slices
from dra_driver.core.health import HealthBook
from dra_driver.core.health_record import dumps, unreadable_record_book
from dra_driver.files.health_store import HEALTH_FILE
from dra_driver.obs.usage_metrics import IDLE, MEMORY, UTILIZATION
from testkit.gpu_check.apiserver import StandInApiServer

REPO = Path(__file__).resolve().parents[2]
DRIVER = "gpu.dra-gpu.dev"
NS = "cli-output"
MACHINE_FORMATS = ("json", "yaml")

# Answers like NVML for two Hopper GPUs on PCI domain 0x0fff, which no sysfs holds: the NVML source
# logs numa_node_omitted for each. Only the queries dra-gpu inventory --nvml makes.
STANDIN_PYNVML = """
class NVMLError(Exception):
    pass

NVML_DEVICE_MIG_ENABLE = 1
NVML_BRAND_NVIDIA = 14
NVML_BRAND_COUNT = 18

def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlSystemGetDriverVersion(): return b"580.95.05"
def nvmlSystemGetCudaDriverVersion_v2(): return 13000
def nvmlDeviceGetCount(): return 2
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetMinorNumber(h): return h
def nvmlDeviceGetUUID(h): return f"GPU-00000000-0000-0000-0000-00000000000{h}"
def nvmlDeviceGetName(h): return "NVIDIA H200"
def nvmlDeviceGetBrand(h): return NVML_BRAND_NVIDIA
def nvmlDeviceGetArchitecture(h): return 9
def nvmlDeviceGetCudaComputeCapability(h): return (9, 0)
def nvmlDeviceGetMigMode(h): return (0, 0)

class _Memory:
    total = 141 << 30

def nvmlDeviceGetMemoryInfo(h): return _Memory()

class _Pci:
    def __init__(self, h): self.busId = f"00000FFF:{0x1b + h:02X}:00.0".encode()

def nvmlDeviceGetPciInfo(h): return _Pci(h)
"""


Parsers = dict[tuple[str, ...], argparse.ArgumentParser]


def leaf_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Parsers:
    """Every runnable command path (``("health", "show")``) and its parser."""
    subs: list[argparse._SubParsersAction[argparse.ArgumentParser]] = [
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    ]
    if not subs:
        return {prefix: parser}
    out: Parsers = {}
    for action in subs:
        for name, sub in action.choices.items():
            out.update(leaf_commands(sub, (*prefix, name)))
    return out


def formats_of(parser: argparse.ArgumentParser) -> list[str]:
    """The machine-readable formats ``-o`` offers (none: the command is run once with its default output)."""
    for a in parser._actions:
        if "-o" in a.option_strings:
            return [f for f in (a.choices or ()) if f in MACHINE_FORMATS]
    return []


LEAVES = leaf_commands(build_parser())


class _Metrics(BaseHTTPRequestHandler):
    """A kubelet plugin's /metrics as dra-gpu top reads it: one busy claim, one idle, one unhealthy GPU."""

    TEXT = "\n".join(
        [
            f"# TYPE {UTILIZATION} gauge",
            f'{UTILIZATION}{{namespace="{NS}",claim="train",claim_uid="u-1",node="node-a",device="gpu-0",pod="p-0"}} 0.9',
            f'{UTILIZATION}{{namespace="{NS}",claim="nb",claim_uid="u-2",node="node-a",device="gpu-1",pod="p-1"}} 0',
            f"# TYPE {MEMORY} gauge",
            f'{MEMORY}{{namespace="{NS}",claim="train",claim_uid="u-1",node="node-a",device="gpu-0",pod="p-0"}} 1073741824',
            f"# TYPE {IDLE} gauge",
            f'{IDLE}{{namespace="{NS}",claim="train",claim_uid="u-1",node="node-a",device="gpu-0",pod="p-0"}} 0',
            f'{IDLE}{{namespace="{NS}",claim="nb",claim_uid="u-2",node="node-a",device="gpu-1",pod="p-1"}} 4000',
            "# TYPE dra_gpu_gpu_healthy gauge",
            'dra_gpu_gpu_healthy{gpu="gpu-2"} 0',
            "",
        ]
    ).encode()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.TEXT)))
        self.end_headers()
        self.wfile.write(self.TEXT)

    def log_message(self, *_args: Any) -> None:
        pass


@dataclass
class World:
    """What the scenarios run against (made once per module)."""

    base: Path
    standin_pynvml: Path
    slices: Path
    kubeconfig: Path
    metrics_port: int
    health_dir: Path
    empty_dir: Path
    repair_dir: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    base = tmp_path_factory.mktemp("cli-output")
    pynvml_dir = base / "standin-pynvml"
    pynvml_dir.mkdir()
    (pynvml_dir / "pynvml.py").write_text(STANDIN_PYNVML)
    slices = inventory_slices(fake_gpus="h100x8", node_name="node-a", driver=DRIVER)
    slices_file = base / "slices.yaml"
    slices_file.write_text(yaml.safe_dump_all(slices, sort_keys=False))

    metrics = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=metrics.serve_forever, daemon=True).start()
    server = StandInApiServer(tls_dir=base / "tls")  # HTTPS: dra-gpu refuses a plain-http server not marked insecure
    server.start()
    server.put("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}})
    for s in slices:
        server.put("/apis/resource.k8s.io/v1/resourceslices", s)
    server.discovery["/apis/resource.k8s.io/v1"] = {"devicetaintrules"}  # as Kubernetes 1.37 serves it
    selector = {"cel": {"expression": f'device.driver == "{DRIVER}"'}}
    server.put(
        "/apis/resource.k8s.io/v1/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [selector]},
        },
    )
    server.put(
        f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "one-gpu"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
        },
    )
    server.put(
        "/api/v1/namespaces/dra-gpu/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "plugin-a", "labels": {"app.kubernetes.io/component": "kubelet-plugin"}},
            "spec": {"nodeName": "node-a"},
        },
    )
    health_dir, empty_dir, repair_dir = base / "health", base / "no-health", base / "repair"
    for d in (health_dir, empty_dir, repair_dir):
        d.mkdir()
    book = unreadable_record_book(["GPU-a"], time.time(), "a test's record")
    (health_dir / HEALTH_FILE).write_bytes(dumps(HealthBook(book.conditions), "boot-1"))
    w = World(
        base,
        pynvml_dir,
        slices_file,
        server.write_kubeconfig(base / "kubeconfig"),
        metrics.server_address[1],
        health_dir,
        empty_dir,
        repair_dir,
    )
    yield w
    server.stop()
    metrics.shutdown()
    metrics.server_close()


@dataclass(frozen=True)
class Scenario:
    """One way to run a command: its arguments, the exit codes it may give, the log events due on stderr."""

    name: str
    args: Callable[[World], list[str]]
    exit_codes: tuple[int, ...] = (0,)
    logs: frozenset[str] = frozenset()
    env: Callable[[World], dict[str, str]] = lambda _w: {}


SCENARIOS: dict[tuple[str, ...], list[Scenario]] = {
    ("inventory",): [
        Scenario(
            "nvml-without-numa",
            lambda w: ["--nvml", "--node-name", "node-a"],
            logs=frozenset({"numa_node_omitted"}),
            env=lambda w: {"PYTHONPATH": os.pathsep.join([str(w.standin_pynvml), str(REPO)])},
        ),
        Scenario("fake-dynamic-mig", lambda w: ["--fake-gpus", "h100x8", "--node-name", "node-a", "--mig", "dynamic"]),
    ],
    ("explain",): [
        Scenario("offline", lambda w: ["-f", str(REPO / "demo" / "gpu-40gi.yaml"), "--slices", str(w.slices)]),
        Scenario("live", lambda w: ["resourceclaim/one-gpu", "-n", NS, "--kubeconfig", str(w.kubeconfig)]),
    ],
    ("health", "show"): [
        Scenario("a-record", lambda w: ["--plugin-dir", str(w.health_dir)]),
        Scenario("no-record", lambda w: ["--plugin-dir", str(w.empty_dir)]),
    ],
    ("health", "repair"): [Scenario("one-gpu", lambda w: ["gpu-0", "--plugin-dir", str(w.repair_dir)])],
    ("cordon",): [
        Scenario("live", lambda w: ["node-a", "gpu-0", "--reason", "fan failure", "--kubeconfig", str(w.kubeconfig)]),
    ],
    ("uncordon",): [Scenario("live", lambda w: ["node-a", "gpu-1", "--kubeconfig", str(w.kubeconfig)])],
    ("top",): [
        Scenario(
            "urls-one-unreadable",
            lambda w: ["--url", f"http://127.0.0.1:{w.metrics_port}/metrics", "--url", "http://127.0.0.1:9/metrics"],
            exit_codes=(1,),
        ),
        Scenario("live", lambda w: ["--kubeconfig", str(w.kubeconfig), "--port", str(w.metrics_port)]),
    ],
}


def _cases() -> list[Any]:
    cases = []
    for path, parser in LEAVES.items():
        for scenario in SCENARIOS.get(path, []):
            formats: list[str | None] = [*formats_of(parser)] or [None]
            for fmt in formats:
                cases.append(pytest.param(path, scenario, fmt, id=f"{' '.join(path)}-{scenario.name}-{fmt or 'default'}"))
    return cases


def log_lines(text: str) -> list[dict[str, Any]]:
    """The structlog JSON lines in ``text`` (objects with an event and a level)."""
    out = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and "event" in doc and "level" in doc:
            out.append(doc)
    return out


def test_every_command_has_a_scenario() -> None:
    missing = [" ".join(p) for p in LEAVES if not SCENARIOS.get(p)]
    assert not missing, f"dra-gpu commands without an output scenario in this test: {missing}"
    assert set(SCENARIOS) <= set(LEAVES), f"scenarios for commands the CLI no longer has: {set(SCENARIOS) - set(LEAVES)}"


@pytest.mark.parametrize(("path", "scenario", "fmt"), _cases())
def test_stdout_is_only_the_output_and_logs_go_to_stderr(
    world: World, path: tuple[str, ...], scenario: Scenario, fmt: str | None
) -> None:
    argv = [*path, *scenario.args(world), *(["-o", fmt] if fmt else [])]
    env = {**os.environ, **scenario.env(world)}
    env.pop("KUBECONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "dra_driver.cli.main", *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode in scenario.exit_codes, f"dra-gpu {' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"dra-gpu {' '.join(argv)} printed nothing"
    assert not log_lines(done.stdout), f"log lines on stdout: {log_lines(done.stdout)}"
    if fmt == "json":
        json.loads(done.stdout)
    elif fmt == "yaml":
        docs = list(yaml.safe_load_all(done.stdout))
        assert docs and all(isinstance(d, dict) and d.get("kind") for d in docs), docs[:1]
    logged = {e["event"] for e in log_lines(done.stderr)}
    assert scenario.logs <= logged, f"expected {sorted(scenario.logs)} on stderr, got {sorted(logged)}:\n{done.stderr[-2000:]}"
