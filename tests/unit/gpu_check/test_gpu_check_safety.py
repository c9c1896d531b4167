"""``make gpu-check`` changes nothing on a GPU: its code holds no NVML setter, no nvidia-smi setting, no MPS.

Scans the code (not the docstrings and comments) of everything ``make gpu-check`` runs:
``scripts/gpu_check.py`` and every module of ``testkit/gpu_check`` (found by listing the folder,
so a new one is scanned too), and the two read-only NVML scripts it calls. Refused anywhere: a
name or string naming an NVML function that sets, resets, clears, enables, disables, creates,
destroys or modifies something (the process's own event set excepted: it changes nothing on the
GPU), ``nvidia-cuda-mps-control``, and nvidia-smi's options and subcommands that change a GPU
(MIG mode and instances, compute mode, clocks, power, persistence, ECC, reset, time slices). The
harness itself never runs ``nvidia-smi`` at all. The plugin it starts gets ``--mig none``,
``--sharing none`` and an empty ``--nvidia-bin-dir``, and its claims carry no sharing config.
The scanner is shown to catch each kind of call on code that makes them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from testkit.gpu_check.plugin import PluginRun

REPO = Path(__file__).resolve().parents[3]
HARNESS = [REPO / "scripts" / "gpu_check.py", *sorted((REPO / "testkit" / "gpu_check").glob("*.py"))]
CALLED_SCRIPTS = [REPO / "scripts" / "gpu_readonly_check.py", REPO / "scripts" / "device_nvml_health_check.py"]

NVML_SETTER = re.compile(r"nvml\w*?(Set|Reset|Clear|Enable|Disable|Create|Destroy|Modify)", re.ASCII)
OWN_EVENT_SET = re.compile(r"^nvml(EventSet(Create|Free|Wait(_v2)?)|DeviceRegisterEvents)$")
SMI_SETTINGS = frozenset(
    {
        # nvidia-smi options and subcommands that change a GPU (long and short spellings)
        "-mig", "--multi-instance-gpu", "mig", "-cgi", "-cci", "-dgi", "-dci",
        "-c", "--compute-mode", "-pm", "--persistence-mode", "-e", "--ecc-config", "-p", "--reset-ecc-errors",
        "-r", "--gpu-reset", "-ac", "--applications-clocks", "-rac", "--reset-applications-clocks",
        "-lgc", "--lock-gpu-clocks", "-rgc", "--reset-gpu-clocks", "-lmc", "--lock-memory-clocks",
        "-rmc", "--reset-memory-clocks", "-pl", "--power-limit", "-am", "--accounting-mode",
        "-caa", "--clear-accounted-apps", "-acp", "--applications-clocks-permission", "-gom", "--gom",
        "-dm", "--driver-model", "-cc", "--cuda-clocks", "drain", "compute-policy", "--set-timeslice",
    }
)  # fmt: skip
SMI_UNAMBIGUOUS = frozenset(s for s in SMI_SETTINGS if s.startswith("--") or s in {"compute-policy"})
"""Refused in any string: they mean nothing else. The short ones (``-c`` is also Python's) only next to nvidia-smi."""


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


def _strings(node: ast.AST, skip: set[int]) -> list[str]:
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip:
            out.append(n.value)
    return out


def _mentions_smi(node: ast.AST, skip: set[int]) -> bool:
    names = [n.id for n in ast.walk(node) if isinstance(n, ast.Name)] + [
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    ]
    return any("nvidia-smi" in s for s in _strings(node, skip)) or any("smi" in n.lower() for n in names)


def violations(source: str, *, strict: bool = False) -> list[str]:
    """What in ``source`` could change a GPU; ``strict``: running nvidia-smi at all counts too."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        words: list[str] = []
        if isinstance(node, ast.Name):
            words = [node.id]
        elif isinstance(node, ast.Attribute):
            words = [node.attr]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            words = re.findall(r"nvml\w+", node.value)
        for w in words:
            if w.startswith("nvml") and NVML_SETTER.search(w) and not OWN_EVENT_SET.match(w):
                found.append(f"line {line}: NVML setter {w}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            text = node.value
            if "nvidia-cuda-mps-control" in text:
                found.append(f"line {line}: MPS control {text!r}")
            if text in SMI_UNAMBIGUOUS or any(f"{s}=" in text for s in SMI_UNAMBIGUOUS if s.startswith("--")):
                found.append(f"line {line}: nvidia-smi setting {text!r}")
            if strict and "nvidia-smi" in text:
                found.append(f"line {line}: runs nvidia-smi {text!r}")
        if isinstance(node, ast.List | ast.Tuple | ast.Call) and _mentions_smi(node, skip):
            for text in _strings(node, skip):
                if text in SMI_SETTINGS or text.split("=")[0] in SMI_SETTINGS:
                    found.append(f"line {line}: nvidia-smi setting {text!r} next to nvidia-smi")
    return sorted(set(found))


@pytest.mark.parametrize("path", HARNESS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_harness_sets_nothing_and_never_runs_nvidia_smi(path: Path) -> None:
    assert violations(path.read_text(), strict=True) == []


@pytest.mark.parametrize("path", CALLED_SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_read_only_scripts_it_calls_set_nothing(path: Path) -> None:
    assert violations(path.read_text()) == []


def test_the_harness_includes_its_own_modules() -> None:
    names = {p.name for p in HARNESS}
    assert {"gpu_check.py", "flow.py", "plugin.py", "workload.py", "sandbox.py", "apiserver.py"} <= names


@pytest.mark.parametrize(
    ("code", "what"),
    [
        ("pynvml.nvmlDeviceSetMigMode(h, 1)", "NVML setter nvmlDeviceSetMigMode"),
        ("n.nvmlDeviceResetGpuLockedClocks(h)", "NVML setter nvmlDeviceResetGpuLockedClocks"),
        ("getattr(pynvml, 'nvmlDeviceSetPowerManagementLimit')(h, 1)", "NVML setter nvmlDeviceSetPowerManagementLimit"),
        ("pynvml.nvmlDeviceCreateGpuInstance(h, p)", "NVML setter nvmlDeviceCreateGpuInstance"),
        ("pynvml.nvmlDeviceClearEccErrorCounts(h, 0)", "NVML setter nvmlDeviceClearEccErrorCounts"),
        ("subprocess.run(['nvidia-smi', '-i', '0', '-mig', '1'])", "nvidia-smi setting '-mig'"),
        ("subprocess.run([smi, '-c', 'EXCLUSIVE_PROCESS'])", "nvidia-smi setting '-c'"),
        ("subprocess.run([smi, '--gpu-reset'])", "nvidia-smi setting '--gpu-reset'"),
        ("run(['nvidia-smi', 'compute-policy', '--set-timeslice=2'])", "nvidia-smi setting 'compute-policy'"),
        ("args = ['--power-limit=300']", "nvidia-smi setting '--power-limit=300'"),
        ("subprocess.Popen(['nvidia-cuda-mps-control', '-d'])", "MPS control"),
    ],
)
def test_the_scanner_catches_each_kind_of_change(code: str, what: str) -> None:
    found = violations(code)
    assert any(what in f for f in found), found


def test_the_scanner_passes_queries_docstrings_and_the_processes_own_event_set() -> None:
    code = '''
"""Never calls nvmlDeviceSetMigMode, never runs nvidia-smi -mig 1 or nvidia-cuda-mps-control."""
import subprocess, sys
def f(pynvml, h):
    """Queries only: nvmlDeviceSetPowerManagementLimit is refused."""
    pynvml.nvmlDeviceGetMigMode(h)
    s = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(h, 1, s)
    pynvml.nvmlEventSetWait_v2(s, 100)
    pynvml.nvmlEventSetFree(s)
    subprocess.run([sys.executable, "-c", "print(1)"])
'''
    assert violations(code, strict=True) == []
    assert violations('subprocess.run(["nvidia-smi", "-q"])') == []
    assert violations('subprocess.run(["nvidia-smi", "-q"])', strict=True) != []


def test_the_plugin_it_starts_gets_no_mig_no_sharing_and_no_nvidia_tools(tmp_path: Path) -> None:
    run = PluginRun(base=tmp_path, state=tmp_path / "s", kubeconfig=tmp_path / "kc", node="n", driver="d", fake_gpus=None)
    argv = run.argv()
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert (flags["--mig"], flags["--sharing"]) == ("none", "none")
    assert flags["--nvidia-bin-dir"] == str(tmp_path / "no-nvidia-bin")
    assert "--fake-gpus" not in argv
